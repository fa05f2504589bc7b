"""The six-step reading protocol as data: what each step says and where it moves the view.

Pure and headless: the TUI's protocol panel draws these steps and moves its timeline
to ``Step.view``; the report and tests read the same objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gaplens.analysis.busy import BusySpans, gpu_window, gpu_work
from gaplens.analysis.compare import family, innermost_phase, largest_blank_region
from gaplens.analysis.gaps import Gap
from gaplens.analysis.notes import STEP_TITLES, Notes
from gaplens.analysis.phases import Phase, phases
from gaplens.analysis.units import fmt_bytes, fmt_ns
from gaplens.analysis.workload import Workload, workload
from gaplens.loaders.model import Kind, Trace

QUESTIONS = {
    1: "Complete what the trace cannot know: model, batch, prompt length, output length.",
    2: "Which ranges are prefill, decode, postprocess, transfer, tokenize? Mark or rename any that are missing.",
    3: "Is the GPU mostly dense or mostly waiting? Which phase matters most?",
    4: "What is on the CPU side during this blank region?",
    5: "In your words: why did the device wait here?",
    6: "Write the one experiment that would shrink this blank region.",
}

#: The lever of each smell (DESIGN.md § Smells), first one the most direct.
LEVERS = {
    "picket_fence": "fuse the small kernels or capture the step in a CUDA graph (torch.compile mode='reduce-overhead')",
    "host_island": "move the CPU work off the request path (or run it in parallel with the GPU)",
    "copy_on_path": "keep the tensor on the device, or copy from pinned memory with non_blocking=True",
    "sync_cliff": "remove the hidden synchronisation (.item(), print of a CUDA tensor, host-side sampling)",
}
CAUSE_SMELL = {"sync": "sync_cliff", "copy": "copy_on_path", "launch": "picket_fence", "host": "host_island"}
SMELL_NAMES = {
    "picket_fence": "launch picket fence",
    "host_island": "host island",
    "copy_on_path": "copy on the critical path",
    "sync_cliff": "sync cliff",
}


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


def busy_verdict(pct: float) -> str:
    """Plain words for a busy share: what the user should take from step 3."""
    if pct < 50:
        return f"mostly waiting: {pct:.0f}% busy"
    if pct < 80:
        return f"partly fed: {pct:.0f}% busy"
    return f"mostly dense: {pct:.0f}% busy"


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
    """The six steps over one trace, computed once (the gap analysis is the slow part)."""

    def __init__(
        self,
        trace: Trace,
        notes: Notes | None = None,
        gap: tuple[Gap | None, bool] | None = None,
    ) -> None:
        """``gap``: (largest blank region, critical path analysed) when the caller has it already."""
        self.trace = trace
        self.notes = notes
        self.phases = phases(trace)
        idx = gpu_work(trace)
        self.busy = BusySpans(trace.start_ns[idx], trace.end_ns[idx])
        self.window_ns = gpu_window(trace)
        self.workload: Workload = workload(trace)
        self.gap, self.critical_path_analysed = largest_blank_region(trace) if gap is None else gap
        self._steps: dict[int, Step] = {}

    def refresh_notes(self, notes: Notes | None) -> None:
        """The user's marks changed: steps that mention them are recomputed on next use."""
        self.notes = notes
        self._steps.clear()

    def step(self, n: int) -> Step:
        if n not in STEP_TITLES:
            raise ValueError(f"no protocol step {n}")
        if n not in self._steps:
            self._steps[n] = getattr(self, f"_step{n}")()
        return self._steps[n]

    def steps(self) -> list[Step]:
        return [self.step(n) for n in STEP_TITLES]

    def _make(self, n: int, facts: list[str], view: View, suggestion: str = "") -> Step:
        return Step(n, STEP_TITLES[n], QUESTIONS[n], facts, view, suggestion)

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
        return self._make(1, w.facts(), View(window_ns=self.window_ns), suggestion)

    # ---- 2. mark the phases -----------------------------------------------
    def _step2(self) -> Step:
        facts = []
        seen: dict[str, list[Phase]] = {}
        for p in self.phases:
            seen.setdefault(family(p.name), []).append(p)
        for fam, ps in seen.items():
            total = sum(p.dur_ns for p in ps)
            count = f"{len(ps)} × " if len(ps) > 1 else ""
            facts.append(f"{count}{fam}: {fmt_ns(total)} on the GPU")
        if facts:
            facts.append("they are drawn on the phases row at the top; select one (enter) and press m to rename it")
        else:
            facts.append("no NVTX / record_function ranges: mark the phases yourself (m, then m again, then a name)")
        if self.notes and self.notes.phases:
            facts.append(f"{len(self.notes.phases)} range(s) marked or renamed by you")
        return self._make(2, facts[:14], View(window_ns=self.window_ns, show_phases=True))

    # ---- 3. zoom out --------------------------------------------------------
    def _step3(self) -> Step:
        w0, w1 = self.window_ns
        pct = 100.0 * self.busy.busy_in(w0, w1) / (w1 - w0) if w1 > w0 else 0.0
        facts = [f"GPU {busy_verdict(pct)} ({fmt_ns(self.busy.busy_in(w0, w1))} of {fmt_ns(w1 - w0)})"]
        by_fam: dict[str, list[int]] = {}
        for p in self.phases:
            acc = by_fam.setdefault(family(p.name), [0, 0])
            acc[0] += self.busy.busy_in(p.start_ns, p.end_ns)
            acc[1] += p.dur_ns
        for fam, (b, d) in by_fam.items():
            if d > 0:
                facts.append(f"{fam}: {busy_verdict(100.0 * b / d)}")
        for m in self.notes.phases if self.notes else []:
            if not m.original and m.end_ns > m.start_ns:  # the ranges the user marked count too
                pct = 100.0 * self.busy.busy_in(m.start_ns, m.end_ns) / (m.end_ns - m.start_ns)
                facts.append(f"{m.name} (yours): {busy_verdict(pct)}")
        return self._make(3, facts[:16], View(window_ns=self.window_ns, show_phases=True))

    # ---- 4. zoom in ---------------------------------------------------------
    def _step4(self) -> Step:
        g = self.gap
        if g is None:
            return self._make(4, ["the device never waited inside the window: no blank region"], View())
        kind = "largest blank region on the critical path" if g.on_critical_path else "largest blank region"
        if not self.critical_path_analysed:
            kind += " (critical path not analysed in this build)"
        where = self._where(g)
        facts = [f"{kind}: {fmt_ns(g.dur_ns)} at {fmt_ns(g.start_ns)}{where}"]
        facts.append(f"that is {100.0 * g.dur_ns / max(1, self.window_ns[1] - self.window_ns[0]):.1f}% of the window")
        return self._make(4, facts, View(window_ns=gap_view(g, self.trace), highlight_ns=(g.start_ns, g.end_ns)))

    def _where(self, g: Gap) -> str:
        inner = innermost_phase(self.phases, g.start_ns, g.end_ns)
        if inner is None:
            return ""
        # The chain of enclosing phases, outermost first, ending at the innermost one.
        chain = [p for p in self.phases if p.start_ns <= inner.start_ns and inner.end_ns <= p.end_ns]
        chain = sorted(chain, key=lambda p: p.depth)[-3:]
        return " in " + " › ".join(p.name for p in chain)

    # ---- 5. explain ---------------------------------------------------------
    def _step5(self) -> Step:
        g = self.gap
        if g is None:
            return self._make(5, ["nothing to explain: the device was never idle"], View())
        evidence = list(g.evidence) or fallback_evidence(self.trace, g)
        facts = []
        if g.cause != "unknown":
            shares = ", ".join(f"{k} {100 * v:.0f}%" for k, v in sorted(g.shares.items(), key=lambda kv: -kv[1]))
            facts.append(f"cause: {g.cause}" + (f" ({shares})" if shares else ""))
        elif not self.critical_path_analysed:
            facts.append("cause: not analysed in this build; the calls below overlap the region")
        else:
            facts.append("cause: unknown")
        if g.message:
            said = g.message.rstrip(".")
            facts.append(said if said.lower().startswith("collect") else f"collect a better trace: {said}")
        else:
            facts.extend(self._better_trace(g))
        facts.extend(profiler_overhead(self.trace, g))
        for i in evidence[:6]:
            facts.append("evidence: " + describe(self.trace, i))
        view = View(window_ns=gap_view(g, self.trace), highlight_ns=(g.start_ns, g.end_ns), select=evidence)
        return self._make(5, facts, view)

    def _better_trace(self, g: Gap) -> list[str]:
        lacks = set(self.trace.meta.lacks)
        if g.cause != "unknown" and not lacks:
            return []
        if "cpu" in lacks or "cuda_api" in lacks:
            return [
                "collect a better trace: the CPU side is missing. Capture torch.profiler with "
                "activities=[CPU, CUDA], or nsys --trace=cuda,nvtx,osrt"
            ]
        if g.cause == "unknown" and self.critical_path_analysed:
            return ["collect a better trace: add NVTX / record_function ranges around the suspect code (with_stack)"]
        return []

    # ---- 6. one experiment --------------------------------------------------
    def _step6(self) -> Step:
        g = self.gap
        if g is None:
            return self._make(6, ["the device is never idle: the next lever is in the kernels themselves"], View())
        smell = nearest_smell(self.trace, g)
        facts = []
        if smell is not None:
            kind, lever = smell
            facts.append(f"closest smell: {SMELL_NAMES.get(kind, kind)}")
            facts.append(f"lever: {lever}")
        elif g.cause in CAUSE_SMELL:
            kind = CAUSE_SMELL[g.cause]
            facts.append(f"the cause ({g.cause}) points at a {SMELL_NAMES[kind]}")
            facts.append(f"lever: {LEVERS[kind]}")
        else:
            facts.append("no smell explains this region yet: look at the evidence and pick one lever")
        facts.append("then record a new trace and run: gaplens compare BEFORE AFTER")
        suggestion = facts[1].removeprefix("lever: ") if len(facts) > 2 else ""
        view = View(window_ns=gap_view(g, self.trace), highlight_ns=(g.start_ns, g.end_ns))
        return self._make(6, facts, view, suggestion)


def gap_view(g: Gap, trace: Trace) -> tuple[int, int]:
    """A window with the gap in its middle half, so its neighbours show what came before and after."""
    pad = max(g.dur_ns // 2, 1_000)
    return max(0, g.start_ns - pad), g.end_ns + pad


def describe(trace: Trace, i: int) -> str:
    """One evidence event in a line: name, lane, duration, bytes for copies."""
    name = trace.names[int(trace.name_id[i])]
    name = name if len(name) <= 60 else name[:57] + "…"
    lane = trace.lanes[int(trace.lane[i])].name
    dur = fmt_ns(int(trace.end_ns[i] - trace.start_ns[i]))
    extra = f", {fmt_bytes(int(trace.bytes[i]))}" if int(trace.bytes[i]) else ""
    return f"{name} ({lane}, {dur}{extra})"


def profiler_overhead(trace: Trace, g: Gap) -> list[str]:
    """A warning when the profiler's own work (buffer flushes) covers much of the gap: an artefact."""
    idx = np.flatnonzero((trace.kind == int(Kind.OVERHEAD)) & (trace.start_ns < g.end_ns) & (trace.end_ns > g.start_ns))
    if idx.size == 0 or g.dur_ns <= 0:
        return []
    from gaplens.analysis.busy import union

    s, e = union(np.maximum(trace.start_ns[idx], g.start_ns), np.minimum(trace.end_ns[idx], g.end_ns))
    share = int((e - s).sum()) / g.dur_ns
    if share < 0.25:
        return []
    name = trace.names[int(trace.name_id[idx[0]])]
    return [
        f"note: profiler overhead ({name}) covers {100 * share:.0f}% of this region: it may be an artefact "
        "of tracing; check the next-largest blank region too (g / G)"
    ]


def fallback_evidence(trace: Trace, g: Gap, limit: int = 8) -> list[int]:
    """Without the causes analysis: the longest CUDA API calls overlapping the gap, in time order."""
    m = (trace.kind == int(Kind.CUDA_API)) & (trace.start_ns < g.end_ns) & (trace.end_ns > g.start_ns)
    idx = np.flatnonzero(m)
    if idx.size == 0:
        return []
    overlap = np.minimum(trace.end_ns[idx], g.end_ns) - np.maximum(trace.start_ns[idx], g.start_ns)
    top = idx[np.argsort(-overlap, kind="stable")[:limit]]
    return sorted(top.tolist(), key=lambda i: int(trace.start_ns[i]))


def nearest_smell(trace: Trace, g: Gap) -> tuple[str, str] | None:
    """(kind, lever) of the smell overlapping or nearest the gap, when the smells reading exists."""
    try:
        from gaplens.analysis import smells as smells_mod  # type: ignore[attr-defined]
    except ImportError:
        return None
    finder = getattr(smells_mod, "smells", None) or getattr(smells_mod, "find_smells", None)
    if finder is None:
        return None
    found = finder(trace)
    best, best_d = None, None
    for s in found:
        get = s.get if isinstance(s, dict) else lambda k, _s=s: getattr(_s, k, None)
        s0, s1 = get("start_ns"), get("end_ns")
        if s0 is None or s1 is None:
            continue
        d = max(0, int(s0) - g.end_ns, g.start_ns - int(s1))  # 0 when they overlap
        if best_d is None or d < best_d:
            best, best_d = (str(get("kind")), str(get("lever") or LEVERS.get(str(get("kind")), ""))), d
    return best


def protocol_markdown(walk: Walkthrough, notes: Notes | None = None) -> str:
    """The six steps as Markdown: what the trace says and, under it, what the user wrote."""
    from gaplens.analysis.notes import notes_markdown

    trace = walk.trace
    name = trace.meta.path.rsplit("/", 1)[-1] or "trace"
    lines = [f"# Reading of {name}", ""]
    for s in walk.steps():
        lines += [f"## {s.number}. {s.title}", ""]
        lines += [f"- {f}" for f in s.facts]
        answer = notes.answers.get(s.number) if notes else None
        if answer:
            lines += ["", "> " + answer.replace("\n", "\n> ")]
        if s.number == 6 and notes and notes.experiment and notes.experiment != answer:
            lines += ["", f"**Experiment:** {notes.experiment}"]
        lines.append("")
    md = notes_markdown(notes, answers=False)
    if md:
        lines.append(md)
    return "\n".join(lines).rstrip() + "\n"
