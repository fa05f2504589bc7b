"""The `gaplens summary` reading: devices, GPU work totals, busy share, phases, top names."""

from __future__ import annotations

import numpy as np

from gaplens.analysis.busy import busy_share
from gaplens.analysis.clock import clock_check
from gaplens.analysis.memory import DIRECTIONS
from gaplens.analysis.phases import (
    Phase,
    family_pct,
    fold_families,
    int_column,
    phases,
    phases_busy_pct,
    process_order,
    span_durations,
)
from gaplens.analysis.regions import active_compute_pct, idle_by_device, idle_ns
from gaplens.analysis.stats import name_stats
from gaplens.analysis.steps import steps, steps_by_process
from gaplens.analysis.workload import kind as workload_kind
from gaplens.loaders.model import MEMCPY_KINDS, Kind, LaneKind, Trace


def totals(trace: Trace, kinds) -> dict:
    m = trace.mask(kinds)
    dur = trace.end_ns[m] - trace.start_ns[m]
    return {"count": int(m.sum()), "total_ns": int(dur.sum())}


def top_names(trace: Trace, kinds, top: int = 10) -> list[dict]:
    """Per name: count, total, avg, med, min, max and share of the total (``analysis.stats``, nsys stats shape)."""
    return name_stats(trace, kinds).rows(top)


def summary(trace: Trace, top: int = 10, phase_rows: bool = True) -> dict:
    """Everything `gaplens summary --json` prints; keys are the DESIGN.md contract.

    ``phase_rows=False`` leaves the row per phase out (``phases`` is None): the text summary prints the families,
    and 100k NVTX ranges made 100k rows for it to drop.
    """
    meta = trace.meta
    share = busy_share(trace)
    devices = []
    for d in share.devices:
        streams = sorted({ln.stream for ln in trace.gpu_lanes(d.id)})
        devices.append(
            {
                "id": d.id,
                "name": d.name,
                "streams": streams,
                "busy_ns": d.busy_ns,
                "busy_pct": d.busy_pct,
                "compute_ns": d.compute_ns,
                "comm_ns": d.comm_ns,
                "exposed_comm_ns": d.exposed_comm_ns,
                "copy_ns": d.copy_ns,
                "idle_ns": idle_by_device(trace).get(d.id, 0),
                "window_ns": list(d.window_ns),
            }
        )
    mem = trace.mask(MEMCPY_KINDS)
    by_dir = {}
    for k, label in DIRECTIONS.items():
        m = trace.kind == int(k)
        if m.any():
            by_dir[label] = {
                "count": int(m.sum()),
                "total_ns": int((trace.end_ns[m] - trace.start_ns[m]).sum()),
                "bytes": int(trace.bytes[m].sum()),
            }
    found = phases(trace)
    pids = set(process_order(found))
    clock = clock_check(trace)
    return {
        "source": {
            "format": meta.source_format,
            "version": meta.source_version,
            "path": meta.path,
        },
        "origin_ns": meta.origin_ns,
        "window_ns": list(share.window_ns),
        "events": len(trace),
        "workload": workload_kind(trace),
        "lacks": list(meta.lacks),
        "warnings": list(meta.warnings),
        "clock": None
        if clock is None
        else {"offset_ns": clock.offset_ns, "share": clock.share, "message": clock.message},
        "devices": devices,
        "kernels": totals(trace, (Kind.KERNEL,)),
        "memcpy": {
            **totals(trace, MEMCPY_KINDS),
            "bytes": int(trace.bytes[mem].sum()),
            "by_direction": by_dir,
        },
        "memset": totals(trace, (Kind.MEMSET,)),
        "gpu": share.to_json() | {"idle_ns": idle_ns(trace), "active_compute_pct": active_compute_pct(trace)},
        "processes": {str(pid): name for pid, name in meta.processes.items() if pid in pids},
        "step": steps(trace).to_json(),
        "step_by_process": step_by_process(trace),
        "phases": phases_json(trace, found) if phase_rows else None,
        "phase_families": family_rows(trace, found),
        "top_kernels": top_names(trace, (Kind.KERNEL,), top),
        "top_cuda_api": top_names(trace, (Kind.CUDA_API,), top),
        "top_ranges": top_names(trace, (Kind.ANNOTATION,), top),
        "threads": sorted({(ln.pid, ln.tid) for ln in trace.lanes if ln.kind != LaneKind.STREAM and ln.pid >= 0}),
    }


def step_by_process(trace: Trace) -> dict[str, dict]:
    """Each process's step when several processes have one (``step`` is the busiest launcher's)."""
    found = steps_by_process(trace)
    if len(found) < 2:
        return {}
    return {str(pid): (st.to_json() or {}) | {"pid": pid} for pid, st in found.items()}


def phases_json(trace: Trace, found: list[Phase]) -> list[dict]:
    """Phases as the JSON contract spells them; busy is the compute busy share of each one's device.

    Built from the phases' columns (100k NVTX ranges: ten attribute reads and a call per phase were most of it).
    """
    busy = phases_busy_pct(trace, found).tolist()
    ints = [int_column(found, f).tolist() for f in ("start_ns", "end_ns", "host_start_ns", "host_end_ns", "depth")]
    names = [p.name for p in found]
    devices = [p.device for p in found]
    return [
        {
            "name": name,
            "start_ns": start,
            "end_ns": end,
            "dur_ns": dur,
            "host_start_ns": host_start,
            "host_end_ns": host_end,
            "depth": depth,
            "pid": pid,
            "device": device,
            "busy_pct": b,
        }
        for name, start, end, dur, host_start, host_end, depth, pid, device, b in zip(
            names,
            *ints[:2],
            span_durations(found).tolist(),
            *ints[2:],
            int_column(found, "pid").tolist(),
            devices,
            busy,
            strict=True,
        )
    ]


def family_rows(trace: Trace, found: list[Phase]) -> list[dict]:
    """Phases folded into families per process (``decode_step ×32``), in order of first appearance."""
    all_busy = phases_busy_pct(trace, found)
    all_dur = span_durations(found)
    device = np.asarray([-1 if p.device is None else p.device for p in found], np.int64)
    out = []
    for (pid, depth, fam), at in fold_families(found, by_depth=True).items():
        dur = all_dur[at]
        devices = np.unique(device[at])
        out.append(
            {
                "family": fam,
                "pid": pid,
                "depth": depth,
                "count": len(at),
                "total_ns": int(dur.sum()),
                "median_ns": int(np.median(dur)),
                "busy_pct": family_pct(all_busy[at], dur),
                "devices": devices[devices >= 0].tolist(),
            }
        )
    return out
