"""The codec's fast converters give the checking converters' answers: the same object for what both
accept, and a deferral (never a wrong object) for anything the checking path refuses; and JSON parsing
reads what the standard library reads, with or without orjson."""

import dataclasses
import json
import random
import subprocess
import sys

import orjson
import pytest
from fakes.recordings import hello, sample, stream_snapshots
from fakes.steps import Rank
from fakes.steps import hello as fake_hello
from torchpar_top.contract import codec
from torchpar_top.contract import messages as m
from torchpar_top.contract.codec import (
    ProtocolError,
    _converter,
    _fast,
    _Slow,
    dumps,
    fast_dumps,
    finite,
    from_plain,
    to_plain,
)
from torchpar_top.contract.snapshot import Snapshot
from torchpar_top.model.store import SessionStore


def _stepping():
    """Samples of two stepping ranks (steps, phases, memory; one rank's forward 3x) and the snapshots a
    real store makes of them (step views, a straggler, memory)."""
    store = SessionStore("run")
    ranks = [
        Rank(step=0.016, jitter=0.2, leak=1000.0, forward=0.002, backward=0.003, comm=0.010, optimizer=0.001),
        Rank(step=0.016, jitter=0.2, seed=1, forward=0.010, backward=0.003, comm=0.002, optimizer=0.001),
    ]
    for i, pid in enumerate((100, 101)):
        store.on_message(fake_hello(pid, i), source=i)
    samples, snaps = [], []
    for _ in range(100):
        for i, r in enumerate(ranks):
            samples.append(r.sample())
            store.on_message(samples[-1], source=i)
        snaps.append(store.snapshot())
    return samples[::20], snaps[::20] + snaps[-1:]


def corpus():
    """``(class, plain)`` pairs, all valid: snapshots of real stores and messages as agents send them."""
    out = []
    for snap in stream_snapshots(40, ranks=2, streams=3, cores=4):
        out.append((Snapshot, to_plain(snap)))
    samples, snaps = _stepping()
    assert snaps[-1].straggler is not None and snaps[-1].steps is not None
    out += [(Snapshot, to_plain(s)) for s in snaps]
    for msg in (sample(streams=2), hello(7, 1), *samples):
        out.append((type(msg), {**to_plain(msg), "v": m.VERSION, "type": msg.TYPE}))
    return out


def _answer_slow(cls, data):
    try:
        return "ok", repr(_converter(cls)(data, "x"))
    except ProtocolError:
        return "refused", None


def _answer_fast(cls, data):
    try:
        return "ok", repr(_fast(cls)(data))
    except _Slow:
        return "deferred", None


def test_every_valid_object_takes_the_fast_path_and_builds_what_the_checking_path_builds():
    pairs = corpus()
    assert len(pairs) > 40
    for cls, data in pairs:
        fast = _answer_fast(cls, data)
        assert fast[0] == "ok", f"{cls.__name__}: the plain valid case fell back to the checking path"
        assert fast == _answer_slow(cls, data)


BAD_VALUES = [
    None,
    True,
    False,
    "x",
    -1,
    -1.5,
    0,
    10**30,
    1e300,
    float("inf"),
    float("nan"),
    [],
    {},
    [1.5],
    ["x"],
]


def _paths(node, path=()):
    yield path
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node[:3]):
            yield from _paths(v, (*path, i))


def _mutants(data, rng, n):
    paths = [p for p in _paths(data) if p]
    for _ in range(n):
        path = rng.choice(paths)
        mutant = json.loads(json.dumps(data))  # a deep copy of plain data
        parent = mutant
        for key in path[:-1]:
            parent = parent[key]
        last = path[-1]
        roll = rng.random()
        if roll < 0.15 and isinstance(parent, dict):
            del parent[last]
        elif roll < 0.2 and isinstance(parent[last], list):
            parent[last] = (
                parent[last] * (codec.MAX_ITEMS + 1) if parent[last] else [0.0] * (codec.MAX_ITEMS + 1)
            )
        else:
            parent[last] = rng.choice(BAD_VALUES)
        yield mutant


def test_a_mutated_object_is_built_alike_or_deferred_never_built_wrong():
    rng = random.Random(3)
    deferred = refused = 0
    for cls, data in corpus()[::5]:
        for mutant in _mutants(data, rng, 60):
            slow = _answer_slow(cls, mutant)
            fast = _answer_fast(cls, mutant)
            if fast[0] == "ok":
                assert slow == fast, (
                    f"{cls.__name__}: the fast path built what the checking path builds otherwise"
                )
            else:
                deferred += 1
            refused += slow[0] == "refused"
    assert refused > 50 and deferred >= refused  # the mutations did reach refusals, and each one was deferred


def test_from_plain_names_the_field_the_fast_path_deferred_on():
    data = to_plain(next(iter(stream_snapshots(1))))
    data["executors"][0]["capacity"] = "lots"
    with pytest.raises(ProtocolError, match=r"Snapshot\.executors\[0\]\.capacity: expected an integer"):
        codec.from_plain(Snapshot, data)


def test_parsing_falls_back_to_the_standard_library_for_what_orjson_refuses():
    assert codec.loads(b'{"a": "\\ud800"}') == {"a": "\ud800"}  # a lone surrogate escape: json reads it
    with pytest.raises(ValueError):
        codec.loads(b'{"a": ')


def test_without_orjson_the_codec_parses_and_decodes_alike(tmp_path):
    line = sample(streams=2).to_json().decode()
    script = (
        "import sys; sys.modules['orjson'] = None\n"
        "from torchpar_top.contract import codec, messages as m\n"
        "assert codec.orjson is None\n"
        f"print(repr(m.decode({line!r})))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == repr(m.decode(line))


def test_a_snapshot_read_for_some_fields_takes_only_those_and_defers_alike():
    only = frozenset({"cores", "executors", "scoreboard"})
    rng = random.Random(5)
    for cls, data in corpus()[:40:8]:
        assert cls is Snapshot
        built = codec.from_plain(Snapshot, data, only=only)
        whole = codec.from_plain(Snapshot, data)
        assert (built.cores, built.executors, built.scoreboard) == (
            whole.cores,
            whole.executors,
            whole.scoreboard,
        )
        assert built.core_history == () and built.frontend_busy == () and built.t == whole.t
        for mutant in _mutants(data, rng, 60):
            try:
                fast = ("ok", repr(_fast(Snapshot, only)(mutant)))
            except _Slow:
                fast = ("deferred", None)
            try:
                slow = ("ok", repr(codec.from_plain(Snapshot, mutant, only=only)))
            except ProtocolError:
                slow = ("refused", None)
            assert fast[0] == "deferred" or fast == slow


def test_a_nested_field_read_for_some_of_its_fields_keeps_the_others_default():
    data = to_plain(list(stream_snapshots(3, streams=2))[-1])
    data["executors"][0]["running"] = [0.5]
    data["executors"][0]["note"] = "a note"
    whole = codec.from_plain(Snapshot, data)
    built = codec.from_plain(Snapshot, data, only=frozenset({"executors", "executors.rank"}))
    e, w = built.executors[0], whole.executors[0]
    assert (e.name, e.value, e.busy, e.rank) == (w.name, w.value, w.busy, w.rank)  # read (or required)
    assert (w.running, w.note) == ((0.5,), "a note") and (e.running, e.note) == ((), None)  # left out


def test_orjson_writes_what_the_standard_library_writes():
    """Messages go out through orjson (fast_dumps): every object of the corpus reads back the same as
    through to_plain and json, and a message line is the same document either way."""
    for cls, data in corpus():
        obj = from_plain(cls, data)
        fast = fast_dumps(obj)
        assert fast is not None
        assert orjson.loads(fast) == json.loads(dumps(obj))
        if isinstance(obj, m.Message):
            line = obj.to_json()
            assert line.endswith(b"\n") and line.count(b"\n") == 1
            slow = {"v": m.VERSION, "type": obj.TYPE, **to_plain(obj)}
            assert orjson.loads(line) == slow
            assert type(m.decode(line)) is cls


def test_orjson_never_writes_nan_as_null_and_gives_way_where_it_refuses():
    s = sample(streams=2)
    nan_deep = dataclasses.replace(s, executors=(dataclasses.replace(s.executors[0], busy=float("nan")),))
    for bad in (nan_deep, dataclasses.replace(s, throughput=float("inf"))):
        with pytest.raises(ValueError):
            fast_dumps(bad)
        with pytest.raises(ValueError):
            bad.to_json()
    log = m.Log(text="\ud800 lone surrogate")  # orjson refuses it: the standard library writes it
    assert fast_dumps(log) is None and m.decode(log.to_json()).text == log.text
    assert finite((1, 2.5, 10**400, None, "x")) and not finite([1.0, (2.0, float("-inf"))])


@dataclasses.dataclass(frozen=True)
class _Loose:
    """A dataclass whose field's type does not say what it holds."""

    anything: object
    count: int = 0


def test_a_nan_anywhere_a_float_can_be_is_found_by_the_checks_made_from_type_hints():
    """``finite`` looks at a dataclass through a check made from its hints: every place a sample can
    carry a float (a field, an optional one, a tuple of them, a nested object, a tuple of nested
    objects, an untyped field) is looked at."""
    steps = m.Steps(
        source=m.StepSource.OPTIMIZER,
        count=3,
        seconds=0.5,
        phases=m.StepPhases(forward=0.1),
        ends=(1.0, 2.0),
        recent=(m.StepRecord(end=1.0, phases=m.StepPhases(data=0.2)),),
    )
    s = dataclasses.replace(sample(streams=1), steps=steps, op_coverage=0.5)
    assert finite(s)
    nan = float("nan")
    bad = [
        dataclasses.replace(s, op_coverage=nan),  # an optional float
        dataclasses.replace(s, frontend=dataclasses.replace(s.frontend, core_wait=float("inf"))),
        dataclasses.replace(s, steps=dataclasses.replace(steps, ends=(1.0, nan))),
        dataclasses.replace(s, steps=dataclasses.replace(steps, phases=m.StepPhases(other=nan))),
        dataclasses.replace(
            s,
            steps=dataclasses.replace(steps, recent=(m.StepRecord(end=1.0, phases=m.StepPhases(sync=nan)),)),
        ),
    ]
    for obj in bad:
        assert not finite(obj)
        with pytest.raises(ValueError):
            obj.to_json()
    assert not finite(_Loose(anything={"k": [1.0, nan]})) and finite(
        _Loose(anything={"k": [1.0]}, count=10**400)
    )


def test_the_flat_check_gives_way_to_the_exact_one_where_its_sum_cannot_say():
    """The check adds every float of a sample into one sum: a sum that overflows from finite numbers, an
    int past a float, an object not of its hint's type, are looked at again one by one, exactly."""
    s = sample(streams=1)
    big = dataclasses.replace(s, t=1e308, throughput=1e308)  # each finite, their sum is not
    assert finite(big) and big.to_json()
    huge = dataclasses.replace(s, throughput=10**400)  # adding it to a float overflows
    assert finite(huge)

    @dataclasses.dataclass(frozen=True)
    class OtherPhases:  # not the StepPhases the hint names: a float the flat check does not know of
        data: float = 0.0
        extra: float = float("nan")

    steps = m.Steps(source=m.StepSource.OPTIMIZER, count=1, seconds=0.5, phases=OtherPhases())  # type: ignore[arg-type]
    assert not finite(dataclasses.replace(s, steps=steps))
    listed = m.Steps(
        source=m.StepSource.OPTIMIZER,
        count=1,
        seconds=0.5,
        phases=m.StepPhases(),
        ends=[1.0, float("inf")],  # type: ignore[arg-type]  # a list where the hint says a tuple
    )
    assert not finite(dataclasses.replace(s, steps=listed))
