"""The hardware floor: how long each GPU op would take at the GPU's peak, against how long it took.

Per op call: floor = max(FLOPs / peak FLOP/s at its dtype, bytes / memory bandwidth); the op is
compute-bound when the first term is the larger, memory-bound otherwise; efficiency = floor /
measured kernel time (1.0 = at the roof). FLOPs and bytes come from ``opcalls`` (the recorded
shapes); peaks from ``gpuspecs`` (a cited table, overridable). Copies: host↔device at the host
link's one-way peak, device↔device at the memory bandwidth (read + write: its bytes are counted
twice, in the floor and in the bytes shown), memsets at the
memory bandwidth (write). Work the trace does not size is "unsized", never guessed.

A call that launched several kernels spreads its floor over them in proportion to their time,
so a window (a phase, a step) sums the floors of the kernels that ran inside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from gaplens.analysis.floor.gpuspecs import GpuSpec, Match, load_user_specs, match_spec
from gaplens.analysis.floor.opcalls import kernel_calls, why_unsized
from gaplens.analysis.phases import family_labels, phases
from gaplens.analysis.steps import steps
from gaplens.analysis.units import fmt_bytes, fmt_ns
from gaplens.loaders.model import GPU_WORK_KINDS, Kind, Trace

if TYPE_CHECKING:
    import pandas as pd

#: GEMMs below this arithmetic intensity (FLOP per byte) are matrix-vector-like: a row or a few per
#: weight read (decode with a small batch); 16 rows of bf16 give ~16 FLOP/B.
GEMV_INTENSITY = 16.0
#: A compute-bound op family below this share of its floor has a lever in its kernel, dtype or shape.
LOW_EFFICIENCY = 0.6
#: A pageable host copy is named as such when it reaches less than this share of the link's peak.
SLOW_COPY_SHARE = 0.5
#: Copies averaging less than this many bytes are paced by per-copy latency, not by the link's bandwidth.
SMALL_COPY_BYTES = 1 << 20
#: Excess families listed per phase.
TOP_EXCESS = 3
#: Ops whose floor at the roof averages under this are paced by their own fixed cost, not by the roof:
#: the smallest kernel, memset or copy takes ~2 µs or more on current GPUs, so an op with a floor under
#: 5% of that cannot show more than a few percent of the roof however good it is; a 4-byte memset's
#: "0% of the roof, memory-bound" says nothing true about it. (Small decode GEMVs, ~0.5 µs of floor in
#: 3 µs, still read as a share of the roof: that share is their lever.)
LATENCY_FLOOR_NS = 100


def latency_paced(floor_ns: float, sized_count: int) -> bool:
    """Sized ops whose mean floor is under ``LATENCY_FLOOR_NS``: their time is latency, not traffic or math."""
    return sized_count > 0 and floor_ns / sized_count < LATENCY_FLOOR_NS


def intensity(flops: float, nbytes: float) -> float:
    """Arithmetic intensity, FLOP per byte moved; ``inf`` when no bytes are known (no memory roof)."""
    return flops / nbytes if nbytes else float("inf")


def per_second(amount: float | None, ns: float | None) -> float | None:
    """An achieved rate (FLOP/s, bytes/s): ``amount`` over ``ns`` nanoseconds; None when either is missing or 0.

    The caller picks the time: a family's *sized* time (the instances whose FLOPs and bytes are known)."""
    return amount / ns * 1e9 if amount and ns else None


def gemv_like(row: dict) -> bool:
    """A memory-bound family with FLOPs under ``GEMV_INTENSITY``: matrix-vector-like (a few rows per weight)."""
    return row["bound"] == "memory" and bool(row["flops"]) and intensity(row["flops"], row["bytes"]) < GEMV_INTENSITY


_COPY_KINDS = {
    int(Kind.MEMCPY_HTOD): "link",
    int(Kind.MEMCPY_DTOH): "link",
    int(Kind.MEMCPY_DTOD): "mem2",
    int(Kind.MEMCPY_OTHER): "",
    int(Kind.MEMCPY_PEER): "",
    int(Kind.MEMSET): "mem",
}


@dataclass
class Floors:
    """Per GPU-work event of the trace (aligned with its columns); NaN where not sized."""

    gpu: np.ndarray  # indices of GPU work events (kernels, copies, memsets)
    family: list[str]  # op family per entry of ``gpu`` ("aten::mm", "Memcpy HtoD (Pageable -> Device)")
    dtype: list[str]
    call: np.ndarray  # call index (kernels) or -1
    time_ns: np.ndarray
    flops: np.ndarray  # this event's share of its call's FLOPs
    bytes: np.ndarray
    compute_ns: np.ndarray  # FLOPs / peak (NaN when no peak for the dtype)
    memory_ns: np.ndarray  # bytes / bandwidth
    floor_ns: np.ndarray  # max of the two (NaN when unsized)
    matches: dict[int, Match] = field(default_factory=dict)
    why: str | None = None  # why the trace has no sizes, when it has none

    @property
    def sized(self) -> np.ndarray:
        return ~np.isnan(self.floor_ns)

    @property
    def bound(self) -> np.ndarray:
        return np.where(np.nan_to_num(self.compute_ns, nan=-1) >= self.memory_ns, "compute", "memory")


def why_no_floor(trace: Trace) -> str | None:
    """The recording option that would give the floor (``record_shapes=True`` / ``emit_nvtx``), or None."""
    return why_unsized(trace)


def gpu_matches(trace: Trace, gpu_spec: str | None = None) -> dict[int, Match]:
    """The spec row per device (``gpu_spec``: a user file; else the default location when present)."""
    user = load_user_specs(gpu_spec)
    return {d.id: match_spec(d.name, d.properties, user, d.id) for d in trace.meta.devices}


def peak_for(spec: GpuSpec, dtype: str) -> float | None:
    """Peak FLOP/s for an op's dtype; integer and other types have none here (their floor is bytes)."""
    return spec.peak_flops.get(dtype)


_FLOORS: dict[tuple[int, str | None], tuple[object, Floors]] = {}


def floors(trace: Trace, gpu_spec: str | None = None) -> Floors:
    """Per GPU-work event FLOPs, bytes and floor (memoised per trace and spec file)."""
    import weakref

    key = (id(trace), gpu_spec)
    hit = _FLOORS.get(key)
    if hit is not None and hit[0]() is trace:  # type: ignore[operator]
        return hit[1]
    got = _floors(trace, gpu_spec)
    for k in [k for k, (ref, _) in _FLOORS.items() if ref() is None]:  # type: ignore[operator]
        del _FLOORS[k]  # traces gone: their floors go too
    _FLOORS[key] = (weakref.ref(trace), got)
    return got


def _floors(trace: Trace, gpu_spec: str | None) -> Floors:
    matches = gpu_matches(trace, gpu_spec)
    kc = kernel_calls(trace)
    gpu = np.flatnonzero(trace.mask(GPU_WORK_KINDS) & (trace.kind != int(Kind.GRAPH)))
    n = gpu.size
    dur = (trace.end_ns[gpu] - trace.start_ns[gpu]).astype(np.float64)
    kind = trace.kind[gpu]
    dev = trace.device_of_event()[gpu]
    call = kc.call_of[gpu]
    flops = np.full(n, np.nan)
    nbytes = np.full(n, np.nan)
    dtype = [""] * n
    family = [trace.names[int(i)] for i in trace.name_id[gpu]]
    # A call's time: all its kernels; each kernel takes its share of the call's size.
    ncalls = len(kc.calls)
    call_time = np.zeros(ncalls)
    has = call >= 0
    np.add.at(call_time, call[has], dur[has])
    for j in np.flatnonzero(has).tolist():
        c = kc.calls[int(call[j])]
        family[j] = c.name
        if c.size is None:
            continue
        share = dur[j] / call_time[int(call[j])] if call_time[int(call[j])] > 0 else 0.0
        flops[j] = c.size.flops * share
        nbytes[j] = c.size.bytes * share
        dtype[j] = c.size.dtype
    copies = np.isin(kind, list(_COPY_KINDS))
    copy_bytes = trace.bytes[gpu].astype(np.float64)
    copies &= copy_bytes > 0  # a copy or memset whose size the trace does not give is unsized, not a 0 ns floor
    nbytes[copies] = copy_bytes[copies]
    # A device-to-device copy reads its bytes and writes them: the row's bytes are the traffic its
    # floor is made of (a 1 GiB DtoD moves 2 GiB through memory), so bytes, GB/s and floor agree.
    nbytes[copies & (kind == int(Kind.MEMCPY_DTOD))] *= 2
    flops[copies] = 0.0
    compute_ns = np.full(n, np.nan)
    memory_ns = np.full(n, np.nan)
    tf32 = _tf32_kernels(trace, gpu)
    for d, m in matches.items():
        if m.spec is None:
            continue
        on = dev == d
        spec = m.spec
        for j in np.flatnonzero(on & has & ~np.isnan(flops)).tolist():
            dt = "tf32" if dtype[j] == "fp32" and tf32[j] else dtype[j]
            dtype[j] = dt
            peak = peak_for(spec, dt)
            memory_ns[j] = nbytes[j] / spec.mem_bytes_per_s * 1e9
            if flops[j] > 0:
                compute_ns[j] = flops[j] / peak * 1e9 if peak else np.nan
                if not peak:
                    memory_ns[j] = np.nan  # FLOPs at a dtype the table has no peak for: not floored
            else:
                compute_ns[j] = 0.0
        for j in np.flatnonzero(on & copies).tolist():
            how = _COPY_KINDS[int(kind[j])]
            compute_ns[j] = 0.0
            if how == "link" and spec.link_bytes_per_s:
                memory_ns[j] = nbytes[j] / spec.link_bytes_per_s * 1e9
            elif how in ("mem", "mem2"):  # a DtoD's nbytes already counts its read and its write
                memory_ns[j] = nbytes[j] / spec.mem_bytes_per_s * 1e9
    floor_ns = np.fmax(compute_ns, memory_ns)
    floor_ns[np.isnan(compute_ns) | np.isnan(memory_ns)] = np.nan
    why = why_unsized(trace)
    return Floors(gpu, family, dtype, call, dur, flops, nbytes, compute_ns, memory_ns, floor_ns, matches, why)


def _tf32_kernels(trace: Trace, gpu: np.ndarray) -> np.ndarray:
    """fp32 GEMM/conv kernels that name TF32 in their name run at the TF32 peak (cuBLAS/cuDNN kernel names)."""
    names = trace.names
    ids = trace.name_id[gpu]
    uniq = np.unique(ids)
    hits = {int(i) for i in uniq.tolist() if "tf32" in names[int(i)].lower()}
    return np.asarray([int(i) in hits for i in ids.tolist()], bool) if gpu.size else np.zeros(0, bool)


# ---- tables ---------------------------------------------------------------------------------


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
    rows = []
    for key, g in groups.items():
        kt = kernel_time[key]
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
        rows.append(g)
    rows.sort(key=lambda r: -r["time_ns"])
    return rows


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


def copy_rows(trace: Trace, gpu_spec: str | None = None) -> list[dict]:
    """Host↔device copies by name (direction and memory kind): bytes, time, achieved GB/s vs the link."""
    f = floors(trace, gpu_spec)
    kinds = trace.kind[f.gpu]
    out: dict[str, dict] = {}
    for j in np.flatnonzero(np.isin(kinds, [int(Kind.MEMCPY_HTOD), int(Kind.MEMCPY_DTOH)])).tolist():
        name = f.family[j]
        r = out.setdefault(
            name,
            {
                "name": name,
                "count": 0,
                "bytes": 0,
                "time_ns": 0,
                "floor_ns": 0.0,
                "device": int(trace.device_of_event()[f.gpu[j]]),
                "unsized": 0,  # copies whose size the trace does not record (ROCm's gpu_memcpy has no bytes)
                "sized_ns": 0,
            },
        )
        r["count"] += 1
        r["time_ns"] += int(f.time_ns[j])
        if np.isnan(f.bytes[j]):
            r["unsized"] += 1
            continue
        r["bytes"] += int(f.bytes[j])
        r["sized_ns"] += int(f.time_ns[j])
        r["floor_ns"] += 0.0 if np.isnan(f.floor_ns[j]) else float(f.floor_ns[j])
    rows = []
    for r in out.values():
        m = f.matches.get(r["device"])
        link = m.spec.link_bytes_per_s if m and m.spec else 0.0
        sized_ns = r.pop("sized_ns")
        r["bytes_per_s"] = r["bytes"] / sized_ns * 1e9 if sized_ns and r["bytes"] else None
        r["link_bytes_per_s"] = link or None
        r["floor_ns"] = round(r["floor_ns"]) if link and sized_ns else None
        if r["unsized"] == r["count"]:
            r["bytes"] = None
        pageable = "pageable" in r["name"].lower()
        slow = bool(link and r["bytes_per_s"] and r["bytes_per_s"] < SLOW_COPY_SHARE * link)
        r["note"] = ""
        n_sized = r["count"] - r["unsized"]
        if slow and r["bytes"] < SMALL_COPY_BYTES * n_sized:
            r["note"] = (
                f"{n_sized} copies of {fmt_bytes(r['bytes'] / n_sized)} on average: each is paced by "
                "its latency, not the link; batch them or keep the values on the device"
            )
        elif slow:
            what = (
                "pageable host memory is staged through a bounce buffer: pin it"
                if pageable
                else "below half the link's peak: small or unpinned transfers"
            )
            r["note"] = (
                f"{fmt_bytes(r['bytes'])} at {r['bytes_per_s'] / 1e9:.1f} GB/s on a link that peaks at "
                f"{link / 1e9:.0f} GB/s ({m.spec.link if m and m.spec else 'host link'}): {what}"
            )
        if r["unsized"] == r["count"]:
            r["note"] = "the trace records no size for these copies: no rate, no floor"
        elif r["unsized"]:
            n = f"{r['unsized']} of these {r['count']}"
            unsized = f"the trace records no size for {n} copies (left out of the rate)"
            r["note"] = f"{r['note']}; {unsized}" if r["note"] else unsized
        rows.append(r)
    rows.sort(key=lambda r: -r["time_ns"])
    return rows


def gpu_json(trace: Trace, gpu_spec: str | None = None) -> dict | None:
    """The contract's ``gpu`` object: the first device with GPU work (and its spec row, or null)."""
    f = floors(trace, gpu_spec)
    devs = sorted({int(d) for d in trace.device_of_event()[f.gpu].tolist()}) or [d.id for d in trace.meta.devices]
    if not devs:
        return None
    m = f.matches.get(devs[0])
    name = m.device_name if m else ""
    spec = m.spec if m else None
    return {
        "device": devs[0],
        "name": name,
        "spec": spec.to_json() if spec else None,
        "peak_flops": dict(spec.peak_flops) if spec else {},
        "mem_bytes_per_s": spec.mem_bytes_per_s if spec else None,
        "link_bytes_per_s": spec.link_bytes_per_s if spec else None,
        "why": (m.why if m else "the trace names no GPU") if not spec else "",
        "devices": [
            {"device": d, "name": mm.device_name, "spec": mm.spec.key if mm.spec else None}
            for d, mm in f.matches.items()
        ],
    }


def floor_json(trace: Trace, gpu_spec: str | None = None) -> dict:
    """``floor --json``: the DESIGN.md contract plus ``copies`` and ``notes``."""
    f = floors(trace, gpu_spec)
    ops = op_rows(trace, gpu_spec)
    keep = (
        "name",
        "kernel",
        "dtype",
        "count",
        "time_ns",
        "flops",
        "bytes",
        "floor_ns",
        "bound",
        "efficiency",
        "shape",
        "unsized_ns",
    )
    total = span_row(trace, np.arange(f.gpu.size), gpu_spec)
    notes = []
    if f.why:
        notes.append(f.why)
    for m in f.matches.values():
        if m.spec is None:
            notes.append(f"GPU {m.device} ({m.device_name}): {m.why}; FLOPs and bytes are shown without a floor")
    return {
        "origin_ns": int(trace.meta.origin_ns),
        "gpu": gpu_json(trace, gpu_spec),
        "ops": [{k: r[k] for k in keep} for r in ops],
        "phases": phase_rows(trace, gpu_spec),
        "step": step_row(trace, gpu_spec),
        "total": total,
        "copies": copy_rows(trace, gpu_spec),
        "unsized_ns": total["unsized_ns"],
        "lever": _lever_json(trace, gpu_spec),
        "notes": notes,
    }


def _lever_json(trace: Trace, gpu_spec: str | None) -> dict | None:
    """``floor_lever`` over the steady steps when the trace has a step, else over the whole trace."""
    window: tuple[int | None, int | None, int | None] = (None, None, None)
    where = "the whole trace"
    st = steps(trace)
    if st and st.steady:
        a, b = st.steady[0], st.steady[-1]
        window = (st.spans[a][0], st.spans[b][1], st.pid)
        where = f"{st.names[a]} to {st.names[b]}"  # the first to the last steady step
    got = floor_lever(trace, *window, gpu_spec=gpu_spec)
    return None if got is None else {**got.__dict__, "window": where}


def name_floor_pct(trace: Trace, name_ids: np.ndarray, gpu_spec: str | None = None) -> np.ndarray:
    """Floor as a percentage of measured time per GPU-op name (the statistics screen's column), over the
    name's sized instances; NaN where none is sized."""
    f = floors(trace, gpu_spec)
    ok = f.sized
    ids = trace.name_id[f.gpu[ok]]
    size = int(max(int(name_ids.max(initial=-1)), int(ids.max(initial=-1)))) + 1
    floor = np.bincount(ids, weights=f.floor_ns[ok], minlength=size)
    time = np.bincount(ids, weights=f.time_ns[ok], minlength=size)
    with np.errstate(invalid="ignore", divide="ignore"):
        pct = np.where(time > 0, 100.0 * floor / time, np.nan)
    return pct[name_ids]


def floor_frame(trace: Trace, gpu_spec: str | None = None) -> pd.DataFrame:
    """The per-op table as a pandas DataFrame (one row per op family and dtype)."""
    import pandas as pd

    return pd.DataFrame(op_rows(trace, gpu_spec))


# ---- the lever ------------------------------------------------------------------------------


@dataclass(frozen=True)
class FloorLever:
    """The op family with the most time above its floor, and the lever that fits it."""

    family: str
    bound: str
    dtype: str | None
    time_ns: int
    floor_ns: int
    excess_ns: int
    efficiency: float
    share: float  # of all excess in the window
    shape: str
    lever: str
    text: str


def _lever(row: dict, spec: GpuSpec | None) -> str:
    """The lever that fits a family's bound, dtype and arithmetic intensity (FLOP per byte)."""
    ai = intensity(row["flops"], row["bytes"])
    fam = row["name"]
    eff = row["efficiency"] or 0.0
    if row["bound"] == "memory":
        if fam.startswith("Memcpy") or fam.startswith("Memset"):
            return "keep tensors on the device, pin host buffers and overlap copies with compute"
        if gemv_like(row):
            return (
                "a matrix-vector-like GEMM reads every weight for a few rows: batch more requests/tokens per "
                "step, or quantise the weights (fp8/int8/int4) to read fewer bytes"
            )
        if row["flops"]:
            peak = spec.peak_flops.get(row["dtype"] or "") if spec else None
            ridge = f" of {peak / spec.mem_bytes_per_s:.0f}" if peak and spec else ""
            text = (
                f"at {ai:.0f} FLOP/B it sits under the GPU's ridge{ridge}: more rows per weight read "
                "(a larger batch) or a narrower dtype"
            )
            if eff < LOW_EFFICIENCY:
                text += f"; it reaches {eff:.0%} of the memory roof: a better kernel or layout"
            return text
        return "fuse it with its neighbours (torch.compile, a fused kernel) so each tensor is read once"
    if row["dtype"] == "fp32":
        return "fp32 runs on CUDA cores: allow TF32 or use bf16 on tensor cores"
    if eff < LOW_EFFICIENCY:
        if "attention" in fam:
            return (
                "a newer fused attention kernel (FlashAttention-3, a recent cuDNN), fp8 attention where accuracy allows"
            )
        if "conv" in fam:
            return "channels-last tensors (no NCHW↔NHWC transposes), cudnn.benchmark, a narrower dtype"
        return (
            "a better kernel, dtype or shape: bf16→fp8 where accuracy allows, dimensions in multiples of "
            "64/128, more rows per GEMM"
        )
    return "it runs near the compute roof: only less work (smaller model, fewer tokens) or a faster dtype helps"


def floor_lever(
    trace: Trace,
    t0_ns: int | None = None,
    t1_ns: int | None = None,
    pid: int | None = None,
    gpu_spec: str | None = None,
) -> FloorLever | None:
    """The kernel family (op name and dtype) with the most measured time above its floor among the GPU ops
    starting in [t0, t1) (launched by ``pid``), with its bound and lever; None when no kernel in the window
    is sized (no ``record_shapes``) or no GPU row matched. Copies are left to the copy readings."""
    f = floors(trace, gpu_spec)
    if not any(m.spec for m in f.matches.values()):
        return None
    sel = window_sel(trace, t0_ns, t1_ns, pid, None, gpu_spec)
    # Kernels only: a copy-bound stretch is the copy reading's (DESIGN: copies are not compute).
    rows = [
        r for r in op_rows(trace, gpu_spec, sel) if r["excess_ns"] > 0 and trace.kind[r["longest"]] == int(Kind.KERNEL)
    ]
    if not rows:
        return None
    total = sum(r["excess_ns"] for r in rows)
    top = max(rows, key=lambda r: r["excess_ns"])
    spec = next((m.spec for m in f.matches.values() if m.spec), None)
    lever = _lever(top, spec)
    what = f"{top['bound']}-bound"
    if gemv_like(top):
        what += ", GEMV-like"
    roof = f"{top['efficiency']:.0%} of the roof over {fmt_ns(top['sized_ns'])}"
    if latency_paced(top["floor_ns"], top["sized_kernels"]):
        # Tiny kernels: their time is launch-to-completion latency; a roof share would mislead.
        what = "latency-bound"
        roof = f"{top['sized_kernels']:,} kernels of {fmt_ns(top['sized_ns'] / top['sized_kernels'])} on average"
        lever = "fuse it with its neighbours (torch.compile, a fused kernel) so the work runs as fewer, larger kernels"
    text = (
        f"{top['name']} ({top['dtype'] or 'no dtype'}, {what}) spends {fmt_ns(top['excess_ns'])} above its floor "
        f"of {fmt_ns(top['floor_ns'])} ({roof}): {lever}"
    )
    return FloorLever(
        top["name"],
        top["bound"],
        top["dtype"],
        int(top["time_ns"]),
        int(top["floor_ns"]),
        int(top["excess_ns"]),
        float(top["efficiency"]),
        top["excess_ns"] / total if total else 0.0,
        top["shape"],
        lever,
        text,
    )
