"""Which recorded operator call launched each GPU kernel, and its size (FLOPs, bytes, dtype).

The lane model keeps ``Input Dims`` only as display text; the floor needs the dtypes and scalar
arguments too, so the Kineto file's CPU-op args are read again here, once per trace (memoised),
only when a floor is asked for. The link is the launch: a kernel's correlation id names its
launch call (``cudaLaunchKernel``...) on one host thread; the innermost CPU op open on that thread
at the launch is the op that launched it. When that op has no formula (``opsize.has_formula``),
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
from gaplens.loaders.files import Source
from gaplens.loaders.model import Kind, Trace

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
    if trace.meta.source_format != "kineto" or not trace.meta.path:
        empty.why = "not a Kineto trace"
        return empty
    if not records_shapes(trace):
        empty.why = "no Input Dims recorded"  # the loader keeps them as details: no need to read the file
        return empty
    try:
        doc = orjson.loads(b"".join(Source(trace.meta.path).chunks()))
    except Exception as exc:
        empty.why = f"the trace's operator arguments could not be read again ({type(exc).__name__})"
        return empty
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        empty.why = "no traceEvents"
        return empty
    return _link(trace, events)


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


def _args(ev: dict) -> dict:
    a = ev.get("args")
    return a if isinstance(a, dict) else {}


def _link(trace: Trace, events: list) -> KernelCalls:
    per_thread: dict[tuple, list] = defaultdict(list)
    launches: dict[tuple, tuple] = {}  # (pid, correlation) -> (pid, tid, ts)
    has_shapes = False
    for ev in events:
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue
        cat = ev.get("cat")
        if cat == "cpu_op":
            ts, dur = ev.get("ts"), ev.get("dur")
            if isinstance(ts, int | float) and isinstance(dur, int | float):
                per_thread[(ev.get("pid"), ev.get("tid"))].append((float(ts), float(ts) + float(dur), ev))
                if not has_shapes and "Input type" in _args(ev):
                    has_shapes = True
        elif cat in ("cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver"):
            corr = _args(ev).get("correlation")
            ts = ev.get("ts")
            if isinstance(corr, int) and isinstance(ts, int | float):
                launches[(ev.get("pid"), corr)] = (ev.get("pid"), ev.get("tid"), float(ts))
    threads = {k: _Thread(v) for k, v in per_thread.items()}
    call_of = np.full(len(trace), -1, np.int64)
    if not has_shapes:
        return KernelCalls(call_of, [], False, "no Input type recorded")
    lane_pid = np.asarray([ln.pid for ln in trace.lanes], np.int64)
    # (thread, op index) of the innermost op at each kernel's launch.
    inner: dict[int, tuple[tuple, int]] = {}
    for k in np.flatnonzero(trace.kind == int(Kind.KERNEL)).tolist():
        a = int(trace.launch[k])
        corr = int(trace.corr[k])
        if a < 0 or corr < 0:
            continue
        got = launches.get((int(lane_pid[trace.lane[a]]), corr))
        if got is None:
            continue
        th = threads.get((got[0], got[1]))
        if th is None:
            continue
        i = th.innermost(got[2])
        if i >= 0:
            inner[k] = ((got[0], got[1]), i)
    return _size_kernels(trace, threads, inner)


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
            calls.append(_call(th.ev[owner], sized=j >= 0))
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


def _call(ev: dict, sized: bool) -> Call:
    args = _args(ev)
    dims = args.get("Input Dims") or args.get("Input dims") or []
    types = args.get("Input type") or []
    concrete = args.get("Concrete Inputs") or []
    name = str(ev.get("name", ""))
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
