"""NVML probe against the fake pynvml (and the real binding on this GPU-less machine)."""

from __future__ import annotations

import subprocess
import sys

import pynvml
import pytest
from fakes.fake_pynvml import FakeGpu, FakeNvml, gpu_fleet
from torchpar_top.probes.host.nvml import NO_BINDING, NvmlProbe, cuda_order


def _probe(fake: FakeNvml, **kw) -> NvmlProbe:
    """A probe on the fake, reading the fake's simulated clock and an empty environment by default."""
    kw.setdefault("environ", {})
    return NvmlProbe(fake, clock=lambda: fake.now_us / 1e6, **kw)


def test_real_binding_without_driver_reports_why() -> None:
    """Measured here: the real pynvml, no libnvidia-ml.so.1 on this machine -> empty tuple and a reason."""
    views, status = NvmlProbe().sample()
    assert views == ()
    assert status == "no GPU: NVML library not found (libnvidia-ml.so.1)"


def test_binding_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    assert NvmlProbe().sample() == ((), NO_BINDING)


@pytest.mark.parametrize(
    "code, status",
    [
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "no GPU: NVML library not found (libnvidia-ml.so.1)"),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "no GPU: NVIDIA driver not loaded"),
        (pynvml.NVML_ERROR_UNKNOWN, "no GPU: NVML could not start (Unknown Error)"),
    ],
)
def test_init_failures_are_a_status_not_an_exception(code: int, status: str) -> None:
    probe = _probe(FakeNvml(gpu_fleet(1), init_error=code))
    assert probe.sample() == ((), status)
    assert probe.sample() == ((), status)


def test_no_devices() -> None:
    assert _probe(FakeNvml([])).sample() == ((), "no GPU: NVML found no NVIDIA GPU")


def test_readable_only_with_a_gpu_to_read_so_the_host_probes_poll_only_then() -> None:
    assert not NvmlProbe().readable  # this machine: no libnvidia-ml.so.1
    assert not _probe(FakeNvml(gpu_fleet(1), init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)).readable
    assert not _probe(FakeNvml([])).readable
    probe = _probe(FakeNvml(gpu_fleet(2)))
    assert probe.readable
    probe.close()
    assert not probe.readable


def test_one_gpu_all_metrics_converted() -> None:
    fake = FakeNvml(
        [
            FakeGpu(
                mem_used=5 << 30,
                power_mw=312_500,
                power_limit_mw=400_000,
                temperature_c=61,
                util=lambda t: 87.0,
            )
        ]
    )
    (view,), status = _probe(fake).sample()
    assert status == ""
    assert (view.index, view.label, view.name) == (0, "cuda:0", "NVIDIA A100-SXM4-80GB")
    assert view.util_percent == 87.0
    assert (view.mem_used, view.mem_total) == (5 << 30, 80 << 30)
    assert (view.power_w, view.power_limit_w, view.temperature_c) == (312.5, 400.0, 61.0)
    assert (view.process_util_percent, view.process_mem, view.lost) == (None, None, False)


def test_sample_timeline_uses_last_seen_timestamp() -> None:
    """Each driver sample lands in the history once; NOT_FOUND (nothing new) adds nothing to it."""
    util = lambda t: float(1 + int(t * 6) % 99)  # a new value every driver sample, never idle  # noqa: E731
    fake = FakeNvml([FakeGpu(util=util)])
    probe = _probe(fake)
    (first,), _ = probe.sample()
    assert len(first.util_history) == 100  # the whole driver buffer on the first call (last_seen = 0)
    last_ts = fake._sample_times()[-1]
    fake.advance(0.5)
    new = [ts for ts in fake._sample_times() if ts > last_ts]
    assert len(new) == 3
    (second,), _ = probe.sample()
    assert second.util_history[-3:] == tuple(util(ts / 1e6) for ts in new)
    assert second.util_percent == pytest.approx(sum(util(ts / 1e6) for ts in new) / 3)
    (third,), _ = probe.sample()  # no time passed: NOT_FOUND, the driver's current average instead
    assert third.util_history == second.util_history
    assert third.util_percent == util(new[-1] / 1e6)
    # what tells a recording's reader how many values are new: every value appended, counted
    assert (first.samples, second.samples, third.samples) == (100, 103, 103)


def test_driver_without_sample_buffer_falls_back_to_utilization_rates() -> None:
    fake = FakeNvml([FakeGpu(util=lambda t: 42.0)], driver="older")
    probe = _probe(fake)
    for _ in range(4):
        (view,), _ = probe.sample()
        fake.advance(0.1)
    assert view.util_percent == 42.0 and view.util_history == (42.0,) * 4 and view.samples == 4
    assert fake.calls[("nvmlDeviceGetSamples", 0)] == 0  # the entry point is missing: FUNCTION_NOT_FOUND
    assert view.power_limit_w == 400.0  # enforced limit missing too: management limit instead
    assert view.process_util_percent is None


def test_not_supported_metric_is_asked_once() -> None:
    gpu = FakeGpu(unsupported={"nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperature", "nvmlDeviceGetSamples"})
    fake = FakeNvml([gpu])
    probe = _probe(fake)
    for _ in range(5):
        (view,), _status = probe.sample()
    assert (view.power_w, view.temperature_c) == (None, None)
    assert view.util_percent == 50.0 and view.mem_total == 80 << 30
    for name in ("nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperature", "nvmlDeviceGetSamples"):
        assert fake.calls[(name, 0)] == 1
    assert fake.calls[("nvmlDeviceGetUtilizationRates", 0)] == 5


def test_gpu_lost_mid_run_is_marked_not_fatal() -> None:
    gpus = gpu_fleet(2)
    fake = FakeNvml(gpus)
    gpus[1].lost_at = fake.now_us / 1e6 + 1.0
    probe = _probe(fake)
    views, status = probe.sample()
    assert [v.lost for v in views] == [False, False] and status == ""
    fake.advance(2.0)
    views, status = probe.sample()
    assert [v.lost for v in views] == [False, True]
    assert status == "lost: cuda:1"
    lost = views[1]
    assert (lost.util_percent, lost.mem_used, lost.power_w, lost.temperature_c) == (None, None, None, None)
    calls = sum(n for (name, i), n in fake.calls.items() if i == 1)
    fake.advance(1.0)
    views, _ = probe.sample()
    assert sum(n for (name, i), n in fake.calls.items() if i == 1) == calls  # not asked again
    assert views[0].util_percent == 10.0 and views[0].mem_total == 80 << 30


def test_eight_gpus_and_bounded_history() -> None:
    fake = FakeNvml(gpu_fleet(8))
    probe = _probe(fake, history=50)
    for _ in range(30):
        views, _ = probe.sample()
        fake.advance(0.5)
    assert [v.label for v in views] == [f"cuda:{i}" for i in range(8)]
    assert [v.util_percent for v in views] == [10.0 * (i + 1) for i in range(8)]
    assert all(len(v.util_history) == 50 for v in views)


@pytest.mark.parametrize(
    "env, expected",
    [
        ({}, [0, 1, 2, 3]),
        ({"CUDA_VISIBLE_DEVICES": "2"}, [2]),
        ({"CUDA_VISIBLE_DEVICES": "3,1"}, [3, 1]),
        ({"CUDA_VISIBLE_DEVICES": "1,9,0"}, [1]),  # CUDA ignores everything from an invalid entry on
        ({"CUDA_VISIBLE_DEVICES": "1,1"}, [1]),
        ({"CUDA_VISIBLE_DEVICES": ""}, []),
        ({"CUDA_VISIBLE_DEVICES": "GPU-225a,GPU-005A1E2B-0000-4000-8000-000000000000"}, [2, 0]),
        ({"CUDA_VISIBLE_DEVICES": "GPU-,0"}, []),  # an ambiguous prefix is invalid
        ({"CUDA_VISIBLE_DEVICES": "GPU-115a,0"}, [1]),  # indices after UUIDs end the list
        ({"CUDA_VISIBLE_DEVICES": "MIG-GPU-115a/0/0"}, []),
    ],
)
def test_cuda_visible_devices_mapping(env: dict[str, str], expected: list[int]) -> None:
    fake = FakeNvml(gpu_fleet(4))
    views, _ = _probe(fake, environ=env).sample()
    assert [v.index for v in views[: len(expected)]] == expected
    assert [v.label for v in views] == [f"cuda:{i}" for i in range(len(expected))] + [
        f"nvml:{v.index}" for v in views[len(expected) :]
    ]


def test_mixed_models_need_pci_bus_order_or_the_child_uuids() -> None:
    gpus = gpu_fleet(2)
    gpus[1].name = "NVIDIA GeForce RTX 4090"
    fake = FakeNvml(gpus)
    views, status = _probe(fake).sample()
    assert [v.label for v in views] == ["nvml:0", "nvml:1"]
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" in status
    views, status = _probe(fake, environ={"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}).sample()
    assert [v.label for v in views] == ["cuda:0", "cuda:1"] and status == ""
    # torch prints UUIDs without the GPU- prefix (str(get_device_properties(i).uuid))
    child = [gpus[1].uuid.removeprefix("GPU-"), gpus[0].uuid]
    views, status = _probe(fake, cuda_uuids=lambda: child).sample()
    assert [(v.label, v.index) for v in views] == [("cuda:0", 1), ("cuda:1", 0)] and status == ""


def test_cuda_order_pure_function() -> None:
    uuids = ["GPU-aa", "GPU-bb"]
    assert cuda_order(uuids, ["A", "B"], {"CUDA_VISIBLE_DEVICES": "1"}) == (
        None,
        "CUDA order unknown for mixed GPU models: set CUDA_DEVICE_ORDER=PCI_BUS_ID",
    )
    assert cuda_order(uuids, ["A", "B"], {"CUDA_VISIBLE_DEVICES": "GPU-b"}) == ([1], "")


def test_child_process_share_with_last_seen_timestamps() -> None:
    gpus = gpu_fleet(2)
    gpus[0].processes = {4242: (37, 2 << 30), 999: (80, 1 << 30)}
    fake = FakeNvml(gpus)
    child = {"pid": None}
    probe = _probe(fake, pid=lambda: child["pid"])
    views, _ = probe.sample()
    assert views[0].process_util_percent is None
    assert fake.calls[("nvmlDeviceGetProcessUtilization", 0)] == 0  # no child: not asked
    child["pid"] = 4242
    views, _ = probe.sample()
    assert (views[0].process_util_percent, views[0].process_mem) == (37.0, 2 << 30)
    assert (views[1].process_util_percent, views[1].process_mem) == (None, None)  # not on GPU 1
    views, _ = probe.sample()  # no new sample (NOT_FOUND): the value stays
    assert views[0].process_util_percent == 37.0
    gpus[0].processes[4242] = (0, 2 << 30)  # the child stops using GPU 0: NVML stops listing it
    fake.advance(1.0)
    assert probe.sample()[0][0].process_util_percent == 37.0
    fake.advance(1.5)
    assert probe.sample()[0][0].process_util_percent == 0.0  # stale after 2 s
    child["pid"] = 5000  # a new child: the old one's values are forgotten
    assert probe.sample()[0][0].process_util_percent is None


def test_process_metrics_not_supported_or_memory_unknown() -> None:
    gpu = FakeGpu(unsupported={"nvmlDeviceGetProcessUtilization"}, processes={7: (50, None)})
    fake = FakeNvml([gpu])
    probe = _probe(fake, pid=7)
    for _ in range(3):
        (view,), _ = probe.sample()
    assert (view.process_util_percent, view.process_mem) == (None, None)
    assert fake.calls[("nvmlDeviceGetProcessUtilization", 0)] == 1
    assert fake.calls[("nvmlDeviceGetComputeRunningProcesses_v2", 0)] == 1  # once per process_interval


def test_close_is_idempotent() -> None:
    fake = FakeNvml(gpu_fleet(1))
    probe = _probe(fake)
    probe.close()
    probe.close()
    assert probe.sample() == ((), "GPU probe closed")
    assert fake._inits == 0


def test_probe_module_imports_neither_torch_nor_pynvml() -> None:
    code = (
        "import sys, torchpar_top.probes.host.nvml; "
        "print('torch' in sys.modules, 'pynvml' in sys.modules, 'textual' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False", "False"]


def test_a_broken_binding_never_raises() -> None:
    fake = FakeNvml(gpu_fleet(1))
    probe = _probe(fake)

    def broken(handle, *args):
        raise ValueError("ctypes said no")

    fake.nvmlDeviceGetMemoryInfo = broken
    assert probe.sample() == ((), "GPU probe error: ValueError: ctypes said no")


def test_idle_gpu_not_found_reads_utilization_rates_not_the_last_busy_value() -> None:
    """An idle GPU's sample buffer runs dry (NOT_FOUND): the value falls to the driver's 0 %, not frozen."""
    start = 100.0  # the fake's clock starts at 100 s
    fake = FakeNvml([FakeGpu(util=lambda t: 80.0 if t < start + 1.0 else 0.0)])
    probe = _probe(fake)
    for _ in range(2):  # busy, then the samples of its last second
        (busy,), _ = probe.sample()
        assert busy.util_percent == 80.0
        fake.advance(1.5)
    (idle,), _ = probe.sample()  # idle for 2 s: no new sample
    assert idle.util_percent == 0.0 and idle.util_history[-1] == 0.0
    assert fake.calls[("nvmlDeviceGetUtilizationRates", 0)] == 1


def test_out_of_range_samples_are_discarded_not_clamped() -> None:
    fake = FakeNvml([FakeGpu(util=lambda t: 30.0)])
    probe = _probe(fake)
    (first,), _ = probe.sample()
    newest = fake._sample_times()[-1]
    fake.advance(0.5)
    fake.gpus[0].odd_samples = [(fake._sample_times()[-1] + 1, 250), (0, 60), (newest, 70)]
    (view,), _ = probe.sample()
    assert view.util_percent == 30.0
    assert set(view.util_history) == {30.0} and len(view.util_history) == len(first.util_history) + 3


def test_no_permission_is_not_a_lost_gpu() -> None:
    gpus = gpu_fleet(2)
    gpus[1].denied = True
    views, status = _probe(FakeNvml(gpus), cuda_uuids=[gpus[0].uuid]).sample()
    assert [v.lost for v in views] == [False, False]
    assert (views[1].util_percent, views[1].mem_used) == (None, None)
    assert views[0].util_percent == 10.0
    assert status == "no permission: nvml:1"


def test_memory_used_as_nvidia_smi_reports_it_v1_on_older_drivers() -> None:
    """``nvmlMemory_v2`` (reserved memory not counted as used) where the driver has it, else v1."""
    gpu = FakeGpu(mem_used=5 << 30, mem_reserved=600 << 20)
    (view,), _ = _probe(FakeNvml([gpu])).sample()
    assert (view.mem_used, view.mem_total) == (5 << 30, 80 << 30)
    (old,), _ = _probe(FakeNvml([gpu], driver="r470")).sample()
    assert (old.mem_used, old.mem_total) == ((5 << 30) + (600 << 20), 80 << 30)


def test_process_list_mismatch_error_falls_back_to_v2() -> None:
    """R470: no ``_v3`` symbol; the binding's unversioned wrapper raises NVMLLibraryMismatchError."""
    gpu = FakeGpu(processes={4242: (30, 2 << 30)})
    fake = FakeNvml([gpu], driver="r470")
    (view,), status = _probe(fake, pid=4242).sample()
    assert view.process_mem == 2 << 30 and status == ""


@pytest.mark.parametrize("child", [4242, 4243, 4244])
def test_r535_process_list_is_read_with_its_own_layout(child: int) -> None:
    """R525-R535's ``_v3`` writes 32-byte records that nvidia-ml-py reads as 24-byte ones."""
    gpu = FakeGpu(processes={4242: (30, 2 << 30), 4243: (5, 1 << 30), 4244: (1, 3 << 30)})
    fake = FakeNvml([gpu], driver="r535")
    (view,), status = _probe(fake, pid=child).sample()
    assert view.process_mem == gpu.processes[child][1] and status == ""


def test_garbage_process_entries_are_dropped_and_said() -> None:
    """A binding without ``_v2`` on an R535 driver: only the misread ``_v3`` list; garbage is dropped."""
    gpu = FakeGpu(processes={4242: (30, 2 << 30), 4243: (5, 1 << 30), 4244: (1, 3 << 30)})
    fake = FakeNvml([gpu], driver="r535")
    fake.nvmlDeviceGetComputeRunningProcesses_v2 = None  # an nvidia-ml-py that lacks it
    (view,), status = _probe(fake, pid=4242).sample()
    assert view.process_mem == 2 << 30  # the first record is read right
    assert status == "cuda:0: process list misread (nvidia-ml-py and driver disagree): entries dropped"


def test_unmatched_uuid_keeps_the_other_devices_positions() -> None:
    """A MIG instance (no NVML GPU UUID) as cuda:0 must not make the next device cuda:0."""
    gpus = gpu_fleet(2)
    mig = "MIG-5d2b5a1e-0000-4000-8000-000000000001"
    views, _ = _probe(FakeNvml(gpus), cuda_uuids=[mig, gpus[1].uuid]).sample()
    assert [(v.label, v.index) for v in views] == [("cuda:1", 1), ("nvml:0", 0)]


def test_ranks_numbering_gpus_differently_get_physical_labels_that_do_not_flip() -> None:
    """torchrun with a CUDA_VISIBLE_DEVICES per rank: each rank's cuda:0 is another GPU."""
    gpus = gpu_fleet(2)
    probe = _probe(FakeNvml(gpus))
    seen = []
    for uuids in ([gpus[0].uuid], [gpus[1].uuid], [gpus[0].uuid], [gpus[1].uuid]):
        probe.cuda_uuids = uuids  # as the session does for every rank's sample
        views, status = probe.sample()
        seen.append([v.label for v in views])
    assert seen[1:] == [["nvml:0", "nvml:1"]] * 3
    assert status == "ranks number the GPUs differently: labelled by NVML index"
    probe.cuda_uuids = None  # the run ended
    probe.cuda_uuids = [gpus[1].uuid, gpus[0].uuid]  # the next run: one numbering again
    assert [v.label for v in probe.sample()[0]] == ["cuda:0", "cuda:1"]


def test_ranks_agreeing_on_the_numbering_keep_cuda_labels() -> None:
    gpus = gpu_fleet(2)
    probe = _probe(FakeNvml(gpus))
    probe.cuda_uuids = [gpus[0].uuid, gpus[1].uuid]
    probe.cuda_uuids = [g.uuid.removeprefix("GPU-") for g in gpus]  # torch's spelling, same numbering
    views, status = probe.sample()
    assert [v.label for v in views] == ["cuda:0", "cuda:1"] and status == ""
