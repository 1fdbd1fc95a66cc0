"""Panels that skip a build when the figures they draw did not move (``SnapshotPanel.drawn_key``): equal
keys must mean equal rows, and a frame with equal keys builds nothing."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable

from fakes.fake_session import (
    FakeSession,
    make_attach_snapshot,
    make_run_snapshot,
    make_snapshot,
    make_steps_snapshot,
    make_torchrun_snapshot,
)
from pilot import run_async, settle, text_of
from torchpar_top.contract.snapshot import DERIVED, ExecutorView, Snapshot
from torchpar_top.contract.vocab import Counted
from torchpar_top.model.snapshot import rebuild
from torchpar_top.tui.app import TorchparTopApp
from torchpar_top.tui.widgets.gpus import GpusPanel
from torchpar_top.tui.widgets.header import HeaderBar
from torchpar_top.tui.widgets.panel import Row, SnapshotPanel
from torchpar_top.tui.widgets.queues import QueuesPanel

KEYED = (HeaderBar, QueuesPanel, GpusPanel)


def variety() -> list[Snapshot]:
    """Snapshots that differ in most fields: experiments, runs, ranks, GPUs, states, modes."""
    plain = make_snapshot(executors=2)
    stream, other = plain.executors
    noted = rebuild(
        plain,
        executors=(
            dataclasses.replace(stream, note="standing aside: torch.profiler active", blocked=0.3),
            dataclasses.replace(other, counts=Counted.TORCH_CALLS, rank=1, blocked=None),
        ),
    )
    return [
        noted,
        make_snapshot(),
        make_snapshot(executors=2, mode="sync", paused=True),
        make_snapshot(executors=1, unbounded=True, gpus=2),
        make_snapshot(child_state="exited", exit_code=1, executors=3),
        make_snapshot(child_state="failed", experiment="interop"),
        make_run_snapshot(),
        make_torchrun_snapshot(),
        make_torchrun_snapshot(ranks=4, dead=None),
        make_steps_snapshot(),
        make_attach_snapshot(),
    ]


def crossed(snapshots: list[Snapshot]) -> list[Snapshot]:
    """Each snapshot with one measured field taken from another (its derived figures derived again): a
    field that a panel draws but leaves out of its key shows as two snapshots with one key and two
    pictures."""
    measured = [f.name for f in dataclasses.fields(Snapshot) if f.name not in DERIVED]
    out = list(snapshots)
    for a, b in itertools.permutations(snapshots[:6], 2):
        for name in measured:
            if getattr(a, name) != getattr(b, name):
                out.append(rebuild(a, **{name: getattr(b, name)}))
    return out


def crossed_executors(snapshots: list[Snapshot]) -> list[Snapshot]:
    """The first executor of a few snapshots with one field taken from each other executor that has
    another value there (a row's figure left out of a key, found the same way)."""
    donors = [e for s in snapshots for e in s.executors]
    out = []
    for snap in snapshots[:3]:
        first, *rest = snap.executors
        for f in dataclasses.fields(ExecutorView):
            values = {repr(getattr(d, f.name)): getattr(d, f.name) for d in donors}
            for value in values.values():
                if value != getattr(first, f.name):
                    out.append(
                        rebuild(snap, executors=(dataclasses.replace(first, **{f.name: value}), *rest))
                    )
    return out


def picture(panel: SnapshotPanel, snapshot: Snapshot, width: int) -> list[tuple[tuple[str, object], ...]]:
    return [tuple((s.text, s.style) for s in row.segments) for row in panel.build(snapshot, width)]


@run_async
async def test_equal_keys_draw_equal_rows() -> None:
    snapshots = crossed(variety())
    snapshots += crossed_executors(variety())
    assert len(snapshots) > 200
    app = TorchparTopApp(FakeSession(make_snapshot()), render_interval=None)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        for kind in KEYED:
            panel = app.query_one(kind)
            for width in (118, 60, 24):
                seen: dict[object, list[tuple[tuple[str, object], ...]]] = {}
                for snap in snapshots:
                    key = panel.drawn_key(snap, width)
                    if key is None:
                        continue
                    drawn = picture(panel, snap, width)
                    assert seen.setdefault(key, drawn) == drawn, (kind.__name__, width, key)
                assert seen or kind is not QueuesPanel


@run_async
async def test_a_frame_whose_figures_did_not_move_builds_nothing_and_one_that_did_redraws() -> None:
    session = FakeSession(make_run_snapshot())
    app = TorchparTopApp(session, render_interval=None)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        header, queues, gpus = (app.query_one(kind) for kind in KEYED)
        builds = {"header": 0, "queues": 0, "gpus": 0}
        for name, panel in (("header", header), ("queues", queues), ("gpus", gpus)):
            build = panel.build

            def counted(
                snapshot: Snapshot, width: int, name: str = name, build: Callable[..., list[Row]] = build
            ) -> list[Row]:
                builds[name] += 1
                return build(snapshot, width)

            panel.build = counted  # type: ignore[method-assign]
        base = session.snapshot_value
        loader = base.executors[1]
        # a new snapshot whose drawn figures are the same: counters an executor carries moved
        session.snapshot_value = dataclasses.replace(
            base,
            executors=(base.executors[0], dataclasses.replace(loader, launched=loader.launched + 7)),
            t=base.t + 0.1,
        )
        app.refresh_from_session()
        await pilot.pause()
        assert builds == {"header": 0, "queues": 0, "gpus": 0}
        # the queue's value moved: the queues panel (and the header's depth) draw it
        moved = dataclasses.replace(loader, value=loader.value - 1)
        session.snapshot_value = rebuild(base, executors=(base.executors[0], moved), t=base.t + 0.2)
        app.refresh_from_session()
        await pilot.pause()
        assert builds["queues"] == 1 and builds["header"] == 1 and builds["gpus"] == 0
        assert f"{moved.value} / {moved.capacity}" in text_of(queues)
        assert f"depth {moved.value}/" in text_of(header)
