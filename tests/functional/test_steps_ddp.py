"""End to end: 2-rank DDP (Gloo) jobs under ``torchpar-top run --nproc-per-node 2 --headless``; the
headless ``straggler`` names the rank slowed in its forward, the rank slowed in its data, the rank that
waits for a core it shares (CPU contention, ``core_wait``), and no one when the ranks are identical.
Lockstep ranks read the same steps/s."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.slow,
]

CMD = [sys.executable, "-m", "torchpar_top"]
SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "ddp_steps.py"
#: Seconds the job runs (the straggler needs MIN_WINDOWS one-second windows, and torchrun a few to start).
SECONDS = 14


def _gloo() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_gloo_available()


def headless(
    *script_args: str, seconds: float = SECONDS, duration: float | None = None, options=()
) -> list[dict]:
    """The headless objects of a 2-rank run of ``ddp_steps.py SECONDS *script_args`` (``--duration``:
    ``SECONDS + 60`` unless given; ``options``: more of ``run``'s own)."""
    duration = seconds + 60 if duration is None else duration
    proc = subprocess.run(
        [
            *CMD,
            "run",
            "--nproc-per-node",
            "2",
            "--headless",
            "--duration",
            str(duration),
            *options,
            str(SCRIPT),
            str(seconds),
            *script_args,
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=duration + 120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def last_straggler(records: list[dict]) -> dict | None:
    """The straggler of the last object where both ranks had stepped."""
    stepped = [r for r in records if len([k for k in r["ranks"] if k.get("steps")]) == 2]
    assert stepped, "no object had both ranks' steps"
    return stepped[-1]["straggler"]


def _story(records: list[dict]) -> str:
    """What the last objects said, for a failure's message: each one's straggler, and per rank its step
    time and phases (ms a step). Seen once (a fresh-clone CI with a busy core): no straggler named in
    the crowd test, cause unknown."""
    lines = []
    for r in [r for r in records if len([k for k in r["ranks"] if k.get("steps")]) == 2][-4:]:
        ranks = {
            k["rank"]: {p: round(v * 1e3, 2) for p, v in k["steps"]["phases"].items() if v}
            for k in r["ranks"]
        }
        lines.append(f"straggler {r['straggler']}; ranks {ranks}")
    return "\n".join(lines) or "no object had both ranks' steps"


@pytest.mark.skipif(not _gloo(), reason="torch.distributed with Gloo is not available")
def test_a_rank_slowed_in_its_forward_is_named_with_forward():
    records = headless("forward", "1", "12")
    found = last_straggler(records)
    assert found is not None and (found["rank"], found["cause"]) == (1, "forward"), found
    assert found["ratio"] > 2 and found["costs"] > 0.005
    assert found["core_wait"] is None  # a sleep: its own code, not a wait for a core
    last = [r for r in records if r["steps"]][-1]
    assert {"source", "count", "per_second", "seconds", "phases"} <= set(last["steps"])
    # the fast rank waits for it in the all-reduce: its comm is the longer
    ranks = {k["rank"]: k["steps"] for k in last["ranks"]}
    assert ranks[0]["phases"]["comm"] > ranks[1]["phases"]["comm"]


@pytest.mark.skipif(not _gloo(), reason="torch.distributed with Gloo is not available")
def test_a_rank_slowed_in_its_data_is_named_with_data():
    found = last_straggler(headless("data", "0", "12"))
    assert found is not None and (found["rank"], found["cause"]) == (0, "data"), found


@pytest.mark.skipif(not _gloo(), reason="torch.distributed with Gloo is not available")
def test_a_rank_that_shares_its_core_is_named_with_its_wait_for_a_core():
    # rank 1 pinned to one core with eight processes spinning there: the same code, a ninth of a core.
    # With only the model's tiny compute the step was mostly the all-reduce: the crowded rank's extra
    # backward read 0.16-0.49 of the step in session 19's runs but 0.11-0.17 on a faster VM (five runs,
    # nobody named: MIN_SHARE is 0.15). So here every rank's forward also computes ~2 ms (40 products of
    # 128x128 matrices, the script's WORK): with it, four runs with another process busy on the other
    # core named rank 1 every time, its backward 18-20 ms against 0.3-0.7 (0.45 of a ~40 ms step), its
    # core wait 25-28 ms a step
    records = headless("crowd", "1", "8", "40")
    found = last_straggler(records)
    assert found is not None and found["rank"] == 1, _story(records)
    assert found["core_wait"] is not None and found["core_wait"] > 0.0002, found


@pytest.mark.skipif(not _gloo(), reason="torch.distributed with Gloo is not available")
def test_identical_ranks_have_no_straggler_and_read_the_same_rate():
    # both ranks sleep 4 ms in their forward (an ~8 ms step): on this 2-core machine with another process
    # busy on one core, the rank that shares its core with it computes its backward and
    # optimizer steadily ~2x slower (0.37 and 0.49 ms a step in two runs), which is a real difference between
    # the ranks (the machine's, not the code's) and above MIN_SHARE of a bare ~2-3 ms step; beside the sleep
    # it is below it, and what is left to judge is the noise this test is about
    records = headless("forward", "all", "4")
    assert last_straggler(records) is None
    both = [r for r in records if len([k for k in r["ranks"] if k.get("steps")]) == 2][-5:]
    for r in both:
        a, b = (k["steps"]["per_second"] for k in r["ranks"])
        assert a is not None and b is not None and abs(a - b) <= 0.05 * max(a, b), (a, b)


def test_a_hung_rank_is_said_stalled_with_where_each_rank_waits(tmp_path):
    """Rank 1's forward sleeps for an hour 2 s in; rank 0 waits for it in DDP's all-reduce. Stopped by
    ``--duration``: both ranks read stalled, rank 1 asleep in its forward, rank 0 on its backward line,
    and the report's verdict is *stalled*."""
    report = tmp_path / "r.json"
    records = headless("hang", "1", "2", seconds=600, duration=25, options=("--report", str(report)))
    live = [r for r in records if len(r["ranks"]) == 2 and all(k["state"] == "running" for k in r["ranks"])]
    assert live, records[-1:]
    last = {k["rank"]: k for k in live[-1]["ranks"]}
    assert all(k["steps"] and k["steps"]["stalled"] and k["steps"]["stalled"] >= 3 for k in last.values()), (
        last
    )
    assert all(k["steps"]["per_second"] == 0 for k in last.values())
    lines = SCRIPT.read_text().splitlines()
    hang = next(i for i, text in enumerate(lines, 1) if "# the hang" in text)
    assert last[1]["at"] == f"sleep at ddp_steps.py:{hang} (forward)", last[1]["at"]
    backward = next(i for i, text in enumerate(lines, 1) if "loss.backward()" in text)
    assert last[0]["at"].endswith(f"at ddp_steps.py:{backward} (main)"), last[0]["at"]
    verdict = json.loads(report.read_text())["verdict"]
    assert verdict["class"] == "stalled" and "rank 1 sleep at ddp_steps.py" in verdict["why"], verdict
