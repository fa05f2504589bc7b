"""The details panel: what the selected event, blank region or phase is, in friendly units.

``describe`` is pure (model + selection → lines of text) so it is tested without an app;
every string from the trace is already cleaned by the model. On a short terminal the
panel is compact (at most ``COMPACT_LINES`` lines, the numbers merged onto fewer lines)
so the rows that explain a blank region stay on screen above it.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from gaplens.analysis.gaps import Gap
from gaplens.analysis.phases import phase_busy_pct
from gaplens.analysis.units import fmt_bytes, fmt_ns
from gaplens.analysis.words import CAUSE_WORDS
from gaplens.loaders.model import Kind, clean_name
from gaplens.tui.navigate import Selection
from gaplens.tui.viewmodel import TimelineModel

_KIND_LABEL = {k: k.name.lower().replace("_", " ") for k in Kind}
#: Terminals shorter than this get the compact panel; it has at most ``COMPACT_LINES`` lines.
COMPACT_BELOW_ROWS = 32
COMPACT_LINES = 4


def _lane_label(model: TimelineModel, lane_id: int) -> str:
    ln = model.trace.lanes[lane_id]
    meta = model.trace.meta
    if ln.is_gpu:
        return clean_name(f"GPU {ln.device} · {ln.name}")
    thread = meta.threads.get((ln.pid, ln.tid), f"thread {ln.tid}")
    return clean_name(f"{meta.processes.get(ln.pid, 'process')} {ln.pid} · {thread.strip()} · {ln.name}")


def _span(t0: int, t1: int) -> str:
    # Absolute times need more digits than durations to tell neighbours apart.
    return f"{fmt_ns(t0, 7)} → {fmt_ns(t1, 7)}   duration {fmt_ns(t1 - t0)}"


def describe(model: TimelineModel, sel: Selection | None, compact: bool = False) -> list[tuple[str, str]]:
    """(label, value) lines for the panel; empty when nothing is selected.

    ``compact``: the same facts in at most ``COMPACT_LINES`` lines (durations first, so a cut line
    still says how long), for terminals of 24-30 rows.
    """
    if sel is None:
        return []
    lines = _describe(model, sel)
    return _compact(lines) if compact else lines


def _compact(lines: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Merge the short facts onto one line each, keep the ``COMPACT_LINES`` that matter most, in order."""
    facts = dict(lines)
    merged: dict[str, str] = {}
    used: set[str] = set()
    for first, *rest in _MERGE:
        if first in facts:
            extra = [v if k in _UNLABELLED else f"{k} {v}" for k in rest if (v := facts.get(k)) is not None]
            merged[first] = "  ·  ".join([facts[first], *extra])
            used.update([first, *rest])
    for label, value in lines:
        if label not in used:
            merged[label] = value
    keep = sorted(merged, key=lambda label: _PRIORITY.index(label) if label in _PRIORITY else len(_PRIORITY))
    keep = keep[:COMPACT_LINES]
    order = [label for label, _ in lines]
    return [(label, merged[label]) for label in sorted(keep, key=order.index)]


# Which facts share a line in the compact panel (the first one names the line); facts whose
# value says what it is are merged without their label.
_MERGE = (
    ("blank", "device", "time"),
    ("cause", "shares", "critical path"),
    ("kind", "lane"),
    ("args", "bytes", "correlation"),
    ("phase", "GPU busy"),
    ("smell", "time"),
)
_UNLABELLED = {"device", "time", "lane", "shares"}
#: The lines a compact panel keeps first.
_PRIORITY = (
    "blank",
    "cause",
    "evidence",
    "note",
    "name",
    "kind",
    "time",
    "launched by",
    "launched",
    "phase",
    "GPU span",
    "host span",
    "smell",
    "finding",
    "lever",
    "args",
)


def _describe(model: TimelineModel, sel: Selection) -> list[tuple[str, str]]:
    if sel.gap is not None:
        return _describe_gap(model, sel.gap)
    if sel.finding is not None:
        f = sel.finding
        return [
            ("smell", f"{f.kind.replace('_', ' ')} · GPU {f.device}"),
            ("time", _span(f.start_ns, f.end_ns)),
            ("finding", clean_name(f.summary)),
            ("lever", f.lever),
        ]
    if sel.phase is not None:
        p = sel.phase
        rows = [
            ("phase", clean_name(p.name)),
            ("GPU span", _span(p.start_ns, p.end_ns)),
            ("host span", _span(p.host_start_ns, p.host_end_ns)),
            ("GPU busy", f"{phase_busy_pct(model.trace, p):.1f}% (compute)" if p.event >= 0 else "–"),
        ]
        if p.pid >= 0 and len({q.pid for q in model.readings.phases}) > 1:
            rows.append(("process", f"{p.pid} {clean_name(model.trace.meta.processes.get(p.pid, ''))}".rstrip()))
        return rows
    t = model.trace
    i = sel.event
    kind = Kind(int(t.kind[i]))
    lines = [
        ("name", t.names[int(t.name_id[i])]),
        ("kind", _KIND_LABEL[kind]),
        ("lane", _lane_label(model, int(t.lane[i]))),
        ("time", _span(int(t.start_ns[i]), int(t.end_ns[i]))),
    ]
    detail = t.details[int(t.detail_id[i])]
    if detail:
        lines.append(("args", detail))
    if int(t.bytes[i]):
        lines.append(("bytes", fmt_bytes(int(t.bytes[i]))))
    if int(t.corr[i]) >= 0:
        lines.append(("correlation", str(int(t.corr[i]))))
    if int(t.launch[i]) >= 0:
        j = int(t.launch[i])
        lag = int(t.start_ns[i]) - int(t.end_ns[j])
        # Started before its call returned (graph launch, host/device clock skew): never a negative lag.
        said = f"launch lag {fmt_ns(lag)}" if lag >= 0 else f"started {fmt_ns(-lag)} before the call returned"
        lines.append(("launched by", f"{t.names[int(t.name_id[j])]}  ({said}; o to jump)"))
    elif kind == Kind.CUDA_API:
        ops = model.launched_by(i)
        if ops.size:
            first = int(ops[0])
            more = f" and {ops.size - 1} more" if ops.size > 1 else ""
            lines.append(("launched", f"{t.names[int(t.name_id[first])]}{more}  (o to jump)"))
    return lines


def _describe_gap(model: TimelineModel, g: Gap) -> list[tuple[str, str]]:
    t = model.trace
    readings = model.readings
    title = ""  # the line's label already says "blank"
    if readings.largest is not None and g == readings.largest:
        title = " · the largest on the critical path" if g.on_critical_path else " · the largest"
    lines = [
        # "GPU idle" only when nothing was asked (DESIGN.md § Idle vs starved); otherwise the device waited.
        ("blank", f"{fmt_ns(g.dur_ns)}{title}" + (" · GPU idle: nothing was asked" if g.cause == "idle" else "")),
        ("time", _span(g.start_ns, g.end_ns)),
        ("device", f"GPU {g.device}"),
    ]
    if not readings.analysed:
        return [*lines, ("cause", "still analysing…")]
    path = {
        "comm": "yes: the device waited in a collective on the path",
        "copy": "yes: copies (or the host inside copy calls) on the path",
        "idle": "no: nothing was asked",
    }
    on = path.get(g.cause, "yes: the device waited for the host")
    lines.append(("critical path", on if g.on_critical_path or g.cause == "idle" else "no"))
    lines.append(("cause", f"{g.cause}: {CAUSE_WORDS[g.cause]}"))
    if g.shares:
        lines.append(("shares", g.shares_text))
    if g.evidence:
        names = [f"{t.name(e)} ({fmt_ns(int(t.end_ns[e] - t.start_ns[e]))})" for e in g.evidence[:4]]
        lines.append(("evidence", "; ".join(names)))
    if g.message:
        lines.append(("note", clean_name(g.message)))
    return lines


class Details(Static):
    """The panel under the timeline; hidden until something is selected."""

    def show(self, model: TimelineModel, sel: Selection | None) -> None:
        text = Text(no_wrap=True, overflow="ellipsis")
        if sel is None:  # opened with `i` before anything was picked: say how to pick
            text.append("Nothing selected: move the cursor onto a bar (h/l, j/k) and press enter; g/c jump to gaps")
        compact = self.app.size.height < COMPACT_BELOW_ROWS
        for k, (label, value) in enumerate(describe(model, sel, compact)):
            if k:
                text.append("\n")
            text.append(f"{label:>13} ", style="bold")
            text.append(value)
        self.update(text)
