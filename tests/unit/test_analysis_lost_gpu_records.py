"""A real H100 profiler window whose trace kept the launch calls and lost every kernel: the summary says
the GPU records were lost, not that the GPU did nothing (tests/data/h100/README.md)."""

from __future__ import annotations

import os

from torchpar_top.analysis import analyse_path
from torchpar_top.analysis.summary import NO_GPU_NOTE, summary

TRACE = os.path.join(
    os.path.dirname(__file__), os.pardir, "data", "h100", "sync_window_without_gpu_records.json.gz"
)
CPU_ONLY = os.path.join(os.path.dirname(__file__), os.pardir, "data", "hta", "cpu_only.json.gz")


def test_launches_without_gpu_ops_are_called_lost_records():
    result = summary(analyse_path(TRACE))
    assert result["gpu_activity"] is False and result["streams"] == []
    assert result["note"] == (
        "no GPU activity in this trace although its threads made 351 launch calls: "
        "the profiler lost its GPU records (profile again)"
    )


def test_a_trace_without_launches_keeps_the_plain_note():
    assert summary(analyse_path(CPU_ONLY))["note"] == NO_GPU_NOTE
