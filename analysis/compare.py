"""Before/after: the same readings of two traces side by side, with differences and a verdict.

Did the experiment shrink the blank region? THE blank region of BEFORE (``analysis.gaps.the_gap``)
is located in its innermost phase (``decode_step 23``); AFTER is asked for its largest blank
region in phases of the same family (``decode_step``), so a fix is judged where the problem was,
not by whatever else became the largest gap. When the two traces differ in shape (another step
count, another number of kernels per step) the comparison says so: it may compare unlike things.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from gaplens.analysis.busy import compute_busy
from gaplens.analysis.gaps import CAUSES, gap_columns, the_gap
from gaplens.analysis.phases import Phase, family, innermost, phases
from gaplens.analysis.regions import device_phases
from gaplens.analysis.steps import step_of
from gaplens.analysis.steps import steps as step_reading
from gaplens.analysis.summary import summary
from gaplens.loaders.model import MEMCPY_KINDS, Kind, Trace

#: Below this relative change a blank region "stayed about the same".
SAME_WITHIN = 0.10


#: Kernels per step may differ by this share before the traces count as differently shaped.
SHAPE_TOLERANCE = 0.2
CAUSE_IDLE = CAUSES.index("idle")


@dataclass
class PhaseStat:
    """One phase family of one trace: summed span and busy time, largest blank inside."""

    name: str
    count: int = 0
    dur_ns: int = 0
    busy_ns: int = 0
    largest_blank_ns: int = 0

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
    kernels: int
    copies: int
    copy_bytes: int
    steps: dict | None  # {label, count, median_ns, mean_ns}
    kernels_per_step: float | None
    copies_per_step: float | None
    copy_bytes_per_step: float | None
    gap: dict | None  # {start_ns, end_ns, dur_ns, cause, shares, on_critical_path, phase, family}
    phases: dict[str, PhaseStat] = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["phases"] = [{**asdict(p), "busy_pct": p.busy_pct, "blank_ns": p.blank_ns} for p in self.phases.values()]
        return d


def read(trace: Trace) -> Reading:
    s = summary(trace, top=1)
    w0, w1 = s["window_ns"]
    cols = gap_columns(trace)
    starved = cols.cause != CAUSE_IDLE
    gs, ge = cols.start_ns[starved], cols.end_ns[starved]
    plist = phases(trace)
    stats: dict[str, PhaseStat] = {}
    for p in plist:
        st = stats.setdefault(family(p.name), PhaseStat(family(p.name)))
        st.count += 1
        st.dur_ns += p.dur_ns
        if p.lane >= 0:
            st.busy_ns += compute_busy(trace, trace.lanes[p.lane].device).busy_in(p.start_ns, p.end_ns)
        st.largest_blank_ns = max(st.largest_blank_ns, _largest_inside(gs, ge, p.start_ns, p.end_ns))

    st = step_reading(trace)  # the one step (analysis.steps); per-step counts over its steady steps
    steps = None
    kps = cps = bps = None
    if st:
        steady = [st.spans[k][1] - st.spans[k][0] for k in st.steady]
        steps = {**(st.to_json() or {}), "mean_ns": int(np.mean(steady)) if steady else 0}
        n = max(len(st.steady), 1)
        kern, mem = np.flatnonzero(trace.mask((Kind.KERNEL,))), np.flatnonzero(trace.mask(MEMCPY_KINDS))
        in_k, in_m = np.isin(step_of(trace, kern, st), st.steady), np.isin(step_of(trace, mem, st), st.steady)
        kps, cps, bps = int(in_k.sum()) / n, int(in_m.sum()) / n, int(trace.bytes[mem][in_m].sum()) / n

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
    return Reading(
        path=s["source"]["path"],
        window_ns=w1 - w0,
        busy_ns=s["gpu"]["busy_ns"],
        busy_pct=s["gpu"]["busy_pct"],
        kernels=s["kernels"]["count"],
        copies=s["memcpy"]["count"],
        copy_bytes=s["memcpy"]["bytes"],
        steps=steps,
        kernels_per_step=kps,
        copies_per_step=cps,
        copy_bytes_per_step=bps,
        gap=gap_d,
        phases=stats,
    )


def _largest_inside(gs: np.ndarray, ge: np.ndarray, t0: int, t1: int) -> int:
    if gs.size == 0 or t1 <= t0:
        return 0
    clipped = np.minimum(ge, t1) - np.maximum(gs, t0)
    return int(max(0, clipped.max()))


def _in_spans(trace: Trace, spans: list[Phase], kinds) -> np.ndarray:
    """GPU events of ``kinds`` starting inside any of the spans (vectorised)."""
    m = np.flatnonzero(trace.mask(kinds))
    if m.size == 0 or not spans:
        return m[:0]
    order = sorted(spans, key=lambda p: p.start_ns)
    s = np.asarray([p.start_ns for p in order], dtype=np.int64)
    e = np.asarray([p.end_ns for p in order], dtype=np.int64)
    t = trace.start_ns[m]
    k = np.searchsorted(s, t, "right") - 1
    ok = (k >= 0) & (t < e[np.maximum(k, 0)])
    return m[ok]


def _count_in(trace: Trace, spans: list[Phase], kinds) -> int:
    return int(_in_spans(trace, spans, kinds).size)


def _bytes_in(trace: Trace, spans: list[Phase], kinds) -> int:
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
    out: dict = {"before": rb.to_dict(), "after": ra.to_dict()}
    out["busy_pct"] = _change(rb.busy_pct, ra.busy_pct)
    out["kernels"] = _change(rb.kernels, ra.kernels)
    out["copies"] = _change(rb.copies, ra.copies)
    same_steps = rb.steps and ra.steps and rb.steps["label"] == ra.steps["label"]
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
    out["warnings"] = shape_warnings(rb, ra)
    out["verdict"] = _verdict(out)
    return out


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
        # The same measure on both sides: the largest blank clipped to that phase family.
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
    from gaplens.analysis.units import fmt_ns

    g = out["gap"]
    busy = out["busy_pct"]
    if abs(busy["diff"]) <= 0.5:
        busy_text = f"GPU busy share stayed at {busy['after']:.1f}%"
    else:
        direction = "rose" if busy["diff"] > 0 else "fell"
        busy_text = f"GPU busy share {direction} from {busy['before']:.1f}% to {busy['after']:.1f}%"
    if g["outcome"] in ("shrank", "grew", "about the same"):
        where = f" in {g['where']}" if g["where"] else ""
        outcome = "stayed about the same" if g["outcome"] == "about the same" else g["outcome"]
        text = (
            f"The blank region{where} {outcome}: largest {fmt_ns(g['before_ns'])} before, "
            f"{fmt_ns(g['after_ns'])} after ({g['pct']:+.0f}%)"
        )
    elif g["outcome"] == "phase missing after":
        text = f"The blank region was in {g['where']}, which AFTER does not have: compare by hand"
    else:
        text = "BEFORE has no blank region to shrink"
    return f"{text}; {busy_text}."
