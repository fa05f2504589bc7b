"""One sentence per blank region: what the trace shows behind its cause (``analysis.causes``).

The calls the launching thread sat in (by name, count and time), the copies that ran, the stream
wait or graph edge behind a dependency, and a note where an op started long after its launch with
nothing running: said with the numbers, never blamed on anyone.
"""

from __future__ import annotations

import copy
import operator
import weakref
from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np

from gaplens.analysis.busy import copy_label, copy_mask, device_splits, is_host_copy
from gaplens.analysis.calls import CAPTURE_HINT, HOST_UNSEEN_HINT, Call, api_class, has_cpu_side, module_load_words
from gaplens.analysis.regions import Regions
from gaplens.analysis.thread_time import call_waits, copy_op_of_calls
from gaplens.analysis.units import fmt_ns
from gaplens.analysis.wait_calls import graph_launched, recorded_waits, wait_call_before
from gaplens.loaders.model import Trace

#: An op that starts this long after its launch returned, with the device empty meanwhile, gets a note:
#: queueing on an idle device takes microseconds.
QUEUE_NOTE_NS = 1_000_000
NO_LAUNCH_HINT = "the GPU op after this gap has no recorded launch call: its host thread was not traced"
NO_NEXT_HINT = "no GPU work follows this gap in the trace"
DEPENDENCY_HINT = (
    "the next GPU op was queued before the gap began, so the host was not late: the device waited on a "
    "dependency (stream order, another stream's or device's work, another process) that the trace does not record"
)
DEPENDENCY_WAIT_HINT = (
    "the next GPU op was queued before the gap began behind a stream wait (cudaStreamWaitEvent): the device "
    "waited on another stream's work, not on the host"
)
DEPENDENCY_GRAPH_HINT = (
    "the next GPU op belongs to a graph launched before the gap began: the device waited on a graph edge "
    "(a node's dependencies), not on the host"
)
MODULE_LOAD_HINT = (
    "a one-off warm-up cost (lazy module loading), set apart from the steady state like a warm-up step: "
    "load modules up front (CUDA_MODULE_LOADING=EAGER, a warm-up pass) or profile after warm-up"
)
COPY_CALL_HINT = "the launching thread sat in copy calls (cudaMemcpy*) while the device ran no compute"
IDLE_HINT = "nothing was asked of the device here (outside every phase, or no host work in flight)"
PROFILER_HINT = "the profiler's own work (buffer flushes, initialisation) covers most of this region: an artefact"
COMM_HINT = (
    "the device only ran communication here: it waited for a peer or the network "
    "(compare the ranks: gaplens ranks RANK_TRACES…)"
)


#: Messages are written when first read, this many regions at a time: a screen or a report reads a few,
#: an export or ``gaps --json --top 0`` reads them all (then in one pass). Each block is one vectorised
#: ``messages`` call; 1,024 keeps a single read at about a millisecond.
MESSAGE_BLOCK = 1024


class GapMessages(Sequence[str]):
    """Each blank region's message (``messages``), written the first time it is read, a block at a time.

    An eager decode loop of 1M events has 170k regions; a sync-bound one (cloverleaf tiled to 1M) 156k
    that each name their calls, 2.6 s of formatting that the summary, the report and the viewer never
    read. A region's message depends on that region alone, so a block of them reads the same as the
    whole. The trace is read through a weak reference while it lives (its memoised readings serve the
    messages); the columns keep a shallow copy of it (the same arrays, no memo of its own) for the
    messages read after it is gone. Neither keeps the trace itself alive: the memo drops a trace's
    readings when the trace goes (``memo.per_trace``).
    """

    def __init__(
        self,
        trace: Trace,
        reg: Regions,
        nxt: np.ndarray,
        cause: np.ndarray,
        names: Sequence[str],
        known: np.ndarray,
        warm: np.ndarray,
    ) -> None:
        self._trace = weakref.ref(trace)
        self._shadow = copy.copy(trace)  # the same columns under another object: read only once the trace is gone
        self._reg, self._nxt, self._cause, self._names, self._known, self._warm = reg, nxt, cause, names, known, warm
        self._texts: list[str | None] = [None] * len(reg)
        self._written = np.zeros(-(-len(reg) // MESSAGE_BLOCK), bool)  # per block

    def __len__(self) -> int:
        return len(self._texts)

    @overload
    def __getitem__(self, k: int) -> str: ...

    @overload
    def __getitem__(self, k: slice) -> list[str]: ...

    def __getitem__(self, k: int | slice) -> str | list[str]:
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        text = self._texts[k]
        if text is None:
            i = operator.index(k) % len(self)
            self._write(np.asarray([i // MESSAGE_BLOCK]))
            text = self._texts[i]
        return text  # type: ignore[return-value]

    def __iter__(self) -> Iterator[str]:
        self._write(np.flatnonzero(~self._written))
        return iter(self._texts)  # type: ignore[arg-type]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def _live(self) -> Trace:
        """The trace while it lives (its memoised readings), else its shallow copy."""
        trace = self._trace()
        return self._shadow if trace is None else trace

    def _write(self, blocks: np.ndarray) -> None:
        """Write the messages of these blocks of regions, in one ``messages`` call."""
        if blocks.size == 0:
            return
        trace = self._live()
        starts = blocks * MESSAGE_BLOCK
        idx = (starts[:, None] + np.arange(MESSAGE_BLOCK)).ravel()
        idx = idx[idx < len(self)]
        reg = self._reg
        part = Regions(reg.device[idx], reg.start_ns[idx], reg.end_ns[idx], reg.idle[idx])
        cause = np.asarray(self._names)[self._cause[idx]]
        texts = messages(trace, part, self._nxt[idx], cause, self._known[idx], self._warm[idx])
        for i, text in zip(idx.tolist(), texts, strict=True):
            self._texts[i] = text
        self._written[blocks] = True

    def __getstate__(self) -> dict[str, Any]:
        """Kept with the readings (``store.readings``) as they stand: the trace as a reference, not a copy."""
        state = dict(self.__dict__)
        state["_trace"] = self._live()
        del state["_shadow"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        trace = state.pop("_trace")
        self.__dict__.update(state)
        self._trace = weakref.ref(trace)
        self._shadow = copy.copy(trace)


def messages(
    trace: Trace, reg: Regions, nxt: np.ndarray, cause: np.ndarray, known: np.ndarray, warm: np.ndarray
) -> list[str]:
    """Per region: its message, from its cause's name (``cause``: one of ``analysis.causes.CAUSES`` each).

    A one-off module load (``warm``) says what loaded: the whole message where the thread's time is host
    or launch work (the load is), after the cause's own message otherwise.
    """
    out = [""] * len(reg)
    for c, hint in (("idle", IDLE_HINT), ("profiler", PROFILER_HINT), ("comm", COMM_HINT)):
        for i in np.flatnonzero(cause == c).tolist():
            out[i] = hint
    dep = np.flatnonzero(cause == "dependency")
    if dep.size:
        waited = recorded_waits(trace)
        graphs = graph_launched(trace, nxt[dep])
        called = wait_call_before(trace, nxt[dep]) >= 0
        for i, g, w in zip(dep.tolist(), graphs.tolist(), called.tolist(), strict=True):
            if int(nxt[i]) in waited or w:
                out[i] = DEPENDENCY_WAIT_HINT
            elif g:
                out[i] = DEPENDENCY_GRAPH_HINT
            else:
                out[i] = DEPENDENCY_HINT
    for c, cls_, head in (
        ("alloc", Call.ALLOC, "the launching thread sat in memory-management calls"),
        ("sync", Call.SYNC, "the launching thread synchronised"),
    ):
        picked = np.flatnonzero(cause == c)
        for i, text in zip(picked.tolist(), _call_messages(trace, reg, picked, nxt, cls_, head), strict=True):
            out[i] = text
    copies = np.flatnonzero(cause == "copy")
    if copies.size:
        for i, text in zip(copies.tolist(), _copy_messages(trace, reg, copies, nxt), strict=True):
            out[i] = text
    if "cpu_ops" in trace.meta.lacks:
        for i in np.flatnonzero(cause == "host").tolist():
            out[i] = out[i] or HOST_UNSEEN_HINT
    for i in np.flatnonzero(warm & (nxt >= 0)).tolist():
        text = f"{module_load_words(trace, int(nxt[i]))}: {MODULE_LOAD_HINT}"
        out[i] = text if cause[i] in ("host", "launch") or not out[i] else f"{out[i]}; {text}"
    for i, text in _queue_notes(trace, reg, nxt, cause).items():
        out[i] = f"{out[i]}; {text}" if out[i] else text
    unknown = np.flatnonzero(cause == "unknown")
    if unknown.size:
        cpu = has_cpu_side(trace)
        for i in unknown.tolist():
            out[i] = CAPTURE_HINT if not cpu else (NO_LAUNCH_HINT if nxt[i] >= 0 else NO_NEXT_HINT)
    return out


def _queue_notes(trace: Trace, reg: Regions, nxt: np.ndarray, cause: np.ndarray) -> dict[int, str]:
    """Regions whose op started more than ``QUEUE_NOTE_NS`` after its launch call returned while the device
    ran nothing at all: nothing in the trace explains the delay (lazy module loading, a graph's first upload,
    or host and device clocks that disagree). Said, with the numbers, rather than blamed on anyone."""
    a = np.where(nxt >= 0, trace.launch[np.maximum(nxt, 0)], -1)
    a0 = np.maximum(a, 0)
    op_start = trace.start_ns[np.maximum(nxt, 0)]
    delay = op_start - trace.end_ns[a0]
    cand = np.flatnonzero((a >= 0) & (delay > QUEUE_NOTE_NS) & (cause != "idle"))
    out: dict[int, str] = {}
    if cand.size == 0:
        return out
    splits = device_splits(trace)
    empty = np.zeros(cand.size, bool)
    for dev in np.unique(reg.device[cand]).tolist():
        sp = splits.get(int(dev))
        if sp is None:
            continue
        m = reg.device[cand] == dev
        # Nothing ran between the call's return and the op's start (else the queue explains the wait).
        empty[m] = (sp.busy.busy_before(op_start[cand[m]]) - sp.busy.busy_before(trace.end_ns[a0[cand[m]]])) == 0
    for i in cand[empty].tolist():
        call = trace.name(int(a0[i]))
        out[i] = (
            f"{trace.name(int(nxt[i]))[:60]} started {fmt_ns(int(delay[i]))} after {call} returned, with nothing "
            "running on the device: a queue delay the trace does not explain (lazy module loading, a graph's "
            "first upload, or host and device clocks that disagree)"
        )
    return out


def _copy_messages(trace: Trace, reg: Regions, gaps: np.ndarray, nxt: np.ndarray) -> list[str]:
    """For copy-caused gaps: which copies ran (direction and memory kind) and whether they crossed the host link.

    With no copy on the device, the copy calls the launching thread sat in, named by the copy each queued.
    """
    cm = copy_mask(trace)
    dev_of = trace.device_of_event()
    out = []
    by_dev: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for i in gaps.tolist():
        d = int(reg.device[i])
        if d not in by_dev:
            ops = np.flatnonzero(cm & (dev_of == d))
            ops = ops[np.argsort(trace.start_ns[ops], kind="stable")]
            by_dev[d] = (ops, trace.start_ns[ops], np.maximum.accumulate(trace.end_ns[ops]) if ops.size else ops)
        ops, st, reach = by_dev[d]
        s, e = int(reg.start_ns[i]), int(reg.end_ns[i])
        hi = int(np.searchsorted(st, e, "left"))
        lo = int(np.searchsorted(reach, s, "right")) if ops.size else 0
        labels: dict[str, int] = {}
        for j in ops[lo:hi].tolist():
            ov = min(int(trace.end_ns[j]), e) - max(int(trace.start_ns[j]), s)
            if ov > 0:
                lab = copy_label(trace, j)
                labels[lab] = labels.get(lab, 0) + ov
        if not labels:
            out.append(_copy_call_text(trace, int(nxt[i]), s, e))
            continue
        ranked = sorted(labels.items(), key=lambda kv: -kv[1])
        text = "copies ran here: " + ", ".join(f"{k} {fmt_ns(v)}" for k, v in ranked[:3])
        if not any(is_host_copy(k) for k in labels):
            text += " (device-local: no host<->device traffic; look at why the data is copied at all)"
        out.append(text)
    return out


def _call_messages(trace: Trace, reg: Regions, gaps: np.ndarray, nxt: np.ndarray, cls_: Call, head: str) -> list[str]:
    """For alloc- or sync-caused gaps: the calls of that class the launching thread made in the region and
    just before it (the run-ahead follows the call), by name with their count and time: ``cudaFree ×12 3.1 ms``."""
    cls = api_class(trace)
    waited = call_waits(trace)
    per_lane: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # the class's calls of a lane, once
    out = []
    for i in gaps.tolist():
        call = int(trace.launch[int(nxt[i])]) if nxt[i] >= 0 else -1
        if call < 0:
            out.append("")
            continue
        s, e = int(reg.start_ns[i]), int(reg.end_ns[i])
        lane = int(trace.lane[call])
        if lane not in per_lane:
            sl = trace.lane_events(lane)
            idx = np.arange(sl.start, sl.stop)
            mine_all = idx[cls[idx] == cls_]  # one thread's calls: in start order, not overlapping
            per_lane[lane] = (mine_all, trace.start_ns[mine_all], np.maximum.accumulate(trace.end_ns[mine_all]))
        mine, starts, ends = per_lane[lane]
        # the calls inside the region, else the last one of the class before it (whose run-ahead this may be)
        lo, hi = int(np.searchsorted(ends, s, "right")), int(np.searchsorted(starts, e, "left"))
        inside = mine[lo:hi]
        if inside.size == 0 and lo > 0:
            inside = mine[lo - 1 : lo]
        if inside.size == 0:
            out.append(head)
            continue
        named: dict[str, list[int]] = {}
        for c in inside.tolist():
            acc = named.setdefault(trace.name(c), [0, 0])
            acc[0] += 1
            acc[1] += int(trace.end_ns[c] - trace.start_ns[c])
        ranked = sorted(named.items(), key=lambda kv: -kv[1][1])
        calls = ", ".join(f"{k} ×{n} {fmt_ns(t)}" for k, (n, t) in ranked[:3])
        last = int(inside[np.argmax(trace.end_ns[inside])])
        ahead = int(trace.end_ns[last]) < e and waited[last] > 0
        tail = (
            "; then ran host work it could have done while the device still had work (run-ahead lost)" if ahead else ""
        )
        out.append(f"{head}: {calls}{tail}")
    return out


def _copy_call_text(trace: Trace, nxt: int, s: int, e: int) -> str:
    """What the launching thread's copy calls inside [s, e) copied: ``HtoD pageable`` and the time in the calls."""
    call = int(trace.launch[nxt]) if nxt >= 0 else -1
    if call < 0:
        return COPY_CALL_HINT
    lane = int(trace.lane[call])
    sl = trace.lane_events(lane)
    idx = np.arange(sl.start, sl.stop)
    idx = idx[(trace.start_ns[idx] < e) & (trace.end_ns[idx] > s) & (api_class(trace)[idx] == Call.COPY)]
    if idx.size == 0:
        return COPY_CALL_HINT
    ops = copy_op_of_calls(trace, api_class(trace))(idx)
    labels: dict[str, int] = {}
    for c, op in zip(idx.tolist(), ops.tolist(), strict=True):
        lab = copy_label(trace, op) if op >= 0 else "copy"
        labels[lab] = labels.get(lab, 0) + min(int(trace.end_ns[c]), e) - max(int(trace.start_ns[c]), s)
    ranked = sorted(labels.items(), key=lambda kv: -kv[1])
    text = "the launching thread sat in copy calls: " + ", ".join(f"{k} {fmt_ns(v)}" for k, v in ranked[:3])
    if not any(is_host_copy(k) for k in labels):
        text += " (device-local copies: no host<->device traffic)"
    return text
