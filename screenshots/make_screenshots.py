"""Screenshots from real runs: the app with a real session and real children, keys pressed as a person would.

The ``replay-*`` shots play real profiler traces recorded on A100 GPUs (``tests/data/hta/``) through the same
screen: every number in them comes from the trace's analysis.

    python screenshots/make_screenshots.py [--only NAME] [--no-png]

Writes ``screenshots/NAME.svg`` (Textual's own SVG export) and, when Chromium is installed,
``screenshots/NAME.png`` (headless Chromium renders the SVG; the SVG expects the Fira Code font, Debian
package fonts-firacode). Every number in them was measured during the run that made them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
SCRIPTS = HERE.parent / "tests" / "scripts"
TRACES = HERE.parent / "tests" / "data" / "hta"

# name -> (target, [(keys to press, seconds to wait after)], size)
SHOTS = {
    "async-async": ("async", [((), 8.0)], (120, 36)),
    "async-sync": ("async", [((), 6.0), (("s",), 8.0)], (120, 36)),
    "multi-device": ("multi-device", [((), 12.0)], (120, 36)),
    "intra-op": ("intra-op", [((), 4.0), (("minus",), 5.0), (("plus",), 4.0)], (120, 36)),
    "inter-op": ("inter-op", [((), 8.0)], (120, 36)),
    "run-train": ("run", [((), 10.0)], (120, 36)),
    # two DDP ranks (Gloo, torchrun) whose rank 1 sleeps 12 ms more in its forward: the steps panel
    "run-ddp-straggler": ("run-ddp", [((), 25.0)], (120, 40)),
    # two DDP ranks whose rank 1 is pinned to one core with two processes spinning there: the same code,
    # a third of a core; the straggler marked "waits for a core", the ranks table's waits column
    "run-ddp-contention": ("run-ddp-crowd", [((), 25.0)], (160, 40)),
    # two DDP ranks whose rank 1's forward sleeps for an hour 4 s in: a hang, each rank said where it waits
    "run-ddp-hang": ("run-ddp-hang", [((), 28.0)], (120, 40)),
    # two "nodes" on loopback (two `run --nnodes 2`, 2 Gloo ranks each) whose rank 3 sleeps in its forward
    # 6 s in, scraped by a real Prometheus, read back by `torchpar-top cluster`: a hung job, where each
    # rank is, and the one not waiting for its peers
    "cluster-hang": ("cluster-hang", [((), 5.0)], (140, 20)),
    "async-80x24": ("async", [((), 8.0)], (80, 24)),
    # replays, at a moment chosen in the analysis whatever the load time: pause at once, go to the trace's
    # start, seek with the right arrow (5 % of the trace each), then step back frame by frame (1 ms each).
    # 240.5 ms into the 5-stream trace: six streams busy in the last 50 ms, s7 767 deep; 789.2 ms into the
    # 2-rank trace: both ranks' s7 queues at their deepest (76 and 85).
    "replay-a100-5-streams": (
        "replay:a100_sxm4_5_streams.json.gz",
        [(("p", "home") + ("right",) * 4 + ("comma",) * 6, 1.0)],
        (120, 36),
    ),
    "replay-2-ranks": (
        "replay:gpu_2_ranks",
        [(("p", "home") + ("right",) * 13 + ("comma",) * 16, 1.0)],
        (120, 48),
    ),
}


def _session(target: str):
    from torchpar_top.main import _gpu_probe, _stack_source
    from torchpar_top.sources.live.session import Session
    from torchpar_top.sources.live.targets import ScriptTarget
    from torchpar_top.sources.trace import TraceReplay

    if target.startswith("replay:"):
        return TraceReplay(os.path.relpath(TRACES / target.split(":", 1)[1]))  # as a user would type it
    if target == "run":
        script = os.path.relpath(SCRIPTS / "train_dataloader.py")  # as a user would type it
        target = ScriptTarget(script, ("400",))
    elif target == "run-ddp":
        script = os.path.relpath(SCRIPTS / "ddp_steps.py")
        target = ScriptTarget(script, ("120", "forward", "1", "12"), nproc=2)
    elif target == "run-ddp-hang":
        script = os.path.relpath(SCRIPTS / "ddp_steps.py")
        target = ScriptTarget(script, ("600", "hang", "1", "4"), nproc=2)
    elif target == "run-ddp-crowd":
        script = os.path.relpath(SCRIPTS / "ddp_steps.py")
        target = ScriptTarget(script, ("120", "crowd", "1", "2"), nproc=2)
    return Session(target, gpu_probe=_gpu_probe(), stack_source=_stack_source())


async def _shoot(name: str, target: str, steps, size) -> pathlib.Path:
    from torchpar_top.tui.app import TorchparTopApp

    session = _session(target)
    app = TorchparTopApp(session)
    svg = HERE / f"{name}.svg"
    async with app.run_test(size=size) as pilot:
        for keys, wait in steps:
            for key in keys:
                await pilot.press(key)
            await asyncio.sleep(wait)
        await pilot.pause()
        app.save_screenshot(filename=svg.name, path=str(HERE))
    session.close()
    return svg


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _shoot_cluster(name: str, steps, size) -> pathlib.Path:
    """The cluster view of a hung two-node job: Prometheus and both nodes started here, stopped after."""
    import httpx
    from torchpar_top.sources.prometheus import ClusterSource
    from torchpar_top.tui.cluster import ClusterApp

    folder = pathlib.Path(tempfile.mkdtemp(prefix="cluster-shot."))
    rdzv, prom_port, metrics = _port(), _port(), (_port(), _port())
    (folder / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: ddp\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{metrics[0]}', '127.0.0.1:{metrics[1]}']\n"
    )
    prom = subprocess.Popen(
        [
            shutil.which("prometheus") or "/usr/bin/prometheus",
            f"--config.file={folder / 'prometheus.yml'}",
            f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    script = os.path.relpath(SCRIPTS / "ddp_steps.py")
    nodes = [
        subprocess.Popen(
            [
                *(sys.executable, "-m", "torchpar_top", "run", "--nnodes", "2", f"--node-rank={r}"),
                *("--rdzv-endpoint", f"127.0.0.1:{rdzv}", "--nproc-per-node", "2", "--headless"),
                *("--duration", "300", "--interval", "0.5", "--metrics-port", str(metrics[r])),
                *(script, "600", "hang", "3", "6"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for r in (0, 1)
    ]
    url = f"http://127.0.0.1:{prom_port}"
    svg = HERE / f"{name}.svg"
    try:
        for _ in range(240):  # every rank stalled, each with where it is
            await asyncio.sleep(1.0)
            try:
                got = httpx.get(f"{url}/api/v1/query", params={"query": "torchpar_rank_stalled_at_info"})
                if len(got.json()["data"]["result"]) == 4:
                    break
            except (httpx.HTTPError, ValueError, KeyError):
                continue
        else:
            raise SystemExit("cluster-hang: the four ranks never read stalled")
        source = ClusterSource(url, "ddp", 2)
        app = ClusterApp(source, 1.0, url, "ddp")
        async with app.run_test(size=size) as pilot:
            for _keys, wait in steps:
                await asyncio.sleep(wait)
            await pilot.pause()
            app.save_screenshot(filename=svg.name, path=str(HERE))
        source.close()
    finally:
        for proc in (*nodes, prom):
            proc.terminate()
        for proc in (*nodes, prom):
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(folder, ignore_errors=True)
    return svg


def to_png(svg: pathlib.Path, size) -> pathlib.Path | None:
    """Render the SVG with headless Chromium; None when Chromium is not installed."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        return None
    png = svg.with_suffix(".png")
    cols, rows = size
    width, height = int(cols * 12.2) + 40, int(rows * 24.5) + 80
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                f"--user-data-dir={profile}",
                f"--screenshot={png}",
                f"--window-size={width},{height}",
                svg.as_uri(),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
    return png


def main() -> int:
    os.chdir(HERE.parent)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=sorted(SHOTS))
    parser.add_argument("--no-png", action="store_true")
    args = parser.parse_args()
    for name in args.only or SHOTS:
        target, steps, size = SHOTS[name]
        if target == "cluster-hang":
            svg = asyncio.run(_shoot_cluster(name, steps, size))
        else:
            svg = asyncio.run(_shoot(name, target, steps, size))
        png = None if args.no_png else to_png(svg, size)
        print(f"{svg.relative_to(HERE.parent)}" + (f", {png.relative_to(HERE.parent)}" if png else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
