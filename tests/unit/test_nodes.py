"""Multi-node ``run``: torchrun's options checked, then passed through as torchrun takes them."""

from __future__ import annotations

import subprocess
import sys

import pytest
from torchpar_top.args import check_nodes, run_parser, split_run
from torchpar_top.contract.snapshot import RankView
from torchpar_top.contract.vocab import ChildState
from torchpar_top.sources.live.targets import Nodes, ScriptTarget, max_nodes, parse_endpoint
from torchpar_top.tui.widgets.ranks import rank_node


@pytest.mark.parametrize(
    "text, expected",
    [
        ("127.0.0.1:29400", ("127.0.0.1", 29400)),
        ("node0.cluster:1", ("node0.cluster", 1)),
        ("[::1]:5000", ("::1", 5000)),
        ("host", ("host", None)),
        ("host:0", None),
        ("host:65536", None),
        ("host:port", None),
        ("::1", None),
        (":29400", None),
        ("", None),
        ("[::1", None),
        ("http://host:1", None),
    ],
)
def test_endpoints(text, expected):
    assert parse_endpoint(text) == expected


def test_nnodes():
    assert max_nodes("4") == 4 and max_nodes("1:4") == 4
    assert max_nodes("0") is None and max_nodes("4:1") is None and max_nodes("x") is None


def _args(argv):
    ours, _, _, _ = split_run([*argv, "train.py"])
    return run_parser().parse_args(ours)


@pytest.mark.parametrize(
    "argv, problem",
    [
        (["--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "h:1"], "--node-rank 2 must be between 0"),
        (["--nnodes=2", "--node-rank=-1", "--rdzv-endpoint=h:1"], "--node-rank -1"),
        (["--nnodes", "2", "--rdzv-endpoint", "h:port"], "--rdzv-endpoint 'h:port': not HOST:PORT"),
        (["--nnodes", "2", "--standalone", "--nproc-per-node", "2"], "--standalone is one node"),
        (["--nnodes", "2"], "needs --rdzv-endpoint"),
        (["--nnodes", "two", "--rdzv-endpoint", "h:1"], "--nnodes 'two'"),
    ],
)
def test_bad_combinations(argv, problem):
    assert problem in check_nodes(_args(argv))


def test_torchrun_gets_the_options_as_given():
    args = _args(["--nnodes=2", "--node-rank", "1", "--rdzv-endpoint", "10.0.0.1:29400", "--rdzv-id=job7"])
    assert check_nodes(args) == "" and args.nproc_per_node == 1  # torchrun's default
    nodes = Nodes(
        nnodes=args.nnodes, node_rank=args.node_rank, rdzv_endpoint=args.rdzv_endpoint, rdzv_id="job7"
    )
    cmd = ScriptTarget("train.py", ("--lr", "1"), nproc=4, nodes=nodes).command(None, 0.1, False)
    torchrun = cmd[cmd.index("torch.distributed.run") + 1 : cmd.index("torchpar_top.probes.agent.run") - 1]
    assert torchrun == [
        "--nnodes=2",
        "--node-rank=1",
        "--rdzv-endpoint=10.0.0.1:29400",
        "--rdzv-id=job7",
        "--nproc-per-node=4",
    ]
    assert cmd[-3:] == ["train.py", "--lr", "1"]
    assert nodes.waiting.startswith("waiting for rendezvous at 10.0.0.1:29400: 2 nodes expected")
    # one node and no rendezvous of its own: standalone, as before
    alone = ScriptTarget("train.py", nproc=2).command(None, 0.1, False)
    assert "--standalone" in alone and Nodes().waiting == ""
    # torchrun's log folder is the one it is given (the listener's, removed with it)
    logged = ScriptTarget("train.py", nproc=2).command(None, 0.1, False, log_dir="/x/logs")
    assert logged.index("--log-dir=/x/logs") < logged.index("torchpar_top.probes.agent.run")
    assert not [a for a in alone if a.startswith("--log-dir")]


def test_bad_combination_is_one_line_and_status_2(tmp_path):
    script = tmp_path / "t.py"
    script.write_text("pass\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torchpar_top",
            "run",
            "--nnodes",
            "2",
            "--node-rank",
            "5",
            "--rdzv-endpoint",
            "127.0.0.1:1",
            "--nproc-per-node",
            "2",
            str(script),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "--node-rank 5 must be between 0 and --nnodes - 1 (1)" in proc.stderr


def test_the_rank_table_says_where_a_rank_runs():
    view = RankView(5, 1, ChildState.RUNNING, 1.0, "steps/s", 0, local_rank=1, node_rank=1, hostname="gpu-b")
    assert rank_node(view) == "1 gpu-b/1"
    assert rank_node(RankView(0, 1, ChildState.RUNNING, 1.0, "steps/s", 0)) == ""


def test_the_ranks_panel_has_a_node_column_only_where_ranks_say_where_they_run():
    import dataclasses

    from fakes.fake_session import FakeSession, make_torchrun_snapshot
    from pilot import run_async, settle, text_of
    from torchpar_top.tui.app import TorchparTopApp
    from torchpar_top.tui.widgets.ranks import RanksPanel

    plain = make_torchrun_snapshot(ranks=4, dead=None)
    placed = dataclasses.replace(
        plain,
        ranks=tuple(
            dataclasses.replace(
                r, rank=r.rank + 4, local_rank=r.rank % 2, node_rank=2 + r.rank // 2, hostname="gpu-b"
            )
            for r in plain.ranks
        ),
    )

    @run_async
    async def check() -> None:
        for snap, expect in ((plain, False), (placed, True)):
            app = TorchparTopApp(FakeSession(snap), render_interval=None)
            async with app.run_test(size=(120, 36)) as pilot:
                await settle(pilot)
                text = text_of(app.query_one(RanksPanel))
                assert ("node host/lr" in text) is expect, text
                if expect:
                    r5 = next(line for line in text.splitlines() if line.startswith("r5"))
                    assert "2 gpu-b/1" in r5 and "running" in r5
                else:
                    assert "5101" in text  # the pid column stays where there is no node column

    check()


def test_per_rank_prometheus_series_say_where_the_rank_runs():
    import dataclasses

    from fakes.fake_session import FakeSession, make_torchrun_snapshot
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families
    from torchpar_top.sinks.metrics import SnapshotCollector

    snap = make_torchrun_snapshot(ranks=2, dead=None)
    snap = dataclasses.replace(
        snap,
        ranks=tuple(
            dataclasses.replace(r, rank=r.rank + 2, local_rank=r.rank, node_rank=1, hostname="gpu-b")
            for r in snap.ranks
        ),
        executors=tuple(dataclasses.replace(e, rank=e.rank + 2) for e in snap.executors),
    )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(FakeSession(snap).snapshot, hostname="monitor-host"))
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}
    for name in ("torchpar_rank_running", "torchpar_rank_queue_depth", "torchpar_queue_depth"):
        where = {
            (s.labels["rank"], s.labels["node"], s.labels["hostname"], s.labels["local_rank"])
            for s in families[name].samples
        }
        assert where == {("2", "1", "gpu-b", "0"), ("3", "1", "gpu-b", "1")}, name
        assert {s.labels["Hostname"] for s in families[name].samples} == {"monitor-host"}
