"""The six-step reading protocol as data: what each step says and where it moves the view.

Pure and headless, and the one owner of the steps' words: the viewer's panel draws these steps and
moves its timeline to ``Step.view``; ``analysis.protocol.report`` writes the same steps as Markdown. Every
number comes from the reading that owns it (``busy_share``, ``the_gap``, ``smells``), never
recomputed here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gaplens.analysis.busy import busy_share, gpu_window, overhead_spans, span_busy_ns
from gaplens.analysis.clock import clock_check
from gaplens.analysis.gaps import CAUSES, Gap, gap_columns, the_gap
from gaplens.analysis.phases import (
    Phase,
    chain,
    family,
    family_pct,
    fold_families,
    innermost,
    phases,
    phases_busy_ns,
    phases_busy_pct,
    process_order,
    span_durations,
)
from gaplens.analysis.protocol.experiment import KERNEL_BOUND_PCT, Experiment, experiment, gap_steps
from gaplens.analysis.protocol.notes import Notes
from gaplens.analysis.regions import active_compute_pct, bound_by, device_phases, idle_ns
from gaplens.analysis.steps import WARMUP_FACTOR, steps
from gaplens.analysis.units import fmt_bytes, fmt_ns
from gaplens.analysis.words import (
    CAUSE_WORDS,
    COMPARE_HINT,
    MOSTLY,
    NO_GPU,
    QUESTIONS,
    STEP_TITLES,
    busy_verdict,
)
from gaplens.analysis.workload import Workload, workload
from gaplens.loaders.model import Trace

#: Phase families listed in step 2, and busy verdicts per family in step 3: a panel's height, not a finding.
MAX_PHASE_FACTS = 13
MAX_FAMILY_VERDICTS = 8
MAX_ZOOM_OUT_FACTS = 18
#: Evidence events listed in step 5 (the rest stay selected on the timeline).
MAX_EVIDENCE = 6
#: Enclosing phases named for THE gap ("in request 3 › decode › decode_step 7").
WHERE_DEPTH = 3
#: A cause's share of a gap below half a percent prints as 0%: not listed.
SHARE_SHOWN = 0.005
#: The smallest margin around a highlighted region, so a sub-microsecond gap still shows its neighbours.
VIEW_MIN_PAD_NS = 1_000
#: The profiler's own work covering a quarter of a gap is worth a warning: part of the gap is an artefact.
PROFILER_NOTE_SHARE = 0.25
WORKLOAD_NAMES = {"serving": "LLM serving / decode", "training": "training", "hpc": "HPC (no framework)"}


def idle_words(idle_ns_: int, devices: int) -> str:
    """Idle time in words; summed over several GPUs it can exceed the window, so it says so."""
    return fmt_ns(idle_ns_) + (f" summed over {devices} GPUs" if devices > 1 else "")


def pct_words(pct: float) -> str:
    """A share with one decimal; a non-zero share below 0.05% reads "<0.1%", not "0.0%"."""
    return "<0.1%" if 0 < pct < 0.05 else f"{pct:.1f}%"


@dataclass
class View:
    """Where a step puts the timeline; None fields leave the view as it is."""

    window_ns: tuple[int, int] | None = None
    highlight_ns: tuple[int, int] | None = None
    select: list[int] = field(default_factory=list)  # event indices to select, the first focused
    show_phases: bool = False


@dataclass
class Step:
    number: int
    title: str
    question: str
    facts: list[str]
    view: View
    suggestion: str = ""  # a prefill for the user's answer


@dataclass
class PhaseRow:
    """One range on the phases row: from the trace, renamed by the user, or marked by the user."""

    name: str
    start_ns: int
    end_ns: int
    depth: int
    source: str  # "trace" | "renamed" | "user"
    original: str = ""


def region_step(trace: Trace, g: Gap, st) -> int:
    """The step a blank region belongs to (-1: none), by the one rule step 6 also uses
    (``experiment.gap_steps``: the step that launched the op ending it), so steps 4 and 6 name the
    same step for the same region."""
    if not st:
        return -1
    cols = gap_columns(trace)
    hit = np.flatnonzero((cols.device == g.device) & (cols.start_ns == g.start_ns))
    if hit.size == 0:
        return -1
    return int(gap_steps(trace, cols, st)[int(hit[0])])


def phase_rows(trace: Trace, notes: Notes | None = None, plist: list[Phase] | None = None) -> list[PhaseRow]:
    """Trace phases with the user's renames applied, plus the ranges the user marked."""
    plist = phases(trace) if plist is None else plist
    renames = {(p.original, p.start_ns): p for p in (notes.phases if notes else []) if p.original}
    rows = []
    for p in plist:
        r = renames.get((p.name, p.start_ns))
        if r is not None:
            rows.append(PhaseRow(r.name, p.start_ns, p.end_ns, p.depth, "renamed", p.name))
        else:
            rows.append(PhaseRow(p.name, p.start_ns, p.end_ns, p.depth, "trace"))
    for m in notes.phases if notes else []:
        if not m.original:
            rows.append(PhaseRow(m.name, m.start_ns, m.end_ns, 0, "user"))
    rows.sort(key=lambda r: (r.start_ns, r.depth))
    return rows


class Walkthrough:
    """The six steps over one trace; each step is computed on first use from the owned readings."""

    def __init__(self, trace: Trace, notes: Notes | None = None) -> None:
        self.trace = trace
        self.notes = notes
        self.phases = phases(trace)
        self.share = busy_share(trace)
        self.window_ns = gpu_window(trace)
        self.workload: Workload = workload(trace)
        self.gap: Gap | None = the_gap(trace)
        self._steps: dict[int, Step] = {}

    def refresh_notes(self, notes: Notes | None) -> None:
        """The user's marks changed: steps that mention them are recomputed on next use."""
        self.notes = notes
        self._steps.clear()

    def step(self, n: int) -> Step:
        if n not in STEP_TITLES:
            raise ValueError(f"no protocol step {n}")
        if n not in self._steps:
            if n >= 3 and not self.share.busy_ns:
                self._steps[n] = self._make(n, [NO_GPU], View())
            else:
                self._steps[n] = getattr(self, f"_step{n}")()
        return self._steps[n]

    def steps(self) -> list[Step]:
        return [self.step(n) for n in STEP_TITLES]

    def _make(self, n: int, facts: list[str], view: View, suggestion: str = "") -> Step:
        return Step(n, STEP_TITLES[n], QUESTIONS[n], facts, view, suggestion)

    @property
    def kernel_bound(self) -> bool:
        """The device paces the work: compute fills the time work was asked for."""
        return active_compute_pct(self.trace) >= KERNEL_BOUND_PCT

    # ---- 1. name the workload ---------------------------------------------
    def _step1(self) -> Step:
        w = self.workload
        parts = []
        if w.gpus:
            parts.append(f"{w.gpu_count} × {w.gpus[0]['name']}")
        if w.dtype:
            parts.append(w.dtype)
        if w.iterations:
            parts.append(f"{w.iterations.count} {w.iterations.label.replace('_', ' ')}s")
        suggestion = ", ".join(parts) + "; model: ?, batch: ?, prompt: ?, output: ?"
        facts = w.facts()
        if w.kind in WORKLOAD_NAMES:
            facts.append(f"looks like {WORKLOAD_NAMES[w.kind]}: the levers below are chosen for it")
        check = clock_check(self.trace)
        if check is not None:
            facts.append(f"warning: {check.message}")
        return self._make(1, facts, View(window_ns=self.window_ns), suggestion)

    # ---- 2. mark the phases -----------------------------------------------
    def _step2(self) -> Step:
        facts = []
        pids = process_order(self.phases)
        fams = fold_families(self.phases)  # per process, its families in order of first appearance
        dur = span_durations(self.phases)
        for pid in pids:
            if len(pids) > 1:
                facts.append(f"process {pid} {self.trace.meta.processes.get(pid, '')}".rstrip() + ":")
            for (p_pid, fam), at in fams.items():
                if p_pid == pid:
                    count = f"{len(at)} × " if len(at) > 1 else ""
                    facts.append(f"{count}{fam}: {fmt_ns(int(dur[at].sum()))} on the GPU")
        if facts:
            facts = facts[:MAX_PHASE_FACTS]
            facts.append("they are drawn on the phases row at the top; select one (enter) and press m to rename it")
        else:
            facts.append("no NVTX / record_function ranges: mark the phases yourself (m, then m again, then a name)")
        if self.notes and self.notes.phases:
            facts.append(f"{len(self.notes.phases)} range(s) marked or renamed by you")
        return self._make(2, facts, View(window_ns=self.window_ns, show_phases=True))

    # ---- 3. zoom out --------------------------------------------------------
    def _step3(self) -> Step:
        sh = self.share
        bound = bound_by(self.trace)
        active = active_compute_pct(self.trace)
        # A copy-bound device is busy, not waiting (round-3 copy_bound read "GPU mostly waiting: 17% busy").
        verdict = f"busy copying, not computing: {active:.0f}% busy computing" if bound.verdict == "copy" else None
        facts = [
            f"GPU {verdict or busy_verdict(active)} of the time work was asked "
            f"(compute {fmt_ns(sh.compute_ns)}; busy {sh.busy_pct:.1f}% of the window)"
        ]
        if bound.verdict in ("copy", "comm"):  # busy, but not computing: say what filled the time
            facts.append(bound.words)
        if sh.comm_ns:
            facts.append(
                f"communication {fmt_ns(sh.comm_ns)}, {fmt_ns(sh.exposed_comm_ns)} of it exposed (not overlapped by "
                "compute): waiting for peers counts as waiting, not work"
            )
        idle = idle_ns(self.trace)
        if idle:
            facts.append(
                f"idle {idle_words(idle, len(sh.devices))}: nothing was asked (start-up, before or between requests)"
            )
        if sh.profiler_ns:
            facts.append(
                f"the profiler itself took {pct_words(sh.profiler_pct)} of the window ({fmt_ns(sh.profiler_ns)})"
            )
        blank = gap_columns(self.trace)
        on = blank.on_path
        if on.any():
            by_cause: dict[str, int] = {}
            for c, d in zip(blank.cause[on].tolist(), (blank.end_ns - blank.start_ns)[on].tolist(), strict=True):
                by_cause[CAUSES[c]] = by_cause.get(CAUSES[c], 0) + d
            total = sum(by_cause.values())
            ranked = sorted(by_cause.items(), key=lambda kv: -kv[1])
            split = ", ".join(f"{c} {100 * v / total:.0f}%" for c, v in ranked if v >= SHARE_SHOWN * total)
            # each region counted whole under its own cause (its shares are in step 5 and `gaps`)
            facts.append(
                f"blank on the critical path {fmt_ns(total)} in {int(on.sum()):,} regions, by their causes: {split}"
            )
        pids = process_order(self.phases)
        fams = fold_families(self.phases)
        busy = phases_busy_pct(self.trace, self.phases)
        copy = phases_busy_ns(self.trace, self.phases, "copy")
        dur = span_durations(self.phases)
        for pid in pids:
            prefix = f"[{pid}] " if len(pids) > 1 else ""
            mine = [(fam, at) for (p_pid, fam), at in fams.items() if p_pid == pid]
            for fam, at in mine[:MAX_FAMILY_VERDICTS]:
                d = int(dur[at].sum())
                c = int(copy[at].sum())
                b = family_pct(busy[at], dur[at]) if at else 0.0
                if d > 0 and c >= MOSTLY * d:  # copy_in: "mostly copying", not "mostly waiting"
                    facts.append(f"{prefix}{fam}: mostly copying: {100 * c / d:.0f}% copying, {b:.0f}% computing")
                elif d > 0:
                    facts.append(f"{prefix}{fam}: {busy_verdict(b)}")
        for m in self.notes.phases if self.notes else []:
            if not m.original and m.end_ns > m.start_ns:  # the ranges the user marked count too
                facts.append(f"{m.name} (yours): {busy_verdict(self._compute_pct(m.start_ns, m.end_ns))}")
        return self._make(3, facts[:MAX_ZOOM_OUT_FACTS], View(window_ns=self.window_ns, show_phases=True))

    def _compute_pct(self, t0: int, t1: int) -> float:
        busy = span_busy_ns(self.trace, t0, t1, [d.id for d in self.share.devices])
        return 100.0 * busy / max((t1 - t0) * max(len(self.share.devices), 1), 1)

    # ---- 4. zoom in ---------------------------------------------------------
    def _step4(self) -> Step:
        g = self.gap
        if g is None:
            why = "the device never waited while work was asked: no blank region to zoom into"
            return self._make(4, [why], View())
        where = self._where(g)
        if g.on_critical_path:
            facts = [f"largest blank region on the critical path: {fmt_ns(g.dur_ns)} at {fmt_ns(g.start_ns)}{where}"]
        else:
            facts = [
                f"largest blank region: {fmt_ns(g.dur_ns)} at {fmt_ns(g.start_ns)}{where}; none lies on the "
                + (
                    "critical path: the trace lacks the host side to tell"
                    if g.cause == "unknown"
                    else "critical path: the device paced the work around it"
                )
            ]
        facts.append(f"that is {100.0 * g.dur_ns / max(1, self.window_ns[1] - self.window_ns[0]):.1f}% of the window")
        facts.extend(self._warmup_note(g))
        return self._make(4, facts, View(window_ns=gap_view(g), highlight_ns=(g.start_ns, g.end_ns)))

    def _warmup_note(self, g: Gap) -> list[str]:
        """Say so when the gap lies in a warm-up step: the step owner's (``analysis.steps``), so the
        median and the warm-up named here are the ones ``summary`` prints (nsys_train_step said
        "80x the median train_step (8.75 ms)" beside a 7.44 ms step: a median over every step)."""
        st = steps(self.trace)
        k = region_step(self.trace, g, st)
        if k < 0 or k not in st.warmup_idx:
            return []
        dur = st.spans[k][1] - st.spans[k][0]
        times = f", {dur / st.median_ns:.0f}× the median {st.label} ({fmt_ns(st.median_ns)})" if st.median_ns else ""
        return [
            f"{st.names[k]} took {fmt_ns(dur)}{times}: a warm-up step (the first, or at least "
            f"{WARMUP_FACTOR:g}× the median: lazy loading, autotuning); press g/G for the steady steps"
        ]

    def _where(self, g: Gap) -> str:
        inner = innermost(device_phases(self.trace, g.device), g.start_ns, g.end_ns)
        if inner is None:
            return ""
        names = [p.name for p in chain(self.phases, inner)[-WHERE_DEPTH:]]
        proc = f" (process {inner.pid})" if len(process_order(self.phases)) > 1 else ""
        # The step it counts against is the one that launched the op ending it (``region_step``, as
        # step 6 reads it): said when the phases around the region's GPU time name another step.
        st = steps(self.trace)
        k = region_step(self.trace, g, st)
        other = k >= 0 and st.names[k] not in names and any(family(n) == st.label for n in names)
        owner = f"; it counts against {st.names[k]}, whose launch ends it" if other else ""
        return " in " + " › ".join(names) + proc + owner

    # ---- 5. explain ---------------------------------------------------------
    def _step5(self) -> Step:
        g = self.gap
        if g is None:
            return self._make(5, ["nothing on the critical path to explain"], View())
        shares = ", ".join(
            f"{k} {100 * v:.0f}%" for k, v in sorted(g.shares.items(), key=lambda kv: -kv[1]) if v >= SHARE_SHOWN
        )
        facts = [f"cause: {g.cause} ({shares}): {CAUSE_WORDS[g.cause]}"]
        if g.message:
            facts.append(g.message)
        elif g.cause == "unknown" or self.trace.meta.lacks:
            facts.extend(self._better_trace(g))
        facts.extend(profiler_note(self.trace, g))
        check = clock_check(self.trace)
        if check is not None:
            facts.append(f"warning: {check.message}")
        for i in g.evidence[:MAX_EVIDENCE]:
            facts.append("evidence: " + describe(self.trace, i))
        view = View(window_ns=gap_view(g), highlight_ns=(g.start_ns, g.end_ns), select=list(g.evidence))
        return self._make(5, facts, view)

    def _better_trace(self, g: Gap) -> list[str]:
        lacks = set(self.trace.meta.lacks)
        if "cpu" in lacks or "cuda_api" in lacks:
            return [
                "collect a better trace: the CPU side is missing. Capture torch.profiler with "
                "activities=[CPU, CUDA], or nsys --trace=cuda,nvtx,osrt"
            ]
        if g.cause == "unknown":
            return ["collect a better trace: add NVTX / record_function ranges around the suspect code (with_stack)"]
        return []

    # ---- 6. one experiment --------------------------------------------------
    def _step6(self) -> Step:
        exp = self.proposal
        facts = ([exp.because] if exp.because else []) + [f"lever: {exp.lever}", *exp.facts, COMPARE_HINT]
        g = self.gap
        if exp.highlight_ns is not None:
            a, b = exp.highlight_ns
            pad = max((b - a) // 2, VIEW_MIN_PAD_NS)
            view = View(window_ns=(max(0, a - pad), b + pad), highlight_ns=exp.highlight_ns)
        elif g is not None:
            view = View(window_ns=gap_view(g), highlight_ns=(g.start_ns, g.end_ns))
        else:
            view = View()
        return self._make(6, facts, view, exp.lever)

    @property
    def proposal(self) -> Experiment:
        """The one experiment of step 6 and of the report (``analysis.protocol.experiment``)."""
        return experiment(self.trace)

    def experiment(self) -> tuple[str, str]:
        """(the lever to try, why this one): the one experiment of step 6 and of the report."""
        exp = self.proposal
        return exp.lever, exp.because


def gap_view(g: Gap) -> tuple[int, int]:
    """A window with the gap in its middle half, so its neighbours show what came before and after."""
    pad = max(g.dur_ns // 2, VIEW_MIN_PAD_NS)
    return max(0, g.start_ns - pad), g.end_ns + pad


def describe(trace: Trace, i: int) -> str:
    """One evidence event in a line: name, lane, duration, bytes for copies."""
    name = trace.name(i)
    name = name if len(name) <= 60 else name[:57] + "…"
    lane = trace.lanes[int(trace.lane[i])]
    where = lane.name if lane.pid < 0 else f"{lane.name}, thread {lane.tid}"
    dur = fmt_ns(int(trace.end_ns[i] - trace.start_ns[i]))
    extra = f", {fmt_bytes(int(trace.bytes[i]))}" if int(trace.bytes[i]) else ""
    return f"{name} ({where}, {dur}{extra})"


def profiler_note(trace: Trace, g: Gap) -> list[str]:
    """A warning when the profiler's own work covers much of a gap it is not already blamed for."""
    if g.cause == "profiler" or g.dur_ns <= 0:
        return []
    share = overhead_spans(trace).busy_in(g.start_ns, g.end_ns) / g.dur_ns
    if share < PROFILER_NOTE_SHARE:
        return []
    return [f"note: the profiler's own work covers {100 * share:.0f}% of this region: part of it is an artefact"]
