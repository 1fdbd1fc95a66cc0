"""The experiments' own measurements, run small in this process (no child, no socket)."""

from __future__ import annotations

import time

from torchpar_top.contract import messages as m
from torchpar_top.probes.agent.agent import Agent
from torchpar_top.workloads import async_compute


def _agent() -> tuple[Agent, list]:
    agent = Agent(None, experiment="async", description="t", interval=0.05)
    agent.hard_exit = lambda: None
    sent: list = []
    agent.send = sent.append  # type: ignore[method-assign]
    return agent, sent


def test_a_text_round_reports_its_three_timings_together_and_holds_the_live_queue():
    agent, sent = _agent()
    stream = agent.emulated_stream("s")
    counted = [0]
    try:
        for _ in range(50):  # a live backlog of 0.5 s: held through the round, not drained
            stream.launch(time.sleep, 0.01)
        t0, before = time.perf_counter(), stream.completed
        times = async_compute.text_round(agent, stream, 4, "cpu", counted, repeats=3, n=64)
        t1 = time.perf_counter()
        # the text's 2 × 3 items ran on a stream of their own while the live backlog stayed queued: the
        # live executor finished at most the item it was running (and one as it resumed)
        assert counted == [6] and stream.launched == 50 and stream.completed <= before + 2 < 50
        text = next(r for r in agent.roles() if r.executor == "text")
        assert text.role == "executor" and "text" not in [e.name for e in agent.executors]
        results = [msg for msg in sent if isinstance(msg, m.Result)]
        assert [r.label for r in results] == ["numpy", "torch launch", "torch + sync", "launch/complete"]
        assert [(r.round, r.closes_round) for r in results] == [(4, False)] * 3 + [(4, True)]
        assert results[3].value == 100 * times["launch"] / times["sync"]
        assert any(isinstance(msg, m.Log) and msg.text.startswith("text round 4:") for msg in sent)
        # every sample window that touches the round says so (neither mode's scoreboard counts it)
        assert agent.sample(t0, t1).timing
        assert not agent.sample(t1 + 0.001, time.perf_counter() + 0.002).timing
    finally:
        agent.close()


def test_the_cuda_item_is_sized_so_the_gpu_is_the_slower():
    gpu = {1000: 58e-6, 1500: 190e-6, 2000: 360e-6, 3000: 1.2e-3}  # an H200's GPU seconds per item
    asked: list[int] = []

    def gpu_s(n: int) -> float:
        asked.append(n)
        return gpu.get(n, 9e-3)

    # the frontend launches one in 200 µs under the agent: 360 µs is the first at 1.5 times that
    assert async_compute.fit_size(200e-6, gpu_s, sizes=(1000, 1500, 2000, 3000)) == (2000, 360e-6)
    assert asked == [1000, 1500, 2000]  # sizes past the fit are not timed
    assert async_compute.fit_size(30e-6, gpu_s, sizes=(1000, 1500)) == (1000, 58e-6)  # already slower
    assert async_compute.fit_size(1.0, gpu_s, sizes=(1000, 1500)) == (1500, 190e-6)  # never: the largest


def test_the_hello_names_cuda_only_for_experiments_that_run_there():
    from torchpar_top import workloads

    on = {name: workloads.get(name).device(cuda_available=True) for name in workloads.names()}
    assert on == {"async": "cuda", "multi-device": "cuda", "intra-op": "cpu", "inter-op": "cpu"}
    assert {workloads.get(name).device(cuda_available=False) for name in workloads.names()} == {"cpu"}
