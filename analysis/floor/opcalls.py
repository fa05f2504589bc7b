"""Which recorded operator call launched each GPU kernel, and its size (FLOPs, bytes, dtype).

Built from the loaded Trace alone, never the file again (issue 31: the second JSON parse was 2.4 s
of a 1.19M-event trace's readings): the Kineto loader keeps each op's ``Input Dims``, ``Input
type``, ``Concrete Inputs``, ``Input Strides`` and ``flops`` in its detail (``loaders.kineto.opdetail``).
The link is the launch: a kernel's correlation id names its launch call (``cudaLaunchKernel``...,
``Trace.launch``) on one host thread; the innermost CPU op open on that thread at the launch is
the op that launched it. When that op has no formula (``opsize.has_formula``),
its nearest enclosing op that has one sizes the kernel, unless another call under that
ancestor was sized on its own (then the ancestor's size would count twice: unsized).
All kernels launched by one op call share its size; their times add up.

nsys reports record no dtypes; their NVTX ranges (``emit_nvtx(record_shapes=True)``) carry shapes
only: the innermost such range open on the launching thread gives a GEMM its FLOPs (bytes and the
floor need the dtype: none), and ``why_unsized`` says what to record for the floor.
"""

from __future__ import annotations

import bisect
import re
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import orjson

from gaplens.analysis.floor.opargs import DTYPES, UNKNOWN_TYPE, OpSize
from gaplens.analysis.floor.opsize import has_formula, size_op
from gaplens.analysis.memo import per_trace
from gaplens.loaders.columns import factorize
from gaplens.loaders.kineto.opdetail import op_args
from gaplens.loaders.model import Kind, LaneKind, Trace

#: Recording options to name when a trace lacks sizes.
KINETO_OPTION = "torch.profiler.profile(record_shapes=True)"
NSYS_OPTION = "torch.autograd.profiler.emit_nvtx(record_shapes=True) (shapes only; dtypes need the torch profiler)"


@dataclass
class Call:
    """One CPU-op call that launched GPU work (directly or through an op it encloses)."""

    name: str
    dims: list
    types: list
    concrete: list
    size: OpSize | None
    flops_recorded: float | None = None

    @property
    def shape_text(self) -> str:
        return ", ".join(
            "x".join(str(v) for v in d) if isinstance(d, list) and all(isinstance(v, int) for v in d) else "·"
            for d, t in zip(self.dims, self.types, strict=False)
            if t and t not in ("Scalar", "ScalarList", "") and d != []
        )


@dataclass
class KernelCalls:
    """Per GPU event of the trace: index into ``calls`` or -1 (no launching op found / not a kernel)."""

    call_of: np.ndarray
    calls: list[Call] = field(default_factory=list)
    has_shapes: bool = False  # the file recorded Input Dims and Input type
    why: str = ""  # why nothing is sized, when nothing is


def why_unsized(trace: Trace) -> str | None:
    """The recording option that would give sizes, or None when the trace has them."""
    fmt = trace.meta.source_format
    if fmt == "nsys":
        if kernel_calls(trace).has_shapes:
            return (
                "the NVTX ranges carry shapes but no dtypes: GEMM FLOPs without a floor; record the run with "
                f"{KINETO_OPTION} for the floor"
            )
        return (
            "an nsys report records no operator dtypes: record the run with "
            f"{KINETO_OPTION} for the floor; NVTX shapes alone (FLOPs, no floor) come from {NSYS_OPTION}"
        )
    kc = kernel_calls(trace)
    if not kc.has_shapes:
        return f"the trace records no operator shapes: record it with {KINETO_OPTION} for the floor"
    return None


def records_shapes(trace: Trace) -> bool:
    """Whether a Kineto trace recorded operator shapes (the loader keeps ``Input Dims`` as details): cheap."""
    return trace.meta.source_format == "kineto" and any(d.startswith("Input Dims") for d in trace.details)


@per_trace
def kernel_calls(trace: Trace) -> KernelCalls:
    """The launching call (and its size) of every kernel of a Kineto trace (memoised per trace)."""
    n = len(trace)
    empty = KernelCalls(np.full(n, -1, np.int64))
    if trace.meta.source_format == "nsys":
        return _link_nvtx(trace)
    if trace.meta.source_format != "kineto":
        empty.why = "not a Kineto trace"
        return empty
    if not records_shapes(trace):
        empty.why = "no Input Dims recorded"
        return empty
    return _link(trace)


def _link(trace: Trace) -> KernelCalls:
    """Kineto: each kernel's innermost CPU op at its launch, on the launching thread's op lane."""
    call_of = np.full(len(trace), -1, np.int64)
    op = trace.kind == int(Kind.CPU_OP)
    used = np.unique(trace.detail_id[op]).tolist()
    args = {d: op_args(trace.details[d]) for d in used}
    if not any(a.get("Input type") for a in args.values()):  # 2020 traces wrote "Input type": [] on every op
        return KernelCalls(call_of, [], False, "no Input type recorded")
    formula = np.asarray([has_formula(name) for name in trace.names], bool)
    kernels = np.flatnonzero((trace.kind == int(Kind.KERNEL)) & (trace.launch >= 0) & (trace.corr >= 0))
    inner, sized_by, covered = _enclosing(trace, trace.launch[kernels], op, formula)
    found = inner >= 0
    kernels, inner, sized_by = kernels[found], inner[found], sized_by[found]
    # An enclosing op with a formula whose other work is sized on its own (an op under it, with a
    # formula of its own, launched a kernel) would count that work twice: its kernels stay unsized.
    sized = (sized_by >= 0) & ((sized_by == inner) | ~covered[np.maximum(sized_by, 0)])
    owner = np.where(sized, sized_by, inner)
    codes, owners = factorize(owner)  # one call per op call, numbered by its first kernel
    call_of[kernels] = codes
    owner_sized = np.zeros(owners.size, bool)
    owner_sized[codes] = sized  # an op is sized by its own formula or not at all: one value per owner
    shared: dict[tuple[int, int, bool], Call] = {}
    calls = []
    for o, s in zip(owners.tolist(), owner_sized.tolist(), strict=True):
        key = (int(trace.name_id[o]), int(trace.detail_id[o]), s)
        got = shared.get(key)
        if got is None:  # calls of one op with the same args have one size: one Call serves them all
            got = shared[key] = _call(trace.names[key[0]], args.get(key[1], {}), s)
        calls.append(got)
    return KernelCalls(call_of, calls, True, "")


def _enclosing(
    trace: Trace, launch: np.ndarray, op: np.ndarray, formula: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per launch call: the innermost CPU op open at its start and the innermost one with a formula
    (-1: none); and per event, whether it is an op enclosing an innermost op that has a formula.

    The ops are on the launching thread's CPU-op lane, one row per depth, each row's events sorted
    and disjoint: one binary search per row, deepest first (``alloc_sites.enclosing_ops``'s pattern),
    so the first op found is the innermost and every later one encloses it.
    """
    inner = np.full(launch.size, -1, np.int64)
    sized_by = np.full(launch.size, -1, np.int64)
    covered = np.zeros(len(trace), bool)
    op_lane = {(ln.pid, ln.tid): ln.id for ln in trace.lanes if ln.kind == LaneKind.CPU_OPS}
    lanes = trace.lane[launch]
    for lane_id in np.unique(lanes).tolist():
        ln = trace.lanes[lane_id]
        ops_lane = op_lane.get((ln.pid, ln.tid))
        if ops_lane is None:
            continue
        mine = np.flatnonzero(lanes == lane_id)
        t = trace.start_ns[launch[mine]]
        for row in reversed(trace.rows_of(ops_lane)):
            at = _covering(trace, row, t, op)
            hit = at >= 0
            inside = inner[mine]
            covered[at[hit & (inside >= 0) & formula[trace.name_id[np.maximum(inside, 0)]]]] = True
            first = hit & (inside < 0)
            inner[mine[first]] = at[first]
            with_formula = hit & (sized_by[mine] < 0) & formula[trace.name_id[np.maximum(at, 0)]]
            sized_by[mine[with_formula]] = at[with_formula]
    return inner, sized_by, covered


def _covering(trace: Trace, row: int, t: np.ndarray, op: np.ndarray) -> np.ndarray:
    """Per time in ``t``: the CPU op of ``row`` open at it (start <= t <= end), else -1 (rows are disjoint)."""
    sl = trace.row_slice(row)
    if sl.stop == sl.start:
        return np.full(t.size, -1, np.int64)
    j = np.searchsorted(trace.start_ns[sl], t, "right") - 1 + sl.start
    jj = np.maximum(j, sl.start)
    return np.where((j >= sl.start) & (trace.end_ns[jj] >= t) & op[jj], jj, -1)


class _Thread:
    """One host thread's CPU ops, sorted by start, with each op's parent (ops nest)."""

    def __init__(self, ops: list[tuple[float, float, dict]]) -> None:
        ops.sort(key=lambda o: (o[0], -o[1]))
        self.start = [o[0] for o in ops]
        self.end = [o[1] for o in ops]
        self.ev = [o[2] for o in ops]
        self.parent = [-1] * len(ops)
        stack: list[int] = []
        for i, (s, _e, _ev) in enumerate(ops):
            while stack and self.end[stack[-1]] < s:
                stack.pop()
            self.parent[i] = stack[-1] if stack else -1
            stack.append(i)

    def innermost(self, t: float) -> int:
        i = bisect.bisect_right(self.start, t) - 1
        while i >= 0 and self.end[i] < t:
            i = self.parent[i]
        return i


def _size_kernels(trace: Trace, threads: dict[tuple, _Thread], inner: dict[int, tuple[tuple, int]]) -> KernelCalls:
    """Each kernel's call from the innermost op open at its launch (``inner``), walking up to an op with a formula."""
    call_of = np.full(len(trace), -1, np.int64)
    calls: list[Call] = []
    # Ops sized in their own right, and every ancestor of one (which then cannot size a kernel itself).
    covered: set[tuple] = set()
    for key, i in set(inner.values()):
        if has_formula(threads[key].ev[i].get("name", "")):
            p = threads[key].parent[i]
            while p >= 0 and (key, p) not in covered:
                covered.add((key, p))
                p = threads[key].parent[p]
    index: dict[tuple, int] = {}
    for k, (key, i) in inner.items():
        th = threads[key]
        j = i
        while j >= 0 and not has_formula(th.ev[j].get("name", "")):
            j = th.parent[j]
        if j >= 0 and j != i and (key, j) in covered:
            j = -1  # an enclosing op whose other work is sized on its own: counting it would count twice
        owner = j if j >= 0 else i
        at = index.get((key, owner))
        if at is None:
            at = index[(key, owner)] = len(calls)
            ev = th.ev[owner]
            calls.append(_call(str(ev.get("name", "")), ev["args"], sized=j >= 0))
        call_of[k] = at
    return KernelCalls(call_of, calls, True, "")


#: ``emit_nvtx(record_shapes=True)`` range names: "aten::mm, seq = 3, op_id = 7, sizes = [[64, 2048], [2048, 2048]]".
NVTX_SIZES = re.compile(r"^(?P<op>[^,]+?)(?:, seq = -?\d+)?(?:, op_id = \d+)?, sizes = (?P<sizes>\[.*?\]\])(?:, |$)")


def _nvtx_op(name: str) -> dict | None:
    """A CPU-op-like record from an emit_nvtx range name: its op name and ``Input Dims``; no dtypes (unknown)."""
    m = NVTX_SIZES.match(name)
    if m is None:
        return None
    try:
        dims = orjson.loads(m.group("sizes"))
    except orjson.JSONDecodeError:
        return None
    if not isinstance(dims, list):
        return None
    return {"name": m.group("op"), "args": {"Input Dims": dims, "Input type": [UNKNOWN_TYPE] * len(dims)}}


def _link_nvtx(trace: Trace) -> KernelCalls:
    """nsys: each kernel's innermost ``emit_nvtx(record_shapes=True)`` range on its launching thread."""
    call_of = np.full(len(trace), -1, np.int64)
    ann = np.flatnonzero(trace.kind == int(Kind.ANNOTATION))
    parsed = {int(i): _nvtx_op(trace.names[int(i)]) for i in np.unique(trace.name_id[ann]).tolist()}
    if not any(parsed.values()):
        return KernelCalls(call_of, [], False, "no emit_nvtx shapes in the NVTX ranges")
    per_thread: dict[tuple, list] = defaultdict(list)
    for i in ann.tolist():
        rec = parsed[int(trace.name_id[i])]
        if rec is not None:
            ln = trace.lanes[int(trace.lane[i])]
            per_thread[(ln.pid, ln.tid)].append((int(trace.start_ns[i]), int(trace.end_ns[i]), rec))
    threads = {k: _Thread(v) for k, v in per_thread.items()}
    inner: dict[int, tuple[tuple, int]] = {}
    for k in np.flatnonzero(trace.kind == int(Kind.KERNEL)).tolist():
        a = int(trace.launch[k])
        if a < 0:
            continue
        ln = trace.lanes[int(trace.lane[a])]
        th = threads.get((ln.pid, ln.tid))
        i = th.innermost(int(trace.start_ns[a])) if th is not None else -1
        if i >= 0:
            inner[k] = ((ln.pid, ln.tid), i)
    return _size_kernels(trace, threads, inner)


def _call(name: str, args: dict, sized: bool) -> Call:
    """One op call's record, sized from its recorded args (``sized``: this op is the one its kernels count)."""
    dims = args.get("Input Dims") or args.get("Input dims") or []
    types = args.get("Input type") or []
    concrete = args.get("Concrete Inputs") or []
    flops = args.get("flops")
    strides = args.get("Input Strides") or []
    size = size_op(name, dims, types, concrete, strides if isinstance(strides, list) else []) if sized else None
    recorded = float(flops) if isinstance(flops, int | float) and flops > 0 else None
    if size is None and recorded is not None and types and types[0] in DTYPES:
        size = OpSize(recorded, 0.0, DTYPES[types[0]][1], "with_flops")
    return Call(
        name,
        dims if isinstance(dims, list) else [],
        types if isinstance(types, list) else [],
        concrete if isinstance(concrete, list) else [],
        size,
        recorded,
    )
