"""The `gaplens summary` reading: devices, GPU work totals, busy share, phases, top names."""

from __future__ import annotations

import numpy as np

from gaplens.analysis.busy import BusySpans, device_busy, gpu_window, gpu_work
from gaplens.analysis.phases import phase_busy_pct, phases
from gaplens.analysis.stats import name_stats
from gaplens.loaders.model import MEMCPY_KINDS, Kind, LaneKind, Trace

MEMCPY_LABELS = {
    Kind.MEMCPY_HTOD: "HtoD",
    Kind.MEMCPY_DTOH: "DtoH",
    Kind.MEMCPY_DTOD: "DtoD",
    Kind.MEMCPY_PEER: "PtoP",
    Kind.MEMCPY_OTHER: "other",
}


def totals(trace: Trace, kinds) -> dict:
    m = trace.mask(kinds)
    dur = trace.end_ns[m] - trace.start_ns[m]
    return {"count": int(m.sum()), "total_ns": int(dur.sum())}


def top_names(trace: Trace, kinds, top: int = 10) -> list[dict]:
    """Per name: count, total, avg, med, min, max and share of the total (``analysis.stats``, nsys stats shape)."""
    return name_stats(trace, kinds).rows(top)


def summary(trace: Trace, top: int = 10) -> dict:
    """Everything `gaplens summary --json` prints; keys are the DESIGN.md contract."""
    meta = trace.meta
    w0, w1 = gpu_window(trace)
    devices = []
    busy_by_device: dict[int, BusySpans] = {}
    gpu_busy = 0
    gpu_window_total = 0
    for dev in meta.devices:
        busy = device_busy(trace, dev.id)
        busy_by_device[dev.id] = busy
        d0, d1 = gpu_window(trace, dev.id)
        streams = sorted({ln.stream for ln in trace.gpu_lanes(dev.id)})
        devices.append(
            {
                "id": dev.id,
                "name": dev.name,
                "streams": streams,
                "busy_ns": busy.total,
                "busy_pct": _pct(busy.total, d1 - d0),
                "window_ns": [d0, d1],
            }
        )
        gpu_busy += busy.total
        gpu_window_total += d1 - d0
    mem = trace.mask(MEMCPY_KINDS)
    by_dir = {}
    for k, label in MEMCPY_LABELS.items():
        m = trace.kind == int(k)
        if m.any():
            by_dir[label] = {
                "count": int(m.sum()),
                "total_ns": int((trace.end_ns[m] - trace.start_ns[m]).sum()),
                "bytes": int(trace.bytes[m].sum()),
            }
    all_busy = BusySpans(*_all_gpu(trace))
    phase_rows = [
        {
            "name": p.name,
            "start_ns": p.start_ns,
            "end_ns": p.end_ns,
            "dur_ns": p.dur_ns,
            "host_start_ns": p.host_start_ns,
            "host_end_ns": p.host_end_ns,
            "depth": p.depth,
            "busy_pct": phase_busy_pct(p, all_busy),
        }
        for p in phases(trace)
    ]
    return {
        "source": {
            "format": meta.source_format,
            "version": meta.source_version,
            "path": meta.path,
        },
        "origin_ns": meta.origin_ns,
        "window_ns": [w0, w1],
        "events": len(trace),
        "lacks": list(meta.lacks),
        "warnings": list(meta.warnings),
        "devices": devices,
        "kernels": totals(trace, (Kind.KERNEL,)),
        "memcpy": {
            **totals(trace, MEMCPY_KINDS),
            "bytes": int(trace.bytes[mem].sum()),
            "by_direction": by_dir,
        },
        "memset": totals(trace, (Kind.MEMSET,)),
        "gpu": {"busy_ns": gpu_busy, "busy_pct": _pct(gpu_busy, gpu_window_total)},
        "phases": phase_rows,
        "top_kernels": top_names(trace, (Kind.KERNEL,), top),
        "top_cuda_api": top_names(trace, (Kind.CUDA_API,), top),
        "top_ranges": top_names(trace, (Kind.ANNOTATION,), top),
        "threads": sorted({(ln.pid, ln.tid) for ln in trace.lanes if ln.kind != LaneKind.STREAM and ln.pid >= 0}),
    }


def _all_gpu(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    idx = gpu_work(trace)
    return trace.start_ns[idx], trace.end_ns[idx]


def _pct(part: int, whole: int) -> float:
    # Unrounded: text output rounds once when it prints (rounding twice shows 86.25 as 86.2).
    return 100.0 * part / whole if whole > 0 else 0.0
