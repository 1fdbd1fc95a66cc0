"""Scale check of ``torchpar-top cluster``: a real Prometheus scraping a synthetic job of N nodes x R ranks.

Each "node" is a ``prometheus_client`` HTTP server on loopback (one per node, as each node's
``run --metrics-port`` is one target) exporting the ``torchpar_*`` per-rank series the cluster view reads,
with the labels ``sinks/metrics.py`` puts on them (``node``, ``hostname``, ``rank``, ``local_rank``) and
the step anatomy's (``torchpar_steps_total``, ``torchpar_step_seconds``, ``torchpar_step_phase_seconds``):
every rank steps at about 5 steps/s with a little noise, one rank (``--slow``) is slower in ``backward``.
A Prometheus (the Debian package) scrapes all of them; then ``ClusterSource.refresh()`` is timed (the
instant queries and the model), and the screen's build (``header_lines`` + ``table_lines``, then Rich
rendering the lines at 160 columns, what the Textual ``Static`` does with them) per refresh.

    python benchmarks/bench_cluster.py [--nodes 64] [--ranks 8] [--refreshes 10] [--scrape 2] [--hung]
    python benchmarks/bench_cluster.py --nodes 4 --ranks 2 --keep 600   # leave it up to look at the TUI

Prints one JSON object (figures in docs/cluster.md and docs/benchmarks.md). Loopback only; everything it
started is stopped at the end.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from torchpar_top.contract.vocab import PHASES

SHARE = {"data": 0.05, "transfer": 0.02, "forward": 0.25, "backward": 0.4, "comm": 0.2, "optimizer": 0.08}


class SyntheticNode:
    """One node's ``torchpar_*`` per-rank series, made up from the clock at each scrape."""

    def __init__(self, node: int, ranks: int, slow: int | None, started: float, hung: bool = False) -> None:
        self.node, self.ranks, self.slow, self.started = node, ranks, slow, started
        self.host = f"node{node:03d}"
        self.hung = hung
        """Every rank stopped stepping: its count frozen, its stall and where it is exported."""

    def collect(self):
        now = time.time()
        rand = random.Random(int(now * 10) + self.node)
        names = ["Hostname", "rank", "node", "hostname", "local_rank"]
        up = GaugeMetricFamily("torchpar_rank_running", "1 while the rank runs", labels=names)
        tp = GaugeMetricFamily("torchpar_rank_throughput_per_second", "throughput", labels=[*names, "what"])
        depth = GaugeMetricFamily("torchpar_rank_queue_depth", "queue depth", labels=names)
        data = GaugeMetricFamily("torchpar_data_wait_ratio", "data wait", labels=names)
        steps = CounterMetricFamily("torchpar_steps", "steps", labels=names)
        step_s = GaugeMetricFamily("torchpar_step_seconds", "seconds per step", labels=names)
        phase = GaugeMetricFamily(
            "torchpar_step_phase_seconds", "phase seconds per step", labels=[*names, "phase"]
        )
        gpu_labels = ["Hostname", "gpu", "UUID", "device", "modelName"]
        gpu = GaugeMetricFamily("torchpar_gpu_utilization_ratio", "GPU", labels=gpu_labels)
        gpu_mem = GaugeMetricFamily("torchpar_gpu_memory_used_bytes", "GPU memory", labels=gpu_labels)
        stalled = GaugeMetricFamily(
            "torchpar_step_stalled_seconds", "seconds since its last step", labels=names
        )
        at = InfoMetricFamily("torchpar_rank_stalled_at", "where a stalled rank is", labels=names)
        for local in range(self.ranks):
            rank = self.node * self.ranks + local
            labels = [self.host, str(rank), str(self.node), self.host, str(local)]
            seconds = 0.2 * (1 + 0.03 * rand.random())
            share = dict(SHARE)
            if rank == self.slow:  # slow in backward, waits least
                share["backward"] += 0.2
                share["comm"] = 0.02
            up.add_metric(labels, 1.0)
            tp.add_metric([*labels, "steps"], 1 / seconds)
            depth.add_metric(labels, rand.randrange(0, 40))
            data.add_metric(labels, share["data"])
            steps.add_metric(labels, 100.0 if self.hung else (now - self.started) / 0.2)
            if self.hung:
                stalled.add_metric(labels, now - self.started)
                place = (
                    "sleep at train.py:70 (forward)" if rank == self.slow else "waits at train.py:96 (main)"
                )
                at.add_metric(labels, {"at": place})
            step_s.add_metric(labels, seconds)
            for p in PHASES:
                phase.add_metric([*labels, p], share.get(p, 0.0) * seconds)
            gpu_row = [self.host, str(local), f"GPU-{rank:08d}", f"nvidia{local}", "synthetic"]
            gpu.add_metric(gpu_row, 0.8)
            gpu_mem.add_metric(gpu_row, 40e9)
        yield from (up, tp, depth, data, steps, step_s, phase, gpu, gpu_mem, stalled, at)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--refreshes", type=int, default=10)
    parser.add_argument("--scrape", type=float, default=2.0, help="Prometheus' scrape_interval, seconds")
    parser.add_argument("--slow", type=int, default=77, help="the slow rank (straggler)")
    parser.add_argument(
        "--keep", type=float, default=0, help="stay up this many seconds (to look at the TUI)"
    )
    parser.add_argument(
        "--hung",
        action="store_true",
        help="a hung job: no rank steps, each exports its stall and where it is (the slow rank asleep in its"
        " forward, the others waiting for it)",
    )
    args = parser.parse_args()
    binary = shutil.which("prometheus") or "/usr/bin/prometheus"
    if not os.path.exists(binary):
        print("prometheus is not installed (apt-get install prometheus)", file=sys.stderr)
        return 2
    from torchpar_top.model.stacks import waits_for_peers
    from torchpar_top.sources.prometheus import QUERIES, ClusterSource
    from torchpar_top.tui.cluster import header_lines, table_lines

    folder = Path(tempfile.mkdtemp(prefix="bench_cluster."))
    started = time.time()
    servers, targets = [], []
    for node in range(args.nodes):
        registry = CollectorRegistry(auto_describe=False)
        registry.register(SyntheticNode(node, args.ranks, args.slow, started, args.hung))
        server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
        servers.append((server, thread))
        targets.append(f"127.0.0.1:{server.server_port}")
    config = folder / "prometheus.yml"
    config.write_text(
        f"global:\n  scrape_interval: {args.scrape:g}s\n  scrape_timeout: {args.scrape:g}s\n"
        "scrape_configs:\n  - job_name: synthetic\n    static_configs:\n      - targets: ["
        + ", ".join(f"'{t}'" for t in targets)
        + "]\n"
    )
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    prom = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(folder / "prometheus.log", "wb"),  # noqa: SIM115 (the child keeps it)
    )
    url = f"http://127.0.0.1:{port}"
    source = ClusterSource(url, "synthetic", args.nodes)
    try:
        want = args.nodes * args.ranks
        deadline = time.monotonic() + 180
        view = source.refresh()
        while (len(view.ranks) < want or view.error) and time.monotonic() < deadline:
            time.sleep(1)
            view = source.refresh()
        if len(view.ranks) < want:
            print(f"only {len(view.ranks)} of {want} ranks after 180 s: {view.error}", file=sys.stderr)
            return 1
        if args.keep:
            print(f"Prometheus at {url}, job synthetic: torchpar-top cluster --prometheus {url}", flush=True)
            time.sleep(args.keep)
        refresh_s, build_s, render_s, query_s = [], [], [], []
        from rich.console import Console
        from rich.text import Text

        for _ in range(args.refreshes):
            time.sleep(args.scrape)  # a new scrape, as the screen refreshes
            t0 = time.perf_counter()
            view = source.refresh()
            refresh_s.append(time.perf_counter() - t0)
            query_s.append(view.query_seconds or 0.0)
            t0 = time.perf_counter()
            first, second = header_lines(view, url, "synthetic", False)
            lines = table_lines(view, 158)
            body = Text("\n").join(lines)
            build_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            console = Console(file=io.StringIO(), width=160, color_system="truecolor", force_terminal=True)
            console.print(Text("\n").join([first, second]))
            console.print(body)
            render_s.append(time.perf_counter() - t0)

        import httpx
        from torchpar_top.sources.prometheus import queries

        with httpx.Client(base_url=url, timeout=30) as client:  # what one refresh moves over HTTP
            sizes = {
                name: len(client.get("/api/v1/query", params={"query": expr}).content)
                for name, expr in queries("synthetic").items()
            }

        def summary(values: list[float]) -> dict[str, float]:
            return {
                "median_ms": round(1000 * statistics.median(values), 2),
                "max_ms": round(1000 * max(values), 2),
            }

        result = {
            "nodes": args.nodes,
            "ranks_per_node": args.ranks,
            "ranks_seen": len(view.ranks),
            "nodes_seen": len(view.nodes),
            "queries_per_refresh": len(QUERIES) + 1,  # and time()
            "hung": args.hung,
            "ranks_stalled": sum(r.stalled is not None for r in view.ranks),
            "ranks_not_waiting_for_peers": [r.rank for r in view.ranks if r.at and not waits_for_peers(r.at)],
            "header": second.plain,
            "straggler": None if view.straggler is None else view.straggler.rank,
            "straggler_cause": None if view.straggler is None else view.straggler.cause,
            "refresh (queries + model)": summary(refresh_s),
            "queries alone": summary(query_s),
            "screen build (header + table lines)": summary(build_s),
            "rich render at 160 columns": summary(render_s),
            "response_bytes_per_refresh": sum(sizes.values()),
            "largest_response": max(sizes.items(), key=lambda kv: kv[1]),
            "refreshes": args.refreshes,
            "scrape_interval_s": args.scrape,
            "cpu": os.cpu_count(),
        }
        print(json.dumps(result, indent=1))
        return 0
    finally:
        source.close()
        prom.terminate()
        try:
            prom.wait(timeout=30)
        except subprocess.TimeoutExpired:
            prom.kill()
            prom.wait()
        for server, thread in servers:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
