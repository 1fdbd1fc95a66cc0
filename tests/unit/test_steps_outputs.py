"""Steps in every output, by the issue's names: headless ``steps``/``straggler``/``memory``, the report's
``figures.step_seconds``/``phases``, ``ranks``, ``straggler``, ``memory`` and its verdict classes, compare on
a phase, Prometheus, the recording (round trip) and the export (a slice per phase per step)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from fakes.fake_session import STEP_PHASES, FakeSession, make_steps_snapshot
from fakes.recordings import write_recording
from fakes.steps import Rank, hello
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from torchpar_top.contract.recording import read_recording
from torchpar_top.contract.snapshot import ChildStatus
from torchpar_top.contract.vocab import PHASES, ChildState
from torchpar_top.model.store import SessionStore
from torchpar_top.sinks import verdict
from torchpar_top.sinks.export import perfetto, recording_source
from torchpar_top.sinks.headless import to_record
from torchpar_top.sinks.metrics import SnapshotCollector
from torchpar_top.sinks.verdict import Bound, RunTally

STEPS_KEYS = {"source", "count", "per_second", "seconds", "phases"}


def fed(snap, seconds=2.0, step=0.1):
    tally, t = RunTally(), 1000.0
    for _ in range(round(seconds / step)):
        tally.feed(dataclasses.replace(snap, t=t, sample_t=t))
        t += step
    return tally


def test_headless_steps_straggler_memory_by_name():
    rec = json.loads(json.dumps(to_record(make_steps_snapshot())))
    assert set(rec["steps"]) >= STEPS_KEYS and set(rec["steps"]["phases"]) == set(PHASES)
    assert rec["steps"]["source"] == "backward" and "recent" not in rec["steps"]
    for r in rec["ranks"]:
        assert set(r["steps"]) >= STEPS_KEYS and "recent" not in r["steps"]
    assert rec["ranks"][1]["steps"]["phases"]["forward"] == STEP_PHASES[1].forward
    assert rec["straggler"] == {
        "rank": 1,
        "cause": "forward",
        "ratio": 4.0,
        "costs": 0.0092,
        "core_wait": None,
    }
    m = rec["memory"][0]
    assert set(m) >= {"rank", "rss_bytes", "devices"}


def test_headless_nulls_before_the_first_step():
    snap = dataclasses.replace(make_steps_snapshot(), steps=None, straggler=None, memory=())
    rec = to_record(snap)
    assert rec["steps"] is None and rec["straggler"] is None and rec["memory"] == []


def test_report_names_and_the_straggler_verdict():
    report = fed(make_steps_snapshot()).report()
    f = report["figures"]
    step = sum(getattr(STEP_PHASES[0], p) for p in PHASES)
    assert f["step_seconds"] == pytest.approx(step * 1.01)
    assert set(f["phases"]) == set(PHASES) and f["phases"]["comm"] == STEP_PHASES[0].comm
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    assert {"rank", "steps_per_s", "step_seconds", "phases"} <= set(report["ranks"][0])
    assert report["ranks"][1]["phases"]["forward"] == STEP_PHASES[1].forward
    assert report["straggler"]["rank"] == 1 and report["straggler"]["cause"] == "forward"
    assert report["memory"]["rss_growth_bytes_per_min"] == 120_000
    assert "devices" in report["memory"]
    classes = [report["verdict"]["class"]] + [a["class"] for a in report["verdict"]["also"]]
    assert Bound.STRAGGLER in classes
    why = next(
        x["why"] for x in [report["verdict"], *report["verdict"]["also"]] if x["class"] == Bound.STRAGGLER
    )
    assert "rank 1's forward is 4.0× the others'" in why
    text = verdict.render(report)
    assert "straggler: rank 1 (forward)" in text and "step:" in text
    # the rate is the scoreboard's (its steady windows); the count is every step the clock saw
    assert f["steps"] == 1200 and [r["steps"] for r in report["ranks"]] == [1200, 1201]
    assert "throughput: 5.8 steps/s (145 steps in 25.0 s of steady running; 1200 in all)" in text


def test_the_report_writes_a_long_step_in_seconds():
    """A step of several seconds (LBFGS with its closure: 5.67 s) is not written ``5.67e+03 ms``."""
    snap = make_steps_snapshot()
    slow = dataclasses.replace(snap.steps, run_seconds=5.67, run_phases=STEP_PHASES[0])
    report = fed(dataclasses.replace(snap, steps=slow)).report()
    line = next(x for x in verdict.render(report).splitlines() if x.startswith("  step:"))
    assert line.startswith("  step: 5.67 s (") and "e+" not in line


def test_a_straggler_held_back_by_contention_is_said_so_everywhere():
    snap = make_steps_snapshot()
    snap = dataclasses.replace(snap, straggler=dataclasses.replace(snap.straggler, core_wait=0.0081))
    assert to_record(snap)["straggler"]["core_wait"] == 0.0081
    report = fed(snap).report()
    assert report["straggler"]["core_wait"] == 0.0081
    why = next(
        x["why"] for x in [report["verdict"], *report["verdict"]["also"]] if x["class"] == Bound.STRAGGLER
    )
    assert "waited for a core 8.10 ms a step more than they did: CPU contention" in why
    assert "CPU contention" in verdict.render(report).split("straggler: rank 1")[1].splitlines()[0]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(FakeSession(snap).snapshot, hostname="n"))
    fams = {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}
    (st,) = fams["torchpar_straggler_core_wait_seconds"].samples
    assert st.labels["rank"] == "1" and st.value == 0.0081
    # without contention the clause and the series are absent
    plain = fed(make_steps_snapshot()).report()
    assert plain["straggler"]["core_wait"] is None and "CPU contention" not in verdict.render(plain)


def test_identical_ranks_no_straggler_verdict():
    report = fed(make_steps_snapshot(straggler=False)).report()
    assert report["straggler"] is None
    assert all(a["class"] != Bound.STRAGGLER for a in [report["verdict"], *report["verdict"]["also"]])


def test_main_process_data_is_input_bound_from_the_phases_not_sync():
    # the frontend waited 70 % (a DataLoader with num_workers=0 loading in the frontend), no DataLoader
    # watched: the phases say where the wait went
    snap = make_steps_snapshot(ranks=1, straggler=False)
    phases = dataclasses.replace(STEP_PHASES[0], data=0.03, comm=0.0)
    steps = dataclasses.replace(
        snap.steps, run_phases=phases, run_seconds=sum(getattr(phases, p) for p in PHASES)
    )
    snap = dataclasses.replace(
        snap, steps=steps, data_verdict=None, frontend_wait=(0.7,), frontend_busy=(0.3,), starved=None
    )
    v = fed(snap).report()["verdict"]
    assert v["class"] == Bound.INPUT and "steps waited for their next batch" in v["why"]
    assert all(a["class"] != Bound.SYNC for a in v["also"])


def test_compare_on_a_phase_regresses_when_it_rises(tmp_path):
    a = fed(make_steps_snapshot()).report()
    b = json.loads(json.dumps(a))
    b["figures"]["phases"]["forward"] *= 1.5
    result = verdict.compare(a, b, 0.05, "phases.forward")
    assert result.regressed and "ROSE" in result.text and result.change == pytest.approx(0.5)
    assert not verdict.compare(b, a, 0.05, "phases.forward").regressed
    assert "phases.forward" in result.text.splitlines()[-1]
    with pytest.raises(verdict.ReportError):
        verdict.compare(a, b, 0.05, "phases.nothing")


def test_compare_cli_takes_a_phase(tmp_path):
    from torchpar_top.main import main as cli

    a = fed(make_steps_snapshot()).report()
    b = json.loads(json.dumps(a))
    b["figures"]["step_seconds"] *= 2
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    verdict.write(a, str(pa))
    verdict.write(b, str(pb))
    assert cli(["compare", str(pa), str(pb), "--metric", "step_seconds"]) == 1
    assert cli(["compare", str(pa), str(pb), "--metric", "phases.comm"]) == 0


def test_prometheus_names():
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(FakeSession(make_steps_snapshot()).snapshot, hostname="n"))
    fams = {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}
    total = {s.labels["rank"]: s.value for s in fams["torchpar_steps"].samples if s.name.endswith("_total")}
    assert total == {"0": 1200, "1": 1201}
    step = {s.labels["rank"]: s.value for s in fams["torchpar_step_seconds"].samples}
    assert step["1"] == pytest.approx(sum(getattr(STEP_PHASES[1], p) for p in PHASES))
    phase = {
        (s.labels["rank"], s.labels["phase"]): s.value for s in fams["torchpar_step_phase_seconds"].samples
    }
    assert phase[("1", "forward")] == STEP_PHASES[1].forward and len(phase) == 2 * len(PHASES)
    assert {s.labels["rank"] for s in fams["torchpar_rss_bytes"].samples} == {"0", "1"}
    (st,) = fams["torchpar_straggler_ratio"].samples
    assert st.labels["cause"] == "forward" and st.value == 4.0
    assert not fams["torchpar_straggler_core_wait_seconds"].samples  # its own code: no contention


def stepping_snapshots():
    """Snapshots of a real store fed by two stepping ranks (rank 1's forward slow), 3 s."""
    st = SessionStore("run")
    st.on_child(ChildStatus(42, ChildState.RUNNING))
    st.on_message(hello(100, 0), source=0)
    st.on_message(hello(101, 1), source=1)
    ranks = [Rank(step=0.02, forward=0.004, comm=0.016), Rank(step=0.02, forward=0.018, comm=0.002)]
    snaps = []
    for _ in range(30):
        for i, r in enumerate(ranks):
            st.on_message(r.sample(), source=i)
        snaps.append(dataclasses.replace(st.snapshot(), t=ranks[0].t, interval=0.1))
    return snaps, ranks


def test_a_recording_round_trips_the_steps(tmp_path):
    snaps, _ = stepping_snapshots()
    path = write_recording(tmp_path / "r.jsonl", snaps)
    back = list(read_recording(str(path)).snapshots())
    assert len(back) == len(snaps)
    for a, b in zip(snaps, back, strict=True):
        assert b.steps == a.steps and b.straggler == a.straggler and b.memory == a.memory
        assert [r.steps for r in b.ranks] == [r.steps for r in a.ranks]


def test_the_export_draws_a_slice_per_phase_per_step(tmp_path):
    snaps, ranks = stepping_snapshots()
    path = write_recording(tmp_path / "r.jsonl", snaps)
    obj = perfetto(recording_source(str(path)))
    names = {e["tid"]: e["args"]["name"] for e in obj["traceEvents"] if e["name"] == "thread_name"}
    tracks = {n: t for t, n in names.items() if n.endswith("frontend: steps")}
    assert set(tracks) == {"rank 0 frontend: steps", "rank 1 frontend: steps"}
    for rank, r in enumerate(ranks):
        tid = tracks[f"rank {rank} frontend: steps"]
        slices = [e for e in obj["traceEvents"] if e.get("tid") == tid and e["ph"] == "X"]
        steps = [e for e in slices if e["name"] == "step"]
        assert len(steps) == r.count  # every step once, none twice
        forward = [e["dur"] for e in slices if e["name"] == "forward"]
        assert len(forward) == r.count and forward[0] == round(r.per_step["forward"] * 1e6)
        assert {e["name"] for e in slices} == {"step", "forward", "comm"}
