"""Levers fitted to the trace: never propose what the trace already does, never advise work it lacks.

``analysis.words.LEVERS`` holds one lever per smell per kind of workload. A trace can already do
part of it or lack the thing a lever names, and a lever that says otherwise costs the reader's
trust. Here the base lever is adjusted to what the trace shows:

- graph launches (``cudaGraphLaunch``/``hipGraphLaunch``/``cuGraphLaunch``) already replace kernel
  launches: no "capture in a CUDA graph"; the launch gaps left are the eager launches around the
  replays, and those are the lever;
- no range mentions tokenising: no tokenisation advice;
- training's host lever names the DataLoader only where one ran (PyTorch's ``enumerate(DataLoader)#…``
  marker), and ``pin_memory`` only where a host-to-device copy is pageable (round-3 loader_fault pins
  every batch; nested_steps and island_fault have no DataLoader at all);
- copies: the direction and memory kind of the copies that cost most (``Memcpy HtoD (Pageable ->
  Device)``), so pinned copies are not told to use pinned memory and device-to-device copies are not
  called host transfers.

Pure: readings of the trace, no Textual.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from gaplens.analysis.alloc_sites import allocating_ops, released_in_a_burst
from gaplens.analysis.calls import Call, api_class
from gaplens.analysis.memo import per_trace
from gaplens.analysis.phases import int_column, phases
from gaplens.analysis.step_names import family
from gaplens.analysis.steps import step_of, steps
from gaplens.analysis.units import fmt_ns
from gaplens.analysis.words import COMM_LEVER, lever
from gaplens.loaders.model import Kind, Trace

#: Runtime/driver calls that replay a whole captured graph (CUDA runtime, HIP, CUDA driver; nsys adds ``_v10000``).
GRAPH_LAUNCH = re.compile(r"^(cuda|hip|cu)GraphLaunch(_v\d+|_ptsz|_spt)*$")
#: Runtime/driver calls that launch one kernel.
KERNEL_LAUNCH = re.compile(
    r"^(cudaLaunchKernel\w*|cuLaunchKernel\w*|hipLaunchKernel\w*|hipExtLaunchKernel\w*|hipModuleLaunchKernel\w*|"
    r"cudaLaunchCooperativeKernel\w*|hipLaunchCooperativeKernel\w*|cuLaunchCooperativeKernel\w*)$"
)
#: A host range or op that says a DataLoader fed the step (``enumerate(DataLoader)#_MultiProcessingDataLoaderIter…``).
DATALOADER = re.compile(r"DataLoader", re.IGNORECASE)
#: Training's host-island lever when a DataLoader ran and every host-to-device copy is already pinned.
TRAINING_ISLAND_PINNED = (
    "feed the GPU ahead of time: more DataLoader workers and a deeper prefetch (the copies are already pinned), "
    "move CPU augmentation off the step, keep Python bookkeeping out of the loop"
)
#: Training's host-island lever when no DataLoader ran: the CPU work is the program's own.
TRAINING_ISLAND_NO_LOADER = (
    "move the CPU work off the step: prepare the next batch on a background thread or process while the GPU "
    "runs, cache what does not change between steps, keep Python bookkeeping (logging, metrics) out of the loop"
)
#: A range name that says the program tokenises (tokenize, tokenise, detokenize, tokenizer, encode_prompt…).
TOKENISE = re.compile(r"tokeni[sz]", re.IGNORECASE)
#: ``Memcpy HtoD (Pageable -> Device)``: the memory kinds at both ends (Kineto and nsys name copies so).
_MEM_KINDS = re.compile(r"\(([A-Za-z][\w ]*?) -> ([A-Za-z][\w ]*?)\)")
_DIRECTION = {
    int(Kind.MEMCPY_HTOD): "HtoD",
    int(Kind.MEMCPY_DTOH): "DtoH",
    int(Kind.MEMCPY_DTOD): "DtoD",
    int(Kind.MEMCPY_PEER): "peer",
    int(Kind.MEMCPY_OTHER): "other",
    int(Kind.MEMSET): "memset",
}

#: The picket-fence lever once graphs already replace kernel launches: the eager launches left are the lever.
GRAPHED_FENCE_LEVER = (
    "the trace already replays CUDA graphs ({graphs:,} graph launches beside {kernels:,} kernel launches): the "
    "launch gaps left come from the eager ops between replays; capture those too (sampling, logits processing, "
    "input preparation) or fuse them, and check no shape change forces eager fallbacks"
)
#: Serving's host-island lever when no range says the program tokenises.
SERVING_ISLAND_NO_TOKENS = (
    "move the CPU work off the request path: prepare the next step's inputs while the GPU runs, stop per-token "
    "logging and Python bookkeeping in the loop, sample on the device"
)
#: When the device waited on work it had already been given (cause ``dependency``).
DEPENDENCY_LEVER = (
    "the device waited on work it had already been given (an event or stream wait, another stream's or "
    "device's op): look at the wait named in the evidence; start the awaited work earlier, split it so the "
    "dependent op can begin sooner, or drop a stream wait the op does not need"
)
#: The same when the trace replays graphs: the waits between a replay's nodes are the graph's own edges.
GRAPHED_DEPENDENCY_LEVER = (
    "the device waited between ops it had already been given; the trace replays CUDA graphs ({graphs:,} graph "
    "launches), whose nodes wait on their edges: fewer, larger nodes (fuse the small kernels inside the graph, "
    "torch.compile in the captured region), and look at any stream or event wait named in the evidence"
)
#: Copy levers by direction and memory kind (the most direct first).
COPY_LEVERS = {
    "pageable": "copy from pinned memory (tensor.pin_memory(), DataLoader(pin_memory=True)) with "
    "non_blocking=True so it overlaps compute; better, keep the tensors on the device",
    "pinned": "the copies are already pinned: overlap them with compute (non_blocking=True on a side stream, "
    "prefetch the next batch) or keep the tensors on the device so they need no copy",
    "dtoh": "read back less and less often: keep results on the device until they are needed, remove the "
    "accidental .cpu(), .item() or NumPy conversion; a read-back that must stay goes into pinned memory with "
    "non_blocking=True and an event to wait on",
    "dtoh_pinned": "read back less and less often (the read-backs already land in pinned memory): keep results "
    "on the device until they are needed, remove the accidental .cpu(), .item() or NumPy conversion",
    "device": "the copies stay on the device: avoid them (views instead of .contiguous()/.clone(), in-place ops, "
    "fused kernels that write where the data is needed)",
    "peer": "overlap the peer copies with compute on a side stream, or place the data on the GPU that uses it",
}

#: The same for a program with no framework: CUDA runtime calls instead of PyTorch's.
HPC_COPY_LEVERS = {
    "pageable": "allocate the host buffers pinned (cudaMallocHost, cudaHostRegister) and copy with cudaMemcpyAsync "
    "on a stream so it overlaps compute; better, keep the data resident on the device",
    "pinned": "the copies are already pinned: issue them with cudaMemcpyAsync on their own stream so they overlap "
    "compute, or keep the data resident on the device",
    "dtoh": "copy back less and less often (check convergence every N steps); when a copy must stay, into pinned "
    "memory with cudaMemcpyAsync and an event to wait on",
    "dtoh_pinned": "copy back less and less often (check convergence every N steps); the copies already land in "
    "pinned memory",
    "device": "the copies stay on the device: avoid them (compute in place, write results where they are needed)",
    "peer": "overlap the peer copies with compute on their own stream, or place the data on the GPU that uses it",
}


@dataclass(frozen=True)
class Launches:
    """How the trace launches its GPU work: graph replays and single-kernel launches."""

    graphs: int
    kernels: int

    @property
    def graphed(self) -> bool:
        """Graph launches replace kernel launches: the trace already captures its steps in graphs."""
        return self.graphs > 0


@per_trace
def launches(trace: Trace) -> Launches:
    """Graph and kernel launch calls in the trace, counted by name."""
    api = trace.kind == int(Kind.CUDA_API)
    ids, counts = np.unique(trace.name_id[api], return_counts=True)
    graphs = kernels = 0
    for nid, n in zip(ids.tolist(), counts.tolist(), strict=True):
        name = trace.names[int(nid)]
        if GRAPH_LAUNCH.match(name):
            graphs += int(n)
        elif KERNEL_LAUNCH.match(name):
            kernels += int(n)
    return Launches(graphs, kernels)


@per_trace
def tokenises(trace: Trace) -> bool:
    """True when a range or CPU op of the trace names tokenising."""
    kinds = np.asarray([int(Kind.ANNOTATION), int(Kind.CPU_OP), int(Kind.PYTHON)], np.int8)
    ids = np.unique(trace.name_id[np.isin(trace.kind, kinds)]).tolist()
    return any(TOKENISE.search(trace.names[int(i)]) for i in ids)


@per_trace
def uses_dataloader(trace: Trace) -> bool:
    """True when a host range or op of the trace names a DataLoader."""
    kinds = np.asarray([int(Kind.ANNOTATION), int(Kind.CPU_OP), int(Kind.PYTHON)], np.int8)
    ids = np.unique(trace.name_id[np.isin(trace.kind, kinds)]).tolist()
    return any(DATALOADER.search(trace.names[int(i)]) for i in ids)


def pageable_htod(trace: Trace) -> bool:
    """True when some host-to-device copy is not from pinned memory (or the name does not say)."""
    return any(c.direction == "HtoD" and c.src.lower() != "pinned" for c in copy_kinds(trace))


@dataclass(frozen=True)
class CopyKind:
    """The copies that cost most: direction and memory kind, in the trace's own words."""

    direction: str  # HtoD, DtoH, DtoD, peer, other, memset
    src: str  # Pageable, Pinned, Device, ... ("" when the name does not say)
    dst: str
    time_ns: int
    count: int

    @property
    def lever_key(self) -> str:
        """Which of ``COPY_LEVERS`` fits: by direction, then by the host side's memory kind."""
        if self.direction in ("DtoD", "memset"):
            return "device"
        if self.direction == "peer":
            return "peer"
        if self.direction == "DtoH":
            return "dtoh_pinned" if self.dst.lower() == "pinned" else "dtoh"
        return "pinned" if self.src.lower() == "pinned" else "pageable"

    @property
    def text(self) -> str:
        kinds = f" ({self.src} → {self.dst})" if self.src and self.dst else ""
        return f"{self.direction}{kinds}"


def copy_kinds(trace: Trace, idx: np.ndarray | list[int] | None = None) -> list[CopyKind]:
    """Copies grouped by direction and memory kind, most time first (``idx``: only these events)."""
    kinds = np.asarray(list(_DIRECTION), np.int8)
    sel = np.arange(len(trace)) if idx is None else np.asarray(idx, np.int64)
    sel = sel[np.isin(trace.kind[sel], kinds)]
    if sel.size == 0:
        return []
    groups: dict[tuple[str, str, str], list[int]] = {}
    dur = (trace.end_ns[sel] - trace.start_ns[sel]).tolist()
    for i, d in zip(sel.tolist(), dur, strict=True):
        m = _MEM_KINDS.search(trace.name(i))
        src, dst = (m.group(1), m.group(2)) if m else ("", "")
        key = (_DIRECTION[int(trace.kind[i])], src, dst)
        acc = groups.setdefault(key, [0, 0])
        acc[0] += int(d)
        acc[1] += 1
    out = [CopyKind(k[0], k[1].strip(), k[2].strip(), t, n) for k, (t, n) in groups.items()]
    out.sort(key=lambda c: -c.time_ns)
    return out


def copy_lever(trace: Trace, idx: np.ndarray | list[int] | None = None, workload: str = "generic") -> str:
    """The copy lever for the copies that cost most, naming their direction and memory kind.

    A program with no framework (``hpc``) gets the CUDA runtime's words, not PyTorch's.
    """
    found = copy_kinds(trace, idx)
    if not found:
        return lever("copy_on_path", workload)
    top = found[0]
    table = HPC_COPY_LEVERS if workload == "hpc" else COPY_LEVERS
    return f"{top.text} copies: {table[top.lever_key]}"


def fitted_lever(trace: Trace, smell: str, workload: str, copies: list[int] | None = None) -> str:
    """The lever of ``smell`` for this workload, fitted to what the trace already does and holds.

    ``copies``: the copy events a ``copy_on_path`` lever is about (default: every copy of the trace).
    """
    if smell == "picket_fence":
        lv = launches(trace)
        if lv.graphed and "graph" in lever(smell, workload).lower():
            return GRAPHED_FENCE_LEVER.format(graphs=lv.graphs, kernels=lv.kernels)
    if smell == "host_island" and workload == "serving" and not tokenises(trace):
        return SERVING_ISLAND_NO_TOKENS
    if smell == "host_island" and workload == "training" and "DataLoader" in lever(smell, workload):
        if not uses_dataloader(trace):
            return TRAINING_ISLAND_NO_LOADER
        if not pageable_htod(trace):
            return TRAINING_ISLAND_PINNED
    if smell == "copy_on_path":
        return copy_lever(trace, copies, workload)
    if smell == "comm":
        return COMM_LEVER
    if smell == "alloc":
        return alloc_lever(trace, workload)
    if smell == "sync_cliff" and _syncs_per_step(trace) >= SYNC_LOOP_MIN:
        return sync_lever(trace, workload)
    if smell == "dependency":
        lv = launches(trace)
        return GRAPHED_DEPENDENCY_LEVER.format(graphs=lv.graphs) if lv.graphed else DEPENDENCY_LEVER
    return lever(smell, workload)


#: The launch lever once the steps can be captured whole and the trace replays no graph yet: a static step
#: (training's too) is what CUDA graphs are for; fusing kernels shortens the loop, a graph removes it.
GRAPH_STEP_LEVER = (
    "capture the step in a CUDA graph (torch.cuda.graph with static input buffers, or torch.compile with "
    "mode='reduce-overhead'): its {launches} launches per step become one graph launch and the Python, "
    "dispatcher and autograd time between them goes; else fuse the small kernels"
)


def graph_lever(trace: Trace, workload: str, base: str) -> str:
    """The picket fence's lever when ``--graph step`` models it: capture the whole step (serving's own lever
    already says so)."""
    if workload == "serving":
        return base

    per, _ = per_step(trace, queuing_calls(trace))
    return GRAPH_STEP_LEVER.format(launches=f"{per:,.0f}")


def queuing_calls(trace: Trace) -> np.ndarray:
    """The launch calls that queued GPU work the trace holds (a kernel, a memset, a graph): what a capture turns
    into graph nodes. ``Call.LAUNCH`` also holds the runtime's queries and stream waits (``cudaOccupancy*``,
    ``cudaEventQuery``, ``cudaStreamIsCapturing``, ``cudaStreamWaitEvent``): counted, HTA's large_216k trace
    read 8,066 "launches" per step where it launches 4,050 (3,874 kernels, 176 memsets). Without launch links
    (no correlation ids), every launch-class call."""
    calls = np.flatnonzero(api_class(trace) == Call.LAUNCH)
    linked = trace.launch[trace.launch >= 0]
    if linked.size == 0:
        return calls
    queued = np.zeros(len(trace), dtype=bool)
    queued[linked] = True
    return calls[queued[calls]]


#: The allocation lever, by what the trace shows allocating.
ALLOC_LEVERS = {
    "allocator_off": "keep PyTorch's caching allocator on (unset PYTORCH_NO_CUDA_MEMORY_CACHING) and reuse buffers "
    "instead of creating and freeing device tensors inside the loop",
    "device": "create the device tensors once and reuse them (preallocate outside the loop, in-place ops, out= "
    "arguments): the caching allocator reuses a freed block only when the sizes repeat",
    "pinned": "allocate the pinned host buffers once and reuse them (a pinned-memory pool, "
    "DataLoader(pin_memory=True)), not a new pinned buffer every step",
    "released": "stop emptying the allocator's cache inside the loop (torch.cuda.empty_cache() per step, or a "
    "memory limit that makes it hand its blocks back): the frees come in one run outside any op and the same "
    "blocks are allocated again the next step",
    "hpc": "allocate once before the loop and reuse the buffers (cudaMallocAsync with a memory pool, or a "
    "caching allocator), not cudaMalloc/cudaFree every step",
}
#: The synchronisation-in-the-loop lever (DESIGN.md § What-if: ``--remove sync``).
SYNC_LOOP_LEVER = (
    "remove the synchronisation inside the loop (timing code that synchronises, .item(), .cpu(), printing "
    "CUDA tensors): time with CUDA events, read values back once per step or less, so the host runs ahead"
)


def per_step(trace: Trace, idx: np.ndarray) -> tuple[float, str]:
    """How many of the events ``idx`` fall in a steady step, per steady step, and the unit ("per step" /
    "per decode_step"); over the whole trace ("in the trace") without steps."""

    steady, count, unit = _in_steady(trace, idx)
    return int(steady.sum()) / count, unit


def _in_steady(trace: Trace, idx: np.ndarray) -> tuple[np.ndarray, int, str]:
    """Which of the events ``idx`` fall in a steady step, how many steady steps there are, and the unit; without
    steps, all of them, over one "step": the trace."""
    st = steps(trace)
    if not st or not st.steady:
        return np.ones(idx.size, dtype=bool), 1, "in the trace"
    k = step_of(trace, idx, st)
    return (k >= 0) & st.steady_mask()[np.maximum(k, 0)], max(len(st.steady), 1), f"per {st.label}"


def _calls_text(trace: Trace, idx: np.ndarray) -> str:
    """``cudaFree ×12, cudaMalloc ×12 per train_step (3.1 ms)``: the calls by name, most time first, their
    counts and time those of the steady steps (the warm-up's calls once scaled the time: 9.33 for 9.30 ms)."""

    if idx.size == 0:
        return ""
    steady, count, unit = _in_steady(trace, idx)
    ids, inv = np.unique(trace.name_id[idx], return_inverse=True)
    dur = (trace.end_ns[idx] - trace.start_ns[idx]).astype(np.int64)
    t = np.bincount(inv, weights=dur, minlength=ids.size)
    n = np.bincount(inv[steady], minlength=ids.size) / count
    order = np.argsort(-t)[:3]
    parts = [f"{trace.names[int(ids[j])]} ×{n[j]:.3g}" for j in order.tolist()]
    return f"{', '.join(parts)} {unit} ({fmt_ns(int(dur[steady].sum() / count))})"


#: Synchronising calls per steady step from which the syncs are "inside the loop" (per layer, per token,
#: timing code): one read-back per step (the loss, the token) is the step's own; two or more are a loop's.
SYNC_LOOP_MIN = 2


@per_trace
def _syncs_per_step(trace: Trace) -> float:

    return per_step(trace, np.flatnonzero(api_class(trace) == Call.SYNC))[0]


def alloc_lever(trace: Trace, workload: str) -> str:
    """The allocation lever, naming the memory the trace allocates, its calls per step and the ops that
    allocate."""

    key, said = _alloc_facts(trace)
    key = "hpc" if workload == "hpc" else key
    return f"{ALLOC_LEVERS[key]}: {said}" if said else ALLOC_LEVERS[key]


@per_trace
def _alloc_facts(trace: Trace) -> tuple[str, str]:
    """(the kind of allocation the trace shows, its calls and sites per step): once per trace, since a trace
    with many allocation findings asks for its lever once per finding."""

    idx = np.flatnonzero(api_class(trace) == Call.ALLOC)
    names = {trace.names[int(i)].lower() for i in np.unique(trace.name_id[idx]).tolist()}
    pinned = any("host" in n for n in names)
    if pinned and not any("host" not in n for n in names):
        key = "pinned"
    elif allocator_off(trace):
        key = "allocator_off"
    else:
        key = "released" if released_in_a_burst(trace) else "device"
    calls = _calls_text(trace, idx)
    return key, f"{calls}{_sites_text(trace, idx)}" if calls else ""


def _sites_text(trace: Trace, idx: np.ndarray) -> str:
    """``; allocated in aten::addmm ×16, aten::gelu ×16 per step``: the ops holding the allocations."""

    sites = allocating_ops(trace, idx)
    if not sites:
        return ""
    per, unit = per_step(trace, idx)
    share = per / max(idx.size, 1)
    return "; allocated in " + ", ".join(f"{name} ×{n * share:.3g}" for name, n in sites) + f" {unit}"


#: Device allocations per step at this share of the kernel launches or more mean the caching allocator is off
#: (every op allocates): 371 cudaMalloc per 264 launches in round-4 alloc_fault; code that allocates a buffer
#: or two per step has a handful.
ALLOCATOR_OFF_SHARE = 0.5


def allocator_off(trace: Trace) -> bool:
    """Device allocations as many as ``ALLOCATOR_OFF_SHARE`` of the kernel launches per step: every op allocates."""
    cls = api_class(trace)
    alloc = np.flatnonzero(cls == Call.ALLOC)
    names = trace.names
    device = alloc[[("host" not in names[int(i)].lower()) for i in trace.name_id[alloc]]] if alloc.size else alloc
    launches = np.flatnonzero(cls == Call.LAUNCH)
    return device.size > 0 and per_step(trace, device)[0] >= ALLOCATOR_OFF_SHARE * per_step(trace, launches)[0]


def sync_lever(trace: Trace, workload: str = "generic") -> str:
    """The synchronisation lever, naming the synchronising calls and how often they run per step (a program
    without a framework keeps the CUDA runtime's words)."""

    base = lever("sync_cliff", "hpc") if workload == "hpc" else SYNC_LOOP_LEVER
    said = _sync_facts(trace)
    return f"{base}: {said}" if said else base


@per_trace
def _sync_facts(trace: Trace) -> str:
    """The synchronising calls per step and the phase holding them: once per trace (a trace with hundreds of
    sync findings asks for its lever once per finding; per finding this was most of ``smells`` at 1M events)."""

    idx = np.flatnonzero(api_class(trace) == Call.SYNC)
    calls = _calls_text(trace, idx)
    where = _phase_holding(trace, idx)
    return f"{calls}{f' inside {where}' if where else ''}" if calls else ""


#: The phase named as where the syncs are holds at least this share of them: "inside forward" must be true
#: of most of the calls, not of a few.
PHASE_HOLDS_SHARE = 0.8


def _phase_holding(trace: Trace, idx: np.ndarray) -> str:
    """The deepest phase family (the user's ranges, ``analysis.phases``) holding ``PHASE_HOLDS_SHARE`` of the
    events ``idx`` on the host, or "" when none does."""

    if idx.size == 0:
        return ""
    t = np.sort(trace.start_ns[idx])
    found = phases(trace)
    if not found:
        return ""
    hs, he = int_column(found, "host_start_ns"), int_column(found, "host_end_ns")
    inside = np.searchsorted(t, he, "right") - np.searchsorted(t, hs, "left")
    # Per family (each distinct name folded once): the events inside its members, and its deepest member's depth.
    name_code: dict[str, int] = {}
    code = np.fromiter((name_code.setdefault(p.name, len(name_code)) for p in found), np.int64, len(found))
    fam_code: dict[str, int] = {}
    of_name = np.asarray([fam_code.setdefault(family(n), len(fam_code)) for n in name_code], np.int64)[code]
    count = np.bincount(of_name, weights=inside, minlength=len(fam_code))
    deepest = np.full(len(fam_code), np.iinfo(np.int64).min, np.int64)
    np.maximum.at(deepest, of_name, int_column(found, "depth"))
    held = {fam: (int(count[k]), int(deepest[k])) for fam, k in fam_code.items()}
    ok = [(depth, name) for name, (n, depth) in held.items() if n >= PHASE_HOLDS_SHARE * idx.size]
    return max(ok)[1] if ok else ""
