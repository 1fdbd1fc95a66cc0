"""Recordings: the header, lines that decode back to the exact snapshots, a line flushed per snapshot, a
truncated last line, other versions, and playing a recording back (pause, step, seek, speed)."""

import dataclasses
import gzip
import json
import threading

import pytest
from fakes.recordings import FakeSession, recorder_for, store_snapshots, write_recording
from torchpar_top.contract import recording as rec_mod
from torchpar_top.contract.codec import from_plain
from torchpar_top.contract.messages import VERSION as PROTOCOL_VERSION
from torchpar_top.contract.recording import (
    FORMAT,
    FORMAT_VERSION,
    Decoder,
    Encoder,
    RecordingError,
    RecordingReader,
    delta,
    read_recording,
    sniff,
)
from torchpar_top.contract.snapshot import LiveControls, ReplayControls, Snapshot, SyncSite
from torchpar_top.contract.vocab import ChildState, Mode
from torchpar_top.model.store import CORE_HISTORY, HISTORY
from torchpar_top.sources.recording import RecordingReplay
from waiting import wait_for


@pytest.fixture(scope="module")
def snaps():
    return store_snapshots()


def test_delta_finds_the_new_values_and_rebuilds_exactly():
    assert delta((1, 2, 3), (2, 3, 4)) == (2, (4,))
    assert delta((1, 2, 3), (1, 2, 3)) == (3, ())
    assert delta((1, 2), (1, 2, 3, 4)) == (2, (3, 4))
    assert delta((5, 6), (1, 2)) == (0, (1, 2))  # nothing in common: written whole
    assert delta((), (1,)) == (0, (1,))
    assert delta((7, 7, 7), (7, 7, 7)) == (3, ())  # a constant series: the same values, none new
    # ...unless the snapshot counted the values appended: a full history of a repeated value
    assert delta((7, 7, 7), (7, 7, 7), added=1) == (2, (7,))
    assert delta((7, 7, 7), (7, 7, 7), added=5) == (0, (7, 7, 7))  # more than it keeps: written whole
    assert delta((1, 2, 3), (2, 3, 4), added=1) == (2, (4,))
    assert delta((1, 2, 3), (5, 6, 7), added=1) == (0, (5, 6, 7))  # a count the values refute is not taken


def test_a_run_of_repeated_values_gives_the_reader_every_new_value_after_the_histories_fill():
    """A stream busy 100 % of every window: the histories read the same after each sample once full, so
    only the snapshots' counts say that a value came (before them, the reader got 600 of 800 samples)."""
    from fakes.recordings import sample
    from torchpar_top.contract.snapshot import ChildStatus, HostSample
    from torchpar_top.model.store import SessionStore, series_length

    st = SessionStore("async")
    st.on_child(ChildStatus(42, ChildState.RUNNING))
    encoder, decoder = Encoder(keyframe=0), Decoder()
    n = HISTORY + 3 * series_length(st.interval)
    got: dict[str, int] = {}
    for i in range(n):
        st.on_message(sample("async", depth=5, throughput=50.0, wait=0.0))
        st.on_host(HostSample(float(i), (100.0, 100.0), ()))
        snap = st.snapshot()
        back = decoder.decode(json.loads(encoder.line(snap)))
        assert back == snap
        for path in ("frontend_busy", "timing", "executors.0.busy", "executors.0.history", "core_history.1"):
            got[path] = got.get(path, 0) + decoder.added.get(path, 1 if i == 0 else 0)
    assert len(set(snap.frontend_busy)) == len(set(snap.executors[0].history)) == 1  # repeated values
    assert got == dict.fromkeys(got, n)


def test_every_line_decodes_back_to_the_exact_snapshot(snaps):
    assert len(snaps[499].executors[0].history) == HISTORY  # past the caps: the rolling case is covered
    assert len(snaps[-1].executors[0].history) < HISTORY  # emptied by the restart, then growing again
    assert all(len(h) == CORE_HISTORY for h in snaps[-1].core_history)
    encoder, decoder = Encoder(), Decoder()
    for i, snap in enumerate(snaps):
        line = encoder.line(snap)
        assert line.endswith("\n") and "\n" not in line[:-1]
        assert decoder.decode(json.loads(line), f"line {i}") == snap


def test_a_line_alone_is_a_typed_snapshot_with_only_its_new_values(snaps):
    encoder = Encoder()
    lines = [encoder.encode(s) for s in snaps[:200]]
    alone = from_plain(Snapshot, lines[150])
    assert isinstance(alone, Snapshot) and alone.mode in (Mode.ASYNC, Mode.SYNC)
    assert alone.executors[0].history == snaps[150].executors[0].history[-len(alone.executors[0].history) :]
    assert len(alone.executors[0].history) <= 3 < len(snaps[150].executors[0].history)
    assert lines[150]["_keep"]["executors.0.history"] == len(snaps[150].executors[0].history) - len(
        alone.executors[0].history
    )


def test_lines_are_far_smaller_than_whole_snapshots(snaps):
    from torchpar_top.contract.codec import dumps

    encoder = Encoder()
    sizes = [len(encoder.line(s)) for s in snaps]
    whole = [len(dumps(s)) for s in snaps]
    assert sum(sizes[-50:]) * 5 < sum(whole[-50:])


def test_a_bad_keep_is_a_protocol_error_not_a_traceback(snaps):
    line = Encoder().encode(next(s for s in snaps if s.executors))
    line["_keep"] = {"executors.0.history": 5}  # no previous line to keep from
    with pytest.raises(ValueError, match="keeps 5 values of a history that had 0"):
        Decoder().decode(line)
    line["_keep"] = {"executors.0.history": "x"}
    with pytest.raises(ValueError, match="_keep"):
        Decoder().decode(line)
    line["_keep"] = {"executors.9.history": 1}
    with pytest.raises(ValueError, match="names no history"):
        Decoder().decode(line)


def test_the_recorder_writes_a_header_then_a_flushed_line_per_snapshot(snaps, tmp_path):
    path = tmp_path / "run.jsonl"
    session = FakeSession(snaps[:30])
    out = open(path, "w", encoding="utf-8")  # noqa: SIM115 the Recorder owns the file and closes it
    recorder = recorder_for(session, out, ["--headless", "--record", str(path)])
    recorder.start()
    for k in range(1, 11):
        session.host_samples = k
        wait_for(lambda k=k: recorder.lines == k)
        # flushed as taken: another reader sees every line whole, now, while the file is still open
        lines = path.read_text().split("\n")
        assert lines[-1] == "" and len(lines) == k + 2
    session.host_samples = 12
    recorder.close()
    assert recorder.error is None and recorder._out.closed
    assert not any(t.name == "tpt-recorder" for t in threading.enumerate())
    header = json.loads(path.read_text().split("\n")[0])
    assert header["format"] == FORMAT and header["version"] == FORMAT_VERSION
    assert header["protocol"] == PROTOCOL_VERSION
    assert header["command"] == ["--headless", "--record", str(path)]
    assert header["interval"] == 0.02 and header["machine"]["cores"] >= 1
    assert set(header["machine"]) >= {"hostname", "cores", "gpus", "torch"}
    assert header["started"].endswith("+00:00")
    rec = read_recording(str(path))
    assert list(rec.snapshots()) == [*snaps[:10], snaps[11]]  # the last one written at close
    assert rec.note == ""


def test_lines_kept_compressed_come_back_whole_in_any_order(snaps):
    encoder = Encoder()
    raw = [encoder.line(s).encode()[:-1] for s in snaps[:250]]
    lines = rec_mod.Lines(raw)
    assert len(lines) == 250 and lines.stored_bytes() * 3 < sum(map(len, raw))
    for i in (249, 0, 150, 99, 100, 101, 5, -1):
        assert lines[i] == raw[i]
    assert lines[98:102] == raw[98:102]


def test_a_snapshot_with_a_nan_is_left_out_and_the_rest_still_decode_exactly(snaps, tmp_path):
    path = tmp_path / "run.jsonl"
    bad = dataclasses.replace(snaps[5], throughput=float("nan"))
    written = [*snaps[:5], bad, *snaps[6:12]]
    out = open(path, "w", encoding="utf-8")  # noqa: SIM115 the Recorder owns the file and closes it
    recorder = recorder_for(FakeSession(snaps), out, [], written)
    for s in written:
        recorder.write(s)
    recorder.close()
    assert recorder.skipped == 1 and "JSON" in recorder.skip_reason and recorder.error is None
    assert list(read_recording(str(path)).snapshots()) == snaps[:5] + snaps[6:12]


def test_a_truncated_last_line_is_left_out_with_a_note(snaps, tmp_path):
    path = write_recording(tmp_path / "run.jsonl", snaps[:20])
    data = path.read_bytes()
    path.write_bytes(data[:-40])  # kill -9 while the last line was being written
    rec = read_recording(str(path))
    assert len(rec.lines) == 19 and list(rec.snapshots()) == snaps[:19]
    assert "cut off while being written and is left out" in rec.note
    session = RecordingReplay(rec, clock=False)
    assert any("cut off" in line.text for line in session.snapshot().log)


def test_gzipped_recordings_are_read(snaps, tmp_path):
    path = write_recording(tmp_path / "run.jsonl", snaps[:5])
    gz = tmp_path / "run.jsonl.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    assert sniff(str(gz)) == "recording"
    assert list(read_recording(str(gz)).snapshots()) == snaps[:5]


def test_a_gz_recording_is_written_gzipped_and_a_kill_loses_at_most_the_last_line(snaps, tmp_path):
    path = tmp_path / "run.jsonl.gz"
    session = FakeSession(snaps[:40])
    recorder = recorder_for(session, rec_mod.open_output(str(path)), ["--record", str(path)], snaps[:40])
    for k in range(1, 41):
        recorder.write(snaps[k - 1])
        if k == 25:
            flushed = path.read_bytes()  # what is on disk after 25 lines: a writer killed here leaves this
    recorder.close()
    whole = path.read_bytes()
    assert whole[:2] == b"\x1f\x8b" and len(whole) < sum(len(Encoder().line(s)) for s in snaps[:40])
    assert list(read_recording(str(path)).snapshots()) == snaps[:40]
    killed = tmp_path / "killed.jsonl.gz"
    killed.write_bytes(flushed)  # no gzip trailer: the stream ends after the 25th line's flush
    assert sniff(str(killed)) == "recording"
    assert list(read_recording(str(killed)).snapshots()) == snaps[:25]
    killed.write_bytes(flushed[:-30])  # and cut inside the last line's block
    rec = read_recording(str(killed))
    assert 20 <= len(rec.lines) < 25 and list(rec.snapshots()) == snaps[: len(rec.lines)]


@pytest.mark.parametrize("version, word", [(0, "older"), (FORMAT_VERSION + 1, "newer")])
def test_another_format_version_is_one_clear_line(snaps, tmp_path, version, word):
    path = write_recording(tmp_path / "run.jsonl", snaps[:3])
    lines = path.read_text().split("\n")
    header = json.loads(lines[0])
    header["version"] = version
    path.write_text("\n".join([json.dumps(header), *lines[1:]]))
    with pytest.raises(RecordingError) as err:
        read_recording(str(path))
    message = str(err.value)
    assert "\n" not in message and f"version {version}" in message and word in message
    assert f"reads version 1, {FORMAT_VERSION}" in message


def test_a_bad_line_in_the_middle_ends_the_recording_there_and_says_where(snaps, tmp_path):
    path = write_recording(tmp_path / "run.jsonl", snaps[:5])
    lines = path.read_text().split("\n")
    lines[3] = lines[3][:50]  # not the last line: a corrupt file, not a kill -9
    path.write_text("\n".join(lines))
    rec = read_recording(str(path))  # what comes before it plays
    assert list(rec.snapshots()) == snaps[:2]
    assert "line 4: not a JSON object" in rec.note and "read up to the line before it" in rec.note
    session = RecordingReplay(rec, clock=False)
    assert any("line 4: not a JSON object" in line.text for line in session.snapshot().log)
    reader = RecordingReader(str(path))  # the streaming reader says the same
    assert list(reader.snapshots()) == snaps[:2] and "line 4" in reader.note


def test_a_line_that_is_no_snapshot_ends_the_replay_before_it(snaps, tmp_path):
    timed = [dataclasses.replace(s, t=10.0 + 0.1 * i) for i, s in enumerate(snaps[:8])]
    path = write_recording(tmp_path / "run.jsonl", timed)
    lines = path.read_text().split("\n")
    bad = json.loads(lines[6])
    bad["mode"] = "sideways"
    lines[6] = json.dumps(bad)
    path.write_text("\n".join(lines))
    rec = read_recording(str(path))  # times only: found when reached
    with pytest.raises(RecordingError, match=r"line 7\.mode: 'sideways' is not one of"):
        read_recording(str(path), check=True)
    with pytest.raises(RecordingError, match="line 7"):
        list(rec.snapshots())
    session = RecordingReplay(rec, clock=False)
    session.seek(1.0)
    assert session.finished and session.index == 4 and len(session.times) == 5
    assert bare(session.snapshot()) == bare(timed[4])
    assert any(
        "line 7" in line.text and "the replay ends before it" in line.text for line in session.snapshot().log
    )


def test_sniff_tells_recordings_from_traces(snaps, tmp_path):
    assert sniff(str(write_recording(tmp_path / "r.jsonl", snaps[:2]))) == "recording"
    assert sniff("tests/data/hta/cpu_only.json.gz") == "trace"
    assert sniff("tests/data/hta") == "trace"
    assert sniff(str(tmp_path / "missing")) == "trace"  # the trace loader says it is missing


# -- playing back ---------------------------------------------------------------------------------


def recorded(session):
    """The snapshot shown, less what the replay puts on top."""
    s = session.snapshot()
    return dataclasses.replace(s, paused=False, log=(), replay=None, notice="", target="", child=None)


def bare(snap):
    return dataclasses.replace(snap, paused=False, log=(), replay=None, notice="", target="", child=None)


@pytest.fixture
def played(snaps, tmp_path):
    # 200 snapshots 0.1 s apart (the store's own clock stamps are replaced by a regular one)
    timed = [dataclasses.replace(s, t=100.0 + 0.1 * i, interval=0.1) for i, s in enumerate(snaps[:200])]
    path = write_recording(tmp_path / "run.jsonl", timed)
    return RecordingReplay(str(path), clock=False), timed


def test_playing_shows_each_snapshot_as_recorded(played):
    session, timed = played
    assert session.interval == 0.1 and session.index == 0 and bare(timed[0]) == recorded(session)
    for i in range(1, 30):
        assert session.tick()
        assert session.index == i and recorded(session) == bare(timed[i])
    assert session.snapshot().replay.position == pytest.approx(2.9)


def test_pause_step_seek_and_speed(played):
    session, timed = played
    session.set_paused(True)
    assert not session.tick() and session.index == 0 and session.snapshot().paused
    session.step(5)
    assert session.index == 5 and recorded(session) == bare(timed[5])
    session.step(-2)
    assert session.index == 3 and recorded(session) == bare(timed[3])
    session.seek(0.5)  # half of 19.9 s on from 0.3 s
    assert session.index == 102 and recorded(session) == bare(timed[102])
    session.seek(-0.25)
    assert session.index == 52 and recorded(session) == bare(timed[52])
    session.seek_start()
    assert session.index == 0 and recorded(session) == bare(timed[0])
    session.set_paused(False)
    session.change_speed(4)
    assert session.snapshot().replay.speed == 4
    session.tick()
    assert session.index == 4 and recorded(session) == bare(timed[4])
    texts = [line.text for line in session.snapshot().log]
    assert "paused at t = 0.0 s" in texts and "speed 4×" in texts


def test_a_seek_far_away_decodes_from_a_checkpoint_the_same(played):
    session, timed = played
    session.seek(1.0)
    assert session.finished and recorded(session) == bare(timed[-1])
    session.step(-150)
    assert session.index == 49 and recorded(session) == bare(timed[49])


def test_the_end_says_finished_and_r_plays_again(played):
    session, _ = played
    session.change_speed(100)
    while session.tick():
        pass
    snap = session.snapshot()
    assert snap.child.state == ChildState.FINISHED and snap.replay.finished
    assert any("replay finished" in line.text for line in snap.log)
    session.restart()
    assert session.index == 0 and not session.snapshot().replay.finished


def test_recorded_log_lines_join_the_replay_log_once(played):
    session, timed = played
    for _ in range(100):
        session.tick()
    texts = [line.text for line in session.snapshot().log]
    recorded_lines = [t for t in texts if t.startswith("line ")]
    assert recorded_lines == [line.text for line in timed[100].log]
    seqs = [line.seq for line in session.snapshot().log]
    assert seqs == sorted(set(seqs))


def test_a_recording_replay_offers_replay_controls_not_live_ones(played):
    session, _ = played
    assert isinstance(session, ReplayControls) and not isinstance(session, LiveControls)
    assert not hasattr(session, "toggle_sync") and not hasattr(session, "switch_experiment")


def test_the_clock_thread_stops_on_close(played):
    session, _ = played
    session._clock = True
    session.start()
    wait_for(lambda: session.index > 0, timeout=60)
    session.close()
    assert not any(t.name == "tpt-playback" for t in threading.enumerate())


def test_a_snapshot_with_sync_sites_and_modes_round_trips(snaps, tmp_path):
    s = dataclasses.replace(snaps[350], syncpoints=(SyncSite("train.py:12", "item", 3, 1.5, None, True),))
    path = write_recording(tmp_path / "r.jsonl", [snaps[349], s])
    assert list(read_recording(str(path)).snapshots()) == [snaps[349], s]
    assert s.mode == Mode.SYNC


def test_module_constants_are_what_the_docs_say():
    assert rec_mod.FORMAT == "torchpar-top-recording" and rec_mod.FORMAT_VERSION == 2


def _recording_one_line(snaps, path):
    """A Recorder on a fake session that has written the line of its one host sample so far."""
    session = FakeSession(list(snaps[:5]))
    out = open(path, "w", encoding="utf-8")  # noqa: SIM115 the Recorder owns the file and closes it
    recorder = recorder_for(session, out, [])
    recorder.start()
    session.host_samples = 5
    wait_for(lambda: recorder.lines == 1)
    return session, recorder


def test_a_child_that_exits_after_the_last_host_sample_is_recorded_at_close(snaps, tmp_path):
    """The run ends between two host samples (the headless loop sees the exit, no sample follows): the
    recording still ends on the exit, not on the last 'running' snapshot."""
    path = tmp_path / "run.jsonl"
    session, recorder = _recording_one_line(snaps, path)
    assert session.snaps[4].child.state != ChildState.EXITED
    session.snaps[4] = dataclasses.replace(
        snaps[4], child=dataclasses.replace(snaps[4].child, state=ChildState.EXITED, exit_code=0)
    )
    recorder.close()
    recorded = list(read_recording(str(path)).snapshots())
    assert len(recorded) == 2 and recorded[-1].child.state == ChildState.EXITED


def test_close_writes_nothing_more_when_nothing_changed(snaps, tmp_path):
    _, recorder = _recording_one_line(snaps, tmp_path / "run.jsonl")
    recorder.close()
    assert recorder.lines == 1
