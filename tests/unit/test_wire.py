"""The workload's text streams: lines cut to a bounded size with a visible marker, never accumulated."""

from torchpar_top.contract.vocab import LOG_LINE_KEEP, LOG_LINE_MAX, LogSource
from torchpar_top.model.store import SessionStore
from torchpar_top.sources.live.wire import TextStream

MIB = 1 << 20


def _feed(stream, data, chunk=65536):
    """Feed ``data`` in pieces of ``chunk`` bytes, as the reader's ``os.read`` does."""
    for i in range(0, len(data), chunk):
        stream.feed(data[i : i + chunk])


def test_a_line_over_a_mib_is_cut_to_its_start_with_a_marker_and_the_next_line_is_intact():
    lines = []
    stream = TextStream(lines.append)
    _feed(stream, b"start" + b"x" * (3 * MIB // 2) + b"\nnext\n")
    assert len(lines) == 2
    assert (
        lines[0]
        == "start"
        + "x" * (LOG_LINE_KEEP - 5)
        + f" … [{5 + 3 * MIB // 2 - LOG_LINE_KEEP} more bytes left out]"
    )
    assert len(lines[0]) <= LOG_LINE_MAX
    assert lines[1] == "next"


def test_long_lines_never_accumulate_in_the_reader():
    """600 lines of 1 MB: the stream keeps at most one cut line, whatever it is fed."""
    lines = []
    stream = TextStream(lambda text: lines.append(len(text)))
    line = b"y" * 1_000_000 + b"\n"
    for _ in range(600):
        _feed(stream, line)
        assert stream.buffered <= LOG_LINE_MAX
    assert len(lines) == 600 and max(lines) <= LOG_LINE_MAX


def test_short_lines_split_across_reads_and_a_last_line_without_newline():
    lines = []
    stream = TextStream(lines.append)
    for piece in (b"hel", b"lo\nwor", b"ld\n\n  \nno newline at the end"):
        stream.feed(piece)
    stream.finish()
    assert lines == ["hello", "world", "no newline at the end"]


def test_a_multibyte_character_cut_at_the_limit_is_replaced_not_an_error():
    lines = []
    stream = TextStream(lines.append)
    stream.feed(b"a" * (LOG_LINE_KEEP - 1) + "é".encode() * 100 + b"\n")
    assert lines[0].startswith("a" * (LOG_LINE_KEEP - 1) + "\ufffd") and "left out" in lines[0]


def test_a_line_of_exactly_the_limit_is_kept_whole():
    lines = []
    stream = TextStream(lines.append)
    stream.feed(b"b" * LOG_LINE_MAX + b"\n")
    assert lines == ["b" * LOG_LINE_MAX]


def test_the_store_bounds_every_log_line_whatever_its_source():
    """A protocol ``log`` message can be up to 1 MiB: the store keeps its start and says how much it cut."""
    store = SessionStore("custom")
    for _ in range(600):
        store.add_log(LogSource.CHILD, "z" * 1_000_000)
    log = store.snapshot().log
    assert all(len(line.text) <= LOG_LINE_MAX for line in log)
    assert log[-1].text == "z" * LOG_LINE_KEEP + f" … [{1_000_000 - LOG_LINE_KEEP} more characters left out]"
    assert store.snapshot().child.last_stderr == ()


def _bar(i: int) -> bytes:
    """A tqdm-like state: ``\\r 42%|████      | 42/100``."""
    return f"\r{i:3d}%|{'█' * (i // 10):<10}| {i}/100".encode()


def test_a_progress_bar_shows_its_latest_state_live_then_its_last_as_the_line():
    """tqdm's ``\\r`` states: each read shows the newest; the line is the last state, not the first 4 KiB."""
    lines, states = [], []
    stream = TextStream(lines.append, states.append)
    stream.feed(b"epoch 1\n")
    for i in range(0, 101):
        stream.feed(_bar(i))
        assert states[-1] == _bar(i).decode()[1:]  # the state just written, before any newline
    assert lines == ["epoch 1"]
    stream.feed(b"\n")
    assert lines == ["epoch 1", "100%|██████████| 100/100"]


def test_several_states_in_one_read_show_only_the_newest_and_crlf_ends_a_line():
    lines, states = [], []
    stream = TextStream(lines.append, states.append)
    stream.feed(_bar(1) + _bar(2) + _bar(3))
    assert states == ["  3%|          | 3/100"]
    stream.feed(_bar(3))  # unchanged: not passed on again
    assert len(states) == 1
    stream.feed(b"\r\n")  # a state then CRLF: the line is that state
    assert lines == ["  3%|          | 3/100"]
    stream.feed(b"one\r\ntwo\n")
    assert lines[1:] == ["one", "two"]


def test_thousands_of_states_keep_the_reader_bounded_and_end_on_the_last():
    lines, states = [], []
    stream = TextStream(lines.append, states.append)
    _feed(stream, b"".join(_bar(i % 101) for i in range(20_000)) + b"\n", chunk=4096)
    assert stream.buffered == 0 and lines == [_bar(19_999 % 101).decode()[1:]]
    assert max(len(s) for s in states) < 100


def test_the_store_keeps_a_line_being_written_apart_until_it_ends():
    store = SessionStore("run")
    store.add_log(LogSource.STDERR, " 10%|█", partial=True)
    store.add_log(LogSource.STDOUT, "a print meanwhile")
    store.add_log(LogSource.STDERR, " 20%|██", partial=True)
    snap = store.snapshot()
    assert [line.text for line in snap.log_partial] == [" 20%|██"]
    assert snap.log[-1].text == "a print meanwhile"
    store.add_log(LogSource.STDERR, "100%|██████████")
    snap = store.snapshot()
    assert snap.log_partial == () and [line.text for line in snap.log[-2:]] == [
        "a print meanwhile",
        "100%|██████████",
    ]
