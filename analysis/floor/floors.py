"""How long each GPU op would take at the GPU's peak: the floor per op, against how long it took.

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

import weakref
from dataclasses import dataclass, field

import numpy as np

from gaplens.analysis.floor.gpuspecs import GpuSpec, Match, gpu_matches
from gaplens.analysis.floor.opcalls import kernel_calls, why_unsized
from gaplens.loaders.model import GPU_WORK_KINDS, Kind, Trace

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


def peak_for(spec: GpuSpec, dtype: str) -> float | None:
    """Peak FLOP/s for an op's dtype; integer and other types have none here (their floor is bytes)."""
    return spec.peak_flops.get(dtype)


_FLOORS: dict[tuple[int, str | None], tuple[object, Floors]] = {}


def floors(trace: Trace, gpu_spec: str | None = None) -> Floors:
    """Per GPU-work event FLOPs, bytes and floor (memoised per trace and spec file)."""
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
