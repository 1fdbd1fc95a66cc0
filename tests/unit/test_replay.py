"""TraceReplay: a hand-made trace whose every frame is worked out by hand, and the real A100 traces.

The clock is off (``clock=False``) except in the one test of the clock itself: each test calls
``tick()`` (one frame), ``step``, ``seek``... and reads the snapshot.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path

import pytest
from torchpar_top.analysis import NO_GPU_NOTE, NO_OP, analyse_path, summary
from torchpar_top.contract.snapshot import LiveControls, ReplayControls, SnapshotSource
from torchpar_top.contract.vocab import ChildState, Counted, ExecutorKind, Mode, Quantity
from torchpar_top.model.store import HISTORY
from torchpar_top.sources.trace import MAX_SPEED, RATE_FRAMES, UNIT, TraceReplay, trace_time
from waiting import wait_for

DATA = Path(__file__).resolve().parents[1] / "data" / "hta"


def cpu(name, ts, dur, cat="cpu_op", corr=None, tid=1, pid=100):
    args = {} if corr is None else {"correlation": corr}
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": pid, "tid": tid, "args": args}


def gpu(ts, dur, corr, stream, device=0, cat="kernel"):
    return {
        "ph": "X",
        "cat": cat,
        "name": f"op{corr}",
        "ts": ts,
        "dur": dur,
        "pid": device,
        "tid": stream,
        "args": {"correlation": corr, "stream": stream, "device": device},
    }


#: One thread launching onto streams 7 and 13 of device 0, 0..90 µs: nine frames of 10 µs. In the
#: comments, the queue depth of s7 and s13, as HTA counts it (+1 at a launch, -1 when its op starts).
TINY = [
    cpu("aten::mm", 0, 10),
    cpu("cudaLaunchKernel", 0, 1, "cuda_runtime", corr=1),  # s7: 1 at 0; its kernel runs [20, 50)
    cpu("aten::add", 10, 10),
    cpu("cudaLaunchKernel", 12, 1, "cuda_runtime", corr=2),  # s7: 2 at 12; its kernel runs [50, 60)
    cpu("cudaMemcpyAsync", 14, 1, "cuda_runtime", corr=3),  # s13: 1 at 14; the copy runs [30, 70)
    gpu(20, 30, 1, 7),
    gpu(50, 10, 2, 7),
    gpu(30, 40, 3, 13, cat="gpu_memcpy"),
    cpu("aten::item", 40, 35),
    cpu("aten::_local_scalar_dense", 41, 33),
    cpu("cudaStreamSynchronize", 45, 25, "cuda_runtime", corr=4),
    cpu("cudaDeviceSynchronize", 80, 10, "cuda_runtime", corr=5),  # outside any op; the trace ends at 90
]
#: 10 µs of trace per frame: 0.1 s on screen at 1e-4×.
FRAME = dict(interval=0.1, speed=1e-4)


def write(path: Path, events, **metadata) -> Path:
    path.write_text(json.dumps({"traceEvents": events, **metadata}))
    return path


@pytest.fixture
def tiny(tmp_path):
    """A TraceReplay on TINY with 10 µs frames, clock off."""
    props = {"deviceProperties": [{"id": 0, "name": "Hand-made GPU"}]}
    session = TraceReplay(write(tmp_path / "tiny.json", TINY, **props), clock=False, **FRAME)
    yield session
    session.close()


def log_texts(snap):
    return [line.text for line in snap.log]


def test_every_frame_of_the_tiny_trace_is_worked_out_by_hand(tiny):
    assert tiny.frame_us == 10 and tiny.position == 0  # the first launch is at the trace's start
    for _ in range(9):
        assert tiny.tick()
    assert not tiny.tick() and tiny.position == 90  # at the end: nothing moves
    snap = tiny.snapshot()
    s7, s13 = snap.executors
    assert (s7.name, s13.name) == ("cuda:0 s7", "cuda:0 s13")
    for e in (s7, s13):
        assert (e.kind, e.quantity, e.counts, e.capacity, e.emulated, e.rank) == (
            ExecutorKind.CUDA_STREAM,
            Quantity.DEPTH,
            Counted.KERNELS,
            1024,
            False,
            None,
        )
    # the highest depth within each frame, so that a burst shorter than a frame stays visible
    assert s7.history == (1, 2, 1, 1, 1, 0, 0, 0, 0)
    assert s13.history == (0, 1, 1, 0, 0, 0, 0, 0, 0)
    assert s7.busy == (0, 0, 1, 1, 1, 1, 0, 0, 0)
    assert s13.busy == (0, 0, 0, 1, 1, 1, 1, 0, 0)
    assert (s7.value, s7.launched, s7.completed, s13.launched, s13.completed) == (0, 2, 2, 1, 1)
    assert s7.blocked == s13.blocked == 0.0
    assert snap.overlap == (0, 0, 0, 1, 1, 1, 0, 0, 0)
    # the launching thread: in CPU ops and not in a sync; in a sync (aten::item's from 45 to 70, and
    # the bare cudaDeviceSynchronize from 80 to 90)
    assert snap.frontend_busy == (1, 1, 0, 0, 0.5, 0, 0, 0.5, 0)
    assert snap.frontend_wait == (0, 0, 0, 0, 0.5, 1, 1, 0, 1)
    # launches per second of trace time: 1 in [0, 10), 2 in [10, 20)
    assert snap.throughput_history == (1e5, 2e5, 0, 0, 0, 0, 0, 0, 0)
    assert snap.throughput == 0 and snap.throughput_unit == UNIT == "launches/s"
    (g,) = snap.gpus
    assert (g.index, g.label, g.name, g.util_percent) == (0, "cuda:0", "Hand-made GPU", 0)
    assert g.util_history == (0, 0, 100, 100, 100, 100, 100, 0, 0)
    assert (g.mem_used, g.mem_total, g.power_w, g.temperature_c) == (None, None, None, None)
    # both sync calls, each once, at the rate of the last RATE_FRAMES frames (all nine here)
    assert RATE_FRAMES >= 9
    assert {(s.where, s.call, s.count, s.rank) for s in snap.syncpoints} == {
        ("aten::_local_scalar_dense", "cudaStreamSynchronize", 1, None),
        (NO_OP, "cudaDeviceSynchronize", 1, None),
    }
    assert all(s.per_second == pytest.approx(1 / 90e-6) for s in snap.syncpoints)
    (rank,) = snap.ranks
    assert (rank.rank, rank.pid, rank.state, rank.unit, rank.depth) == (
        None,
        100,
        ChildState.FINISHED,
        UNIT,
        0,
    )
    assert snap.child.state == ChildState.FINISHED and snap.child.message == "replay finished"
    assert snap.mode == Mode.ASYNC and snap.target == "replay tiny.json" and snap.experiment == "replay"
    assert snap.replay.finished and snap.replay.position == pytest.approx(90e-6)
    assert snap.replay.duration == pytest.approx(90e-6) and snap.replay.frame == pytest.approx(10e-6)
    assert snap.cores == () and snap.thread_groups == () and snap.scoreboard == ()
    assert any(t.startswith("replay finished at t = 90.0 µs") for t in log_texts(snap))


def test_each_frame_as_it_plays(tiny):
    snap = tiny.snapshot()  # before the first frame: the depth at the start, no history
    assert snap.executors[0].value == 1 and snap.executors[0].history == () and snap.throughput is None
    assert snap.child.state == ChildState.RUNNING and not snap.replay.finished
    tiny.tick()
    tiny.tick()  # [10, 20]: s7 at 2 from 12, back to 1 at 20; s13 at 1 from 14
    snap = tiny.snapshot()
    s7, s13 = snap.executors
    assert (s7.value, s7.history[-1], s7.launched, s7.completed) == (1, 2, 2, 1)
    assert (s13.value, s13.history[-1], s13.launched, s13.completed) == (1, 1, 1, 0)
    assert snap.syncpoints == () and snap.ranks[0].depth == 2 and snap.throughput == 2e5
    for _ in range(3):
        tiny.tick()  # [40, 50]: the stream sync starts at 45
    (site,) = tiny.snapshot().syncpoints
    assert (site.where, site.call, site.count) == ("aten::_local_scalar_dense", "cudaStreamSynchronize", 1)
    assert site.per_second == pytest.approx(1 / 50e-6)


def test_blocked_is_the_share_of_the_frame_at_the_cap(tmp_path):
    session = TraceReplay(write(tmp_path / "t.json", TINY), clock=False, cap=2, **FRAME)
    session.tick()
    session.tick()  # [10, 20]: s7 at its cap of 2 from 12 to 20
    s7, s13 = session.snapshot().executors
    assert s7.capacity == 2 and s7.blocked == pytest.approx(0.8) and s13.blocked == 0
    session.tick()
    assert session.snapshot().executors[0].blocked == 0


def comparable(snap):
    """What a frame shows, less the wall-clock time, the log and the words about pausing."""
    return dataclasses.replace(snap, t=0, log=(), notice="", paused=False)


def test_a_position_shows_the_same_however_it_was_reached(tiny, tmp_path):
    for _ in range(5):
        tiny.tick()
    played = comparable(tiny.snapshot())
    other = TraceReplay(
        write(tmp_path / "tiny.json", TINY, deviceProperties=[{"id": 0, "name": "Hand-made GPU"}]),
        clock=False,
        **FRAME,
    )
    other.step(7)
    other.step(-2)  # back to 50: the frames ending there are made again
    assert other.position == 50 and comparable(other.snapshot()) == played
    other.seek(-1.0)
    other.seek(50 / 90)
    assert other.position == pytest.approx(50)


def test_pause_step_and_play(tiny):
    tiny.set_paused(True)
    snap = tiny.snapshot()
    assert snap.paused and "paused" in snap.notice
    assert not tiny.tick() and tiny.position == 0
    assert tiny.snapshot() is snap  # nothing changed: the same snapshot, nothing to redraw
    tiny.step(1)
    assert tiny.position == 10 and tiny.snapshot().paused
    tiny.step(3)
    assert tiny.position == 40
    tiny.step(-1)
    assert tiny.position == 30 and len(tiny.snapshot().executors[0].history) == 3
    tiny.set_paused(False)
    assert tiny.tick() and tiny.position == 40 and "playing" in tiny.snapshot().notice


def test_step_while_playing_pauses_first(tiny):
    tiny.tick()
    tiny.step(1)
    snap = tiny.snapshot()
    assert snap.paused and tiny.position == 20
    assert "paused at t = 10.0 µs to step" in log_texts(snap)


def test_seek_moves_by_a_share_of_the_trace_within_it(tiny):
    tiny.seek(0.5)
    assert tiny.position == 45 and "seek to t = 45.0 µs" in log_texts(tiny.snapshot())
    # the frames that end at 45: [0, 5], [5, 15], [15, 25], [25, 35], [35, 45] (s7 at 2 from 12 to 20)
    assert tiny.snapshot().executors[0].history == (1, 2, 2, 1, 1)
    tiny.seek(-2.0)
    assert tiny.position == 0 and tiny.snapshot().executors[0].history == ()
    tiny.seek(2.0)
    assert tiny.position == 90 and tiny.finished and tiny.snapshot().child.state == ChildState.FINISHED
    tiny.seek(-0.5)
    assert not tiny.finished and tiny.snapshot().child.state == ChildState.RUNNING
    tiny.seek_start()
    assert tiny.position == 0 and "back to the trace's start, t = 0" in log_texts(tiny.snapshot())


def test_sync_points_count_up_to_the_position_after_a_seek(tiny):
    tiny.seek(50 / 90)
    (site,) = tiny.snapshot().syncpoints
    assert site.count == 1
    tiny.seek(-10 / 90)  # 40: before the sync
    assert tiny.snapshot().syncpoints == ()
    tiny.seek(1.0)
    assert sorted(s.count for s in tiny.snapshot().syncpoints) == [1, 1]


def test_speed_changes_the_frame_and_remakes_the_history(tiny):
    for _ in range(6):
        tiny.tick()
    tiny.change_speed(2.0)
    snap = tiny.snapshot()
    assert tiny.frame_us == 20 and snap.replay.speed == pytest.approx(2e-4)
    assert snap.executors[0].history == (2, 1, 1)  # [0, 20], [20, 40], [40, 60]
    assert "speed 0.0002×: a frame is 20.0 µs of trace" in log_texts(snap)
    tiny.change_speed(0.25)
    assert tiny.frame_us == 5
    tiny.change_speed(1e9)
    tiny.change_speed(2.0)
    assert tiny.snapshot().replay.speed == MAX_SPEED
    assert f"speed stays at {MAX_SPEED:g}× (1e-05× .. 100×)" in log_texts(tiny.snapshot())


def test_the_end_then_r_or_p_plays_it_again(tiny):
    for _ in range(20):
        tiny.tick()
    assert tiny.finished and "finished: r plays it again" in tiny.snapshot().notice
    tiny.restart()
    assert tiny.position == 0 and not tiny.finished
    for _ in range(9):
        tiny.tick()
    tiny.set_paused(True)
    tiny.set_paused(False)  # play at the end: from the start again
    assert tiny.position == 0 and tiny.tick()
    texts = log_texts(tiny.snapshot())
    assert texts.count("replay finished at t = 90.0 µs: r plays it again, home or ← goes back") == 2


def test_a_trace_replay_offers_replay_controls_not_live_ones(tiny):
    """The TUI checks capabilities (and says itself what a replay cannot do): no stubs to call."""
    assert isinstance(tiny, SnapshotSource) and isinstance(tiny, ReplayControls)
    assert not isinstance(tiny, LiveControls)
    assert not hasattr(tiny, "toggle_sync") and not hasattr(tiny, "profile")
    assert tiny.snapshot().mode == Mode.ASYNC


def test_the_log_lists_what_was_found_and_the_whole_trace_summary(tiny):
    texts = log_texts(tiny.snapshot())
    assert texts[0].endswith("tiny.json: 1 rank, 90.0 µs of trace, 2 streams on 1 GPU")
    assert "rank 0 cuda:0 (Hand-made GPU): kernel-active 55.6% of the trace" in texts
    assert (
        "rank 0 cuda:0 s7: 2 launches, depth max 2 mean 1.0 (HTA's), never at the cap, busy 40.0 µs" in texts
    )
    assert (
        "rank 0 cuda:0 s13: 1 launches, depth max 1 mean 0.5 (HTA's), never at the cap, busy 40.0 µs" in texts
    )
    assert texts[-1].startswith("playing from t = 0.0 µs at 0.0001×: a frame of 10.0 µs every 0.1 s")


def test_a_trace_that_begins_long_before_its_gpu_work_plays_from_its_first_launch(tmp_path):
    shifted = [dict(e, ts=e["ts"] + 1000) for e in TINY] + [cpu("startup", 0, 500)]
    session = TraceReplay(write(tmp_path / "late.json", shifted), clock=False, **FRAME)
    assert session.position == 1000
    snap = session.snapshot()
    assert snap.replay.position == pytest.approx(1000e-6)
    assert "t = 1.00 ms of 1.09 ms" in snap.notice
    assert "(its first launch; home goes to the start)" in log_texts(snap)[-1]
    session.seek_start()
    assert session.position == 0


def test_ranks_of_a_folder_are_told_apart(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    write(folder / "rank-0.json", TINY)
    write(folder / "rank-1.json", [dict(e, pid=e["pid"] + 1) if e["cat"] == "cpu_op" else e for e in TINY])
    session = TraceReplay(folder, clock=False, **FRAME)
    for _ in range(9):
        session.tick()
    snap = session.snapshot()
    assert snap.target == "replay job ×2 ranks"
    assert [(e.rank, e.name) for e in snap.executors] == [
        (0, "cuda:0 s7"),
        (0, "cuda:0 s13"),
        (1, "cuda:0 s7"),
        (1, "cuda:0 s13"),
    ]
    assert [g.label for g in snap.gpus] == ["r0:cuda:0", "r1:cuda:0"]
    assert [(r.rank, r.state, r.throughput) for r in snap.ranks] == [
        (0, ChildState.FINISHED, 0),
        (1, ChildState.FINISHED, 0),
    ]
    assert {(s.rank, s.count) for s in snap.syncpoints} == {(0, 1), (1, 1)}


def test_a_trace_without_gpu_work_is_finished_at_once_and_says_why():
    session = TraceReplay(DATA / "cpu_only.json.gz", clock=False)
    snap = session.snapshot()
    assert session.finished and not session.tick()
    assert snap.notice == NO_GPU_NOTE and NO_GPU_NOTE in log_texts(snap)
    assert snap.executors == () and snap.gpus == () and snap.gpu_status == "no GPU activity in this trace"
    assert snap.child.state == ChildState.FINISHED and snap.replay.finished


def test_the_clock_ticks_on_its_own_thread_and_stops_on_close(tmp_path):
    session = TraceReplay(write(tmp_path / "t.json", TINY), interval=0.01, speed=1e-3)
    assert session.frame_us == 10
    session.start()
    wait_for(lambda: session.finished and session.host_samples >= 12)
    assert [t.name for t in threading.enumerate()].count("tpt-replay") == 1
    session.close()
    session.close()
    assert "tpt-replay" not in [t.name for t in threading.enumerate()]
    samples = session.host_samples
    assert session.snapshot().replay.finished and session.host_samples == samples


def test_without_the_clock_start_runs_no_thread(tiny):
    tiny.start()
    assert "tpt-replay" not in [t.name for t in threading.enumerate()]


def test_trace_time_is_three_digits_and_a_unit():
    assert [trace_time(x) for x in (0, 12.34, 950, 12_300, 1_234_567, 43_425_365)] == [
        "0 µs",
        "12.3 µs",
        "950 µs",
        "12.3 ms",
        "1.23 s",
        "43.4 s",
    ]


def play_to_the_end(session):
    """Tick until the end; returns the snapshot and how many frames were played."""
    played = 0
    while session.tick():
        played += 1
    return session.snapshot(), played


@pytest.mark.parametrize("speed", [0.25, 1.0])
def test_the_a100_two_stream_trace_played_through(speed):
    """Whatever the frame, the highest depth of the history is the analysis' highest depth, the frames'
    busy time adds up to the stream's, and every launch and sync point is counted once."""
    path = DATA / "a100_alexnet_2_streams.json.gz"
    analysis = analyse_path(path)
    whole = summary(analysis)
    session = TraceReplay(path, clock=False, speed=speed)
    first = session.position
    assert first == min(s.queue.times[0] for s in analysis.streams())  # 30.4 s in: a CUDA start-up first
    assert (analysis.end - first) / session.frame_us <= HISTORY  # the history holds the whole replay
    snap, played = play_to_the_end(session)
    # the played frames are the newest: full ones, then what is left of the trace
    lengths = [session.frame_us] * (played - 1) + [analysis.end - first - session.frame_us * (played - 1)]
    assert [e.name for e in snap.executors] == ["cuda:0 s7", "cuda:0 s20"]
    for e, s, lane in zip(snap.executors, whole["streams"], analysis.streams(), strict=True):
        assert max(e.history) == s["max_depth"]  # 18 and 2
        assert (e.launched, e.completed, e.value) == (s["launches"], s["launches"], 0)
        busy = sum(b * f for b, f in zip(e.busy[-played:], lengths, strict=True))
        assert (
            busy
            == pytest.approx(lane.busy.covered(first, analysis.end))
            == pytest.approx(s["busy_seconds"] * 1e6)
        )
    assert [max(e.history) for e in snap.executors] == [18, 2]
    counts = {(p["site"], p["call"]): p["count"] for p in whole["ranks"][0]["sync_points"]}
    assert {(s.where, s.call): s.count for s in snap.syncpoints} == counts
    launches = sum(t * f / 1e6 for t, f in zip(snap.throughput_history[-played:], lengths, strict=True))
    assert launches == pytest.approx(91 + 7)
    (g,) = snap.gpus
    assert g.name == "NVIDIA A100-PG509-200"


def test_the_a100_five_stream_trace_reaches_its_deepest_queue():
    path = DATA / "a100_sxm4_5_streams.json.gz"
    session = TraceReplay(path, clock=False, speed=0.025)  # 2.5 ms frames: 493 of them
    snap, _ = play_to_the_end(session)
    assert [max(e.history) for e in snap.executors] == [946, 4, 17, 3, 4, 4]
    assert max(snap.overlap) > 0 and snap.gpus[0].name == "NVIDIA A100-SXM4-80GB"
    assert snap.replay.duration == pytest.approx(1.232469)


def test_a_live_session_offers_live_controls_not_replay_ones():
    from torchpar_top.sources.live.session import Session

    session = Session("async")  # not started: nothing runs
    try:
        assert isinstance(session, SnapshotSource) and isinstance(session, LiveControls)
        assert not isinstance(session, ReplayControls)
    finally:
        session.close()
