"""The one experiment (protocol step 6 and the report): the lever that pays most, not THE gap's.

THE gap (the largest blank region on the critical path) is where steps 4 and 5 look; it can be a
2 ms host island in a trace whose 537 ms of on-path blank time is 78% launch overhead. So the
experiment goes to the *cause group* holding the most on-path blank time in steady steps:

1. Steady steps come from the one step owner (``analysis.steps``), warm-up steps set apart; a gap
   belongs to the step that launched the op ending it (the host was late there). Without steps,
   the whole GPU window. A one-off module load (``calls.module_load_regions``: a first launch of
   ``calls.FIRST_CALL_MIN_NS`` or more, or the driver's module-load calls before a launch) is warm-up
   wherever it lies, as it is never THE gap.
2. On-path blank time per cause in those steps (``analysis.gaps.gap_columns``), summed over
   devices; the largest group wins, printed with its share, the steps it appears in and the smell
   rollup that matches it ("launch picket fence in 32 of 32 decode_step"); what-if's predicted
   step time when ``analysis.whatif`` can give one.
3. Copy-bound steps (copies alone on the device ``COPY_BOUND_SHARE`` of the steady time) get the
   copy lever, naming direction and memory kind. When on-path blank time is under
   ``DEVICE_PACED_BLANK_SHARE`` of the steady time, or compute fills ``KERNEL_BOUND_PCT``, the
   device paces the work: the waits between queued ops (``dependency``) when they outweigh the
   host's, else the kernels against their hardware floor (``analysis.floor.lever``'s op family when its
   excess is worth naming).
4. The lever is fitted to the trace (``analysis.levers``): never what the trace already does.

Pure and headless; the walkthrough's step 6, the viewer's panel and the report all print ``experiment``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gaplens.analysis.busy import busy_share, gpu_window, span_busy_ns
from gaplens.analysis.gaps import CAUSES, GapColumns, gap_columns
from gaplens.analysis.lever_changes import NO_MODEL, quotes
from gaplens.analysis.levers import fitted_lever, graph_lever
from gaplens.analysis.memo import per_trace
from gaplens.analysis.regions import active_compute_pct
from gaplens.analysis.spans import union
from gaplens.analysis.steps import Steps, step_of, steps
from gaplens.analysis.units import fmt_ns
from gaplens.analysis.words import CAUSE_SMELL, KERNEL_LEVER, MOSTLY, NO_GPU, SMELL_NAMES, WARMUP_LEVER
from gaplens.loaders.model import Kind, Trace

#: Compute share (of the time work was asked) above which the device paces the work: at most a
#: tenth of the asked time is left for the host to shorten.
KERNEL_BOUND_PCT = 90.0
#: On-path blank time below this share of the steady time leaves the kernels as the lever: a
#: host-side fix could win back less than a twentieth of the step.
DEVICE_PACED_BLANK_SHARE = 0.05
#: A step whose copies run alone (no compute beside them) this share of its steady time is copy-bound.
COPY_BOUND_SHARE = MOSTLY

#: The floor's op family is named as the lever only when its time above the floor is this share of the
#: steady time: the same twentieth that makes host-side blank time worth a lever.
FLOOR_MIN_SHARE = DEVICE_PACED_BLANK_SHARE
#: GPU work that is a copy (memset included: it moves no compute forward either).
COPY_KINDS = (Kind.MEMCPY_HTOD, Kind.MEMCPY_DTOH, Kind.MEMCPY_DTOD, Kind.MEMCPY_PEER, Kind.MEMCPY_OTHER, Kind.MEMSET)
#: When the device is neither busy nor waiting on the host: the time goes on the GPU side.
GPU_SIDE_LEVER = (
    "the time goes on the GPU side: look at what each stream waits on (events, other streams, copies) and at "
    "the kernels against the hardware floor; the host is not the lever"
)
#: How the experiment names each cause group.
GROUP_NAMES = {
    "launch": "launch-bound",
    "host": "host work",
    "sync": "synchronisation",
    "alloc": "memory allocation",
    "copy": "copies",
    "comm": "waiting in communication",
    "dependency": "waiting on queued work",
    "unknown": "unexplained (the host side is missing)",
}
#: The smell (or lever key) each cause group is fixed by.
GROUP_LEVER = {**CAUSE_SMELL, "comm": "comm", "dependency": "dependency", "alloc": "alloc"}


@dataclass
class Experiment:
    """Step 6's proposal: the lever, why this one, and the numbers behind it."""

    lever: str
    because: str
    group: str  # a cause in GROUP_NAMES, or "device" (kernels), "warmup", "better_trace", "none"
    blank_ns: int = 0  # the group's on-path blank time in steady time
    total_ns: int = 0  # all on-path blank time in steady time
    highlight_ns: tuple[int, int] | None = None  # the group's largest region in steady time
    facts: list[str] = field(default_factory=list)  # more lines for step 6 (the smell, THE gap's share)

    @property
    def share(self) -> float:
        return self.blank_ns / self.total_ns if self.total_ns else 0.0


@dataclass(frozen=True)
class Steady:
    """The time the experiment reads: steady steps, warm-up set apart (or the GPU window)."""

    label: str  # the step family, "" when the trace has no steps (then: the whole GPU window)
    count: int  # steady steps (0 without steps)
    warmup: list[str]  # the steps set apart, in words (``Steps.warmup_text``)
    time_ns: int  # the steady steps' time (as CUDA events time them), or the window

    @property
    def words(self) -> str:
        """``in 31 steady steps (decode_step; warm-up decode_step 0 set apart)`` or ``in the GPU window``: the
        family's own name in brackets (a family named ``step`` read "in 5 steady step" before)."""
        if not self.label:
            return "in the GPU window"
        aside = self.label
        if self.warmup:
            shown = ", ".join(self.warmup[:3]) + (f" and {len(self.warmup) - 3} more" if len(self.warmup) > 3 else "")
            aside += f"; warm-up {shown} set apart"
        return f"in {self.count} steady step{'' if self.count == 1 else 's'} ({aside})"


def steady(trace: Trace, st: Steps) -> Steady:
    if not st or not st.steady:
        w0, w1 = gpu_window(trace)
        return Steady("", 0, [], w1 - w0)
    warm = [st.warmup_text()] if st.warmup else []  # one phrase: names, or "the first N (...)"
    return Steady(st.label, len(st.steady), warm, sum(st.spans[k][1] - st.spans[k][0] for k in st.steady))


def gap_steps(trace: Trace, cols: GapColumns, st: Steps) -> np.ndarray:
    """The step of each gap (-1 outside every step): the step that launched the op ending it.

    The host was late launching that op, so the step whose host span holds the launch is the one
    that paid; a gap with no op after it belongs to the step whose GPU span holds its start.
    """
    out = np.full(len(cols), -1, np.int64)
    if not st:
        return out
    has = cols.next_op >= 0
    out[has] = step_of(trace, cols.next_op[has], st)
    lo = np.asarray([a for a, _ in st.spans], np.int64)
    hi = np.asarray([b for _, b in st.spans], np.int64)
    order = np.argsort(lo, kind="stable")
    k = np.searchsorted(lo[order], cols.start_ns[~has], "right") - 1
    ok = (k >= 0) & (cols.start_ns[~has] < hi[order][np.maximum(k, 0)])
    out[np.flatnonzero(~has)[ok]] = order[k[ok]]
    return out


def _covered(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Whether each time in ``t`` lies in one of the sorted, disjoint intervals."""
    k = np.searchsorted(starts, t, "right") - 1
    return (k >= 0) & (t < ends[np.maximum(k, 0)]) if starts.size else np.zeros(t.size, bool)


def _copy_alone_ns(trace: Trace, spans: list[tuple[int, int]]) -> tuple[int, list[int]]:
    """Time inside ``spans`` when copies ran and no compute kernel did (summed over devices); those copies."""
    from gaplens.analysis.comm import comm_mask

    copies = np.isin(trace.kind, np.asarray([int(k) for k in COPY_KINDS], np.int8))
    if not copies.any():
        return 0, []
    dev = trace.device_of_event()
    compute = (trace.kind == int(Kind.KERNEL)) & ~comm_mask(trace)
    ss, se = union(np.asarray([a for a, _ in spans], np.int64), np.asarray([b for _, b in spans], np.int64))
    total, events = 0, []
    for d in trace.meta.devices:
        c = np.flatnonzero(copies & (dev == d.id))
        if c.size == 0:
            continue
        k = compute & (dev == d.id)
        cs, ce = union(trace.start_ns[c], trace.end_ns[c])
        ks, ke = union(trace.start_ns[k], trace.end_ns[k])
        # Elementary pieces between every boundary; a piece counts when it is in a copy, in a steady
        # span and in no compute kernel.
        pts = np.unique(np.concatenate((cs, ce, ss, se, ks, ke)))
        left = pts[:-1]
        alone = _covered(cs, ce, left) & _covered(ss, se, left) & ~_covered(ks, ke, left)
        total += int(np.diff(pts)[alone].sum())
        k0 = np.searchsorted(ss, trace.end_ns[c], "left") - 1
        overlaps = (k0 >= 0) & (trace.start_ns[c] < se[np.maximum(k0, 0)])
        events += c[overlaps].tolist()
    return total, events


@per_trace
def experiment(trace: Trace) -> Experiment:
    """The one experiment for this trace (see module docstring); cached per trace.

    Kept whole (over 80 lines): one decision ladder read top to bottom, each return one kind of experiment
    (no GPU work, better trace, copy-bound, dependency, device-paced, then the largest on-path cause).
    """
    if not busy_share(trace).busy_ns:
        return Experiment(NO_GPU, "", "none")
    st = steps(trace)
    sd = steady(trace, st)
    cols = gap_columns(trace)
    dur = cols.end_ns - cols.start_ns
    the = cols.the_index()
    first_call = cols.warmup & cols.on_path
    on = cols.on_path & ~first_call
    k = gap_steps(trace, cols, st)
    if st:
        steady_mask = st.steady_mask()
        steady_gap = (k >= 0) & steady_mask[np.maximum(k, 0)]
        in_warm = on & (k >= 0) & ~steady_mask[np.maximum(k, 0)]
        outside = on & (k < 0)
    else:
        steady_gap, in_warm, outside = np.ones(len(cols), bool), np.zeros(len(cols), bool), np.zeros(len(cols), bool)
    in_steady = on & steady_gap
    dependency = int(dur[steady_gap & ~cols.on_path & (cols.cause == CAUSES.index("dependency"))].sum())
    inside = np.where(in_steady, dur, 0)
    by = np.bincount(cols.cause, weights=inside, minlength=len(CAUSES)).astype(np.int64)
    total = int(by.sum())
    first_ns = int(dur[first_call].sum())
    warm_ns = first_ns + int(dur[in_warm].sum())
    set_apart = f"; a one-off first-call launch ({fmt_ns(first_ns)}, module load) set apart" if first_ns else ""
    steady_ns = max(sd.time_ns, 1)

    if total == 0 and the >= 0 and CAUSES[int(cols.cause[the])] == "unknown":
        lever = "collect a better trace first: " + (cols.message[the] or "the host side is missing")
        return Experiment(lever, "the trace cannot say why the device waited", "better_trace")
    copy_alone, copy_events = _copy_alone_ns(trace, _steady_spans(trace, st))
    if copy_alone >= COPY_BOUND_SHARE * steady_ns:
        c = CAUSES.index("copy")
        return Experiment(
            fitted_lever(trace, "copy_on_path", _kind(trace), copy_events),
            f"copy-bound: copies ran alone on the device {fmt_ns(copy_alone)}, "
            f"{100 * copy_alone / steady_ns:.0f}% of the time {sd.words}",
            "copy",
            int(by[c]),
            total,
            facts=[line for q in quotes(trace, "copy", copy_events) for line in q.lines()],
        )
    compute_pct = _compute_pct(trace, st, cols)
    quiet = total < DEVICE_PACED_BLANK_SHARE * steady_ns
    worth = DEVICE_PACED_BLANK_SHARE * steady_ns  # blank time elsewhere that outweighs a quiet host
    if compute_pct < KERNEL_BOUND_PCT and quiet and dependency > total and dependency >= worth:
        why = (
            f"waiting on queued work: the device waited {fmt_ns(dependency)} off the host's path "
            f"({100 * dependency / steady_ns:.0f}% of the time {sd.words}) against {fmt_ns(total)} on it"
        )
        lever = fitted_lever(trace, "dependency", _kind(trace))
        return Experiment(lever, why, "dependency", dependency, total, facts=[NO_MODEL["dependency"]])
    if total == 0 or compute_pct >= KERNEL_BOUND_PCT or quiet:
        # The compute share is of the time work was asked (idle stretches left out): a 13.3 s profiler step
        # holding 1.76 µs of work read "100% busy computing in 1 steady ProfilerStep" (HTA triton_example).
        where = "of the time work was asked" + (f" {sd.words}" if st else "")
        scope = "their time" if st else "the GPU window"
        on_path = f"on-path blank time {fmt_ns(total)}, {100 * total / steady_ns:.1f}% of {scope}"
        facts = _outside_line(int(dur[outside].sum()), total) + _warm_line(warm_ns, total)
        if compute_pct < KERNEL_BOUND_PCT and total > 0:  # not busy, yet not waiting on the host either
            why = f"the host is not what the device waits for: {compute_pct:.0f}% busy computing {where}; {on_path}"
            return Experiment(GPU_SIDE_LEVER, why, "device", 0, total, None, facts)
        why = f"the device paces the work: {compute_pct:.0f}% busy computing {where}; {on_path}"
        return _device(trace, why, total, _steady_spans(trace, st), [*facts, NO_MODEL["device"]])
    g = int(np.argmax(by))
    cause = CAUSES[g]
    blank = int(by[g])
    mine = np.flatnonzero((cols.cause == g) & (inside > 0))
    big = int(mine[np.argmax(inside[mine])])
    highlight = (int(cols.start_ns[big]), int(cols.end_ns[big]))
    hit = f"; in {len(set(k[mine].tolist()))} of {sd.count} steps" if st else ""
    because = (
        f"{GROUP_NAMES.get(cause, cause)}: {100 * blank / total:.0f}% of {fmt_ns(total)} on-path blank time "
        f"{sd.words}{hit}{set_apart}"
    )
    facts = _smell_line(trace, cause) + _outside_line(int(dur[outside].sum()), total)
    if cause == "unknown":
        lever = "collect a better trace first: " + (cols.message[big] or "the host side is missing")
        return Experiment(lever, because, "better_trace", blank, total, highlight, facts)
    facts += _the_gap_line(cols, the, g, total, inside, st, k)
    copies = _copies_in(trace, cols.start_ns[mine], cols.end_ns[mine]) if cause == "copy" else None
    qs = quotes(trace, cause, copies)
    lever = fitted_lever(trace, GROUP_LEVER.get(cause, cause), _kind(trace), copies)
    kinds = {c.kind for c in qs[0].changes}
    if "graph" in kinds:
        lever = graph_lever(trace, _kind(trace), lever)
        if "remove" in kinds:  # --remove sync --graph step: the step's synchronisations stand in the way
            lever += "; first take the synchronisations out of the step (a CUDA graph cannot hold one)"
    return Experiment(lever, because, cause, blank, total, highlight, facts + [ln for q in qs for ln in q.lines()])


def _copies_in(trace: Trace, g0: np.ndarray, g1: np.ndarray) -> list[int]:
    """Copy events overlapping any of the regions [g0, g1): the copies a ``copy`` group is about."""
    idx = np.flatnonzero(np.isin(trace.kind, np.asarray([int(k) for k in COPY_KINDS], np.int8)))
    if idx.size == 0 or g0.size == 0:
        return []
    s0, s1 = union(g0.astype(np.int64), g1.astype(np.int64))
    k = np.searchsorted(s0, trace.end_ns[idx], "left") - 1  # the last region starting before the copy ends
    hit = (k >= 0) & (trace.start_ns[idx] < s1[np.maximum(k, 0)])
    return idx[hit].tolist()


def _compute_pct(trace: Trace, st: Steps, cols: GapColumns) -> float:
    """Compute share of the time work was asked in the steady steps (as CUDA events time them, idle
    stretches inside them left out); without steps, of the time work was asked in the whole trace."""
    if not st or not st.steady:
        return active_compute_pct(trace)
    devs = [d.id for d in trace.meta.devices]
    spans = [st.spans[k] for k in st.steady]
    busy = sum(span_busy_ns(trace, a, b, devs) for a, b in spans)
    s0, s1 = union(np.asarray([a for a, _ in spans], np.int64), np.asarray([b for _, b in spans], np.int64))
    w0, w1 = gpu_window(trace)  # before the first and after the last GPU op nothing was asked of the device
    s0, s1 = np.clip(s0, w0, w1), np.clip(s1, w0, w1)
    keep = s1 > s0
    s0, s1 = s0[keep], s1[keep]
    if s0.size == 0:  # the steps hold none of the GPU window (a marker around set-up): read the trace
        return active_compute_pct(trace)
    idle = cols.cause == CAUSES.index("idle")
    pts_in = _inside(s0, s1, cols.start_ns[idle], cols.end_ns[idle])
    asked = int((s1 - s0).sum()) * max(len(devs), 1) - int(pts_in.sum())
    if busy == 0 or asked <= 0:  # the steps hold none of the GPU work (a marker around set-up): read the trace
        return active_compute_pct(trace)
    return 100.0 * busy / asked


def _inside(s0: np.ndarray, s1: np.ndarray, t0: np.ndarray, t1: np.ndarray) -> np.ndarray:
    """Each interval [t0, t1)'s time inside the sorted, disjoint spans [s0, s1)."""
    cum = np.concatenate(([0], np.cumsum(s1 - s0)))

    def before(t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(s0, t, "right")
        part = np.where(k > 0, np.minimum(t, s1[np.maximum(k - 1, 0)]) - s0[np.maximum(k - 1, 0)], 0)
        return np.where(k > 0, cum[np.maximum(k - 1, 0)] + part, 0)

    return before(t1) - before(t0)


def _steady_spans(trace: Trace, st: Steps) -> list[tuple[int, int]]:
    if not st or not st.steady:
        return [gpu_window(trace)]
    return [st.spans[k] for k in st.steady]


def _warm_line(warm_ns: int, total: int) -> list[str]:
    """Warm-up's on-path blank time, set apart, when it outweighs the steady steps': say where it went."""
    if warm_ns <= total:
        return []
    return [f"{fmt_ns(warm_ns)} more on-path blank time lies in warm-up, set apart here; {WARMUP_LEVER}"]


def _outside_line(outside_ns: int, total: int) -> list[str]:
    """On-path blank time outside every step (set-up, prefill before the loop) when it outweighs the steps'."""
    if outside_ns <= total:
        return []
    return [f"{fmt_ns(outside_ns)} more on-path blank time lies outside every step (before, between or after them)"]


def _the_gap_line(
    cols: GapColumns, the: int, group: int, total: int, inside: np.ndarray, st: Steps, k: np.ndarray
) -> list[str]:
    """Say so when THE gap of steps 4 and 5 is not of the group the lever targets, and how much it holds.

    Its step is ``gap_steps``'s, the one step 4 names too (``walk.region_step``)."""
    if the < 0 or int(cols.cause[the]) == group or not cols.on_path[the]:
        return []
    d = int(cols.end_ns[the] - cols.start_ns[the])
    what = f"the largest blank region (steps 4 and 5: {fmt_ns(d)}, {CAUSES[int(cols.cause[the])]})"
    if 2 * int(inside[the]) < d:
        if st and k[the] < 0:
            return [f"{what} lies outside every {st.label}: not what a steady step pays"]
        if st and k[the] in st.warmup_idx:
            return [f"{what} lies in {st.names[int(k[the])]}, a warm-up step: not what a steady step pays"]
        return [f"{what} lies outside the steady time: warm-up, not what a steady step pays"]
    share = 100 * int(inside[the]) / max(total, 1)
    return [f"{what} holds {share:.1f}% of that time: the lever goes to the larger share"]


def _kind(trace: Trace) -> str:
    from gaplens.analysis.workload import kind

    return kind(trace)


def _device(trace: Trace, why: str, total: int, spans: list[tuple[int, int]], facts: list[str]) -> Experiment:
    """The kernels are the lever: the op family furthest above its hardware floor when one can be named.

    Only a family whose excess over its floor is ``FLOOR_MIN_SHARE`` of the steady time or more is
    named: a few microseconds above the floor is not where a device-paced step's time goes.
    """
    try:
        from gaplens.analysis.floor.lever import floor_lever
    except ImportError:  # the floor reading is optional
        return Experiment(KERNEL_LEVER, why, "device", 0, total, None, facts)
    t0, t1 = min(a for a, _ in spans), max(b for _, b in spans)
    found = floor_lever(trace, t0, t1)
    if found is None or found.excess_ns < FLOOR_MIN_SHARE * sum(b - a for a, b in spans):
        return Experiment(KERNEL_LEVER, why, "device", 0, total, None, facts)
    lever = f"look at the kernels against the hardware floor: {found.text}"
    return Experiment(lever, why, "device", 0, total, None, facts)


def _smell_line(trace: Trace, cause: str) -> list[str]:
    """The rolled-up smell that matches the group ("launch picket fence in 32 of 32 decode_step, …")."""
    from gaplens.analysis.smells import rollup, smells

    kind = CAUSE_SMELL.get(cause)
    if kind is None:
        return []
    groups = [g for g in rollup(trace, smells(trace)) if g.kind == kind and not g.findings[0].numbers.get("warmup")]
    if not groups:
        return [f"no {SMELL_NAMES[kind]} crosses its threshold: the time is spread over many small regions"]
    return [f"smell: {groups[0].line}"]
