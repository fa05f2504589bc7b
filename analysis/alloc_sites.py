"""Where a trace's memory-management calls come from: the op that allocates, and frees handed back in a burst.

The allocation lever (``analysis.levers``) names what the trace shows (issue 32): which framework op holds
the ``cudaMalloc`` calls (``aten::addmm``, ``aten::native_batch_norm``: the op a user can find in their code,
not the ``aten::empty`` it asks), and whether the frees come as one run of back-to-back calls outside any op,
which is a cache being emptied (``torch.cuda.empty_cache()`` in the loop) rather than tensors dying one by one
where the code drops them.
Pure: readings of the trace, no Textual.
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

from gaplens.analysis.calls import Call, api_class
from gaplens.analysis.memo import per_trace
from gaplens.analysis.steps import steps
from gaplens.loaders.model import Kind, LaneKind, Trace

#: A free: the calls that give memory back (device, pinned host, async pool, their HIP and driver twins).
_FREE = re.compile(r"Free|Release|Unmap|Unregister|PoolTrimTo", re.IGNORECASE)


def is_free(name: str) -> bool:
    """A memory-management call that gives memory back (``cudaFree``, ``cudaFreeHost``, ``hipFree``...)."""
    return bool(_FREE.search(name))


#: The framework's allocation primitives: the op a user wrote is the one around them (``aten::addmm`` asks
#: ``aten::empty`` for its output); one is named only when nothing else holds the call (``torch.empty``).
PRIMITIVES = frozenset(
    {
        "aten::empty",
        "aten::empty_strided",
        "aten::empty_like",
        "aten::new_empty",
        "aten::new_empty_strided",
        "aten::resize_",
        "aten::zeros",
        "aten::zeros_like",
        "aten::new_zeros",
    }
)


def enclosing_ops(trace: Trace, idx: np.ndarray, skip: frozenset[str] = frozenset()) -> np.ndarray:
    """Per call in ``idx``: the innermost CPU op (``Kind.CPU_OP``) of the same thread holding it whose name is
    not in ``skip`` (else the innermost op at all), -1 when no op holds it.

    A call sits on its thread's CUDA API lane; the ops are on the thread's CPU-op lane, one row per depth,
    each row's events sorted and disjoint, so one binary search per row finds the op covering a call.
    """
    skipped = np.asarray([n in skip for n in trace.names], dtype=bool) if skip else None
    out = np.full(idx.size, -1, dtype=np.int64)
    if idx.size == 0:
        return out
    lanes = trace.lanes
    call_lane = trace.lane[idx]
    for lane_id in np.unique(call_lane).tolist():
        mine = np.flatnonzero(call_lane == lane_id)
        thread = lanes[int(lane_id)]
        t0, t1 = trace.start_ns[idx[mine]], trace.end_ns[idx[mine]]
        found = np.full(mine.size, -1, dtype=np.int64)
        fallback = np.full(mine.size, -1, dtype=np.int64)
        for ln in lanes:
            if ln.kind != LaneKind.CPU_OPS or (ln.pid, ln.tid) != (thread.pid, thread.tid):
                continue
            for row in reversed(trace.rows_of(ln.id)):  # deepest first: the innermost op wins
                sl = trace.row_slice(row)
                starts, ends = trace.start_ns[sl], trace.end_ns[sl]
                if starts.size == 0:
                    continue
                j = np.searchsorted(starts, t0, "right") - 1
                jj = np.maximum(j, 0)
                ok = (j >= 0) & (ends[jj] >= t1) & (trace.kind[sl][jj] == int(Kind.CPU_OP))
                first = ok & (fallback < 0)
                fallback[first] = sl.start + jj[first]
                if skipped is not None:
                    ok &= ~skipped[trace.name_id[sl][jj]]
                ok &= found < 0
                found[ok] = sl.start + jj[ok]
        out[mine] = np.where(found >= 0, found, fallback)
    return out


def allocating_ops(trace: Trace, idx: np.ndarray, limit: int = 3) -> list[tuple[str, int]]:
    """The ops holding the allocations (not the frees) among ``idx``, most calls first: ``[(name, calls)]``."""
    idx = np.asarray(idx, dtype=np.int64)
    ids = np.unique(trace.name_id[idx]).tolist()  # the calls' few names, each judged once
    freeing = np.asarray([i for i in ids if is_free(trace.names[i])], dtype=np.int64)
    alloc = idx[~np.isin(trace.name_id[idx], freeing)]
    ops = enclosing_ops(trace, alloc, PRIMITIVES)
    op_ids, first, counts = np.unique(trace.name_id[ops[ops >= 0]], return_index=True, return_counts=True)
    held: Counter[str] = Counter()
    for k in np.argsort(first, kind="stable").tolist():  # first seen first: most_common keeps it among ties
        held[trace.names[int(op_ids[k])]] += int(counts[k])
    return held.most_common(limit)


#: Frees handed back as one run of back-to-back calls on a thread (nothing else of the CUDA API between them)
#: holding at least this share of the frees, outside any op, are a cache being emptied: round-5 emptycache
#: (``torch.cuda.empty_cache()`` each step) frees all 41 blocks per step in one run; tensors that die where the
#: code drops them are freed one or a few at a time between launches (round-5 allocinfer: runs of 3 in 32).
RELEASE_RUN_SHARE = 0.5
#: ... and the run is at least this long: two or three frees in a row is a few tensors dropped together.
RELEASE_RUN_MIN = 8


@per_trace
def released_in_a_burst(trace: Trace) -> bool:
    """Most frees come in one back-to-back run outside any op: the allocator's cache handed back to the driver
    (``torch.cuda.empty_cache()`` in the loop), to be allocated again the next step. Asked by the lever and by
    step 6's quote: once per trace."""

    cls = api_class(trace)
    api = np.flatnonzero(cls != 0)
    if api.size == 0:
        return False
    alloc = api[cls[api] == Call.ALLOC]
    ids = np.unique(trace.name_id[alloc]).tolist()  # a handful of names: each judged once, not once per call
    freeing = np.asarray([i for i in ids if is_free(trace.names[i])], dtype=np.int64)
    free = (cls[api] == Call.ALLOC) & np.isin(trace.name_id[api], freeing)
    if not free.any():
        return False
    outside = np.zeros(api.size, dtype=bool)
    outside[free] = enclosing_ops(trace, api[free]) < 0
    best = 0
    for lane_id in np.unique(trace.lane[api]).tolist():
        on = trace.lane[api] == lane_id
        order = np.argsort(trace.start_ns[api[on]], kind="stable")
        best = max(best, _longest_run((free & outside)[on][order]))
    st = steps(trace)
    per_step = int(free.sum()) / (len(st.spans) if st else 1)  # a cache emptied once per step: one run each
    return best >= RELEASE_RUN_MIN and best >= RELEASE_RUN_SHARE * per_step


def _longest_run(flags: np.ndarray) -> int:
    """The longest run of consecutive ``True`` in ``flags``."""
    edges = np.diff(np.concatenate(([0], flags.astype(np.int8), [0])))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    return int((ends - starts).max()) if starts.size else 0
