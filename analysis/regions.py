"""Where each device waited: compute-idle stretches, cut into *idle* (nothing asked) and *starved* pieces.

A blank region is a stretch where the device runs no compute. Communication and copies alone do
not count as compute: a rank spinning in an all-reduce for its peer is waiting (``analysis.comm``),
and a step spent in a pageable copy is copy-bound (such stretches get cause ``comm`` or ``copy``).

    compute    ███   ██          ████         ███
    comm              ▒▒▒▒▒▒
    host       [request 3 ......]     sleep     [request 4 ..]
    regions       [  ][ comm   ][ ][  idle  ][  ]              <- starved | idle | starved

Idle: nothing was asked of the device. When the trace marks phases (the user's ranges, or the
profiler's ``ProfilerStep#N``), a stretch outside every phase of the processes that use the device
is idle (start-up, waiting for the first request, between requests). Without phases, a stretch of
at least ``IDLE_MIN_NS`` with no CPU op, Python frame, CUDA call or range in flight on the threads
that launch the device's work is idle (``IDLE_MIN_UNSEEN_NS`` when the trace records no CPU ops).
Work queued but not yet run is asked. A trace without its host side is never called idle: it
cannot tell.

``bound_by`` reads the time that was asked (the window less its idle regions) by class of GPU work:
compute-, copy- or communication-bound, or mostly waiting.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gaplens.analysis.busy import BusySpans, busy_share, copy_breakdown, device_splits, gpu_window, gpu_work, pct
from gaplens.analysis.memo import per_trace
from gaplens.analysis.phases import PhaseList, int_column, phases
from gaplens.analysis.step_names import PROFILER_STEP as _PROFILER_STEP  # the one step marker rule
from gaplens.analysis.units import fmt_ns
from gaplens.analysis.words import MOSTLY
from gaplens.loaders.model import Kind, LaneKind, Trace

#: Without phases, host silence shorter than this is the program's own overhead, not a waiting room.
IDLE_MIN_NS = 1_000_000
#: The same when the trace records no CPU ops (nsys, CUDA-only Kineto): only CUDA calls show the host
#: at work, so silence between them may be Python; only a long one is a waiting room.
IDLE_MIN_UNSEEN_NS = 50_000_000


@dataclass(frozen=True)
class Regions:
    """Blank regions of one or more devices in (start, device) order, as columns."""

    device: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    idle: np.ndarray  # bool: nothing was asked

    def __len__(self) -> int:
        return int(self.start_ns.size)


def regions(trace: Trace, device: int | None = None, window: tuple[int, int] | None = None, min_ns: int = 1) -> Regions:
    """Blank regions of each device (or one) inside its GPU window (or ``window``), at least ``min_ns`` long."""
    if device is None and window is None and min_ns == 1:
        return _every_region(trace)
    return _regions(trace, device, window, min_ns)


@per_trace
def _every_region(trace: Trace) -> Regions:
    """The default reading (every device, its whole GPU window): the gaps, the idle time and the summary read it."""
    return _regions(trace, None, None, 1)


def _regions(trace: Trace, device: int | None, window: tuple[int, int] | None, min_ns: int) -> Regions:
    devices = [device] if device is not None else [d.id for d in trace.meta.devices]
    parts = []
    splits = device_splits(trace)
    for dev in devices:
        split = splits.get(dev)
        if split is None:
            continue
        w0, w1 = window if window is not None else gpu_window(trace, dev)
        compute = split.compute
        asked = asked_spans(trace, dev)
        if asked is None:
            s, e = complement(compute, w0, w1)
            idle = np.zeros(s.size, dtype=bool)
        else:
            # Idle pieces: neither compute nor anything asked; starved rows: the rest of the blank time.
            i_s, i_e = complement(BusySpans(*_cat(compute, asked)), w0, w1)
            s_s, s_e = complement(BusySpans(*_cat(compute, BusySpans(i_s, i_e))), w0, w1)
            s = np.concatenate((s_s, i_s))
            e = np.concatenate((s_e, i_e))
            idle = np.concatenate((np.zeros(s_s.size, bool), np.ones(i_s.size, bool)))
        keep = (e - s) >= min_ns
        parts.append((np.full(int(keep.sum()), dev, np.int64), s[keep], e[keep], idle[keep]))
    if not parts:
        empty = np.empty(0, np.int64)
        return Regions(empty, empty, empty, np.zeros(0, bool))
    d, s, e, idle = (np.concatenate([p[k] for p in parts]) for k in range(4))
    order = np.lexsort((d, s))
    return Regions(d[order], s[order].astype(np.int64), e[order].astype(np.int64), idle[order])


@per_trace
def idle_ns(trace: Trace) -> int:
    """Blank time, summed over devices, where nothing was asked of the device."""
    reg = regions(trace)
    return int((reg.end_ns[reg.idle] - reg.start_ns[reg.idle]).sum())


@per_trace
def idle_by_device(trace: Trace) -> dict[int, int]:
    """``idle_ns`` per device: a multi-GPU window's summed idle can exceed the window, one device's cannot."""
    reg = regions(trace)
    out = {int(d.id): 0 for d in busy_share(trace).devices}
    for d in np.unique(reg.device[reg.idle]).tolist():
        m = reg.idle & (reg.device == d)
        out[int(d)] = int((reg.end_ns[m] - reg.start_ns[m]).sum())
    return out


def active_compute_pct(trace: Trace) -> float:
    """Compute share of the time the devices were asked for work: what density verdicts use.

    A server idle between requests is not a slow server; its compute share while serving is.
    """
    share = busy_share(trace)
    return pct(share.compute_ns, share.device_ns - idle_ns(trace))


def complement(busy: BusySpans, w0: int, w1: int) -> tuple[np.ndarray, np.ndarray]:
    """Spans inside [w0, w1) that ``busy`` does not cover."""
    if w1 <= w0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    s = np.clip(busy.start, w0, w1)
    e = np.clip(busy.end, w0, w1)
    keep = e > s
    s, e = s[keep], e[keep]
    gap_s = np.concatenate(([w0], e))
    gap_e = np.concatenate((s, [w1]))
    keep = gap_e > gap_s
    return gap_s[keep].astype(np.int64), gap_e[keep].astype(np.int64)


def _cat(a: BusySpans, b: BusySpans) -> tuple[np.ndarray, np.ndarray]:
    return np.concatenate((a.start, b.start)), np.concatenate((a.end, b.end))


@per_trace
def _asked_by_device(trace: Trace) -> dict[int, BusySpans | None]:
    return {d.id: _asked(trace, d.id) for d in trace.meta.devices}


def asked_spans(trace: Trace, device: int) -> BusySpans | None:
    """When something was asked of ``device`` (None when the trace cannot tell: no host side)."""
    return _asked_by_device(trace).get(device)


@per_trace
def _phases_by_device(trace: Trace) -> dict[int, list]:
    out: dict[int, list] = {}
    found = phases(trace)
    for d in trace.meta.devices:
        pids = {p for p, _ in launching_threads(trace, d.id)}
        out[d.id] = PhaseList(p for p in found if p.pid in pids) if pids else PhaseList(found)
    return out


def device_phases(trace: Trace, device: int) -> list:
    """The phases of the processes that queue work on ``device`` (all phases when none is known)."""
    return _phases_by_device(trace).get(device, phases(trace))


def launching_threads(trace: Trace, device: int) -> set[tuple[int, int]]:
    """(pid, tid) of the host threads whose calls queued work on ``device``."""
    return _launching_threads(trace).get(device, set())


@per_trace
def _launching_threads(trace: Trace) -> dict[int, set[tuple[int, int]]]:
    """Per device, the threads that queued its work: one pass over the launch links of all GPU ops."""
    ops = gpu_work(trace)
    calls = trace.launch[ops]
    has = calls >= 0
    dev = trace.device_of_event()[ops[has]]
    lane = trace.lane[calls[has]].astype(np.int64)
    # (device, lane) pairs without sorting a million rows: a small presence table over dense device codes.
    ids = np.unique(np.asarray([ln.device for ln in trace.lanes if ln.device >= 0] or [0], np.int64))
    code = np.minimum(np.searchsorted(ids, dev), ids.size - 1)
    seen = np.zeros((ids.size, len(trace.lanes)), bool)
    seen[code, lane] = True
    return {
        int(ids[k]): {(trace.lanes[int(ln)].pid, trace.lanes[int(ln)].tid) for ln in np.flatnonzero(seen[k]).tolist()}
        for k in np.flatnonzero(seen.any(axis=1)).tolist()
    }


def _asked(trace: Trace, device: int) -> BusySpans | None:
    threads = launching_threads(trace, device)
    if not threads:
        return None
    pids = {p for p, _ in threads}
    split = device_splits(trace)[device]
    # Communication and copies are work the device was asked to do, even where it only waits; so is GPU work
    # from the moment its launch call queued it until it ran (waiting on a dependency, not idle).
    starts, ends = [split.comm.start, split.copy.start], [split.comm.end, split.copy.end]
    ops = gpu_work(trace, device)
    calls = trace.launch[ops]
    queued = calls >= 0
    starts.append(trace.start_ns[calls[queued]])
    ends.append(trace.end_ns[ops[queued]])
    # The phases of those processes and their ProfilerStep# markers, from columns: 100k NVTX ranges were 100k
    # regular-expression matches and attribute reads (0.3-0.4 s of a summary); each name is matched once.
    found = phases(trace)
    marked = np.flatnonzero(np.isin(int_column(found, "pid"), list(pids)))
    ann = np.flatnonzero(trace.kind == int(Kind.ANNOTATION))
    lane_pid = np.asarray([ln.pid for ln in trace.lanes], dtype=np.int64)
    steps = ann[np.isin(lane_pid[trace.lane[ann]], list(pids))] if ann.size else ann
    if steps.size:
        ids = np.unique(trace.name_id[steps]).tolist()
        wanted = np.asarray([i for i in ids if _PROFILER_STEP.match(trace.names[i])], np.int64)
        steps = steps[np.isin(trace.name_id[steps], wanted)]
    if marked.size or steps.size:
        starts += [int_column(found, "host_start_ns")[marked], trace.start_ns[steps]]
        ends += [int_column(found, "host_end_ns")[marked], trace.end_ns[steps]]
        return BusySpans(np.concatenate(starts), np.concatenate(ends))
    in_flight = (int(Kind.CPU_OP), int(Kind.PYTHON), int(Kind.CUDA_API), int(Kind.ANNOTATION))
    host_kinds = (LaneKind.CPU_OPS, LaneKind.CUDA_API, LaneKind.ANNOTATIONS)
    for ln in trace.lanes:
        if ln.kind in host_kinds and (ln.pid, ln.tid) in threads:
            sl = trace.lane_events(ln.id)
            m = np.isin(trace.kind[sl], in_flight)
            starts.append(trace.start_ns[sl][m])
            ends.append(trace.end_ns[sl][m])
    busy = BusySpans(np.concatenate(starts), np.concatenate(ends))
    # Host silence shorter than the minimum is overhead inside the work: fill those holes.
    seen = any(ln.kind == LaneKind.CPU_OPS and (ln.pid, ln.tid) in threads for ln in trace.lanes)
    h_s, h_e = complement(busy, int(trace.start_ns.min()), int(trace.end_ns.max()))
    short = (h_e - h_s) < (IDLE_MIN_NS if seen else IDLE_MIN_UNSEEN_NS)
    return BusySpans(np.concatenate((busy.start, h_s[short])), np.concatenate((busy.end, h_e[short])))


@dataclass(frozen=True)
class Bound:
    """Which class of GPU work a stretch of time was spent in (DESIGN.md § Three classes of GPU work).

    ``verdict``: ``compute`` (the device computes and paces the work), ``copy`` (copies not hidden under
    compute fill most of the busy time: copy-bound), ``comm`` (communication not hidden under compute or
    copies: waiting for peers), ``waiting`` (busy less than half the asked time: ``words.MOSTLY``),
    ``none`` (nothing was asked).
    """

    verdict: str
    asked_ns: int  # the span summed over devices, less the idle time (nothing asked)
    busy_ns: int
    compute_ns: int
    copy_only_ns: int  # copies not overlapped by compute
    comm_only_ns: int  # communication not overlapped by compute or copies
    copies: dict[str, int]  # copy time by direction and memory kind

    def pct(self, part: int) -> float:
        return pct(part, self.asked_ns)

    @property
    def words(self) -> str:
        """One line: ``copy-bound: 90% of the asked time in copies not hidden by compute (HtoD pageable 84 ms)``."""
        if self.verdict == "none":
            return "nothing was asked of the device"
        if self.verdict == "waiting":
            return f"mostly waiting: busy {self.pct(self.busy_ns):.0f}% of the time work was asked"
        if self.verdict == "copy":
            kinds = ", ".join(f"{k} {fmt_ns(v)}" for k, v in list(self.copies.items())[:3])
            return (
                f"copy-bound: {self.pct(self.copy_only_ns):.0f}% of the time work was asked went to copies not "
                f"hidden by compute ({kinds}); compute {self.pct(self.compute_ns):.0f}%"
            )
        if self.verdict == "comm":
            return (
                f"communication-bound: {self.pct(self.comm_only_ns):.0f}% of the time work was asked the device only "
                f"communicated (waiting for peers counts as waiting); compute {self.pct(self.compute_ns):.0f}%"
            )
        return f"compute-bound: {self.pct(self.compute_ns):.0f}% of the time work was asked the device computed"


def bound_by(
    trace: Trace, window: tuple[int, int] | None = None, device: int | None = None, exclude_idle: bool = True
) -> Bound:
    """Is a step or window compute-, copy- or communication-bound, or mostly waiting?

    Over ``window`` (default: each device's GPU window) on ``device`` (default: all, summed), less the
    idle time (nothing asked) when ``exclude_idle``. When the device was busy at least
    half of that time (``words.MOSTLY``), the verdict is the class with the most exclusive time: compute,
    then copies not under compute, then communication under neither. Density and pacing verdicts use this.
    """
    splits = device_splits(trace)
    devices = [device] if device is not None else [d.id for d in trace.meta.devices]
    asked = busy = compute = copy_only = comm_only = 0
    copies: dict[str, int] = {}
    for dev in devices:
        sp = splits.get(dev)
        if sp is None:
            continue
        w0, w1 = window if window is not None else gpu_window(trace, dev)
        if w1 <= w0:
            continue
        span = w1 - w0
        if exclude_idle:
            reg = regions(trace, dev, (w0, w1))
            span -= int((reg.end_ns[reg.idle] - reg.start_ns[reg.idle]).sum())
        asked += max(span, 0)
        b = sp.busy.busy_in(w0, w1)
        k = sp.compute.busy_in(w0, w1)
        with_copy = BusySpans(*_cat(sp.compute, sp.copy)).busy_in(w0, w1)
        busy += b
        compute += k
        copy_only += with_copy - k
        comm_only += b - with_copy
        for label, ns in copy_breakdown(trace, w0, w1, dev).items():
            copies[label] = copies.get(label, 0) + ns
    copies = dict(sorted(copies.items(), key=lambda kv: -kv[1]))
    if asked <= 0:
        verdict = "none"
    elif busy < MOSTLY * asked:
        verdict = "waiting"
    else:
        verdict = max((compute, "compute"), (copy_only, "copy"), (comm_only, "comm"), key=lambda kv: kv[0])[1]
    return Bound(verdict, asked, busy, compute, copy_only, comm_only, copies)


@dataclass(slots=True)
class Gap:
    device: int
    start_ns: int
    end_ns: int
    on_critical_path: bool = False
    cause: str = "unknown"
    shares: dict[str, float] = field(default_factory=dict)  # cause -> share of the gap, sums to 1
    evidence: list[int] = field(default_factory=list)  # event indices that explain it
    message: str = ""  # e.g. what better trace to collect

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def shares_text(self) -> str:
        return shares_text(self.shares)


def shares_text(shares: dict[str, float]) -> str:
    """``host 92%, launch 6%``: the shares of at least half a percent, largest first."""
    ranked = sorted(shares.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{c} {100 * v:.0f}%" for c, v in ranked if v >= 0.005)
