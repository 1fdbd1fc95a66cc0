"""Files end in a clear line and a sensible status (issue 20, items 5 and 6): a destination that cannot be
written is found before the run starts, a write that fails at the end is one line and a non-zero status,
a FIFO without a reader is said, a recording deleted during the run is said; long recordings are
summarised and exported in bounded memory (a child process under an address-space limit)."""

import os
import resource
import stat
import subprocess
import sys
import threading
import time

import pytest
from fakes.recordings import FakeSession, long_recording, store_snapshots, write_recording
from torchpar_top.contract.recording import read_recording
from torchpar_top.sinks.recording import Recorder
from waiting import wait_for

pytestmark = pytest.mark.slow

CMD = [sys.executable, "-m", "torchpar_top"]


def run(*args, timeout=240, limit_mb=None):
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (limit_mb << 20, limit_mb << 20))

    return subprocess.run(
        [*CMD, *map(str, args)],
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=limit if limit_mb else None,
    )


def one_error_line(proc, needle, status=2):
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == status, proc.stderr
    assert "Traceback" not in proc.stderr
    assert [line for line in lines if line.startswith("torchpar-top: error:")] == [lines[-1]], proc.stderr
    assert needle in lines[-1], proc.stderr


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    return write_recording(tmp_path_factory.mktemp("rec") / "run.jsonl", store_snapshots(50))


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize(
    "args, needle",
    [
        (
            ["--headless", "--duration", "30", "--record", "/dev/full"],
            "--record cannot write /dev/full: No space",
        ),
        (["--headless", "--duration", "30", "--report", "/dev/full"], "--report /dev/full: No space"),
    ],
)
def test_a_destination_that_takes_no_bytes_is_refused_before_the_run(args, needle):
    proc = run(*args, timeout=120)
    one_error_line(proc, needle)
    assert proc.stdout == ""  # nothing ran: no sample printed


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_read_only_folder_is_refused_before_the_run(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        one_error_line(
            run("--headless", "--duration", "30", "--record", folder / "r.jsonl"), "Permission denied"
        )
        one_error_line(
            run("--headless", "--duration", "30", "--report", folder / "r.json"), "Permission denied"
        )
    finally:
        folder.chmod(stat.S_IRWXU)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("flag", ["--csv", "--perfetto"])
def test_an_export_to_a_full_disk_is_one_line_and_status_2(recording, flag):
    one_error_line(
        run("export", recording, flag, "/dev/full"), "cannot write /dev/full: No space left on device"
    )


def test_a_report_that_cannot_be_written_at_the_end_is_one_line_and_status_1(tmp_path):
    folder = tmp_path / "gone"
    folder.mkdir()
    proc = subprocess.Popen(
        [*CMD, "--headless", "--duration", "3", "--report", str(folder / "r.json")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    proc.stdout.readline()  # the run has started
    folder.rmdir()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    assert "Traceback" not in err
    assert any(
        line.startswith("torchpar-top: error: --report") and "No such file" in line
        for line in err.splitlines()
    )


def test_record_into_a_fifo_without_a_reader_says_it_waits_then_records(tmp_path):
    fifo = tmp_path / "rec.fifo"
    os.mkfifo(fifo)
    proc = subprocess.Popen(
        [*CMD, "--headless", "--duration", "2", "--record", str(fifo)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    first: list[str] = []
    threading.Thread(target=lambda: first.append(proc.stderr.readline()), daemon=True).start()
    try:
        wait_for(lambda: first, timeout=60)  # said, not a silent hang
    except BaseException:
        proc.kill()
        raise
    assert f"waiting for a reader of FIFO {fifo}" in first[0]
    data = []

    def read_all():
        with open(fifo, "rb") as f:
            data.append(f.read())

    reader = threading.Thread(target=read_all)
    reader.start()
    proc.wait(timeout=120)
    err = proc.stderr.read()
    reader.join(timeout=60)
    assert proc.returncode == 0, err
    out = tmp_path / "copy.jsonl"
    out.write_bytes(data[0])
    assert len(list(read_recording(str(out)).snapshots())) >= 5


def test_a_recording_deleted_during_the_run_is_said(tmp_path):
    path = tmp_path / "run.jsonl"
    said = []
    session = FakeSession(store_snapshots(5))
    out = open(path, "w", encoding="utf-8")  # noqa: SIM115 (the recorder closes it)
    recorder = Recorder(session, out, [], say=said.append)
    recorder.CHECK_EVERY = 0.05
    recorder.start()
    session.host_samples = 1
    wait_for(lambda: recorder.lines == 1)
    path.unlink()
    wait_for(lambda: said, timeout=30)
    assert said == [f"the recording {path} was deleted while being written: what follows is lost"]
    recorder.close()
    assert recorder.deleted


def test_a_headless_run_whose_recording_is_deleted_says_so(tmp_path):
    path = tmp_path / "run.jsonl"
    proc = subprocess.Popen(
        [*CMD, "--headless", "--duration", "4", "--record", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    proc.stdout.readline()
    wait_for(path.exists)
    path.unlink()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert f"the recording {path} was deleted during the run" in err


def test_a_long_recording_is_summarised_and_exported_in_bounded_memory(tmp_path):
    """12,000 snapshots (4 minutes at 0.02 s): every snapshot held took about 80 kB each (about 1 GB);
    streamed, each command runs under a 300 MB address-space limit (Python and its imports take ~100)."""
    path = long_recording(tmp_path / "long.jsonl", 12_000)
    started = time.monotonic()
    summary = run("replay", path, "--summary", limit_mb=300, timeout=600)
    assert summary.returncode == 0, summary.stderr
    assert '"snapshots": 12000' in summary.stdout
    export = run(
        "export",
        path,
        "--perfetto",
        tmp_path / "o.json",
        "--csv",
        tmp_path / "o.csv",
        limit_mb=300,
        timeout=600,
    )
    assert export.returncode == 0, export.stderr
    assert "from 12000 samples" in export.stderr and "12000 rows" in export.stderr
    assert (tmp_path / "o.csv").read_text().count("\n") == 12_001
    assert (
        time.monotonic() - started < 600
    )  # generous: the timing itself is benchmarks/bench_long_recordings.py
