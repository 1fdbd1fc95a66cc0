"""A real Prometheus on loopback for tests: a temporary config and data folder, stopped afterwards.

The binary is the Debian package's (``.ci/run`` installs it); without it the test is skipped, or fails
in CI. Scrapes every second so that tests wait seconds, not minutes.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

_HANDED_OUT: set[int] = set()


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port() -> int:
    """A TCP port nobody listens on now (loopback), from below the kernel's ephemeral range.

    A test names its ports before the processes that bind them have started (Prometheus's config lists
    its targets first). A port the kernel handed out by ``bind(0)`` is in the ephemeral range, where
    any outgoing connection in the meantime (Gloo's, a scrape's) may be given it as its source port: a
    CI run saw ``--metrics-port ... in use`` that way. Below that range only an explicit bind takes it.
    """
    low = max(_ephemeral_low(), 2048)
    for _ in range(200):
        port = random.randrange(low // 2, low)
        if port in _HANDED_OUT:  # two calls in a row name two ports
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            _HANDED_OUT.add(port)
            return port
    raise RuntimeError(f"no free TCP port found below {low}")


def binary() -> str:
    """The prometheus executable, or skip (fail in CI)."""
    found = shutil.which("prometheus") or (
        "/usr/bin/prometheus" if os.path.exists("/usr/bin/prometheus") else None
    )
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("prometheus is not installed (.ci/run installs the Debian package)")
        pytest.skip("prometheus is not installed (apt-get install prometheus)")
    return found


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    """Ask a process to end, then kill it if it does not within a minute."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


class PrometheusServer:
    """``prometheus`` scraping ``targets`` every second as scrape job ``job``, on ``127.0.0.1:port``."""

    def __init__(self, folder: Path, targets: list[str], job: str = "torchpar-top") -> None:
        self.folder, self.job, self.port = folder, job, free_port()
        config = folder / "prometheus.yml"
        quoted = ", ".join(f"'{t}'" for t in targets)
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
            f"scrape_configs:\n  - job_name: {job}\n    static_configs:\n      - targets: [{quoted}]\n"
        )
        self.log = folder / "prometheus.log"
        self.proc = subprocess.Popen(
            [
                binary(),
                f"--config.file={config}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(self.log, "wb"),  # noqa: SIM115 (the child keeps it)
            cwd=folder,
        )
        self.url = f"http://127.0.0.1:{self.port}"

    def query(self, expr: str) -> list[dict]:
        """An instant query's result ([] while Prometheus is not up yet); fails if Prometheus ended."""
        if self.proc.poll() is not None:
            pytest.fail("prometheus ended: " + self.log.read_text()[-2000:])
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                body = json.load(resp)
        except (urllib.error.URLError, OSError, ValueError):
            return []
        return body["data"]["result"] if body.get("status") == "success" else []

    def close(self) -> None:
        """Stop it."""
        stop(self.proc)
