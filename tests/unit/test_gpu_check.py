"""``benchmarks/gpu_check.py``: the no-GPU path for real, its comparisons and report on recorded numbers.

The GPU checks themselves need a GPU (none here); what runs here is everything around them: the script
on a machine without CUDA (one line, exit 0, a report that says so), the import chain (no Textual, no
torch in the monitor), the runner (a check that throws fails alone; a hang is a timeout), the plumbing
on the CPU (an exported profiler window under a real Session, a script under ``torchpar-top run
--headless`` with Textual unimportable), HTA called the way the check calls it, and the pure
comparisons on numbers written down here.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from torchpar_top.analysis import Event

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpu_check_parts import checks  # noqa: E402 importable once benchmarks/ is on sys.path, above
from gpu_check_parts import compare as cmp  # noqa: E402 importable once benchmarks/ is on sys.path, above
from gpu_check_parts import report as rep  # noqa: E402 importable once benchmarks/ is on sys.path, above

NO_CUDA = "no CUDA device: nothing to check; run this on a GPU machine"


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _blocked_textual(tmp_path: Path) -> dict[str, str]:
    """An environment in which ``import textual`` fails (as on the GPU machine, which lacks it)."""
    block = tmp_path / "block"
    (block / "textual").mkdir(parents=True)
    (block / "textual" / "__init__.py").write_text("raise ImportError('textual is blocked in this test')\n")
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(block), os.environ.get("PYTHONPATH")) if p),
    }


# -- the script, for real, on this machine -------------------------------------------------------------------


@pytest.mark.skipif(_has_cuda(), reason="this machine has CUDA: the no-GPU path does not apply")
def test_without_cuda_it_says_so_in_one_line_writes_the_report_and_exits_0(tmp_path):
    done = subprocess.run(
        [sys.executable, "-X", "importtime", str(SCRIPT), "--out", str(tmp_path / "r.json")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        env=_blocked_textual(tmp_path),
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == NO_CUDA + "\n"
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["cuda"] is False and report["message"] == NO_CUDA
    assert report["checks"] == [] and report["counts"] == {"passed": 0, "failed": 0, "skipped": 0}
    assert "sees no CUDA device" in report["reason"] or "torch:" in report["reason"]
    head = report["header"]
    assert head["python"] == ".".join(map(str, sys.version_info[:3]))
    assert head["torch"] and head["torchpar_top"].startswith("0.")
    assert NO_CUDA in (tmp_path / "r.md").read_text()
    imported = {
        line.split("|")[-1].strip().split(".")[0]
        for line in done.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "textual" not in imported and "torch" not in imported  # torch only in its child


@pytest.mark.skipif(_has_cuda(), reason="this machine has CUDA: the no-GPU path does not apply")
def test_the_default_report_lands_in_the_working_directory(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], cwd=tmp_path, capture_output=True, text=True, timeout=180, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "gpu_check_report.json").exists() and (tmp_path / "gpu_check_report.md").exists()


def test_the_checks_import_chain_has_no_textual_and_no_torch(tmp_path):
    """What the GPU path imports in the monitor: Session, NVML probe, analysis, contract; never Textual
    (absent on the GPU machine) nor torch (importing it is no CUDA context, but nothing here needs it)."""
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT / "benchmarks")!r})
        import gpu_check
        gpu_check.use_checkout()
        from gpu_check_parts import checks, compare, report
        import torchpar_top.sources.live.session, torchpar_top.sources.live.targets
        import torchpar_top.probes.host.nvml
        import torchpar_top.contract.messages, torchpar_top.analysis, torchpar_top.sinks.headless
        bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'torch', 'rich'))
        print(bad)
    """)
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=_blocked_textual(tmp_path),
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_without_an_install_the_checkout_is_linked_in(tmp_path):
    """A Python that has torch and friends but no torchpar_top (the GPU machine): the shim makes it
    importable, for this process and for children (PYTHONPATH), from this checkout."""
    import site

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site_dir = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # our site-packages as a plain path entry: its packages importable, its .pth files (the editable
    # install's finder) not run
    Path(site_dir, "parent.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    code = textwrap.dedent(f"""
        import importlib.util, os, pathlib, subprocess, sys
        spec = importlib.util.find_spec("torchpar_top")  # none, or an install elsewhere (CI's wheel)
        # the package's origin in this checkout
        checkout = pathlib.Path({str(ROOT / "cli" / "__init__.py")!r})
        assert spec is None or pathlib.Path(spec.origin).resolve() != checkout, (
            "this checkout importable before the shim")
        sys.path.insert(0, {str(ROOT / "benchmarks")!r})
        import gpu_check
        print(gpu_check.use_checkout())
        import torchpar_top.analysis, torchpar_top.sources.live.session
        child = subprocess.run([sys.executable, "-c", "import os, torchpar_top.probes.agent.agent as a; "
                                "print(os.path.realpath(a.__file__))"],
                               capture_output=True, text=True)
        print(child.stdout.strip() or child.stderr)
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, timeout=120, env=env, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    how, agent_file = done.stdout.strip().splitlines()[-2:]
    assert how.startswith("this checkout, through links in ")
    assert Path(agent_file) == ROOT / "probes" / "agent" / "agent.py"


# -- the runner ----------------------------------------------------------------------------------------------


def _ctx(tmp_path):
    return checks.Context(info={"device_count": 1}, smi=None, tmp=tmp_path)


def test_cupti_cost_alternates_the_modes_and_reads_each_over_plain(tmp_path):
    # a stand-in for cupti_loop.py: each mode's speed, and a log of the order the modes ran in
    script = tmp_path / "loop.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import json, sys
            mode = sys.argv[2]
            open({str(tmp_path / "order")!r}, "a").write(mode + "\\n")
            speeds = {{"plain": 140000.0, "callbacks": 138000.0, "after-activity": 80000.0}}
            speed = speeds.get(mode, 139000.0)
            print("GPU-CHECK " + json.dumps({{"ok": True, "mode": mode, "median": speed}}))
            """
        )
    )
    ctx = _ctx(tmp_path)
    ctx.deadline = time.monotonic() + 300
    cost = checks._cupti_cost(ctx, script)
    order = (tmp_path / "order").read_text().split()
    assert order == ["plain", "callbacks", "after-activity", "after-detach"] * checks.CUPTI_COST_ROUNDS
    assert cost["plain"] == {"rounds": [140000.0, 140000.0], "ratio": 1.0}
    assert cost["callbacks"]["ratio"] == round(138000 / 140000, 3)
    assert cost["after-activity"]["ratio"] == round(80000 / 140000, 3)
    ctx.deadline = time.monotonic() + 10  # too little time left: no mode runs, nothing is reported
    assert checks._cupti_cost(ctx, script) == {}


def test_a_cost_mode_cut_off_by_the_window_is_reported_not_raised(tmp_path):
    # on an H200 after-detach's process outlived the window and its TimeoutExpired failed the whole check
    script = tmp_path / "loop.py"
    script.write_text(
        textwrap.dedent(
            """
            import json, sys, time
            mode = sys.argv[2]
            if mode == "after-detach":
                time.sleep(60)
            print("GPU-CHECK " + json.dumps({"ok": True, "mode": mode, "median": 100000.0}))
            """
        )
    )
    ctx = _ctx(tmp_path)
    ctx.deadline = time.monotonic() + 20  # a window of 0.4 x 15 s: one round, the fourth mode cut off
    started = time.monotonic()
    cost = checks._cupti_cost(ctx, script)
    assert time.monotonic() - started < 15
    assert cost["after-detach"] == {"rounds": [], "cut_off": 1}
    assert cost["plain"]["ratio"] == 1.0 and cost["after-activity"]["rounds"] == [100000.0]


def test_a_check_that_throws_fails_with_its_error_and_the_rest_still_run(tmp_path):
    def boom(ctx):
        raise ValueError("bad reading 42")

    def fine(ctx):
        return "passed", "all good", {"x": 1}

    def skip(ctx):
        raise checks.Skip("HTA not installed")

    cleaned = []

    def leaves_something(ctx):
        ctx.on_cleanup(lambda: cleaned.append(True))
        raise RuntimeError("after starting something")

    plan = [
        checks.Planned("a", "A", boom, 5, 0),
        checks.Planned("b", "B", leaves_something, 5, 0),
        checks.Planned("c", "C", skip, 5, 0),
        checks.Planned("d", "D", fine, 5, 0),
    ]
    seen = []
    entries = checks.run_plan(_ctx(tmp_path), plan, time.monotonic() + 60, seen.append)
    assert [e["status"] for e in entries] == ["failed", "failed", "skipped", "passed"]
    assert entries[0]["reason"] == "ValueError: bad reading 42"
    assert "Traceback" in entries[0]["details"]["traceback"]
    assert entries[2]["reason"] == "HTA not installed"
    assert entries[3]["details"] == {"x": 1}
    assert cleaned == [True] and seen == entries


def test_a_hanging_check_is_a_timeout_and_what_it_started_is_cleaned_up(tmp_path):
    cleaned = []

    def hangs(ctx):
        ctx.on_cleanup(lambda: cleaned.append(True))
        time.sleep(30)

    entry = checks.run_one(_ctx(tmp_path), checks.Planned("h", "H", hangs, 0.2, 0), 0.2, grace=0.1)
    assert entry["status"] == "failed" and entry["reason"] == "timed out after 0 s (its budget)"
    assert entry["seconds"] < 5 and cleaned == [True]


def test_checks_beyond_the_total_budget_are_skipped_with_the_reason(tmp_path):
    plan = [checks.Planned("late", "Late", lambda ctx: ("passed", "", {}), 60, 30)]
    (entry,) = checks.run_plan(_ctx(tmp_path), plan, time.monotonic() + 10)
    assert entry["status"] == "skipped"
    assert entry["reason"].startswith("not run:") and "needs 30 s" in entry["reason"]


def test_the_plan_stays_within_the_ten_minute_command_limit():
    # the default budget (470 s) plus a hung check's 30 s stays under the device's 10-minute command
    assert sum(p.least for p in checks.PLAN) < 270
    assert all(p.budget <= 290 for p in checks.PLAN)
    source = (ROOT / "benchmarks" / "gpu_check.py").read_text()
    assert 'default=470.0, help="seconds for all the checks (default 470)"' in source


# -- the report ----------------------------------------------------------------------------------------------


def test_the_report_is_strict_json_and_a_markdown_summary(tmp_path):
    report = {
        "tool": "benchmarks/gpu_check.py",
        "started": "2026-01-01T00:00:00+00:00",
        "seconds": 123.4,
        "cuda": True,
        "header": {
            "python": "3.11.7",
            "torch": "2.11.0+cu130",
            "cuda_build": "13.0",
            "driver": "580.65.06",
            "gpus": [
                {
                    "index": 0,
                    "name": "NVIDIA H100 80GB HBM3",
                    "uuid": "GPU-1",
                    "capability": "9.0",
                    "memory_gib": 79.2,
                }
            ],
        },
        "checks": [
            rep.check_entry(
                "a",
                "A | pipe",
                "passed",
                "fine",
                1.234,
                {
                    "nan": math.nan,
                    "tuple": (1, 2),
                    "tables": [{"title": "T", "columns": ["x", "y"], "rows": [[1, None]]}],
                },
            ),
            rep.check_entry("b", "B", "skipped", "HTA not installed"),
        ],
    }
    report["counts"] = rep.counts(report["checks"])
    json_path, md_path = rep.write_report(report, tmp_path / "out" / "r.json")
    doc = json.loads(json_path.read_text())
    assert doc["checks"][0]["details"]["nan"] is None and doc["checks"][0]["details"]["tuple"] == [1, 2]
    assert doc["counts"] == {"passed": 1, "failed": 0, "skipped": 1}
    md = md_path.read_text()
    assert "| A \\| pipe | passed | fine | 1.23 |" in md
    assert "| B | skipped | HTA not installed | 0.0 |" in md
    assert "NVIDIA H100 80GB HBM3" in md and "| 1 | – |" in md
    assert "1 passed, 0 failed, 1 skipped" in md


def test_report_paths_and_statuses():
    assert rep.paths("x.json") == (Path("x.json"), Path("x.md"))
    assert rep.paths("dir/report") == (Path("dir/report.json"), Path("dir/report.md"))
    with pytest.raises(ValueError):
        rep.check_entry("a", "A", "ok")


# -- NVML against nvidia-smi, on recorded numbers ------------------------------------------------------------

SMI_IDLE = """0, GPU-5b0d4f1e-8c2a-4c7b-9e51-0a1b2c3d4e5f, 0, 1, 81559, 69.53
1, GPU-a1b2c3d4-0000-1111-2222-333344445555, 0, 1, 81559, [N/A]
"""
SMI_LOADED = "0, GPU-5b0d4f1e-8c2a-4c7b-9e51-0a1b2c3d4e5f, 100, 1113, 81559, 512.10\n"


class _View:
    def __init__(self, index, label, util, mem_used_mib, mem_total_mib, power_w):
        self.index, self.label, self.util_percent, self.power_w = index, label, util, power_w
        self.mem_used = None if mem_used_mib is None else int(mem_used_mib * cmp.MIB)
        self.mem_total = None if mem_total_mib is None else int(mem_total_mib * cmp.MIB)


def test_nvidia_smi_rows_are_parsed_with_missing_values_as_none():
    rows = cmp.parse_smi_gpus(SMI_IDLE + "garbage line\n")
    assert [r["index"] for r in rows] == [0, 1]
    assert rows[0] == {
        "index": 0,
        "uuid": "GPU-5b0d4f1e-8c2a-4c7b-9e51-0a1b2c3d4e5f",
        "util": 0.0,
        "mem_used_mib": 1.0,
        "mem_total_mib": 81559.0,
        "power_w": 69.53,
    }
    assert rows[1]["power_w"] is None
    assert cmp.parse_smi_apps("4242, 1112\n77, [N/A]\nNo running processes found\n") == [
        {"pid": 4242, "used_mib": 1112.0},
        {"pid": 77, "used_mib": None},
    ]


def test_probe_and_nvidia_smi_agree_within_tolerance_and_differences_are_named():
    smi = cmp.parse_smi_gpus(SMI_LOADED)
    close = [
        ([cmp.probe_row(_View(0, "cuda:0", 99.0, 1113.0, 81559.0, 498.0))], smi),
        ([cmp.probe_row(_View(0, "cuda:0", 100.0, 1113.0, 81559.0, 530.0))], smi),
    ]
    (row,) = cmp.compare_nvml(close)
    assert row["label"] == "cuda:0" and row["readings"] == 2
    assert row["util"] == {"probe": 99.5, "smi": 100.0, "diff": -0.5, "allowed": 10.0, "ok": True}
    assert row["power_w"]["ok"] and row["power_w"]["allowed"] == pytest.approx(51.21)
    assert cmp.nvml_problems({"loaded": [row]}) == []

    far = [([cmp.probe_row(_View(0, "cuda:0", 60.0, 1500.0, 81559.0, None))], smi)]
    (row,) = cmp.compare_nvml(far)
    problems = cmp.nvml_problems({"loaded": [row]})
    assert problems == [
        "loaded, cuda:0, util: probe 60.0, nvidia-smi 100.0 (difference -40.0, allowed ±10.0)",
        "loaded, cuda:0, mem_used_mib: probe 1500.0, nvidia-smi 1113.0 (difference 387.0, allowed ±64.0)",
        "loaded, cuda:0, power_w: the probe has no value, nvidia-smi reads 512.1",
    ]
    table = cmp.table_of_nvml({"loaded": [row]})
    assert table["rows"] == [
        ["loaded", "cuda:0", "60.0 / 100.0 ✗", "1500 / 1113 ✗", "81559 / 81559", "– / 512.1"]
    ]


def test_a_metric_neither_side_has_is_not_a_problem():
    smi = cmp.parse_smi_gpus(SMI_IDLE)
    pairs = [([cmp.probe_row(_View(1, "cuda:1", 0.0, 1.0, 81559.0, None))], smi)]
    rows = {r["index"]: r for r in cmp.compare_nvml(pairs)}
    assert rows[1]["power_w"] == {"probe": None, "smi": None, "diff": None, "allowed": None, "ok": None}
    assert rows[0]["util"]["probe"] is None  # the probe did not list GPU 0 at all
    assert cmp.nvml_problems({"idle": [rows[1]]}) == []


# -- labels --------------------------------------------------------------------------------------------------

SMI_TWO = cmp.parse_smi_gpus("0, GPU-aaaa, 0, 1, 100, 60\n1, GPU-bbbb, 0, 1, 100, 60\n")


def test_labels_agree_when_cuda_order_is_nvml_order():
    result = cmp.compare_labels(
        ["aaaa", "bbbb"],
        ["GPU-aaaa", "GPU-bbbb"],
        SMI_TWO,
        {"given UUIDs": {0: "cuda:0", 1: "cuda:1"}, "environment": {0: "cuda:0", 1: "cuda:1"}},
    )
    assert result["ok"] and result["expected"] == {"cuda:0": 0, "cuda:1": 1} and result["agent_uuids_exact"]


def test_labels_follow_uuids_when_cuda_orders_gpus_differently():
    # CUDA_VISIBLE_DEVICES=1,0: torch's cuda:0 is NVML 1
    result = cmp.compare_labels(
        ["bbbb", "aaaa"],
        ["GPU-bbbb", "GPU-aaaa"],
        SMI_TWO,
        {"given UUIDs": {1: "cuda:0", 0: "cuda:1"}, "environment": {0: "cuda:0", 1: "cuda:1"}},
    )
    assert result["expected"] == {"cuda:0": 1, "cuda:1": 0}
    assert result["labellings"]["given UUIDs"]["wrong"] == []
    assert result["labellings"]["environment"]["wrong"] == [
        "NVML 1 labelled 'cuda:1', torch calls it cuda:0",
        "NVML 0 labelled 'cuda:0', torch calls it cuda:1",
    ]
    assert not result["ok"]


def test_a_uuid_spelled_differently_by_the_agent_is_a_problem():
    """If torch's UUID string already started with GPU-, the agent's f"GPU-{uuid}" would double it."""
    result = cmp.compare_labels(["GPU-aaaa"], ["GPU-GPU-aaaa"], SMI_TWO[:1], {"given UUIDs": {0: "cuda:0"}})
    assert result["expected"] == {"cuda:0": 0}
    assert result["agent_uuids_exact"] is False and not result["ok"]
    assert cmp.nvml_uuid("aaaa") == "GPU-aaaa" == cmp.nvml_uuid("GPU-aaaa")
    assert cmp.nvml_uuid("MIG-x") == "MIG-x"


def test_a_torch_uuid_nvidia_smi_does_not_list_is_a_problem():
    result = cmp.compare_labels(["cccc"], None, SMI_TWO, {})
    assert result["expected"] == {"cuda:0": None} and result["problems"] == [
        "cuda:0: torch's UUID cccc is not among nvidia-smi's"
    ]


# -- live rows against a trace -------------------------------------------------------------------------------


def _records(values, launched_step=100, busy=1.0, t0=1000.0, dt=0.1, name="cuda:0"):
    out = []
    for i, v in enumerate(values):
        out.append(
            {
                "t": t0 + i * dt,
                "mode": "async",
                "overlap": 0.25,
                "executors": {
                    name: {
                        "launched": i * launched_step,
                        "completed": i * launched_step - v,
                        "value": v,
                        "busy": busy,
                        "counts": "torch calls",
                        "quantity": "outstanding",
                        "capacity": 1024,
                    }
                },
            }
        )
    return out


def test_the_live_window_is_bounded_by_the_samples_around_it():
    records = _records([1000, 1010, 1020, 990, 1000, 1005, 1015, 1000])  # t = 1000.0 .. 1000.7
    live = cmp.live_window(records, "cuda:0", 1000.15, 1000.45)
    assert (live["from"], live["to"]) == (1000.1, 1000.5)  # the sample before t0, the first at or after t1
    assert live["samples"] == 4 and live["span"] == pytest.approx(0.4)
    assert live["launched"] == 400 and live["launch_rate"] == pytest.approx(1000.0)
    assert live["mean_value"] == pytest.approx((1020 + 990 + 1000 + 1005) / 4) and live["max_value"] == 1020
    assert live["counts"] == "torch calls" and live["mean_busy"] == 1.0 and live["mean_overlap"] == 0.25
    assert cmp.live_window(records, "cuda:1", 1000.15, 1000.45) is None
    assert cmp.live_window(records[:1], "cuda:0", 1000.0, 1000.1) is None


def test_time_weighted_depth_and_the_window_clock():
    # depth 0 until 10, 4 from 10, 2 from 30; over [0, 40]: (0*10 + 4*20 + 2*10) / 40
    assert cmp.time_weighted_depth([10.0, 30.0], [4, 2], 0.0, 40.0) == pytest.approx(2.5)
    assert cmp.time_weighted_depth([10.0, 30.0], [4, 2], 20.0, 25.0) == pytest.approx(4.0)
    assert cmp.time_weighted_depth([10.0], [4], 5.0, 5.0) is None
    base = 1_790_857_026_000_000_000
    assert cmp.trace_to_unix(4_519_256_852_673.242, base) == pytest.approx(1_795_376_282.852673, abs=1e-6)


def test_a_full_queue_agrees_when_both_sides_see_it_full():
    """Recorded ASYNC figures: ~1000 outstanding torch calls at 36k calls/s; the trace ~1 kernel per call."""
    live = cmp.live_window(
        _records([1000, 1010, 1020, 990, 1000, 1005], launched_step=3600), "cuda:0", 1000.05, 1000.45
    )
    trace = {
        "launches": 18500,
        "duration": 0.5,
        "max_depth": 1024,
        "mean_depth": 1001.2,
        "time_mean_depth": 998.0,
        "seconds_at_cap": 0.41,
    }
    c = cmp.compare_queue(live, trace, 1024)
    assert c["kernels_per_call"] == pytest.approx(37000 / 36000)
    assert (c["live_regime"], c["trace_regime"], c["agree"]) == ("full", "full", True)
    assert "torch calls" in c["wording"] and "kernels" in c["wording"]


def test_a_drained_queue_agrees_and_a_mismatch_is_said():
    sync = cmp.live_window(_records([0, 1, 0, 2, 0, 1], launched_step=900), "cuda:0", 1000.05, 1000.45)
    c = cmp.compare_queue(
        sync,
        {"launches": 9000, "duration": 0.5, "max_depth": 2, "mean_depth": 0.9, "time_mean_depth": 0.6},
        1024,
    )
    assert (c["live_regime"], c["trace_regime"], c["agree"]) == ("drained", "drained", True)
    c = cmp.compare_queue(
        sync,
        {"launches": 9000, "duration": 0.5, "max_depth": 1024, "mean_depth": 900.0, "time_mean_depth": 950.0},
        1024,
    )
    assert c["agree"] is False and c["note"] == "live drained, trace full"
    assert cmp.compare_queue(None, {"launches": 1}, 1024)["agree"] is None
    assert (
        cmp.compare_queue(sync, {"launches": 0, "duration": 0.5}, 1024)["note"] == "no launches in the trace"
    )
    assert [cmp.regime(x, 1024) for x in (None, 0, 8, 9, 511, 512)] == [
        None,
        "drained",
        "drained",
        "partial",
        "partial",
        "full",
    ]
    table = cmp.table_of_queues([("SYNC", c)])
    assert table["rows"][0][0] == "SYNC" and table["rows"][0][-1] == "no"


def test_outstanding_lanes_run_from_the_launch_to_the_end_of_the_gpu_op():
    events = [
        Event("cudaLaunchKernel", "cuda_runtime", 0.0, 2.0, 1, 1, correlation=1),
        Event("k1", "kernel", 5.0, 10.0, 0, 7, correlation=1, device=0, stream=7),
        Event("cudaLaunchKernel", "cuda_runtime", 3.0, 2.0, 1, 1, correlation=2),
        Event("k2", "kernel", 15.0, 5.0, 1, 9, correlation=2, device=1, stream=9),
        Event("orphan", "kernel", 40.0, 5.0, 0, 7, correlation=99, device=0, stream=7),
        Event("aten::mm", "cpu_op", 0.0, 3.0, 1, 1),
    ]
    lanes = cmp.outstanding_lanes(events)
    assert lanes == {0: [(0.0, 15.0)], 1: [(3.0, 20.0)]}
    assert cmp.share_covered(lanes[0], 0.0, 50.0) == pytest.approx(0.3)
    assert cmp.share_overlapping(list(lanes.values()), 0.0, 50.0) == pytest.approx(12.0 / 50.0)
    share = cmp.compare_share("overlap", 0.30, 0.24)
    assert share["ok"] and share["diff"] == pytest.approx(0.06)
    assert cmp.compare_share("overlap", 0.9, 0.24)["ok"] is False
    assert cmp.compare_share("overlap", None, 0.24)["ok"] is None


# -- our analysis against HTA --------------------------------------------------------------------------------


def test_hta_comparison_allows_the_tie_order_and_nothing_else():
    ours = [
        {"rank": 0, "stream": 7, "launches": 6050, "max_depth": 946, "mean_depth": 663.2759},
        {"rank": 0, "stream": 27, "launches": 370, "max_depth": 17, "mean_depth": 3.4919},
        {"rank": 0, "stream": 99, "launches": 0, "max_depth": 0, "mean_depth": 0.0},
    ]
    hta = {
        (0, 7): {"launches": 6050, "max": 946, "mean": 663.268},
        (0, 27): {"launches": 370, "max": 17, "mean": 3.486},
    }
    result = cmp.compare_hta(ours, hta)
    assert result["ok"] and [r["stream"] for r in result["streams"]] == [7, 27]
    hta[(0, 27)] = {"launches": 371, "max": 17, "mean": 3.486}
    hta[(0, 30)] = {"launches": 2, "max": 1, "mean": 0.5}
    result = cmp.compare_hta(ours, hta)
    assert not result["ok"]
    assert result["problems"] == [
        "rank 0 stream 27: ours launches 370 max 17 mean 3.492, HTA 371 / 17 / 3.486",
        "rank 0 stream 30: only HTA has it",
    ]


def test_hta_comparison_expects_one_launch_more_where_htas_first_event_miss_applies():
    ours = [{"rank": 0, "stream": 7, "launches": 11567, "max_depth": 156, "mean_depth": 25.053}]
    hta = {(0, 7): {"launches": 11566, "max": 156, "mean": 25.055}}  # the H200 window's figures
    assert not cmp.compare_hta(ours, hta)["ok"]  # one launch more is a failure anywhere else
    result = cmp.compare_hta(ours, hta, (0, 7))
    assert result["ok"] and result["streams"][0]["hta_misses_first_event"]
    assert not cmp.compare_hta(ours, {(0, 7): {"launches": 11567, "max": 156, "mean": 25.055}}, (0, 7))["ok"]
    assert not cmp.compare_hta(ours, hta, (0, 8))["ok"]


def test_htas_first_event_miss_is_found_where_the_file_opens_with_a_launched_gpu_op():
    with gzip.open(ROOT / "tests" / "data" / "h200" / "first_event_is_a_kernel.json.gz", "rt") as f:
        trace = json.load(f)
    assert cmp.hta_first_event_miss(trace) == (0, 7)
    kernel = trace["traceEvents"][0]
    trace["traceEvents"] = [*trace["traceEvents"][1:], kernel]  # the kernel later in the file: HTA sees it
    assert cmp.hta_first_event_miss(trace) is None
    runtime_only = [e for e in trace["traceEvents"] if e.get("cat") != "cuda_runtime"]
    assert cmp.hta_first_event_miss({"traceEvents": [kernel, *runtime_only]}) is None  # no launch: none
    assert cmp.hta_first_event_miss({}) is None


@pytest.mark.slow
def test_hta_misses_the_first_events_launch_on_a_real_h200_window_as_the_check_expects():
    pytest.importorskip("hta.trace_analysis", reason="HTA not installed (.ci/run installs it)")
    path = str(ROOT / "tests" / "data" / "h200" / "first_event_is_a_kernel.json.gz")
    from torchpar_top.analysis import analyse_path, summary

    with gzip.open(path, "rt") as f:
        misses = cmp.hta_first_event_miss(json.load(f))
    ours, hta = summary(analyse_path(path))["streams"], checks.hta_queue_summary(path)
    assert not cmp.compare_hta(ours, hta)["ok"]
    assert cmp.compare_hta(ours, hta, misses)["ok"]


@pytest.mark.slow
def test_hta_is_called_as_the_check_calls_it_and_agrees_on_a_real_trace():
    pytest.importorskip("hta.trace_analysis", reason="HTA not installed (.ci/run installs it)")
    path = str(ROOT / "tests" / "data" / "hta" / "a100_alexnet_2_streams.json.gz")
    from torchpar_top.analysis import analyse_path, summary

    result = cmp.compare_hta(summary(analyse_path(path))["streams"], checks.hta_queue_summary(path))
    assert result["ok"] and len(result["streams"]) == 2


def test_trace_side_on_a_real_trace():
    side = checks.trace_side(str(ROOT / "tests" / "data" / "hta" / "gpu_2_ranks" / "rank-0.json.gz"))
    assert side["start_unix"] is None  # this older trace has no baseTimeNanoseconds: the check says so
    stream = checks._busiest(side["streams"], 0)
    assert (stream["stream"], stream["launches"], stream["max_depth"]) == (7, 1052, 80)
    assert 0 < stream["time_mean_depth"] < stream["mean_depth"]
    dev = side["devices"][0]
    assert 0 < dev["kernel_active"] < dev["outstanding"] <= 1


# -- scripts under torchpar-top run --headless ---------------------------------------------------------------


def test_error_and_warning_lines():
    lines = [
        "[stderr] Traceback (most recent call last):",
        "[stderr] RuntimeError: CUDA error: an illegal access",
        "[stderr] UserWarning: TensorFloat32 tensor cores available but not enabled",
        '[stdout] GPU-CHECK {"ok": true, "max_abs_diff": 0.0}',
        "[child] CUDA in use: watching cuda:0",
        "[stderr] skipping cudagraphs due to mutated inputs",
        "[app] profiler window failed: boom",
    ]
    assert cmp.error_lines(lines) == [lines[0], lines[1], lines[6]]
    assert cmp.warning_lines(lines) == [lines[2], lines[5]]


def test_the_marker_line_is_found_in_the_log():
    assert cmp.marker_result(["x", 'GPU-CHECK {"ok": true, "n": 1}', "GPU-CHECK not json"]) == {
        "ok": True,
        "n": 1,
    }
    assert cmp.marker_result(["nothing"]) is None


def _headless_records(
    exit_code=0, marker='GPU-CHECK {"ok": true, "graph_breaks": 0, "unique_graphs": 1}', stderr=()
):
    log = [
        {"source": "child", "text": "CUDA in use: watching the current stream of cuda:0"},
        {"source": "stdout", "text": marker},
    ] + [{"source": "stderr", "text": t} for t in stderr]
    row = {
        "name": "cuda:0",
        "kind": "cuda-stream",
        "quantity": "outstanding",
        "counts": "torch calls",
        "capacity": 1024,
        "launched": 6000,
        "completed": 6000,
    }
    return [
        {
            "child": {"pid": 5, "state": "running", "exit_code": None},
            "mode": "async",
            "log": log[:1],
            "executors": [dict(row, value=37, launched=3000, completed=2963)],
            "gpus": [{"util_percent": 35.0}],
        },
        {
            "child": {"pid": 5, "state": "running", "exit_code": None},
            "mode": "async",
            "log": log[1:],
            "executors": [dict(row, value=0)],
            "gpus": [{"util_percent": 80.0}],
        },
        {
            "child": {"pid": 5, "state": "exited", "exit_code": exit_code},
            "mode": "async",
            "log": [],
            "executors": [dict(row, value=0)],
            "gpus": [],
        },
    ]


def test_a_headless_run_is_summarised_per_queue_row():
    s = cmp.summarise_headless(_headless_records())
    assert (s["records"], s["state"], s["exit_code"], s["max_gpu_util"], s["modes"]) == (
        3,
        "exited",
        0,
        80.0,
        ["async"],
    )
    assert s["executors"] == [
        {
            "name": "cuda:0",
            "kind": "cuda-stream",
            "counts": "torch calls",
            "quantity": "outstanding",
            "samples": 3,
            "max_value": 37,
            "nonzero_samples": 1,
            "launched": 6000,
            "completed": 6000,
            "capacity": 1024,
        }
    ]
    assert [x["source"] for x in s["log"]] == ["child", "stdout"]


def test_a_script_run_is_judged_on_its_exit_its_own_result_its_log_and_compile_counters():
    plain = {"ok": True, "graph_breaks": 0, "unique_graphs": 1}
    verdict = cmp.judge_script_run(cmp.summarise_headless(_headless_records()), plain)
    assert verdict["ok"] and verdict["counters"]["unique_graphs"] == {"plain": 1, "under torchpar-top": 1}

    verdict = cmp.judge_script_run(cmp.summarise_headless(_headless_records(exit_code=1)), plain)
    assert verdict["problems"] == ["the script did not exit 0 (state exited, exit code 1)"]

    bad = cmp.summarise_headless(_headless_records(marker='GPU-CHECK {"ok": false}'))
    assert "the script's own check failed" in cmp.judge_script_run(bad)["problems"][0]

    missing = cmp.judge_script_run(cmp.summarise_headless(_headless_records(marker="done")))
    assert missing["problems"] == ["the script's GPU-CHECK line is missing from the log"]

    erred = cmp.judge_script_run(
        cmp.summarise_headless(_headless_records(stderr=["RuntimeError: boom"])),
        extra_lines=["[cli stderr] fine"],
    )
    assert erred["problems"] == ["1 error line(s) in the log, first: [stderr] RuntimeError: boom"]

    recompiled = cmp.summarise_headless(
        _headless_records(marker='GPU-CHECK {"ok": true, "graph_breaks": 1, "unique_graphs": 2}')
    )
    assert cmp.judge_script_run(recompiled, plain)["problems"] == [
        "graph_breaks: 1 under torchpar-top, 0 plain",
        "unique_graphs: 2 under torchpar-top, 1 plain",
    ]


# -- the plumbing on the CPU: real children, real sessions ---------------------------------------------------


@pytest.mark.slow
def test_a_script_under_headless_run_is_checked_end_to_end_without_textual(tmp_path, monkeypatch):
    """``script_check``'s whole path on a CPU script (plain, then ``torchpar-top run --headless`` in a child
    that cannot import Textual): what the GPU scripts go through, minus the GPU."""
    script = tmp_path / "marker.py"
    script.write_text(
        textwrap.dedent("""
        import json, time, torch
        x = torch.randn(32, 32)
        for _ in range(100):
            y = torch.relu(x @ x)
        time.sleep(1.0)  # a few agent samples before the end, so that the queue rows are seen
        print("GPU-CHECK " + json.dumps({"ok": True, "calls": 100}), flush=True)
    """)
    )
    for key, value in _blocked_textual(tmp_path).items():
        monkeypatch.setenv(key, value)
    ctx = _ctx(tmp_path)
    ctx.deadline = time.monotonic() + 90
    try:
        status, reason, details = checks.script_check(ctx, script, [], "CPU marker")
    finally:
        ctx.cleanup()
    assert status == "passed", (reason, details.get("headless"))
    assert details["headless"]["ended_by"] == "the workload's end"  # not a SIGTERM: it ends by itself
    assert details["summary"]["exit_code"] == 0
    assert [e["name"] for e in details["summary"]["executors"]] == ["cpu (eager)"]


@pytest.mark.slow
def test_a_profiler_window_is_exported_from_a_live_session(tmp_path):
    """The check's Session plumbing on the CPU: the agent writes the window's trace where asked and says so;
    the recorder keeps one record per agent sample. (On the CPU the trace holds no GPU work.)"""
    ctx = _ctx(tmp_path)
    ctx.deadline = time.monotonic() + 60
    try:
        session, recorder = checks._start_session(ctx, "async")
        assert checks._wait_for(lambda: checks._rows_running(session, ["cpu-stream:0"]), 40)
        path, lines = checks._profile_window(ctx, session, "cpu")
        session.close()
        recorder.stop()
    finally:
        ctx.cleanup()
    assert path == str(tmp_path / "cpu.json") and os.path.getsize(path) > 0
    assert ctx.traces == {"cpu": path}
    assert any(f"trace written to {path}" in t for t in lines)
    assert any("no launch queue to analyse" in t for t in lines)
    times = [r["t"] for r in recorder.records]
    assert len(times) >= 3 and times == sorted(set(times))
    assert recorder.records[-1]["executors"]["cpu-stream:0"]["quantity"] == "depth"


def test_the_check_scripts_compile():
    for path in (ROOT / "benchmarks" / "gpu_check_parts" / "children").glob("*.py"):
        compile(path.read_text(), str(path), "exec")


@pytest.mark.parametrize(
    ("trace", "launches"),
    [("h100/sync_window_without_gpu_records.json.gz", 351), ("hta/a100_alexnet_2_streams.json.gz", 0)],
)
def test_a_window_whose_trace_lost_its_gpu_records_is_told_apart(tmp_path, trace, launches):
    """async_session profiles a window again when its trace kept the launch calls and no GPU op (the
    real H100 trace); a trace with its kernels is not one."""
    import gzip

    path = tmp_path / "window.json"
    with gzip.open(ROOT / "tests" / "data" / trace, "rt") as f:
        path.write_text(f.read())
    assert checks._lost_gpu_records(str(path)) == launches
    assert checks._lost_gpu_records(None) == 0


def test_live_rates_split_in_and_out_of_the_profiler_windows():
    def rec(t, mode, rate, timing=False):
        return {"t": t, "mode": mode, "throughput": rate, "timing": timing, "executors": {}}

    records = [rec(0.1 * i, "async", 0.0) for i in range(30)]  # the start: nothing done, left out
    records += [rec(5.0 + 0.1 * i, "async", 100.0) for i in range(20)]  # 5.0-6.9: outside
    records += [rec(7.0, "async", 999.0, timing=True)]  # a timing round: left out
    records += [rec(7.2, "async", 150.0)]  # within the margin of the window: left out
    records += [rec(7.5 + 0.1 * i, "async", 200.0) for i in range(5)]  # inside 7.5-8.0
    records += [rec(9.0 + 0.1 * i, "sync", 50.0) for i in range(10)]
    records += [rec(11.0 + 0.1 * i, "sync", 80.0) for i in range(5)]  # inside 11.0-11.5
    rates = checks.rates_in_and_out(records, {"async": (7.5, 8.0), "sync": (11.0, 11.5)})
    assert rates["async"] == {"in_window": 200.0, "in_samples": 5, "outside": 100.0, "out_samples": 20}
    assert rates["sync"] == {"in_window": 80.0, "in_samples": 5, "outside": 50.0, "out_samples": 10}


def test_two_rounds_are_judged_by_their_median_not_the_faster():
    # an H200's rounds under run, 101.6k and 74.4k ops/s against plain's 90.9k and 93.1k: 0.956x, not 1.091x
    assert checks._middle([101611.3, 74381.5]) / checks._middle([90902.2, 93122.5]) == pytest.approx(
        0.9564, abs=1e-4
    )
    assert checks._middle([3.0, 1.0, 2.0]) == 2.0
