"""The cluster view from Prometheus' query results: rows per (node, rank), stale ranks, the job's pace,
the straggler from successive refreshes."""

from __future__ import annotations

import asyncio
import dataclasses

from torchpar_top.contract.snapshot import Straggler
from torchpar_top.contract.vocab import PHASES
from torchpar_top.model.cluster import ClusterModel, ClusterView
from torchpar_top.model.steps import MIN_WINDOWS
from torchpar_top.tui.cluster import ClusterApp, header_lines, phases_text, table_lines


def _labels(instance: str, node: int, rank: int, local: int) -> dict[str, str]:
    return {
        "instance": instance,
        "job": "j",
        "node": str(node),
        "hostname": f"host{node}",
        "Hostname": f"host{node}",
        "rank": str(rank),
        "local_rank": str(local),
    }


RANKS = [("a:1", 0, 0, 0), ("a:1", 0, 1, 1), ("b:1", 1, 2, 0), ("b:1", 1, 3, 1)]


def _results(fresh=("a:1", "b:1"), steps=None, rates=None, slow=None, count=0.0, core_wait=None):
    out: dict[str, list] = {k: [] for k in ("seen", "running", "throughput", "depth", "up", "scraped")}
    for inst, node, rank, local in RANKS:
        lab = _labels(inst, node, rank, local)
        out["seen"].append((lab, 1.0))
        if inst in fresh:
            out["running"].append((lab, 1.0))
            out["throughput"].append((lab | {"what": "steps"}, (rates or {}).get(rank, 10.0)))
            out["depth"].append((lab, 3.0))
    out["gpu_util"], out["gpu_memory"] = [], []
    for inst in fresh:  # per node, by NVML index: a rank reads the GPU whose index is its local rank
        for gpu in (0, 1):
            labels = {"instance": inst, "gpu": str(gpu), "Hostname": "h"}
            out["gpu_util"].append((labels, 0.5 + 0.25 * gpu))
            out["gpu_memory"].append((labels, 2.0**30 * (gpu + 1)))
    for inst in ("a:1", "b:1"):
        out["up"].append(({"instance": inst, "job": "j"}, 1.0 if inst in fresh else 0.0))
        out["scraped"].append(({"instance": inst, "job": "j"}, 99.0))
    if steps:
        out["steps_total"], out["step_seconds"], out["phase_seconds"], out["steps_rate"] = [], [], [], []
        for inst, node, rank, local in RANKS:
            lab = _labels(inst, node, rank, local)
            out["steps_total"].append((lab, count))
            out["steps_rate"].append((lab, 5.0))
            out["step_seconds"].append((lab, 0.2))
            if core_wait is not None:
                out.setdefault("core_wait", []).append((lab, core_wait.get(rank, 0.02)))
            for p in PHASES:
                share = {"forward": 0.3, "backward": 0.4, "comm": 0.3}.get(p, 0.0)
                if rank == slow:
                    share = {"forward": 0.6, "backward": 0.4, "comm": 0.0}.get(p, 0.0)
                out["phase_seconds"].append((lab | {"phase": p}, share * 0.2))
    return out


def test_rows_per_node_and_rank_and_the_job_pace():
    view = ClusterModel().update(100.0, _results(rates={0: 10.0, 1: 9.0, 2: 12.0, 3: 11.0}), 0.01)
    assert [(r.node, r.rank, r.local_rank, r.hostname) for r in view.ranks] == [
        (0, 0, 0, "host0"),
        (0, 1, 1, "host0"),
        (1, 2, 0, "host1"),
        (1, 3, 1, "host1"),
    ]
    assert all(r.state == "running" and not r.stale for r in view.ranks)
    assert [(r.gpu_util, r.gpu_memory) for r in view.ranks[2:]] == [(0.5, 2.0**30), (0.75, 2.0**31)]
    assert view.steps_per_s == 9.0 and view.slowest == 1  # the slowest rank's
    assert view.expected_nodes == 2 and view.fresh_nodes == 2 and view.scrape_age == 1.0
    assert not view.steps_known and view.straggler is None and view.ranks[0].phases is None
    first, second = header_lines(view, "http://p:9090", "j", False)
    assert "job 9.00 steps/s (r1 slowest)" in first.plain and "nodes 2/2" in first.plain
    assert second.plain.startswith("steps unknown")


def test_steps_per_s_is_the_throughput_in_steps_else_the_counters_irate():
    results = _results(steps=True, count=10.0)
    view = ClusterModel().update(100.0, results)
    assert [r.steps_per_s for r in view.ranks] == [10.0] * 4
    # a rank whose throughput is not in steps (no step found yet on it): its counter's last two scrapes
    results["throughput"] = [(lab | {"what": "ops (sampled)"}, v) for lab, v in results["throughput"]]
    view = ClusterModel().update(100.0, results)
    assert [r.steps_per_s for r in view.ranks] == [5.0] * 4


def test_ranks_at_one_pace_name_no_slowest_rank():
    # two nodes' DDP ranks in lockstep, as read at one refresh (their monitors' spans end apart)
    view = ClusterModel().update(100.0, _results(rates={0: 39.5, 1: 39.5, 2: 39.0, 3: 39.0}))
    assert view.steps_per_s == 39.0 and view.slowest is None
    first = header_lines(view, "u", None, False)[0].plain
    assert "job 39.0 steps/s " in first and "slowest" not in first
    # one rank 10 % behind the others' median is named
    view = ClusterModel().update(100.0, _results(rates={0: 40.0, 1: 40.0, 2: 36.0, 3: 40.5}))
    assert view.steps_per_s == 36.0 and view.slowest == 2


def test_before_the_first_step_the_header_says_no_steps_yet_not_unknown():
    results = _results()
    results["throughput"] = [(lab | {"what": "ops (sampled)"}, v) for lab, v in results["throughput"]]
    view = ClusterModel().update(100.0, results)
    assert not view.steps_known
    assert header_lines(view, "u", None, False)[1].plain.startswith("no steps yet")
    view = ClusterModel().update(100.0, _results())  # steps counted, but the node exports no step series
    assert header_lines(view, "u", None, False)[1].plain.startswith("steps unknown")


def test_ranks_whose_count_stops_rising_are_said_stalled():
    model = ClusterModel()
    views = [model.update(100.0 + i, _results(steps=True, count=min(10.0 * i, 30.0))) for i in range(9)]
    # step 0.2 s: stalled from 3 s (ten steps are 2 s) without a rise, timed from when 30 was first seen
    assert [v.ranks[0].stalled for v in views] == [None] * 6 + [3.0, 4.0, 5.0]
    header = header_lines(views[-1], "u", None, False)[1].plain
    assert header.startswith("no step on any rank for 5.00 s: a hang?"), header
    assert "◀ no step for 5.00 s" in [t.plain for t in table_lines(views[-1], 200)][1]
    view = model.update(109.0, _results(steps=True, count=31.0))
    assert all(r.stalled is None for r in view.ranks)  # stepping again
    assert not header_lines(view, "u", None, False)[1].plain.startswith("no step")


def test_where_each_stalled_rank_is_comes_from_its_nodes_monitor():
    model = ClusterModel()
    results = _results(steps=True, count=30.0)
    # the nodes' monitors judged every rank stalled (from their step ends) and read where each one is
    places = {
        0: "waits at t.py:21 (<module>)",
        1: "waits at t.py:21 (<module>)",
        2: "",
        3: "sleep at t.py:15 (forward)",
    }
    results["stalled"] = [(_labels(*r), 12.0) for r in RANKS]
    results["stalled_at"] = [(_labels(*r) | {"at": places[r[2]]}, 1.0) for r in RANKS if places[r[2]]]
    view = model.update(100.0, results)  # this screen's first refresh: its own timing has not started
    assert [(r.stalled, r.at) for r in view.ranks] == [(12.0, places[r]) for r in range(4)]
    rows = [t.plain for t in table_lines(view, 200)]
    assert "◀ no step for 12.0 s: sleep at t.py:15 (forward)" in rows[4]
    # the phases are the node's last window's, from before the stall, and say so
    assert all(" before: bwd 40% fwd 30% " in row for row in rows[1:])
    assert rows[3].rstrip().endswith("◀ no step for 12.0 s")  # rank 2: its node said no place
    # where the place does not fit beside the row, it goes on a line of its own under the note
    narrow = [t.plain for t in table_lines(view, 120)]
    r3 = next(i for i, t in enumerate(narrow) if " r3 " in t)
    assert narrow[r3].endswith("◀ no step for 12.0 s:") and len(narrow) == 8  # rank 2's note fits
    assert narrow[r3 + 1].strip() == "sleep at t.py:15 (forward)"
    assert narrow[r3 + 1].index("sleep") == 120 - len("sleep at t.py:15 (forward)")  # as far left as needed
    wide = [t.plain for t in table_lines(view, 140)]
    r3 = next(i for i, t in enumerate(wide) if " r3 " in t)
    assert wide[r3].endswith("◀ no step for 12.0 s:") and wide[r3 + 1].index("sleep") == wide[r3].index(
        "no step"
    )
    header = header_lines(view, "u", None, False)[1].plain
    # the rank that is not waiting for its peers is named: where their wait comes from
    assert (
        header
        == "no step on any rank for 12.0 s: a hang? not waiting for peers: r3 sleep at t.py:15 (forward)"
    )
    # many ranks in their own code: three named, the rest counted
    many = dict(results) | {
        "stalled_at": [(_labels(*r) | {"at": f"sleep at t.py:{r[2]} (forward)"}, 1.0) for r in RANKS]
    }
    header = header_lines(model.update(100.5, many), "u", None, False)[1].plain
    assert header.endswith(
        "r0 sleep at t.py:0 (forward); r1 sleep at t.py:1 (forward); r2 sleep at t.py:2 (forward); 1 more"
    )
    # a place with a control character in it (a file's name) stays on the header's line, made visible
    odd = dict(results) | {"stalled_at": [(_labels(*RANKS[3]) | {"at": "sleep at a\nb.py:1 (f)"}, 1.0)]}
    header = header_lines(model.update(100.7, odd), "u", None, False)[1].plain
    assert "\n" not in header and header.endswith("r3 sleep at a␊b.py:1 (f)")
    # where every place is a wait for peers, the rows say it and the header names nobody
    results["stalled_at"] = [(_labels(*r) | {"at": "waits at t.py:21 (<module>)"}, 1.0) for r in RANKS]
    header = header_lines(model.update(101.0, results), "u", None, False)[1].plain
    assert header == "no step on any rank for 12.0 s: a hang?"
    # stepping again: the place goes with the stall, whatever a late series still says
    results = _results(steps=True, count=31.0) | {"stalled_at": results["stalled_at"]}
    view = model.update(102.0, results)
    assert all(r.stalled is None and r.at == "" for r in view.ranks)
    assert not any("before:" in t.plain for t in table_lines(view, 200))


def test_a_node_that_stops_answering_is_stale_not_dropped():
    model = ClusterModel(expected_nodes=3)
    view = model.update(100.0, _results(fresh=("a:1",)))
    stale = [r for r in view.ranks if r.instance == "b:1"]
    assert len(view.ranks) == 4 and all(r.stale and r.state == "stale" for r in stale)
    assert all(r.steps_per_s is None and r.depth is None for r in stale)  # nothing current is claimed
    assert [(n.instance, n.stale, n.up) for n in view.nodes] == [("a:1", False, True), ("b:1", True, False)]
    assert view.fresh_nodes == 1 and view.expected_nodes == 3
    assert "+1 stale/3" in header_lines(view, "u", None, False)[0].plain
    lines = [t.plain for t in table_lines(view, 200)]
    assert "stale" in lines[3] and "no answer from its node's monitor" in lines[3]


def test_the_straggler_from_successive_refreshes():
    model = ClusterModel()
    view = None
    for i in range(8):
        view = model.update(100.0 + i, _results(steps=True, slow=3, count=10.0 * i))
    assert view is not None and view.steps_known
    assert view.straggler is not None and view.straggler.rank == 3 and view.straggler.cause == "forward"
    assert view.ranks[3].phases is not None and view.ranks[3].step_seconds == 0.2
    assert view.ranks[0].steps_per_s == 10.0  # its throughput in steps: step ends over its node's span
    assert "straggler r3: forward" in header_lines(view, "u", None, False)[1].plain
    assert phases_text({"forward": 0.12, "backward": 0.08, "comm": 0.0}, 0.2) == "fwd 60% bwd 40%"


def test_a_straggler_that_waits_for_a_core_is_said_so_from_its_exported_wait():
    model = ClusterModel()
    # rank 3: forward 0.12 s a step against 0.06; its frontend waited for a core 40 % of the time (0.08 s
    # of its 0.2 s step) against 2 % on the others
    for i in range(8):
        view = model.update(100.0 + i, _results(steps=True, slow=3, count=10.0 * i, core_wait={3: 0.4}))
    assert view.straggler is not None and view.straggler.rank == 3
    assert view.straggler.core_wait is not None
    assert abs(view.straggler.core_wait - (0.4 - 0.02) * 0.2) < 1e-9
    assert view.ranks[3].core_wait == 0.4
    assert "waits for a core 76.0 ms a step more" in header_lines(view, "u", None, False)[1].plain
    table = [t.plain for t in table_lines(view, 200)]
    assert "waits for a core" in table[4]
    # each rank's wait in its own column, where one waited enough to say
    at = table[0].index("waits") + len("waits")
    assert [row[at - 5 : at].strip() for row in table[1:]] == ["2%", "2%", "2%", "40%"]
    # the same forward without the wait: its code, said without contention, and no column
    model = ClusterModel()
    for i in range(8):
        view = model.update(100.0 + i, _results(steps=True, slow=3, count=10.0 * i, core_wait={}))
    assert view.straggler is not None and view.straggler.core_wait is None
    assert "waits for a core" not in header_lines(view, "u", None, False)[1].plain
    assert "waits" not in table_lines(view, 200)[0].plain


def test_a_straggler_without_a_ratio_is_drawn():
    # the others spend no time in the cause phase: the ratio is None (JSON has no infinity)
    model = ClusterModel()
    view = model.update(100.0, _results(steps=True))
    st = Straggler(rank=3, cause="data", ratio=None, costs=0.01)
    view = dataclasses.replace(view, straggler=st)
    assert "data (none on the others)" in header_lines(view, "u", None, False)[1].plain
    assert "◀ straggler: data (none on the others)" in [t.plain for t in table_lines(view, 200)][4]


def test_identical_ranks_have_no_straggler():
    model = ClusterModel()
    for i in range(8):
        view = model.update(100.0 + i, _results(steps=True, count=10.0 * i))
        said = header_lines(view, "u", None, False)[1].plain
        if view.straggler_windows < MIN_WINDOWS:  # not judged yet: not "no straggler"
            assert said == f"straggler: judging, {view.straggler_windows} of {MIN_WINDOWS} refreshes"
        else:
            assert said == "no straggler"
    assert view.straggler is None and view.straggler_windows == 7  # the first refresh is no window


class _Source:
    def __init__(self, views):
        self.views, self.calls = views, 0

    def refresh(self) -> ClusterView:
        self.calls += 1
        return self.views[min(self.calls, len(self.views)) - 1]


def test_the_screen_says_an_error_keeps_trying_and_pauses():
    error = ClusterModel().error(1.0, "Prometheus at http://x:1 cannot be reached: connection refused")
    good = ClusterModel().update(100.0, _results())
    source = _Source([error, good])

    async def run() -> None:
        app = ClusterApp(source, 0.05, "http://x:1", None)
        async with app.run_test(size=(120, 20)) as pilot:
            for _ in range(100):
                await pilot.pause(0.05)
                if app.view is good:
                    break
            assert source.calls >= 2 and app.view is good  # it tried again after the error
            await pilot.press("p")
            calls = source.calls
            await pilot.pause(0.3)
            assert app.paused and source.calls <= calls + 1  # at most the refresh already under way
            await pilot.press("question_mark")
            assert type(app.screen).__name__ == "HelpScreen"
            await pilot.press("escape")
            await pilot.press("q")

    asyncio.run(run())
    header = header_lines(error, "http://x:1", None, False)[1].plain
    assert header == "Prometheus at http://x:1 cannot be reached: connection refused"
