"""``--metrics-port``: the collector's families on fake snapshots, parsed back with the official parser;
the server serves them and is gone after close; a port in use is one line and status 2."""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
import urllib.request

import pytest
from fakes.fake_session import (
    FakeSession,
    make_run_snapshot,
    make_snapshot,
    make_steps_snapshot,
    make_torchrun_snapshot,
)
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from torchpar_top.contract.vocab import ExecutorKind
from torchpar_top.sinks.metrics import MetricsServer, SnapshotCollector

TRACE = os.path.join(os.path.dirname(__file__), os.pardir, "data", "hta", "cpu_only.json.gz")
UUIDS = ("GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52", "GPU-11111111-2222-3333-4444-555555555555")


def scrape(snap) -> dict[str, list]:
    """The families of one scrape of ``snap`` (through a FakeSession), by name: a list of samples."""
    session = FakeSession(snap)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(session.snapshot, hostname="node-7", version="9.9"))
    text = generate_latest(registry).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    return families


def samples(families, name):
    return {tuple(sorted(s.labels.items())): s.value for s in families[name].samples}


def one(families, name, **labels):
    found = [s.value for s in families[name].samples if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (name, labels, families[name].samples)
    return found[0]


def test_cpu_and_threads_in_base_units():
    fams = scrape(make_run_snapshot())
    assert fams["torchpar_cpu_load_ratio"].type == "gauge" and fams["torchpar_cpu_load_ratio"].unit in (
        "",
        "ratio",
    )
    loads = samples(fams, "torchpar_cpu_load_ratio")
    assert len(loads) == 4 and all(0 <= v <= 1 for v in loads.values())
    assert one(fams, "torchpar_cpu_load_ratio", core="0", Hostname="node-7") == pytest.approx(0.97)
    assert one(fams, "torchpar_threads_cpu_cores", role="frontend (main)") == pytest.approx(0.41)
    assert one(fams, "torchpar_threads_run_queue_wait_cores", role="DataLoader workers") == pytest.approx(
        0.22
    )
    assert one(fams, "torchpar_starved_cores") == pytest.approx(0.64)  # the store's verdict, in cores
    assert one(fams, "torchpar_data_wait_ratio", rank="") == pytest.approx(0.62)
    assert one(fams, "torchpar_throughput_per_second", what="steps") == pytest.approx(6.2)
    assert one(fams, "torchpar_work", what="steps") == pytest.approx(6.2 * 38.0)  # counter: name less _total
    assert fams["torchpar_work"].type == "counter"
    assert one(fams, "torchpar_sync_points", where="train.py:57", call="item()") == 1860
    assert one(fams, "torchpar_monitor_info", Hostname="node-7", version="9.9", target="run train.py") == 1


def test_queues_mode_and_frontend():
    fams = scrape(make_snapshot(executors=2, mode="async"))
    assert (
        one(fams, "torchpar_queue_depth", executor="cpu-stream:0", kind="emulated-stream", quantity="depth")
        == 1024
    )
    assert one(fams, "torchpar_queue_capacity", executor="cpu-stream:1") == 1024
    assert one(fams, "torchpar_queue_blocked_ratio", executor="cpu-stream:0") == pytest.approx(0.61)
    assert one(fams, "torchpar_queue_launches", executor="cpu-stream:1") == 121_000
    assert fams["torchpar_queue_launches"].type == "counter"
    names = {s.name for s in fams["torchpar_queue_launches"].samples}
    assert names == {"torchpar_queue_launches_total"}
    assert one(fams, "torchpar_sync_mode") == 0
    assert one(fams, "torchpar_frontend_busy_ratio") == pytest.approx(0.2)
    assert one(fams, "torchpar_mode_seconds", mode="sync") == 12.0
    assert one(scrape(make_snapshot(mode="sync")), "torchpar_sync_mode") == 1


def test_gpu_series_carry_dcgm_exporters_labels():
    snap = make_snapshot(gpus=2)
    snap = dataclasses.replace(
        snap, gpus=tuple(dataclasses.replace(g, uuid=u) for g, u in zip(snap.gpus, UUIDS, strict=True))
    )
    fams = scrape(snap)
    labels = {
        "Hostname": "node-7",
        "gpu": "1",
        "UUID": UUIDS[1],
        "device": "nvidia1",
        "modelName": "NVIDIA A100-SXM4-80GB",
    }
    assert one(fams, "torchpar_gpu_utilization_ratio", **labels) == pytest.approx(0.67)
    assert one(fams, "torchpar_gpu_memory_used_bytes", **labels) == 35 * 1024**3
    assert one(fams, "torchpar_gpu_memory_total_bytes", **labels) == 80 * 1024**3
    assert one(fams, "torchpar_gpu_power_watts", **labels) == pytest.approx(272.0)


def test_a_cuda_streams_series_name_its_gpu_as_dcgm_does():
    snap = make_snapshot(gpus=2)
    gpus = (
        dataclasses.replace(snap.gpus[0], index=0, label="cuda:1", uuid=UUIDS[0]),
        dataclasses.replace(snap.gpus[1], index=1, label="cuda:0", uuid=UUIDS[1]),
    )  # CUDA_VISIBLE_DEVICES=1,0
    stream = dataclasses.replace(snap.executors[0], name="cuda:0 s1", kind=ExecutorKind.CUDA_STREAM, value=37)
    fams = scrape(dataclasses.replace(snap, gpus=gpus, executors=(stream,)))
    assert one(fams, "torchpar_queue_depth", executor="cuda:0 s1", gpu="1", UUID=UUIDS[1], stream="s1") == 37


def test_torchrun_ranks_are_labelled():
    fams = scrape(make_torchrun_snapshot(ranks=2, dead=1))
    running = samples(fams, "torchpar_rank_running")
    assert {dict(k)["rank"]: v for k, v in running.items()} == {"0": 1.0, "1": 0.0}
    depth_ranks = {s.labels["rank"] for s in fams["torchpar_queue_depth"].samples}
    assert depth_ranks == {"0", "1"}


def test_a_stalled_rank_exports_its_stall_and_where_it_is():
    snap = make_steps_snapshot()
    hung = dataclasses.replace(
        snap.ranks[1],
        steps=dataclasses.replace(snap.ranks[1].steps, stalled=14.5),
        at="sleep at t.py:7 (forward)",
    )
    stepping = dataclasses.replace(snap.ranks[0], at="running at t.py:9 (<module>)")  # stepping: not said
    fams = scrape(dataclasses.replace(snap, ranks=(stepping, hung)))
    assert samples(fams, "torchpar_step_stalled_seconds") == {(("Hostname", "node-7"), ("rank", "1")): 14.5}
    (info,) = fams["torchpar_rank_stalled_at_info"].samples  # an info series (a gauge at 1 in this format)
    assert info.value == 1.0
    assert info.labels == {"Hostname": "node-7", "rank": "1", "at": "sleep at t.py:7 (forward)"}
    fams = scrape(snap)  # every rank stepping: neither series
    assert (
        not fams["torchpar_step_stalled_seconds"].samples
        and not fams["torchpar_rank_stalled_at_info"].samples
    )


def test_the_server_serves_and_stops():
    server = MetricsServer(SnapshotCollector(FakeSession(make_snapshot()).snapshot, hostname="h"), 0)
    url = f"http://127.0.0.1:{server.port}/metrics"
    text = urllib.request.urlopen(url, timeout=30).read().decode()
    assert 'torchpar_queue_depth{Hostname="h"' in text
    assert "torchpar_monitor_process_cpu_seconds_total" in text  # the monitor's own process
    server.close()
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=5)
    server.close()  # idempotent


@pytest.mark.parametrize("mode", [["--headless", "--duration", "5"], ["replay", "--headless"]])
def test_a_port_in_use_is_one_line_and_status_2(mode):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = ["replay", TRACE, "--headless"] if mode[0] == "replay" else mode
        proc = subprocess.run(
            [sys.executable, "-m", "torchpar_top", *argv, "--metrics-port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert lines == [f"torchpar-top: error: --metrics-port {port} on 127.0.0.1: in use"]


@pytest.mark.parametrize("make", [make_snapshot, make_run_snapshot, make_torchrun_snapshot])
def test_names_units_and_ranges_in_openmetrics(make):
    from prometheus_client.openmetrics.exposition import generate_latest as openmetrics
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics

    snap = make()
    if not snap.gpus:
        snap = dataclasses.replace(snap, gpus=make_snapshot(gpus=1).gpus)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(FakeSession(snap).snapshot, hostname="node-7"))
    families = list(parse_openmetrics(openmetrics(registry).decode()))
    assert families
    for family in families:
        assert family.name.startswith("torchpar_"), family.name
        for suffix in ("ratio", "bytes", "watts", "cores", "seconds"):
            if family.name.endswith("_" + suffix):
                assert family.unit == suffix, (family.name, family.unit)
        for sample in family.samples:
            assert sample.labels.get("Hostname") == "node-7", (family.name, sample)
            if family.type == "counter":
                assert sample.name == family.name + "_total" and sample.value >= 0
            if family.name.endswith("_ratio"):
                assert 0.0 <= sample.value <= 1.0, (family.name, sample)
