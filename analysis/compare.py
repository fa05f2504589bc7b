"""Before/after: the same readings of two traces side by side, with differences, a verdict and a gate.

Every reading is the one the single-trace commands print (DESIGN.md):
- blank regions follow THE gap's rule: the largest on the critical path (``GapColumns.the_index``);
  idle stretches and the profiler's own flushes ("Activity Buffer Request") are no finding, here
  either. THE blank region of BEFORE is located in its innermost phase (``decode_step 23``); AFTER
  is asked for its largest such region in phases of the same family, so a fix is judged where the
  problem was;
- the device's work is *compute*, not busy: an NCCL kernel spinning while it waits for a peer, or a
  pageable copy, keeps the device busy and computes nothing;
- the step is the step owner's (``analysis.steps``);
- the verdict names the largest change: the cause whose blank time on the critical path per step
  moved most (a new 15 ms host island), with THE gap of AFTER when it is of that cause.

``gate`` evaluates ``--fail-on`` conditions (``step>+5%``, ``compute<-10%``, ``gap>+20%``,
``kernel:GLOB>+10%``): each is a relative change AFTER vs BEFORE held against a signed threshold.
Gates read the steady steps only: a warm-up step (a first step's module loading, an allocator growing)
is set apart from every metric, so ``gap`` is the largest eligible blank region outside the warm-up
steps and ``compute`` the compute share of the steady steps' spans.
When the traces differ in shape (another step count, another number of kernels per step) the
comparison says so: it may compare unlike things.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import asdict, dataclass, field

import numpy as np

from gaplens.analysis.busy import span_busy_ns
from gaplens.analysis.gaps import CAUSES, NOT_WORK, gap_columns, the_gap
from gaplens.analysis.phases import Phase, family, innermost, phases
from gaplens.analysis.regions import device_phases
from gaplens.analysis.steps import Steps, steps
from gaplens.analysis.summary import summary
from gaplens.analysis.units import fmt_ns
from gaplens.loaders.model import MEMCPY_KINDS, Kind, Trace, TraceError

#: Below this relative change a blank region "stayed about the same".
SAME_WITHIN = 0.10
#: Kernels per step may differ by this share before the traces count as differently shaped.
SHAPE_TOLERANCE = 0.2
#: What blank time of each cause is, in a sentence ("a new 15 ms host island").
CAUSE_WORDS = {
    "host": "host islands",
    "launch": "launch overhead",
    "sync": "synchronisation",
    "alloc": "memory allocation",
    "copy": "copies",
    "comm": "communication waits",
    "dependency": "waits on queued work",
    "unknown": "unexplained blank time",
}


@dataclass
class PhaseStat:
    """One phase family of one trace: summed span and compute time, largest blank region inside (steady
    members: the step family's warm-up steps are counted apart)."""

    name: str
    count: int = 0
    dur_ns: int = 0
    busy_ns: int = 0  # compute time inside the phases' GPU spans
    largest_blank_ns: int = 0
    warmup: int = 0  # members inside a warm-up step (the step's own included), set apart (not in the sums above)

    @property
    def blank_ns(self) -> int:
        return self.dur_ns - self.busy_ns

    @property
    def busy_pct(self) -> float:
        return round(100.0 * self.busy_ns / self.dur_ns, 2) if self.dur_ns > 0 else 0.0


@dataclass
class Reading:
    """What ``compare`` reads from one trace."""

    path: str
    window_ns: int
    busy_ns: int
    busy_pct: float
    compute_ns: int
    compute_pct: float
    kernels: int
    copies: int
    copy_bytes: int
    steps: dict | None  # {label, count, median_ns, warmup}
    kernels_per_step: float | None
    copies_per_step: float | None
    copy_bytes_per_step: float | None
    gap: dict | None  # {start_ns, end_ns, dur_ns, cause, shares, on_critical_path, phase, family}
    blank_by_cause: dict[str, int] = field(default_factory=dict)  # per steady step (or whole window), ns
    blank_scope: str = "window"  # "per step" when blank_by_cause is per steady step
    phases: dict[str, PhaseStat] = field(default_factory=dict)
    kernel_ns: dict[str, int] = field(default_factory=dict)  # per kernel name (for the gate; not in JSON)
    kernel_scope_steps: int = 0  # steady steps the kernel times were summed over (0: whole trace)
    # What the gate reads (not in JSON): the steady steps' largest blank region and compute share;
    # without warm-up steps (or without steps) they are THE gap and the window's compute share.
    gate_gap_ns: int = 0
    gate_compute_pct: float = 0.0
    gate_scope: str = "window"  # "steady steps" when warm-up steps were set apart

    def to_dict(self) -> dict:
        d = asdict(self)
        for key in ("kernel_ns", "kernel_scope_steps", "gate_gap_ns", "gate_compute_pct", "gate_scope"):
            d.pop(key)
        d["phases"] = [{**asdict(p), "busy_pct": p.busy_pct, "blank_ns": p.blank_ns} for p in self.phases.values()]
        return d


def _eligible(cols) -> np.ndarray:
    """THE gap's rule as a mask (``GapColumns.the_index``): on the critical path; without any, what the device
    was asked to fill; a one-off module load only when nothing else is."""
    on = np.asarray(cols.on_path, dtype=bool)
    work = ~np.isin(cols.cause, NOT_WORK)
    warm = np.asarray(cols.warmup, dtype=bool)
    for pick in (on & ~warm, work & ~warm, on, work):
        if pick.any():
            return pick
    return work


def read(trace: Trace) -> Reading:
    s = summary(trace, top=1)
    w0, w1 = s["window_ns"]
    cols = gap_columns(trace)
    ok = _eligible(cols)
    gs, ge, gc = cols.start_ns[ok], cols.end_ns[ok], cols.cause[ok]
    gd = cols.device[ok]
    by_dev = {int(d): (gs[gd == d], ge[gd == d]) for d in np.unique(gd).tolist()}
    st = steps(trace)
    stats = _phase_stats(trace, st, by_dev, gs, ge)

    step_d = st.to_json() if st else None
    kps = cps = bps = None
    steady = [st.spans[k] for k in st.steady] if st else []
    kern = np.flatnonzero(trace.kind == int(Kind.KERNEL))
    if steady:
        k = _count_in(trace, steady, (Kind.KERNEL,))
        c = _count_in(trace, steady, MEMCPY_KINDS)
        b = _bytes_in(trace, steady, MEMCPY_KINDS)
        kps, cps, bps = k / len(steady), c / len(steady), b / len(steady)
        kern = _in_spans(trace, steady, (Kind.KERNEL,))
    by_cause = _blank_by_cause(gs, ge, gc, steady, (w0, w1))

    gap = the_gap(trace)
    gap_d = None
    if gap is not None:
        inner = innermost(device_phases(trace, gap.device), gap.start_ns, gap.end_ns)
        gap_d = {
            "device": gap.device,
            "start_ns": gap.start_ns,
            "end_ns": gap.end_ns,
            "dur_ns": gap.dur_ns,
            "cause": gap.cause,
            "shares": dict(gap.shares),
            "on_critical_path": bool(gap.on_critical_path),
            "phase": inner.name if inner else "",
            "family": family(inner.name) if inner else "",
        }
    gpu = s["gpu"]
    window = max(w1 - w0, 0)
    compute_ns = int(gpu.get("compute_ns", gpu["busy_ns"]))
    compute_pct = round(100.0 * compute_ns / window, 2) if window else 0.0
    gate_gap: int = gap.dur_ns if gap is not None else 0
    gate_compute, gate_scope = compute_pct, "window"
    if st and st.warmup_idx and steady:
        # gates judge the steady state: a warm-up step's gap is no regression (issue 31: "1.14 ms in step 3")
        hulls = [_hull(st.host_spans[k], st.spans[k]) for k in st.warmup_idx]
        gate_gap, gate_compute = _outside_longest(gs, ge, hulls), _compute_pct_in(trace, steady)
        gate_scope = "steady steps"
    return Reading(
        path=s["source"]["path"],
        window_ns=window,
        busy_ns=gpu["busy_ns"],
        busy_pct=round(float(gpu["busy_pct"]), 2),
        compute_ns=compute_ns,
        compute_pct=compute_pct,
        kernels=s["kernels"]["count"],
        copies=s["memcpy"]["count"],
        copy_bytes=s["memcpy"]["bytes"],
        steps=step_d,
        kernels_per_step=kps,
        copies_per_step=cps,
        copy_bytes_per_step=bps,
        gap=gap_d,
        blank_by_cause=by_cause,
        blank_scope="per step" if steady else "window",
        phases=stats,
        kernel_ns=_kernel_ns(trace, kern),
        kernel_scope_steps=len(steady),
        gate_gap_ns=gate_gap,
        gate_compute_pct=gate_compute,
        gate_scope=gate_scope,
    )


def _phase_stats(
    trace: Trace, st: Steps | None, by_dev: dict[int, tuple[np.ndarray, np.ndarray]], gs: np.ndarray, ge: np.ndarray
) -> dict[str, PhaseStat]:
    """Per phase family: instances, time, compute time and the largest blank region inside one instance.

    Warm-up steps are set apart (the step owner names them): a first step's module loading is no finding
    and so is what ran inside them: a child family summed over every step beside a parent summed over
    the steady ones reads longer than its parent (round-3 copy_bound: copy_in ×6 522 ms, train_step ×5 508 ms).
    """
    warm = [st.host_spans[k] for k in st.warmup_idx] if st else []
    stats: dict[str, PhaseStat] = {}
    for p in phases(trace):
        st_ = stats.setdefault(family(p.name), PhaseStat(family(p.name)))
        if st and any(p.pid == st.pid and a <= p.host_start_ns and p.host_end_ns <= z for a, z in warm):
            st_.warmup += 1
            continue
        st_.count += 1
        st_.dur_ns += p.dur_ns
        if p.lane >= 0:
            st_.busy_ns += span_busy_ns(trace, p.start_ns, p.end_ns, [trace.lanes[p.lane].device])
        ds, de = by_dev.get(p.device, (gs[:0], ge[:0])) if p.device is not None else (gs, ge)
        st_.largest_blank_ns = max(st_.largest_blank_ns, _largest_clipped(ds, de, p.start_ns, p.end_ns))
    return stats


def _hull(host: tuple[int, int], gpu: tuple[int, int]) -> tuple[int, int]:
    """A step's whole extent: its host range and its GPU span (the work it queued may run after the host left)."""
    return min(host[0], gpu[0]), max(host[1], gpu[1])


def _outside_longest(gs: np.ndarray, ge: np.ndarray, spans: list[tuple[int, int]]) -> int:
    """The longest of the blank regions [gs, ge) once the parts inside ``spans`` (disjoint) are taken off."""
    if gs.size == 0:
        return 0
    left = (ge - gs).astype(np.int64)
    for a, z in spans:
        left -= np.clip(np.minimum(ge, z) - np.maximum(gs, a), 0, None)
    return int(max(0, left.max()))


def _compute_pct_in(trace: Trace, spans: list[tuple[int, int]]) -> float:
    """Compute time inside the spans over their summed length, all devices summed (as the window's share is)."""
    length = sum(max(0, z - a) for a, z in spans)
    if length <= 0:
        return 0.0
    busy = sum(span_busy_ns(trace, a, z) for a, z in spans)
    return round(100.0 * busy / length, 2)


def _largest_clipped(gs: np.ndarray, ge: np.ndarray, t0: int, t1: int) -> int:
    """The largest eligible blank region's part inside [t0, t1)."""
    if gs.size == 0 or t1 <= t0:
        return 0
    clipped = np.minimum(ge, t1) - np.maximum(gs, t0)
    return int(max(0, clipped.max()))


def _blank_by_cause(
    gs: np.ndarray, ge: np.ndarray, gc: np.ndarray, spans: list[tuple[int, int]], window: tuple[int, int]
) -> dict[str, int]:
    """Eligible blank time by cause: per steady step (clipped to the steps' spans) or over the window."""
    use = spans or [window]
    total = np.zeros(len(CAUSES), np.int64)
    for a, z in use:
        part = np.clip(np.minimum(ge, z) - np.maximum(gs, a), 0, None)
        total += np.bincount(gc, weights=part, minlength=len(CAUSES)).astype(np.int64)[: len(CAUSES)]
    n = len(spans) if spans else 1
    return {c: int(v) // n for c, v in zip(CAUSES, total.tolist(), strict=True) if v > 0}


def _kernel_ns(trace: Trace, idx: np.ndarray) -> dict[str, int]:
    if idx.size == 0:
        return {}
    dur = trace.end_ns[idx] - trace.start_ns[idx]
    ids, inv = np.unique(trace.name_id[idx], return_inverse=True)
    tot = np.bincount(inv.reshape(-1), weights=dur)
    return {trace.names[int(i)]: int(v) for i, v in zip(ids.tolist(), tot.tolist(), strict=True)}


def _in_spans(trace: Trace, spans: list[Phase] | list[tuple[int, int]], kinds) -> np.ndarray:
    """GPU events of ``kinds`` starting inside any of the spans (vectorised)."""
    m = np.flatnonzero(trace.mask(kinds))
    if m.size == 0 or not spans:
        return m[:0]
    pairs = sorted((p.start_ns, p.end_ns) if isinstance(p, Phase) else (int(p[0]), int(p[1])) for p in spans)
    s = np.asarray([a for a, _ in pairs], dtype=np.int64)
    e = np.asarray([z for _, z in pairs], dtype=np.int64)
    t = trace.start_ns[m]
    k = np.searchsorted(s, t, "right") - 1
    ok = (k >= 0) & (t < e[np.maximum(k, 0)])
    return m[ok]


def _count_in(trace: Trace, spans, kinds) -> int:
    return int(_in_spans(trace, spans, kinds).size)


def _bytes_in(trace: Trace, spans, kinds) -> int:
    return int(trace.bytes[_in_spans(trace, spans, kinds)].sum())


# ---- the comparison ------------------------------------------------------------


def _change(before: float | None, after: float | None) -> dict:
    if before is None or after is None:
        return {"before": before, "after": after, "diff": None, "pct": None}
    diff = round(after - before, 2) if isinstance(after - before, float) else after - before
    pct = round(100.0 * diff / before, 1) if before else None
    return {"before": before, "after": after, "diff": diff, "pct": pct}


def compare(before: Trace, after: Trace) -> dict:
    """Every reading of both traces, the differences and a plain verdict (JSON-ready)."""
    rb, ra = read(before), read(after)
    return compare_readings(rb, ra)


def compare_readings(rb: Reading, ra: Reading) -> dict:
    out: dict = {"before": rb.to_dict(), "after": ra.to_dict()}
    out["busy_pct"] = _change(rb.busy_pct, ra.busy_pct)
    out["compute_pct"] = _change(rb.compute_pct, ra.compute_pct)
    out["kernels"] = _change(rb.kernels, ra.kernels)
    out["copies"] = _change(rb.copies, ra.copies)
    same_steps = _same_steps(rb, ra)
    out["step_time_ns"] = _change(
        rb.steps["median_ns"] if rb.steps else None, ra.steps["median_ns"] if same_steps and ra.steps else None
    )
    out["step_label"] = rb.steps["label"] if rb.steps else None
    out["kernels_per_step"] = _change(rb.kernels_per_step, ra.kernels_per_step if same_steps else None)
    out["copies_per_step"] = _change(rb.copies_per_step, ra.copies_per_step if same_steps else None)
    out["copy_bytes_per_step"] = _change(rb.copy_bytes_per_step, ra.copy_bytes_per_step if same_steps else None)

    rows = []
    for name in [*rb.phases, *(n for n in ra.phases if n not in rb.phases)]:
        pb, pa = rb.phases.get(name), ra.phases.get(name)
        rows.append(
            {
                "name": name,
                "count": [pb.count if pb else 0, pa.count if pa else 0],
                "dur_ns": _change(pb.dur_ns if pb else None, pa.dur_ns if pa else None),
                "busy_pct": _change(pb.busy_pct if pb else None, pa.busy_pct if pa else None),
                "blank_ns": _change(pb.blank_ns if pb else None, pa.blank_ns if pa else None),
                "largest_blank_ns": _change(pb.largest_blank_ns if pb else None, pa.largest_blank_ns if pa else None),
            }
        )
    out["phases"] = rows
    out["gap"] = _gap_verdict(rb, ra)
    out["largest_change"] = largest_change(rb, ra)
    out["warnings"] = shape_warnings(rb, ra)
    out["verdict"] = _verdict(out)
    return out


def _same_steps(rb: Reading, ra: Reading) -> bool:
    return bool(rb.steps and ra.steps and rb.steps["label"] == ra.steps["label"])


def shape_warnings(rb: Reading, ra: Reading) -> list[str]:
    """Ways BEFORE and AFTER differ in shape, each a reason to distrust a naive comparison."""
    out = []
    if (rb.steps is None) != (ra.steps is None) or (rb.steps and ra.steps and rb.steps["label"] != ra.steps["label"]):
        out.append("the traces are not stepped the same way: per-step numbers are not compared")
    elif rb.steps and ra.steps and rb.steps["count"] != ra.steps["count"]:
        out.append(
            f"BEFORE has {rb.steps['count']} {rb.steps['label']}s, AFTER {ra.steps['count']}: totals differ in scope"
        )
    kb, ka = rb.kernels_per_step, ra.kernels_per_step
    if kb and ka and abs(ka - kb) > SHAPE_TOLERANCE * kb:
        out.append(
            f"kernels per step changed from {kb:.0f} to {ka:.0f}: if that was not the experiment, the "
            "workloads differ (batch, sequence length, model)"
        )
    return out


def largest_change(rb: Reading, ra: Reading) -> dict | None:
    """The cause whose blank time on the critical path moved most (per steady step when both are stepped alike)."""
    if rb.blank_scope != ra.blank_scope or (rb.blank_scope == "per step" and not _same_steps(rb, ra)):
        return None
    causes = set(rb.blank_by_cause) | set(ra.blank_by_cause)
    if not causes:
        return None
    diffs = {c: ra.blank_by_cause.get(c, 0) - rb.blank_by_cause.get(c, 0) for c in causes}
    cause = max(sorted(diffs), key=lambda c: abs(diffs[c]))
    res = {
        "cause": cause,
        "scope": rb.blank_scope,
        "before_ns": rb.blank_by_cause.get(cause, 0),
        "after_ns": ra.blank_by_cause.get(cause, 0),
        "diff_ns": diffs[cause],
        "the_gap_after": None,
    }
    if ra.gap and ra.gap["cause"] == cause and diffs[cause] > 0:
        res["the_gap_after"] = {k: ra.gap[k] for k in ("dur_ns", "start_ns", "phase", "cause")}
    if rb.gap and rb.gap["cause"] == cause and diffs[cause] < 0:
        res["the_gap_before"] = {k: rb.gap[k] for k in ("dur_ns", "start_ns", "phase", "cause")}
    return res


def _gap_verdict(rb: Reading, ra: Reading) -> dict:
    """Judge the blank region where BEFORE had it: same phase family in AFTER."""
    gb, ga = rb.gap, ra.gap
    res: dict = {"before": gb, "after": ga, "where": None, "before_ns": None, "after_ns": None, "outcome": "unknown"}
    if gb is None:
        res["outcome"] = "no blank region before"
        return res
    where = gb["family"]
    before_ns = gb["dur_ns"]
    if where and where in ra.phases:
        # The same measure on both sides: the largest eligible blank region clipped to that phase family.
        before_ns = rb.phases[where].largest_blank_ns
        after_ns = ra.phases[where].largest_blank_ns
    elif where:
        res.update(where=where, before_ns=before_ns, outcome="phase missing after")
        return res
    else:
        after_ns = ga["dur_ns"] if ga else 0
    res.update(where=where or None, before_ns=before_ns, after_ns=after_ns)
    if where:
        # All the blank time of that phase family, per occurrence (per step for decode_step N).
        pb, pa = rb.phases[where], ra.phases[where]
        res["blank_per_occurrence_ns"] = [pb.blank_ns // max(pb.count, 1), pa.blank_ns // max(pa.count, 1)]
        # The phase sums leave warm-up steps out, so the largest here can differ from THE gap (and the gate's)
        res["warmup_set_apart"] = bool(pb.warmup or pa.warmup)
    ratio = after_ns / before_ns if before_ns else 1.0
    res["pct"] = round(100.0 * (ratio - 1.0), 1)
    if ratio < 1 - SAME_WITHIN:
        res["outcome"] = "shrank"
    elif ratio > 1 + SAME_WITHIN:
        res["outcome"] = "grew"
    else:
        res["outcome"] = "about the same"
    return res


def _verdict(out: dict) -> str:
    g = out["gap"]
    parts = []
    if g["outcome"] in ("shrank", "grew", "about the same"):
        where = f" in {g['where']}" if g["where"] else ""
        outcome = "stayed about the same" if g["outcome"] == "about the same" else g["outcome"]
        on = "on the critical path" if g["before"] and g["before"]["on_critical_path"] else "(off the critical path)"
        if g.get("warmup_set_apart"):  # island_fixed vs island_fault: 4.29 ms here, THE gap 4.37 ms in a warm-up step
            on += " (warm-up steps set apart)"
        parts.append(
            f"The blank region{where} {outcome}: largest {on} {fmt_ns(g['before_ns'])} before, "
            f"{fmt_ns(g['after_ns'])} after ({g['pct']:+.0f}%)"
        )
    elif g["outcome"] == "phase missing after":
        parts.append(f"The blank region was in {g['where']}, which AFTER does not have: compare by hand")
    else:
        parts.append("BEFORE has no blank region to shrink")
    st = out["step_time_ns"]
    if st["pct"] is not None:
        moved = "grew" if st["diff"] > 0 else "shrank"
        if abs(st["pct"]) < 100 * SAME_WITHIN / 2:
            moved = "stayed about the same"
        parts.append(
            f"the {out['step_label']} {moved} from {fmt_ns(st['before'])} to {fmt_ns(st['after'])} ({st['pct']:+.0f}%)"
        )
    lc = out["largest_change"]
    if lc and lc["diff_ns"]:
        what = CAUSE_WORDS.get(lc["cause"], lc["cause"])
        scope = f" per {out['step_label']}" if lc["scope"] == "per step" and out["step_label"] else ""
        direction = "grew" if lc["diff_ns"] > 0 else "shrank"
        text = (
            f"largest change: {what} on the critical path{scope} {direction} from {fmt_ns(lc['before_ns'])} "
            f"to {fmt_ns(lc['after_ns'])}"
        )
        ga = lc.get("the_gap_after")
        if ga:
            where = f" in {ga['phase']}" if ga["phase"] else ""
            noun = "host island" if lc["cause"] == "host" else f"{lc['cause']} region"
            text += f" (a {fmt_ns(ga['dur_ns'])} {noun}{where} is THE gap after)"
        parts.append(text)
    c = out["compute_pct"]
    if abs(c["diff"]) <= 0.5:
        parts.append(f"compute share stayed at {c['after']:.1f}%")
    else:
        direction = "rose" if c["diff"] > 0 else "fell"
        parts.append(f"compute share {direction} from {c['before']:.1f}% to {c['after']:.1f}%")
    return "; ".join(parts) + "."


# ---- the gate ------------------------------------------------------------------

_EXPR = re.compile(
    r"^\s*(?P<metric>step|compute|gap|kernel:(?P<glob>.+?))\s*(?P<op>[<>])\s*(?P<val>[+-]?\d+(?:\.\d+)?)\s*%\s*$"
)
METRICS = "step>+N%, compute<-N%, gap>+N%, kernel:GLOB>+N%"


@dataclass(frozen=True)
class Condition:
    """``step>+5%``: the relative change AFTER vs BEFORE of one metric, held against a signed threshold."""

    expr: str
    metric: str  # step | compute | gap | kernel
    op: str  # ">" or "<"
    threshold_pct: float
    glob: str = ""


def parse_fail_on(exprs: list[str]) -> list[Condition]:
    """Conditions from ``--fail-on`` values (each may hold several, comma-separated); TraceError if malformed."""
    out = []
    for raw in exprs:
        for part in _split(raw):
            m = _EXPR.match(part)
            if m is None:
                raise TraceError(f"--fail-on {part!r}: expected one of {METRICS}")
            metric = "kernel" if m.group("glob") is not None else m.group("metric")
            out.append(Condition(part.strip(), metric, m.group("op"), float(m.group("val")), m.group("glob") or ""))
    if not out:
        raise TraceError(f"--fail-on needs a condition: {METRICS}")
    return out


def _split(raw: str) -> list[str]:
    """Split on commas that follow a ``%`` (a glob may hold commas inside braces or brackets)."""
    return [p for p in re.split(r"(?<=%)\s*,", raw) if p.strip()]


def _metric(c: Condition, rb: Reading, ra: Reading) -> tuple[float | None, float | None, str, str]:
    """(before, after, unit, why not) for one condition's metric."""
    if c.metric == "step":
        if not rb.steps or not ra.steps:
            side = "BEFORE" if not rb.steps else "AFTER"
            return None, None, "ns", f"{side} has no step (no numbered range family, no ProfilerStep#)"
        if rb.steps["label"] != ra.steps["label"]:
            return None, None, "ns", f"the steps differ: {rb.steps['label']} vs {ra.steps['label']}"
        return rb.steps["median_ns"], ra.steps["median_ns"], "ns", ""
    if c.metric == "compute":
        return rb.gate_compute_pct, ra.gate_compute_pct, "%", ""
    if c.metric == "gap":
        return rb.gate_gap_ns, ra.gate_gap_ns, "ns", ""
    per_step = rb.kernel_scope_steps > 0 and ra.kernel_scope_steps > 0 and _same_steps(rb, ra)

    def total(r: Reading) -> float:
        ns = sum(v for k, v in r.kernel_ns.items() if fnmatch.fnmatchcase(k, c.glob))
        return ns / r.kernel_scope_steps if per_step else float(ns)

    return total(rb), total(ra), "ns per step" if per_step else "ns", ""


def gate(conditions: list[Condition], rb: Reading, ra: Reading) -> dict:
    """Each condition judged on the two readings; ``exit_status`` 3 when one holds, 2 when one cannot be judged."""
    rows = []
    for c in conditions:
        before, after, unit, why = _metric(c, rb, ra)
        row: dict = {
            "expr": c.expr,
            "metric": c.metric,
            "glob": c.glob or None,
            "op": c.op,
            "threshold_pct": c.threshold_pct,
            "before": before,
            "after": after,
            "unit": unit,
            "change_pct": None,
            "holds": None,
            "reason": why or None,
            # what the numbers cover: the steady steps when either trace set warm-up steps apart
            "scope": "steady steps" if "steady steps" in (rb.gate_scope, ra.gate_scope) else "window",
        }
        if before is not None and after is not None:
            if before:
                change = 100.0 * (after - before) / before
            else:
                change = 0.0 if after == before else (float("inf") if after > before else float("-inf"))
            row["change_pct"] = round(change, 2) if np.isfinite(change) else None
            row["change_infinite"] = not np.isfinite(change)
            row["holds"] = bool(change > c.threshold_pct if c.op == ">" else change < c.threshold_pct)
        rows.append(row)
    failed = any(r["holds"] for r in rows)
    unjudged = any(r["holds"] is None for r in rows)
    status = 3 if failed else (2 if unjudged else 0)
    return {"conditions": rows, "failed": failed, "exit_status": status}
