"""Blank regions: maximal intervals inside a window where a device runs nothing on any stream.

    stream 7   ███   ██      ████
    stream 13     ██            ██
    gaps             [  ]  [   ]        <- complement of the union, clipped to the window

Critical-path flags and causes are filled in by ``analysis.critical_path`` and
``analysis.causes``; this module only finds where the device waited.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from analysis.busy import BusySpans, device_busy, gpu_window
from loaders.model import Trace

CAUSES = ("sync", "copy", "launch", "host", "unknown")


@dataclass
class Gap:
    device: int
    start_ns: int
    end_ns: int
    on_critical_path: bool = False
    cause: str = "unknown"
    shares: dict[str, float] = field(default_factory=dict)  # cause -> share of the gap, sums to 1
    evidence: list[int] = field(default_factory=list)  # event indices that explain it
    message: str = ""  # e.g. what better trace to collect

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns


def blank_regions(
    trace: Trace,
    device: int | None = None,
    window: tuple[int, int] | None = None,
    min_ns: int = 1,
) -> list[Gap]:
    """Blank regions of each device (or one), in time order, at least ``min_ns`` long."""
    devices = [device] if device is not None else [d.id for d in trace.meta.devices]
    out: list[Gap] = []
    for dev in devices:
        busy = device_busy(trace, dev)
        w0, w1 = window if window is not None else gpu_window(trace, dev)
        starts, ends = complement(busy, w0, w1)
        keep = (ends - starts) >= min_ns
        out.extend(Gap(dev, int(s), int(e)) for s, e in zip(starts[keep], ends[keep], strict=True))
    out.sort(key=lambda g: (g.start_ns, g.device))
    return out


def complement(busy: BusySpans, w0: int, w1: int) -> tuple[np.ndarray, np.ndarray]:
    """Idle spans of ``busy`` inside [w0, w1)."""
    if w1 <= w0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    s = np.clip(busy.start, w0, w1)
    e = np.clip(busy.end, w0, w1)
    keep = e > s
    s, e = s[keep], e[keep]
    gap_s = np.concatenate(([w0], e))
    gap_e = np.concatenate((s, [w1]))
    keep = gap_e > gap_s
    return gap_s[keep], gap_e[keep]
