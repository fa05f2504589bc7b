"""What each CUDA API call does to the host: launch work, copy, or block until the device catches up.

The class comes from the call's name (runtime and driver spellings, nsys version
suffixes such as ``cudaStreamSynchronize_v3020``), so both loaders share it.
"""

from __future__ import annotations

import re
from enum import IntEnum

import numpy as np

from gaplens.analysis.memo import per_trace
from gaplens.analysis.units import fmt_ns
from gaplens.loaders.model import Kind, Trace


class Call(IntEnum):
    """What a CUDA API call does to the host, ordered so that a larger value wins when calls or ops nest.

    ``api_class`` stores these as int8, with 0 for events that are not API calls. ``HOST`` calls
    (module loading, queries) are host work: they queue nothing, so they are not launch overhead.
    ``ALLOC`` calls (memory management) queue nothing either but are their own gap cause: a step
    spent in ``cudaMalloc``/``cudaFree`` is fixed by the caching allocator, not by moving CPU work
    (DESIGN.md § Gap cause). It is negative so that no "queues work" test (``>= LAUNCH``) admits it.
    """

    ALLOC = -1
    HOST = 0
    LAUNCH = 1
    COPY = 2
    SYNC = 3


# Blocking: the host cannot return before the device has finished earlier work.
_SYNC = re.compile(r"Synchronize|cuStreamSynchronize|cuCtxSynchronize|cuEventSynchronize", re.IGNORECASE)
# Copies (cudaMemcpy*, cuMemcpy*, hipMemcpy*); memset is a launch, not a copy.
_COPY = re.compile(r"memcpy", re.IGNORECASE)
# Memory management: device, pinned-host and managed allocations and frees, virtual-memory mapping, pool
# growth (cudaMalloc, cudaFree, cudaMallocHost, cudaHostAlloc, cudaFreeHost, cudaMallocAsync, cudaFreeAsync,
# cudaMallocManaged, cudaHostRegister, cuMemAlloc_v2, cuMemCreate/Map/SetAccess, cudaMemPoolCreate,
# hipMalloc, hipHostMalloc, hipHostFree, hipExtMallocWithFlags). Memset is not among them: it queues work.
_ALLOC = re.compile(
    r"^(?:cuda|cu|hip)(?:Ext)?(?:Malloc|Free|HostAlloc|HostMalloc|HostFree|HostRegister|HostUnregister)"
    r"|^(?:cuda|cu|hip)Mem(?:Alloc|Free|HostAlloc|HostRegister|HostUnregister|Create|Release|Map|Unmap|SetAccess|AddressReserve|AddressFree|PoolCreate"
    r"|PoolDestroy|PoolTrimTo|RetainAllocationHandle)",
    re.IGNORECASE,
)
# Host work that queues nothing and allocates nothing: module loading, pointer and memory queries.
_HOST = re.compile(
    r"^(?:cuda|cu|hip)(?:Mem)?(?:HostGetDevicePointer|GetInfo)|^(?:cu|hip)(?:Module|Library)(?:Load|Unload|GetFunction"
    r"|GetKernel)",
    re.IGNORECASE,
)


def call_class_of_name(name: str) -> Call:
    if _SYNC.search(name):
        return Call.SYNC
    if _COPY.search(name):
        return Call.COPY
    if _HOST.search(name):
        return Call.HOST
    if _ALLOC.search(name):
        return Call.ALLOC
    return Call.LAUNCH


def is_alloc_name(name: str) -> bool:
    """A memory-management call (``Call.ALLOC``): allocation, free, pinning, mapping, pool growth."""
    return call_class_of_name(name) == Call.ALLOC


@per_trace
def api_class(trace: Trace) -> np.ndarray:
    """Per event: the ``Call`` class for CUDA API events, 0 for everything else (cached; do not modify)."""
    out = np.zeros(len(trace), dtype=np.int8)
    api = trace.kind == int(Kind.CUDA_API)
    if api.any():
        ids = trace.name_id[api]
        used = used_codes(ids, len(trace.names))
        table = np.zeros(len(trace.names), dtype=np.int8)
        table[used] = [call_class_of_name(trace.names[i]) for i in used.tolist()]
        out[api] = table[ids]
    return out


def used_codes(codes: np.ndarray, size: int) -> np.ndarray:
    """The distinct dictionary codes (``name_id``, ``detail_id``: each in ``range(size)``) in ``codes``, sorted.

    A presence table, one pass: ``np.unique`` (numpy 2.4) hashes every value, then imports ``numpy.ma`` on
    its first call, 25 ms of a first open's readings for the 206k calls of decode_eager x1.04M.
    """
    seen = np.zeros(size, bool)
    seen[codes] = True
    return np.flatnonzero(seen)


def has_cpu_side(trace: Trace) -> bool:
    """True when the trace recorded CUDA API calls on host threads (else causes are unknown)."""
    return bool((trace.kind == int(Kind.CUDA_API)).any())


HOST_UNSEEN_HINT = (
    "the trace records CUDA calls but no CPU ops, so what the host did here is not visible; "
    "profile with torch.profiler activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]"
)
CAPTURE_HINT = (
    "the trace has no CPU-side events; capture them with torch.profiler "
    "(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) or nsys --trace=cuda,nvtx,osrt"
)


#: A launch call this long is not dispatch overhead: the runtime loaded the kernel's module (or compiled it)
#: inside it. A kernel launch takes microseconds, a lazy module load milliseconds (HTA's MI250 trace: the
#: first hipLaunchKernel 6.6 ms). When it is the first launch of its kernel, it is a one-off warm-up. The
#: same bound holds for the driver's own module-load calls before a launch (``MODULE_LOAD``).
FIRST_CALL_MIN_NS = 1_000_000
#: The driver calls that load a module, as nsys records lazy loading (CUDA_MODULE_LOADING=LAZY) before the
#: launch that needs it: cuLibraryLoadData, cuLibraryLoadFromFile, cuModuleLoad, cuModuleLoadData(Ex),
#: cuModuleLoadFatBinary, hipModuleLoad*. (cuLibraryGetKernel and cuModuleGetFunction only look one up.)
MODULE_LOAD = re.compile(r"^(?:cu|hip)(?:Module|Library)Load", re.IGNORECASE)
#: A blank region is a module load when the loading covers at least this share of it: then the device sat
#: there mostly waiting on it (the share ``gaps.ON_PATH_SHARE`` asks of the host to be on the path).
MODULE_LOAD_SHARE = 0.5


@per_trace
def module_loads(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """The launch calls that loaded a module (event indices, sorted) and, per call, where its loading began.

    Two ways a trace shows a module load, one rule for the causes (warm-up host work, not launch
    overhead), THE blank region and the experiment (set apart as warm-up):

    - the first launch of its kernel (the kernel name's earliest op) taking ``FIRST_CALL_MIN_NS`` or longer:
      the runtime loaded the module inside the call (Kineto, rocprof); the loading began with the call;
    - a launch call whose thread, since its previous launch, sat ``FIRST_CALL_MIN_NS`` or longer in
      module-load driver calls (``MODULE_LOAD``: nsys records ``cuLibraryLoadData`` before the
      ``cudaLaunchKernel`` that needed it, whatever the kernel's name); the loading began with the first.
    """
    k = np.flatnonzero((trace.kind == int(Kind.KERNEL)) & (trace.launch >= 0))
    if k.size == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    calls = trace.launch[k]
    begun = {c: int(trace.start_ns[c]) for c in _long_first_launches(trace, k, calls).tolist()}
    for c, t in _after_module_loads(trace, calls).items():
        begun[c] = min(t, begun.get(c, t))
    out = np.asarray(sorted(begun), np.int64)
    return out, np.asarray([begun[c] for c in out.tolist()], np.int64)


def _long_first_launches(trace: Trace, k: np.ndarray, calls: np.ndarray) -> np.ndarray:
    """Launch calls of ``FIRST_CALL_MIN_NS`` or longer that launched their kernel name's earliest op."""
    long = (trace.end_ns[calls] - trace.start_ns[calls]) >= FIRST_CALL_MIN_NS
    if not long.any():
        return np.empty(0, np.int64)
    order = np.lexsort((trace.start_ns[k], trace.name_id[k]))
    first = np.ones(order.size, bool)
    first[1:] = trace.name_id[k][order][1:] != trace.name_id[k][order][:-1]
    firsts = order[first]
    return np.unique(calls[firsts][long[firsts]])


def _after_module_loads(trace: Trace, launches: np.ndarray) -> dict[int, int]:
    """Launch call -> start of the first module-load call its thread made since its previous launch, for the
    calls after ``FIRST_CALL_MIN_NS`` or more of such loading (a load nested in the call counts too).

    ``launches``: the kernels' launch calls, repeats allowed (a graph launch queues many kernels).
    """
    loads = _module_load_calls(trace)
    if loads.size == 0:  # most traces: no distinct-calls sort at all (80 ms at 170k kernels)
        return {}
    calls = np.sort(launches)
    calls = calls[np.concatenate(([True], calls[1:] != calls[:-1]))]
    out: dict[int, int] = {}
    for lane in np.unique(trace.lane[loads]).tolist():
        mine = calls[trace.lane[calls] == lane]  # a thread's launch calls, in start order (a lane is sorted)
        lo_ = loads[trace.lane[loads] == lane]
        if mine.size == 0:
            continue
        l_s = trace.start_ns[lo_]
        done = np.concatenate(([0], np.cumsum(trace.end_ns[lo_] - l_s)))
        since = np.concatenate(([np.iinfo(np.int64).min], trace.end_ns[mine][:-1]))
        a = np.searchsorted(l_s, since, "left")
        b = np.searchsorted(l_s, trace.end_ns[mine], "left")
        hit = (done[b] - done[a]) >= FIRST_CALL_MIN_NS
        out.update(zip(mine[hit].tolist(), l_s[a[hit]].tolist(), strict=True))
    return out


def first_call_launches(trace: Trace) -> np.ndarray:
    """The launch calls (event indices, sorted) that loaded a module (``module_loads``)."""
    return module_loads(trace)[0]


def module_load_regions(trace: Trace, starts: np.ndarray, ends: np.ndarray, nxt: np.ndarray) -> np.ndarray:
    """Per blank region [start, end) ended by op ``nxt`` (-1: none): a one-off module load, warm-up.

    The op was queued by a launch that loaded a module (``module_loads``), and the loading (the thread's
    module-load calls since its previous launch, and the launch call) covers ``MODULE_LOAD_SHARE`` of the
    region or more: the device sat there waiting for it. A long region with a short load in it is the
    host's other work (a warm-up step's set-up) and reads as such; stretches of copies long before the
    load that the same op happens to end were not loading at all.
    """
    calls, begun = module_loads(trace)
    out = np.zeros(np.asarray(starts).size, bool)
    call = np.where(nxt >= 0, trace.launch[np.maximum(nxt, 0)], -1)
    if calls.size == 0 or not (call >= 0).any():
        return out
    k = np.minimum(np.searchsorted(calls, call), calls.size - 1)
    cand = (call >= 0) & (calls[k] == call) & (begun[k] < ends) & (trace.end_ns[np.maximum(call, 0)] > starts)
    for i in np.flatnonzero(cand).tolist():
        c, s, e = int(call[i]), int(starts[i]), int(ends[i])
        parts = [*_loads_before(trace, c, int(begun[k[i]])).tolist(), c]
        covered = sum(max(0, min(int(trace.end_ns[j]), e) - max(int(trace.start_ns[j]), s)) for j in parts)
        out[i] = covered >= MODULE_LOAD_SHARE * (e - s)
    return out


@per_trace
def _module_load_calls(trace: Trace) -> np.ndarray:
    """Every module-load driver call (``MODULE_LOAD``), in event order."""
    api = np.flatnonzero(trace.kind == int(Kind.CUDA_API))
    names = used_codes(trace.name_id[api], len(trace.names))
    ids = [i for i in names.tolist() if MODULE_LOAD.search(trace.names[i])]
    return api[np.isin(trace.name_id[api], ids)] if ids else np.empty(0, np.int64)


def _loads_before(trace: Trace, call: int, t0: int) -> np.ndarray:
    """The module-load calls of ``call``'s thread from ``t0`` to the call's return."""
    loads = _module_load_calls(trace)
    mine = loads[trace.lane[loads] == trace.lane[call]]
    return mine[(trace.start_ns[mine] >= t0) & (trace.start_ns[mine] < trace.end_ns[call])]


def module_load_words(trace: Trace, op: int) -> str:
    """What loaded the module of ``op``'s kernel, in words: ``the first launch of k ran 6 ms (module load)``,
    or with the driver's load calls ``cuLibraryLoadData ×1 9.94 ms, then cudaLaunchKernel 5.05 ms``."""
    call = int(trace.launch[op])
    calls, begun = module_loads(trace)
    k = int(np.searchsorted(calls, call))
    took = fmt_ns(int(trace.end_ns[call] - trace.start_ns[call]))
    kernel = trace.name(op)[:60]
    t0 = int(begun[k]) if k < calls.size and calls[k] == call else int(trace.start_ns[call])
    named: dict[str, list[int]] = {}
    for c in _loads_before(trace, call, t0).tolist():
        acc = named.setdefault(trace.name(c), [0, 0])
        acc[0] += 1
        acc[1] += int(trace.end_ns[c] - trace.start_ns[c])
    if not named:
        return f"the first launch of {kernel} ran {took} (module load)"
    loads = ", ".join(f"{n} ×{c} {fmt_ns(t)}" for n, (c, t) in sorted(named.items(), key=lambda kv: -kv[1][1]))
    return f"its thread loaded the module of {kernel} ({loads}, then {trace.name(call)} {took})"
