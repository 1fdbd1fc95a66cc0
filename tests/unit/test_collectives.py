"""The flight recorder's dump read as per-collective counts and NCCL time (real dumps: a Gloo job in
tests/functional/test_cluster.py; here the dump's format as torch writes it)."""

from __future__ import annotations

from torchpar_top.probes.agent.collectives import CollectiveWatch, FlightRecorderReader, describe


def _entry(rid: int, name: str = "nccl:all_reduce", state: str = "completed", ms: float | None = 2.0) -> dict:
    e = {"record_id": rid, "profiling_name": name, "state": state, "retired": state == "completed"}
    if ms is not None:
        e["duration_ms"] = ms
    return e


def test_counts_and_nccl_time_since_the_last_read():
    reader = FlightRecorderReader(dump=lambda **_: "{}")
    first = reader.add(
        {"entries": [_entry(0), _entry(1, "nccl:broadcast", ms=1.0), _entry(2, state="started")]}
    )
    assert first["nccl:all_reduce"].count == 1 and first["nccl:broadcast"].mean == 0.001
    # the started one is counted once it finished, never twice
    second = reader.add({"entries": [_entry(0), _entry(1), _entry(2, ms=4.0), _entry(3, ms=6.0)]})
    cost = second["nccl:all_reduce"]
    assert (cost.count, cost.timed, round(cost.seconds, 6)) == (2, 2, 0.01) and reader.lost == 0
    assert reader.add({"entries": [_entry(2), _entry(3)]}) == {}


def test_a_ring_that_wrapped_says_how_many_it_lost():
    reader = FlightRecorderReader(dump=lambda **_: "{}")
    reader.add({"entries": [_entry(i) for i in range(5)]})
    costs = reader.add({"entries": [_entry(i) for i in range(20, 25)]})  # 5..19 were overwritten
    assert costs["nccl:all_reduce"].count == 5 and reader.lost == 15
    line = describe(costs, 5.0, reader.lost, "rank 3: ")
    assert line.startswith("rank 3: collectives over 5.0 s (flight recorder): 20 in all, the last 5")


def test_gloo_has_counts_but_no_time():
    reader = FlightRecorderReader(dump=lambda **_: "{}")
    costs = reader.add(
        {"entries": [_entry(0, "gloo:all_reduce", state="scheduled", ms=None) | {"retired": True}]}
    )
    assert costs["gloo:all_reduce"].count == 1 and costs["gloo:all_reduce"].mean is None
    assert "gloo:all_reduce ×1 (time unknown)" in describe(costs, 5.0)


def test_an_unreadable_dump_is_said_once_and_not_read_again(monkeypatch):
    import torch.distributed as dist

    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    lines: list[str] = []
    calls = []

    def broken(**_):
        calls.append(1)
        return "not json"

    watch = CollectiveWatch(lines.append, [FlightRecorderReader(dump=broken)])
    watch.tick()
    watch._last = None
    watch.tick()
    assert len(calls) == 1 and len(lines) == 1 and lines[0].startswith("flight recorder: cannot read")


def test_a_costly_ring_is_read_less_often(monkeypatch):
    import time

    import torch.distributed as dist

    monkeypatch.setattr(dist, "is_initialized", lambda: True)

    def slow(**_):
        time.sleep(0.08)  # a large ring: torch's dump takes this long at least
        return '{"entries": []}'

    watch = CollectiveWatch(lambda line: None, [FlightRecorderReader(dump=slow)])
    watch.tick()
    assert watch._gap >= 0.08 / 0.01  # its cost is kept under 1 % of the wall time


def test_both_rings_are_read_nccls_and_the_generic_one(monkeypatch):
    """A CUDA build keeps NCCL's collectives in a ring of their own (``_dump_nccl_trace_json``); the
    generic dump (``_dump_fr_trace_json``) holds Gloo's. Reading the generic one alone logged nothing for
    an NCCL job on an H100: each ring is read with its own record ids."""
    import json

    import torch.distributed as dist

    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    nccl = {"entries": [_entry(0)]}
    generic = {"entries": [_entry(0, "gloo:barrier", ms=None)]}
    lines: list[str] = []
    watch = CollectiveWatch(
        lines.append,
        [
            FlightRecorderReader(lambda **_: json.dumps(nccl)),
            FlightRecorderReader(lambda **_: json.dumps(generic)),
        ],
    )
    watch.tick()  # the first read: what finished since the watch began
    assert len(lines) == 1 and "nccl:all_reduce ×1" in lines[0] and "gloo:barrier ×1" in lines[0]
    nccl["entries"] += [_entry(1, ms=3.0), _entry(2, ms=5.0)]
    generic["entries"].append(_entry(1, "gloo:barrier", ms=None))
    watch._last = 0.0  # the next read is due
    watch.tick()
    assert len(lines) == 2
    assert "nccl:all_reduce ×2 (4 ms each" in lines[1] and "gloo:barrier ×1 (time unknown)" in lines[1]


def test_no_flight_recorder_dump_means_no_reading():
    watch = CollectiveWatch(lambda line: None, [FlightRecorderReader(None)])
    assert watch._off


def test_a_first_read_of_a_wrapped_ring_counts_what_it_lost():
    """Record ids start at 0: a first read that finds ids from 20 on knows 20 were overwritten."""
    reader = FlightRecorderReader(dump=lambda **_: "{}")
    costs = reader.add({"entries": [_entry(i) for i in range(20, 25)]})
    assert costs["nccl:all_reduce"].count == 5 and reader.lost == 20


def test_the_process_groups_end_reads_once_more_whatever_the_gap(monkeypatch):
    """A job shorter than a read's spacing: the read when the user's code destroys the process group
    logs its collectives (the step anatomy wraps ``destroy_process_group``)."""
    import json

    import torch.distributed as dist

    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    ring = {"entries": [_entry(0)]}
    lines: list[str] = []
    watch = CollectiveWatch(lines.append, [FlightRecorderReader(lambda **_: json.dumps(ring))])
    watch.tick()
    ring["entries"] += [_entry(1), _entry(2)]
    watch.tick()  # within the spacing: not read
    assert len(lines) == 1
    watch.final()
    assert len(lines) == 2 and "nccl:all_reduce ×2" in lines[1]


def test_destroy_process_group_runs_the_hooks_first_and_keeps_their_errors(monkeypatch):
    import torch.distributed as dist
    from torchpar_top.probes.agent.usercode_phases import PhaseHooks
    from torchpar_top.probes.agent.usercode_steps import StepClock

    calls: list[str] = []
    monkeypatch.setattr(dist, "destroy_process_group", lambda *a, **k: calls.append("torch"))
    hooks = PhaseHooks(StepClock(), 0)

    def broken() -> None:
        raise RuntimeError("a hook that fails")

    hooks.before_destroy += [lambda: calls.append("ours"), broken]
    hooks.install()
    try:
        dist.destroy_process_group()
    finally:
        hooks.uninstall()
    assert calls == ["ours", "torch"]
