"""The floor over a window: op families (one row per op, dtype and shape class), a window's totals,
the phases and the step, each holding the GPU ops asked for inside it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gaplens.analysis.floor.floors import Floors, floors
from gaplens.analysis.floor.opcalls import kernel_calls
from gaplens.analysis.phases import family_labels, phases
from gaplens.analysis.steps import steps
from gaplens.loaders.model import Trace

#: Excess families listed per phase.
TOP_EXCESS = 3


def _bound(compute: float, memory: float) -> str:
    return "compute" if compute >= memory else "memory"


def _ratio(a: float, b: float) -> float | None:
    return round(float(a) / float(b), 4) if b > 0 else None


def op_rows(trace: Trace, gpu_spec: str | None = None, sel: np.ndarray | None = None) -> list[dict]:
    """One row per (op, dtype, shape class: compute- or memory-bound calls): totals over instances,
    largest time first.

    ``sel`` picks entries of ``floors(...).gpu`` (a window); the op's main kernel is the kernel
    with the most time among its instances.
    """
    f = floors(trace, gpu_spec)
    idx = np.arange(f.gpu.size) if sel is None else sel
    # The shape class: a call whose FLOPs put it under the GPU's ridge is memory-bound, one above it
    # compute-bound, so a 8192³ GEMM and a 1×8192 GEMV of one op and dtype are two rows, each with an
    # efficiency against its own roof. Ops without FLOPs are one class.
    shape_class = np.where(
        ~np.isnan(f.floor_ns) & (np.nan_to_num(f.flops) > 0), np.where(f.bound == "compute", "c", "m"), ""
    )
    groups: dict[tuple, dict] = {}
    kernel_time: dict[tuple, dict[str, float]] = {}
    calls_seen: dict[tuple, set] = {}
    for j in idx.tolist():
        name = f.family[j]
        kname = trace.names[int(trace.name_id[f.gpu[j]])]
        key = (name, f.dtype[j], str(shape_class[j])) if f.call[j] >= 0 else (name, "", "")
        g = groups.get(key)
        if g is None:
            g = groups[key] = {
                "name": name,
                "kernel": "",
                "dtype": f.dtype[j] or None,
                "count": 0,
                "kernels": 0,
                "time_ns": 0.0,
                "flops": 0.0,
                "bytes": 0.0,
                "floor_ns": 0.0,
                "compute_ns": 0.0,
                "memory_ns": 0.0,
                "sized_ns": 0.0,
                "unsized_ns": 0.0,
                "sized_kernels": 0,  # GPU ops with a floor (kernels, copies, memsets)
                "shapes": {},
                "longest": int(f.gpu[j]),
            }
            kernel_time[key] = {}
            calls_seen[key] = set()
        c = int(f.call[j])
        if c < 0 or c not in calls_seen[key]:
            g["count"] += 1
            if c >= 0:
                calls_seen[key].add(c)
                shape = kernel_calls(trace).calls[c].shape_text
                g["shapes"][shape] = g["shapes"].get(shape, 0) + 1
        g["kernels"] += 1
        if f.time_ns[j] > trace.end_ns[g["longest"]] - trace.start_ns[g["longest"]]:
            g["longest"] = int(f.gpu[j])  # the instance the roofline screen shows on the timeline
        g["time_ns"] += f.time_ns[j]
        kernel_time[key][kname] = kernel_time[key].get(kname, 0.0) + f.time_ns[j]
        # FLOPs and bytes known without a floor: no GPU row (unknown GPU), or no dtype (nsys NVTX shapes).
        if not np.isnan(f.flops[j]):
            g["known_flops"] = g.get("known_flops", 0.0) + f.flops[j]
        if not np.isnan(f.bytes[j]):
            g["known_bytes"] = g.get("known_bytes", 0.0) + f.bytes[j]
        if np.isnan(f.floor_ns[j]):
            g["unsized_ns"] += f.time_ns[j]
            continue
        g["sized_ns"] += f.time_ns[j]
        g["sized_kernels"] += 1
        g["flops"] += f.flops[j]
        g["bytes"] += f.bytes[j]
        g["floor_ns"] += f.floor_ns[j]
        g["compute_ns"] += f.compute_ns[j]
        g["memory_ns"] += f.memory_ns[j]
    rows = [_finished(g, kernel_time[key]) for key, g in groups.items()]
    rows.sort(key=lambda r: -r["time_ns"])
    return rows


def _finished(g: dict, kt: dict[str, float]) -> dict:
    """An op family's row from its running sums: the main kernel (most time), bound, efficiency, rounded
    times, the commonest shape; FLOPs and bytes known without a floor where none of it is sized."""
    g["kernel"] = max(kt, key=kt.__getitem__) if kt else ""
    sized = g["sized_ns"] > 0
    g["bound"] = _bound(g["compute_ns"], g["memory_ns"]) if sized else None
    g["efficiency"] = _ratio(g["floor_ns"], g["sized_ns"]) if sized else None
    for k in ("time_ns", "floor_ns", "unsized_ns", "sized_ns", "compute_ns", "memory_ns"):
        g[k] = round(g[k])
    known, known_bytes = g.pop("known_flops", None), g.pop("known_bytes", None)
    if not sized:
        g["floor_ns"] = None
        g["flops"] = float(known) if known else None
        g["bytes"] = float(known_bytes) if known_bytes else None
    else:
        g["flops"], g["bytes"] = float(g["flops"]), float(g["bytes"])
    g["shape"] = max(g["shapes"], key=g["shapes"].__getitem__) if g["shapes"] else ""
    g["shapes"] = len(g["shapes"])
    g["excess_ns"] = g["sized_ns"] - g["floor_ns"] if sized else 0
    return g


def window_sel(
    trace: Trace,
    t0: int | None,
    t1: int | None,
    pid: int | None = None,
    device: int | None = None,
    gpu_spec: str | None = None,
) -> np.ndarray:
    """Entries of ``floors(...).gpu`` that start inside [t0, t1) (and were launched by ``pid``, ran on ``device``)."""
    f = floors(trace, gpu_spec)
    st = trace.start_ns[f.gpu]
    ok = np.ones(f.gpu.size, bool)
    if t0 is not None:
        ok &= st >= t0
    if t1 is not None:
        ok &= st < t1
    if device is not None:
        ok &= trace.device_of_event()[f.gpu] == device
    if pid is not None:
        launch = trace.launch[f.gpu]
        lane_pid = np.asarray([ln.pid for ln in trace.lanes], np.int64)
        lp = np.where(launch >= 0, lane_pid[trace.lane[np.maximum(launch, 0)]], -1)
        ok &= (lp == pid) | (launch < 0)
    return np.flatnonzero(ok)


def span_row(trace: Trace, sel: np.ndarray, gpu_spec: str | None = None) -> dict:
    """Totals of a window: count, time, FLOPs, bytes, floor, bound, unsized time, excess families."""
    f = floors(trace, gpu_spec)
    sized = sel[~np.isnan(f.floor_ns[sel])]
    rows = op_rows(trace, gpu_spec, sel)
    excess = sorted((r for r in rows if r["excess_ns"] > 0), key=lambda r: -r["excess_ns"])[:TOP_EXCESS]
    comp = float(np.nansum(f.compute_ns[sized]))
    mem = float(np.nansum(f.memory_ns[sized]))
    floor_ns = float(f.floor_ns[sized].sum())
    sized_ns = float(f.time_ns[sized].sum())
    return {
        "count": int(sel.size),
        "time_ns": round(float(f.time_ns[sel].sum())),
        "flops": float(np.nansum(f.flops[sel])),  # sized ops' and those with FLOPs but no floor (no dtype)
        "bytes": float(np.nansum(f.bytes[sel])),
        "floor_ns": round(floor_ns),
        "bound": _bound(comp, mem) if sized.size else None,
        "efficiency": _ratio(floor_ns, sized_ns) if sized.size else None,
        "sized_count": int(sized.size),
        "unsized_ns": round(float(f.time_ns[sel].sum()) - sized_ns),
        "excess": [
            {"name": r["name"], "dtype": r["dtype"], "excess_ns": r["excess_ns"], "bound": r["bound"]} for r in excess
        ],
    }


@dataclass(frozen=True)
class _Launches:
    """Entries of ``floors(...).gpu`` by when they were asked for: launched ones by their launch call's
    start on the host, the rest (no launch in the trace) by their own start on the device."""

    launched: np.ndarray  # entries with a launch call, sorted by that call's start
    launched_t: np.ndarray
    orphan: np.ndarray  # entries without one, sorted by their GPU start
    orphan_t: np.ndarray
    pid: np.ndarray  # per entry: the launching thread's process (-1 without a launch)
    device: np.ndarray  # per entry: the device it ran on


def _launches(trace: Trace, f: Floors) -> _Launches:
    a = trace.launch[f.gpu]
    has = a >= 0
    lane_pid = np.asarray([ln.pid for ln in trace.lanes], np.int64)
    pid = np.where(has, lane_pid[trace.lane[np.maximum(a, 0)]], -1)
    launched = np.flatnonzero(has)
    lt = trace.start_ns[a[launched]]
    o1 = np.argsort(lt, kind="stable")
    orphan = np.flatnonzero(~has)
    ot = trace.start_ns[f.gpu[orphan]]
    o2 = np.argsort(ot, kind="stable")
    return _Launches(launched[o1], lt[o1], orphan[o2], ot[o2], pid, trace.device_of_event()[f.gpu])


def launched_sel(
    lx: _Launches, host: tuple[int, int], gpu: tuple[int, int], pid: int | None, device: int | None
) -> np.ndarray:
    """Entries asked for inside a range: launched while its host span ran (by a thread of ``pid``),
    or, without a launch in the trace, starting inside its GPU span; on ``device`` when given.

        host    [---- range ----]
                  launch  launch            <- these ops are the range's, wherever they ran
        device  ███(earlier work)██ op op   <- work queued before the range is its own range's
    """
    lo, hi = np.searchsorted(lx.launched_t, host, side="left")
    a = lx.launched[lo:hi]
    if pid is not None:
        a = a[lx.pid[a] == pid]
    lo, hi = np.searchsorted(lx.orphan_t, gpu, side="left")
    sel = np.concatenate((a, lx.orphan[lo:hi]))
    if device is not None:
        sel = sel[lx.device[sel] == device]
    return np.sort(sel)


def phase_rows(trace: Trace, gpu_spec: str | None = None) -> list[dict]:
    """Per phase (the user's ranges, analysis.phases): the GPU ops launched inside it (by the launch
    call's time on the host, from a thread of its process), on its device; folded when a name repeats.

    ``name`` is the phase's whole name (``gemm_fp8e4m3_8192`` repeated 12 times stays that name), or
    the family of a numbered one (``decode_step`` for ``decode_step 0``, ``decode_step 1``, ...);
    ``instances`` counts the ranges folded into the row.
    """
    f = floors(trace, gpu_spec)
    lx = _launches(trace, f)
    found = [p for p in phases(trace) if p.device is not None]
    label = family_labels(found)
    out: list[dict] = []
    fams: dict[tuple, list] = {}
    for ph in found:
        fams.setdefault((label[ph.name], ph.pid), []).append(ph)
    for (name, pid), members in fams.items():
        parts = [
            launched_sel(lx, (p.host_start_ns, p.host_end_ns), (p.start_ns, p.end_ns), p.pid, p.device) for p in members
        ]
        sel = np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int64)
        row = span_row(trace, sel, gpu_spec)
        out.append({"name": name, "pid": pid, "instances": len(members), **row})
    return out


def step_row(trace: Trace, gpu_spec: str | None = None) -> dict | None:
    """The step (``analysis.steps``): per steady step the GPU ops launched inside its host range
    (host spans decide which step an op belongs to); medians of measured time and floor, the bound
    and the families above the floor over all steady steps."""
    st = steps(trace)
    if not st or not st.steady:
        return None
    lx = _launches(trace, floors(trace, gpu_spec))
    parts = [launched_sel(lx, st.host_spans[k], st.spans[k], st.pid, None) for k in st.steady]
    rows = [span_row(trace, sel, gpu_spec) for sel in parts]
    every = span_row(trace, np.unique(np.concatenate(parts)), gpu_spec)
    return {
        "label": st.label,
        "count": st.count,
        "steady": len(st.steady),
        "median_ns": int(st.median_ns),
        "median_time_ns": int(np.median([r["time_ns"] for r in rows])),
        "median_floor_ns": int(np.median([r["floor_ns"] for r in rows])),
        # the roof share is of the sized ops only: their time per step, beside the step's GPU-op time
        "median_sized_ns": int(np.median([r["time_ns"] - r["unsized_ns"] for r in rows])),
        "median_sized_count": int(np.median([r["sized_count"] for r in rows])),
        **{k: every[k] for k in ("bound", "efficiency", "excess")},
    }
