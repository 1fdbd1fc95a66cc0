"""The one builder of :class:`~torchpar_top.contract.snapshot.Snapshot`.

Every source of snapshots (the live store, the trace replay, the recording replay, an export read back)
gives :func:`build` what it measured, by the snapshot's own field names; :func:`build` adds what is
derived from it (:data:`~torchpar_top.contract.snapshot.DERIVED`: the lanes' percentages, the queues
summed, the mean core load, the primary rank, the scoreboard's modes together and their ratio;
:mod:`.figures`), keeps the log to the lines a snapshot carries and lists the sync sites in one order
(:func:`.figures.sync_order`). A figure derived from measurements
is added here, once, and every source has it. :func:`rebuild` changes measured fields of a snapshot and
derives again.
"""

from __future__ import annotations

import dataclasses
from collections import ChainMap
from collections.abc import Mapping
from typing import Any

from torchpar_top.contract.snapshot import DERIVED, ChildStatus, Snapshot
from torchpar_top.contract.vocab import Mode
from torchpar_top.model import figures

#: The newest log lines a snapshot carries (the store keeps more; the log pane shows fewer).
SHOWN_LOG = 200


def build(
    *,
    t: float,
    experiment: str,
    description: str,
    mode: Mode,
    paused: bool,
    interval: float,
    child: ChildStatus,
    **measured: Any,
) -> Snapshot:
    """A snapshot of what a source measured, with every derived figure.

    Args:
        t, experiment, description, mode, paused, interval, child: the fields every snapshot has.
        measured: any other measured :class:`Snapshot` field, by name.

    Raises:
        TypeError: an unknown field, or a derived one (derived here, never given).
    """
    given = sorted(set(measured) & set(DERIVED))
    if given:
        raise TypeError(f"derived by build, not given: {', '.join(given)}")
    if "log" in measured:
        measured["log"] = tuple(measured["log"])[-SHOWN_LOG:]
    if "syncpoints" in measured:
        measured["syncpoints"] = tuple(sorted(measured["syncpoints"], key=figures.sync_order))
    values = ChainMap(measured, _DEFAULTS)
    # derived from what was given, then built once (a second, derived copy cost a third of deriving)
    return Snapshot(
        t=t,
        experiment=experiment,
        description=description,
        mode=mode,
        paused=paused,
        interval=interval,
        child=child,
        **measured,
        **_derived(values, interval),
    )


def rebuild(snap: Snapshot, **changes: Any) -> Snapshot:
    """``snap`` with measured fields changed (none: as it is) and its derived figures computed again
    (a recording's snapshot, which may come from a version that derived fewer)."""
    fields = {f.name: getattr(snap, f.name) for f in dataclasses.fields(Snapshot) if f.name not in DERIVED}
    fields.update(changes)
    return build(**fields)


_DEFAULTS: dict[str, Any] = {
    f.name: f.default for f in dataclasses.fields(Snapshot) if f.default is not dataclasses.MISSING
}
"""Every snapshot field's default (none has a factory): what a field that a source did not give holds."""


def _derived(s: Mapping[str, Any], interval: float) -> dict[str, Any]:
    """The :data:`DERIVED` figures of a snapshot whose measured fields are ``s``."""
    return {
        "primary_rank": figures.primary_rank(r.rank for r in s["ranks"]),
        "depth": figures.queue_depth(s["executors"]),
        "core_load": figures.core_load(s["cores"]),
        "lanes": figures.lanes(
            s["executors"],
            s["frontend_busy"],
            s["frontend_wait"],
            s["frontend_core_wait"],
            s["overlap"],
            s["overlap_high"],
            s["overlap_in_progress"],
            interval,
        ),
        "steady": figures.steady(s["scoreboard"]),
        "ratio": figures.ratio(s["scoreboard"]),
        "ranks_running": figures.ranks_running(s["ranks"]),
    }
