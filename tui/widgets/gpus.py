"""Per-GPU kernel-active share (NVML), memory, power and temperature; one row per GPU.

NVML's ``utilization.gpu`` is the share of time a kernel ran, not SM occupancy: it is labelled
``kernel-active`` everywhere on screen.
"""

from __future__ import annotations

from torchpar_top.contract.snapshot import GpuView, Snapshot
from torchpar_top.tui import render
from torchpar_top.tui.widgets.panel import Row, SnapshotPanel


def gpu_details(gpu: GpuView) -> str:
    """``mem 31.2G/80.0G  312/400 W  61°C`` (what is known of it)."""
    parts = []
    if gpu.mem_used is not None or gpu.mem_total is not None:
        parts.append(f"mem {render.size(gpu.mem_used)}/{render.size(gpu.mem_total)}")
    if gpu.power_w is not None:
        limit = f"/{gpu.power_limit_w:.0f}" if gpu.power_limit_w is not None else ""
        parts.append(f"{gpu.power_w:.0f}{limit} W")
    if gpu.temperature_c is not None:
        parts.append(f"{gpu.temperature_c:.0f}°C")
    if gpu.process_util_percent is not None:
        parts.append(f"child {gpu.process_util_percent:.0f}%")
    return "  ".join(parts)


class GpusPanel(SnapshotPanel):
    """``cuda:0 A100  kernel-active ███▌ 87% ▃▅▇█  mem 31.2G/80.0G  312/400 W  61°C`` per GPU."""

    DEFAULT_CSS = """
    GpusPanel { height: auto; }
    """

    def empty(self, snapshot: Snapshot) -> bool:
        """Without GPUs the panel shrinks to one borderless line."""
        return not snapshot.gpus

    def title(self, snapshot: Snapshot) -> str:
        """``GPU  2 devices (NVML)``."""
        n = len(snapshot.gpus)
        source = (
            "from the trace, not NVML" if snapshot.replay is not None and snapshot.replay.trace else "NVML"
        )
        return f"GPU  {n} device{'s' if n != 1 else ''} ({source})" if n else "GPU"

    def drawn_key(self, snapshot: Snapshot, width: int) -> object:
        """Without a GPU, the reason there is none (the line stays the same all run); with GPUs, built
        every time (their readings move)."""
        return None if snapshot.gpus else (width, snapshot.gpu_status)

    def build(self, snapshot: Snapshot, width: int) -> list[Row]:
        """One row per GPU, or the reason there is none."""
        gpus = snapshot.gpus
        if not gpus:
            return [
                Row()
                .add("GPU  ", self.style("accent"))
                .add(snapshot.gpu_status or "no GPU", self.style("dim"))
            ]
        label_w = max(len(g.label) for g in gpus)
        details = [gpu_details(g) for g in gpus]
        details_w = max(len(d) for d in details)
        name_w = min(max(len(g.name) for g in gpus), 22)
        # label, name, "kernel-active", bar, percent, history, details
        flex = width - (label_w + 1 + name_w + 2 + 14 + 5 + 2 + details_w)
        if flex < 12:
            name_w = max(0, name_w + flex - 12)
            flex = 12
        bar_w = max(4, min(20, flex // 2))
        hist_w = max(4, flex - bar_w - 1)
        active = "kernel-active "
        if label_w + 1 + len(active) + bar_w + 5 + 1 + hist_w > width:  # narrow: words, then the history go
            active, bar_w = "", 4
            hist_w = max(0, min(hist_w, width - (label_w + 1 + bar_w + 5 + 1)))
        out = []
        for gpu, detail in zip(gpus, details, strict=True):
            row = Row().add(gpu.label.ljust(label_w) + " ", self.style("value"))
            if name_w:
                row.add(render.clip(gpu.name, name_w).ljust(name_w) + "  ", self.style("label"))
            if gpu.lost:
                out.append(row.add("lost: NVML no longer answers for this device", self.style("hot")))
                continue
            row.add(active, self.style("dim"))
            util = gpu.util_percent
            frac = render.fraction(util or 0.0, 100.0)
            row.add(render.bar(frac, bar_w), self.level_style(frac))
            row.add(render.pct(None if util is None else frac, 5), self.style("value"))
            if hist_w:
                row.add(" ").add(render.spark(gpu.util_history, hist_w, 100.0), self.style("track"))
            shown = render.fields(detail, width - row.width - 2)
            if shown:
                row.add("  " + shown, self.style("label"))
            out.append(row)
        return out
