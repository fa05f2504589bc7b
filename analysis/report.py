"""The six-step reading protocol written out as Markdown, without asking anything.

``report_markdown(trace, notes)`` prefills what the trace knows; ``notes`` (the
user's saved answers, keyed by step number 1-6) are quoted under their step, so
the walkthrough in the TUI and this report share one text.
"""

from __future__ import annotations

import os

from gaplens.analysis.busy import BusySpans, gpu_work
from gaplens.analysis.gaps import Gap, analyse_gaps, largest, largest_on_critical_path
from gaplens.analysis.memory import memory_rows, steps, trace_phases
from gaplens.analysis.notes import Notes, notes_markdown
from gaplens.analysis.pacing import pacing
from gaplens.analysis.phases import phases
from gaplens.analysis.smells import LEVERS, Finding, smells
from gaplens.analysis.summary import summary
from gaplens.analysis.units import fmt_bytes, fmt_ns
from gaplens.loaders.model import Trace

NO_GPU_HINT = "Capture the device side too: torch.profiler with ProfilerActivity.CUDA, or nsys --trace=cuda,nvtx,osrt."
CAUSE_TO_SMELL = {"host": "host_island", "sync": "sync_cliff", "copy": "copy_on_path", "launch": "picket_fence"}
STEP_TITLES = {
    1: "Name the workload",
    2: "Mark the phases",
    3: "Zoom out: dense or waiting?",
    4: "Zoom in: the largest blank region on the critical path",
    5: "Explain it",
    6: "One experiment",
}


def _md(text: str) -> str:
    """Names from traces are untrusted: keep them from breaking the Markdown around them."""
    return text.replace("|", "\\|").replace("`", "'").replace("\n", " ")


def describe_event(trace: Trace, i: int) -> str:
    """``name`` (lane) at t, dur: one evidence line."""
    lane = trace.lanes[int(trace.lane[i])]
    where = f"{lane.name} {lane.pid}/{lane.tid}" if lane.pid >= 0 else f"GPU {lane.device} {lane.name}"
    s, e = int(trace.start_ns[i]), int(trace.end_ns[i])
    return f"`{_md(trace.name(i)[:80])}` ({where}) at {fmt_ns(s)}, {fmt_ns(e - s)}"


def phase_at(trace: Trace, t0: int, t1: int | None = None, found=None) -> str:
    """The deepest phase holding t0, or covering at least half of [t0, t1) ("" when none)."""
    t1 = t0 + 1 if t1 is None or t1 <= t0 else t1
    half = (t1 - t0) / 2
    inner = [
        p
        for p in (found if found is not None else phases(trace))
        if min(p.end_ns, t1) - max(p.start_ns, t0) >= half or (t1 - t0 == 1 and p.start_ns <= t0 < p.end_ns)
    ]
    return max(inner, key=lambda p: p.depth).name if inner else ""


def experiment(gap: Gap | None, findings: list[Finding]) -> str:
    """The lever closest to the highlighted gap: a smell overlapping it first, else its cause."""
    if gap is None:
        return "No blank region lies on the critical path: the device set the pace. Shrink the kernels themselves."
    near = [f for f in findings if f.start_ns < gap.end_ns and f.end_ns > gap.start_ns and f.device == gap.device]
    if near:
        f = max(near, key=lambda f: min(f.end_ns, gap.end_ns) - max(f.start_ns, gap.start_ns))
        kind = f.kind
    else:
        kind = CAUSE_TO_SMELL.get(gap.cause, "")
    if not kind:
        return "Collect a better trace first: " + (gap.message or "the CPU side is missing.")
    return (
        f"Against the {kind.replace('_', ' ')}: {LEVERS[kind]}. Success means the {fmt_ns(gap.dur_ns)} "
        f"blank region shrinks in a new capture of the same workload."
    )


def report_markdown(trace: Trace, notes: dict | Notes | None = None) -> str:
    """The whole protocol as Markdown; ``notes`` maps step number (1-6) to the user's answer.

    ``notes`` may also be the saved ``analysis.notes.Notes``: its answers are quoted under
    their steps, and its experiment, marked phases and pinned notes close the report.
    """
    saved = notes if isinstance(notes, Notes) else None
    raw = notes.answers if isinstance(notes, Notes) else notes
    answers = {int(k): v for k, v in (raw or {}).items() if str(k).isdigit()}
    s = summary(trace, top=5)
    found = trace_phases(trace)
    st = steps(trace, found)
    gaps = analyse_gaps(trace)
    findings = smells(trace, gaps, st)
    hot = largest_on_critical_path(gaps)
    ops = gpu_work(trace)
    busy = BusySpans(trace.start_ns[ops], trace.end_ns[ops])
    name = os.path.basename(trace.meta.path) or "trace"
    out = [f"# gaplens report: {_md(name)}", ""]
    out += [
        f"Source: {s['source']['format']} ({_md(s['source']['version'])}), {s['events']:,} events; times are "
        f"relative to origin_ns {s['origin_ns']}.",
        "",
    ]

    def section(k: int, lines: list[str]) -> None:
        out.extend([f"## {k}. {STEP_TITLES[k]}", "", *lines])
        if k in answers and str(answers[k]).strip():
            out.extend(["", *[f"> {line}" for line in str(answers[k]).splitlines()]])
        out.append("")

    # 1 -- workload facts the trace knows
    lines = []
    for d in trace.meta.devices:
        props = d.properties or {}
        extra = ", ".join(f"{k} {props[k]}" for k in ("numSms", "totalGlobalMem", "computeMajor") if k in props)
        lines.append(f"- GPU {d.id}: {_md(d.name)}" + (f" ({extra})" if extra else ""))
    k = s["kernels"]
    lines.append(
        f"- GPU work: {k['count']:,} kernels ({fmt_ns(k['total_ns'])}), {s['memcpy']['count']:,} copies "
        f"({fmt_bytes(s['memcpy']['bytes'])}), {s['memset']['count']:,} memsets"
    )
    if st.family:
        lines.append(f"- Steps: {len(st.spans)} × `{_md(st.family)}`, median {fmt_ns(st.step_ns)} on the GPU")
    lines.append(f"- Host threads: {len(s['threads'])}")
    if s["top_kernels"]:
        top = s["top_kernels"][0]
        lines.append(f"- Heaviest kernel: `{_md(top['name'][:80])}` ({top['pct']:.0f}% of kernel time)")
    lines.append("- Fill in: model, batch, prompt length, output length, dtype.")
    section(1, lines)

    # 2 -- phases with pacing
    rows = pacing(trace, found)
    if rows:
        min_depth = min(r.get("depth", 0) for r in rows)
        lines = ["| phase | GPU span | busy | pacing | median launch lag |", "|---|---|---|---|---|"]
        for r in rows[:60]:
            lag = r["lag_ns"].get("median")
            indent = "· " * min(r.get("depth", 0) - min_depth, 4)
            lines.append(
                f"| {indent}{_md(r['name'][:60])} | {fmt_ns(r['end_ns'] - r['start_ns'])} | {r['busy_pct']:.1f}% "
                f"| {r['verdict']} | {fmt_ns(lag) if lag is not None else '–'} |"
            )
        if len(rows) > 60:
            lines.append(f"| … {len(rows) - 60} more | | | | |")
    else:
        lines = ["The trace has no annotation ranges; mark phases with NVTX or `torch.profiler.record_function`."]
    section(2, lines)

    if ops.size == 0:
        section(3, ["The trace holds no GPU activity: nothing ran on a device. " + NO_GPU_HINT])
        for k in (4, 5, 6):
            section(k, ["Nothing to look at without GPU activity."])
        return "\n".join(out).rstrip() + "\n"

    # 3 -- zoom out
    g = s["gpu"]
    idle = sum(x.dur_ns for x in gaps)
    on_idle = sum(x.dur_ns for x in gaps if x.on_critical_path)
    verdict = "mostly dense" if g["busy_pct"] >= 70 else ("mostly waiting" if g["busy_pct"] < 40 else "half and half")
    lines = [f"GPU busy {fmt_ns(g['busy_ns'])} of its window ({g['busy_pct']:.1f}%): **{verdict}**."]
    if idle:
        by_cause: dict[str, int] = {}
        for x in gaps:
            by_cause[x.cause] = by_cause.get(x.cause, 0) + x.dur_ns
        split = ", ".join(f"{c} {100 * v / idle:.0f}%" for c, v in sorted(by_cause.items(), key=lambda kv: -kv[1]))
        lines.append(
            f"Idle {fmt_ns(idle)} in {len(gaps):,} blank regions; {100 * on_idle / idle:.0f}% of it on the "
            f"critical path (the device waited for the host). By cause: {split}."
        )
    counts = {kind: sum(f.kind == kind for f in findings) for kind in CAUSE_TO_SMELL.values()}
    if findings:
        lines.append("Smells: " + ", ".join(f"{v} {kk.replace('_', ' ')}" for kk, v in counts.items() if v) + ".")
    section(3, lines)

    # 4 -- zoom in
    if hot is None:
        biggest = largest(gaps)[:1]
        lines = ["No blank region lies on the critical path."]
        if biggest:
            lines.append(
                f"The largest blank region overall is {fmt_ns(biggest[0].dur_ns)} at {fmt_ns(biggest[0].start_ns)}"
                + (f": {biggest[0].message}" if biggest[0].message else ".")
            )
    else:
        ph = phase_at(trace, hot.start_ns, hot.end_ns, found)
        lines = [
            f"GPU {hot.device}: {fmt_ns(hot.dur_ns)} idle from {fmt_ns(hot.start_ns)} to {fmt_ns(hot.end_ns)}"
            + (f", in `{_md(ph)}`" if ph else "")
            + f" ({100 * hot.dur_ns / max(busy.total + idle, 1):.1f}% of the window)."
        ]
    section(4, lines)

    # 5 -- explain
    if hot is None:
        lines = ["Nothing on the path to explain."]
    else:
        shares = ", ".join(
            f"{c} {100 * v:.0f}%" for c, v in sorted(hot.shares.items(), key=lambda kv: -kv[1]) if v >= 0.005
        )
        lines = [f"Cause: **{hot.cause}** ({shares})."]
        if hot.message:
            lines.append(f"Collect a better trace: {hot.message}.")
        if hot.evidence:
            lines += ["", "Evidence:"] + [f"- {describe_event(trace, i)}" for i in hot.evidence]
    section(5, lines)

    # 6 -- one experiment
    biggest = largest(gaps)[:1]
    if hot is None and biggest and biggest[0].cause == "unknown":
        section(6, [f"Collect a better trace first: {biggest[0].message}."])
    else:
        section(6, [experiment(hot, findings)])

    if findings:
        out += ["## Smells", "", "| smell | where | size | finding |", "|---|---|---|---|"]
        for f in findings[:50]:
            out.append(f"| {f.kind} | {fmt_ns(f.start_ns)} | {fmt_ns(f.dur_ns)} | {_md(f.summary)} |")
        if len(findings) > 50:
            out.append(f"| … {len(findings) - 50} more | | | |")
        out.append("")
    mem = memory_rows(trace, st)
    if mem:
        out += ["## Memory", "", "| direction | copies | bytes | per step |", "|---|---|---|---|"]
        for r in mem:
            per = (
                f"{r['copies_per_step']} copies, {fmt_bytes(r['bytes_per_step'])}"
                if r["bytes_per_step"] is not None
                else "–"
            )
            out.append(f"| {r['direction']} | {r['count']:,} | {fmt_bytes(r['bytes'])} | {per} |")
        out.append("")
    out += _saved_extras(saved)
    return "\n".join(out).rstrip() + "\n"


def _saved_extras(saved: Notes | None) -> list[str]:
    """The user's experiment (when not already the step-6 answer), marked phases and pinned notes."""
    if saved is None:
        return []
    out = []
    if saved.experiment and saved.experiment.strip() != saved.answers.get(6, "").strip():
        out += ["## Your experiment", "", saved.experiment, ""]
    md = notes_markdown(saved, answers=False)
    return out + ([md] if md else [])


def idle_by_cause(gaps: list[Gap]) -> dict[str, int]:
    """Blank time per cause (a helper for summaries and tests)."""
    out: dict[str, int] = {}
    for g in gaps:
        out[g.cause] = out.get(g.cause, 0) + g.dur_ns
    return out
