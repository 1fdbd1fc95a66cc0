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
