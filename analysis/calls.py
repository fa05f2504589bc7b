"""What each CUDA API call does to the host: launch work, copy, or block until the device catches up.

The class comes from the call's name (runtime and driver spellings, nsys version
suffixes such as ``cudaStreamSynchronize_v3020``), so both loaders share it.
"""

from __future__ import annotations

import re
from enum import IntEnum

import numpy as np

from gaplens.analysis.memo import per_trace
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
        used = np.unique(trace.name_id[api])
        table = np.zeros(len(trace.names), dtype=np.int8)
        table[used] = [call_class_of_name(trace.names[int(i)]) for i in used]
        out[api] = table[trace.name_id[api]]
    return out


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
#: first hipLaunchKernel 6.6 ms). When it is the first launch of its kernel, it is a one-off warm-up.
FIRST_CALL_MIN_NS = 1_000_000


@per_trace
def first_call_launches(trace: Trace) -> np.ndarray:
    """The launch calls (event indices, sorted) that loaded a module: the first launch of their kernel (the
    kernel name's earliest op) and ``FIRST_CALL_MIN_NS`` or longer. One rule for the causes (warm-up host
    work, not launch overhead) and the experiment (set apart as warm-up)."""
    k = np.flatnonzero((trace.kind == int(Kind.KERNEL)) & (trace.launch >= 0))
    if k.size == 0:
        return np.empty(0, np.int64)
    calls = trace.launch[k]
    long = (trace.end_ns[calls] - trace.start_ns[calls]) >= FIRST_CALL_MIN_NS
    if not long.any():
        return np.empty(0, np.int64)
    order = np.lexsort((trace.start_ns[k], trace.name_id[k]))
    first = np.ones(order.size, bool)
    first[1:] = trace.name_id[k][order][1:] != trace.name_id[k][order][:-1]
    firsts = order[first]
    return np.unique(calls[firsts][long[firsts]])


def first_calls(trace: Trace, ops: np.ndarray) -> np.ndarray:
    """Whether each GPU op (-1: none) was queued by a first-call module load (``first_call_launches``)."""
    ops = np.asarray(ops, np.int64)
    call = np.where(ops >= 0, trace.launch[np.maximum(ops, 0)], -1)
    return (call >= 0) & np.isin(call, first_call_launches(trace))
