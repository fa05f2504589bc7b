"""The six-step reading protocol written out as Markdown, without asking anything.

The steps and their words are the walkthrough's (``analysis.protocol.walk``), so the viewer's panel,
its export and this report say the same thing; the report adds the tables a panel has no room
for (pacing per phase family, the smells rolled up, the bytes per step). ``notes``, the user's
saved answers, are quoted under their steps.
"""

from __future__ import annotations

import os

import numpy as np

from gaplens.analysis.memory import memory_rows
from gaplens.analysis.pacing import VERDICTS, phase_pacing
from gaplens.analysis.phases import family_pct, fold_families, phases
from gaplens.analysis.protocol.notes import Notes, notes_markdown
from gaplens.analysis.protocol.walk import Walkthrough
from gaplens.analysis.smells import rollup, smells
from gaplens.analysis.steps import steps
from gaplens.analysis.units import fmt_bytes, fmt_ns
from gaplens.loaders.model import Trace, clean_name

#: Rows of a table before "… N more".
MAX_ROWS = 40


def _md(text: str) -> str:
    """Names from traces are untrusted: keep them from breaking the Markdown around them."""
    return clean_name(text).replace("|", "\\|").replace("`", "'").replace("\n", " ")


def report_markdown(trace: Trace, notes: dict | Notes | None = None, walk: Walkthrough | None = None) -> str:
    """The whole protocol as Markdown; ``notes`` maps step number (1-6) to the user's answer.

    ``notes`` may also be the saved ``store.notes.Notes``: its answers are quoted under
    their steps, and its experiment, marked phases and pinned notes close the report.
    """
    saved = notes if isinstance(notes, Notes) else None
    raw = notes.answers if isinstance(notes, Notes) else notes
    answers = {int(k): v for k, v in (raw or {}).items() if str(k).isdigit()}
    walk = Walkthrough(trace, saved) if walk is None else walk
    meta = trace.meta  # the header reads the trace itself: ``summary`` would build every phase's JSON row for it
    name = os.path.basename(meta.path) or "trace"
    out = [f"# gaplens report: {_md(name)}", ""]
    out += [
        f"Source: {meta.source_format} ({_md(meta.source_version)}), {len(trace):,} events; times are "
        f"relative to origin_ns {meta.origin_ns}.",
        "",
    ]
    for step in walk.steps():
        out += [f"## {step.number}. {step.title}", ""]
        out += [f"- {_md(f)}" for f in step.facts]
        if step.number == 2:
            out += ["", *pacing_table(trace)]
        answer = answers.get(step.number)
        if answer and str(answer).strip():
            out += ["", *[f"> {line}" for line in str(answer).splitlines()]]
        out.append("")
    out += smells_section(trace)
    out += memory_section(trace)
    out += _saved_extras(saved)
    return "\n".join(out).rstrip() + "\n"


def pacing_table(trace: Trace) -> list[str]:
    """Pacing per phase family: who set the pace, the host or the device.

    Medians are ``np.median``'s, as ``summary`` prints them: the upper middle of an even count read
    copy_in 85.4 ms here beside summary's 84.9 ms for the same six spans (round-3 copy_bound).
    Read from the phases' pacing columns (``phase_pacing``): 100k NVTX phases made 100k rows to read five fields.
    """
    found = phases(trace)
    if not found:
        return ["The trace has no annotation ranges; mark phases with NVTX or `torch.profiler.record_function`."]
    cols = phase_pacing(trace)
    span_all = cols["end_ns"] - cols["start_ns"]
    code_all = cols["code"]
    lagged = (code_all >= 4) & (cols["has"] > 0)  # the rows whose lag_ns is filled in
    fams = fold_families(found)
    several = len({pid for pid, _ in fams}) > 1
    lines = ["| phase | × | GPU span (median) | busy | pacing | median launch lag |", "|---|---|---|---|---|---|"]
    for k, ((pid, fam), at) in enumerate(fams.items()):
        if k == MAX_ROWS:
            lines.append(f"| … {len(fams) - MAX_ROWS} more | | | | | |")
            break
        idx = np.asarray(at, np.int64)
        spans = span_all[idx]
        verdict = VERDICTS[_most_common(code_all[idx])]
        lags = cols["median"][idx[lagged[idx]]]
        lag = fmt_ns(int(np.median(lags))) if lags.size else "–"
        busy = family_pct(cols["busy_pct"][idx], spans)
        who = f"[{pid}] " if several else ""
        median = fmt_ns(int(np.median(spans)))
        st = steps(trace, pid)
        if st and st.warmup and fam == st.label and len(idx) == st.count:  # the step: its steady median
            median = f"{fmt_ns(st.median_ns)} steady"
        lines.append(f"| {who}{_md(fam[:60])} | {len(idx)} | {median} | {busy:.1f}% | {verdict} | {lag} |")
    return lines


def _most_common(codes: np.ndarray) -> int:
    """The most common code; a tie goes to the one its earliest member read (a set's order, as it was, changed
    with the interpreter's string hashing: generate ×2 read device-paced or cpu-bound)."""
    values, first, counts = np.unique(codes, return_index=True, return_counts=True)
    top = np.flatnonzero(counts == counts.max())
    return int(values[top[np.argmin(first[top])]])


def smells_section(trace: Trace) -> list[str]:
    """The smells rolled up per phase family, a few instances under each."""
    groups = rollup(trace, smells(trace))
    if not groups:
        return []
    out = ["## Smells", ""]
    for g in groups[:MAX_ROWS]:
        out.append(f"- **{_md(g.line)}** — lever: {g.findings[0].lever}")
        if len(g.findings) > 1:
            for f in sorted(g.findings, key=lambda f: -f.dur_ns)[:3]:
                out.append(f"  - at {fmt_ns(f.start_ns)}: {_md(f.summary)}")
    if len(groups) > MAX_ROWS:
        out.append(f"- … {len(groups) - MAX_ROWS} more")
    return [*out, ""]


def memory_section(trace: Trace) -> list[str]:
    mem = memory_rows(trace, steps(trace))
    if not mem:
        return []
    out = ["## Memory", "", "| direction | copies | bytes | per step |", "|---|---|---|---|"]
    for r in mem:
        per = (
            f"{r['copies_per_step']} copies, {fmt_bytes(r['bytes_per_step'])}"
            if r["bytes_per_step"] is not None
            else "–"
        )
        out.append(f"| {r['direction']} | {r['count']:,} | {fmt_bytes(r['bytes'])} | {per} |")
    return [*out, ""]


def _saved_extras(saved: Notes | None) -> list[str]:
    """The user's experiment (when not already the step-6 answer), marked phases and pinned notes."""
    if saved is None:
        return []
    out = []
    if saved.experiment and saved.experiment.strip() != saved.answers.get(6, "").strip():
        out += ["## Your experiment", "", saved.experiment, ""]
    md = notes_markdown(saved, answers=False)
    return out + ([md] if md else [])
