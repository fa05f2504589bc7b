"""`gaplens gaps`, `gaplens smells` and `gaplens report`: the readings, headless."""

from __future__ import annotations

import argparse
import sys

from gaplens.analysis.gaps import CAUSES, Gap, analyse_gaps, gap_columns, gap_json, largest
from gaplens.analysis.phases import innermost
from gaplens.analysis.regions import device_phases
from gaplens.analysis.units import fmt_ns
from gaplens.analysis.words import CAUSE_WORDS
from gaplens.loaders.model import Trace, TraceError
from gaplens.loaders.text import clean_text
from gaplens.tui.commands.common import load_trace, output_file, print_json, write_output
from gaplens.tui.commands.fit import fit_entries, short_name

#: The shares column: four causes with two-digit shares ("host 74%, launch 19%, sync 6%, copy 1%").
SHARES_WIDTH = 40


def render_gaps(trace: Trace, gaps: list[Gap], top: int) -> str:
    by_cause: dict[str, int] = {}
    for g in gaps:
        by_cause[g.cause] = by_cause.get(g.cause, 0) + g.dur_ns
    on = [g for g in gaps if g.on_critical_path]
    return _render(trace, (len(gaps), len(on), sum(g.dur_ns for g in on)), by_cause, largest(gaps)[:top], top)


def render_top_gaps(trace: Trace, top: int) -> str:
    """``render_gaps`` for the whole trace from the gap columns: only the ``top`` largest become objects."""
    cols = gap_columns(trace)
    dur = cols.end_ns - cols.start_ns
    on = cols.on_path
    order = cols.largest_first()[:top]
    shown = [cols.gap(trace, int(k)) for k in order.tolist()]
    return _render(trace, (len(cols), int(on.sum()), int(dur[on].sum())), cols.time_by_cause(), shown, top)


def _render(trace: Trace, counts: tuple[int, int, int], by_cause: dict[str, int], shown: list[Gap], top: int) -> str:
    total, on_count, on_ns = counts
    blank = sum(by_cause.values())
    ranked = sorted(by_cause.items(), key=lambda kv: (-kv[1], CAUSES.index(kv[0])))
    split = ", ".join(f"{c} {fmt_ns(v)}" for c, v in ranked)
    lines = [
        f"{total:,} blank regions, {fmt_ns(blank)} without compute ({split}); {on_count:,} on the critical path "
        f"({fmt_ns(on_ns)})",
        "",
        f"  {'#':>3} {'GPU':>3} {'start':>10} {'length':>10} {'path':>4}  {'cause':<10} {'shares':<{SHARES_WIDTH}} "
        "phase / evidence",
    ]
    for k, g in enumerate(shown, 1):
        inner = innermost(device_phases(trace, g.device), g.start_ns, g.end_ns)
        phase = inner.name if inner is not None else ""
        ev = ", ".join(short_name(trace.name(i), 40) for i in _telling(g))
        mark = " ●" if g.on_critical_path else ""
        lines.append(
            f"  {k:>3} {g.device:>3} {fmt_ns(g.start_ns):>10} {fmt_ns(g.dur_ns):>10} {mark:>4}  {g.cause:<10} "
            f"{fit_entries(g.shares_text.split(', '), SHARES_WIDTH):<{SHARES_WIDTH}} {short_name(phase, 30)}"
            f"{' · ' if phase and ev else ''}{ev}"
        )
        if g.message:
            lines.append(f"      {g.message}")
    if total > top:
        lines.append(f"  … {total - top:,} more (--top N)")
    lines.append("")
    lines.append("● on the critical path: the device waited for the host, or for a collective or copy on the path")
    lines += [f"  {c:<10} {CAUSE_WORDS[c]}" for c, _ in ranked]
    return "\n".join(lines)


def _telling(g: Gap) -> list[int]:
    """The evidence worth a name in one line: the collective or overhead row, else what the host ran."""
    return g.evidence[:2] if g.cause in ("comm", "profiler", "copy") else g.evidence[2:4]


TEXT_TOP = 20  # gaps shown as text without --top: a screenful
JSON_TOP = 50  # gaps in --json without --top: a decode trace has ~17k regions (4.9 MB of JSON); --top 0 gives all


def _top(args: argparse.Namespace) -> int | None:
    """How many gaps to print: --top N, 0 for all (None), else the text or JSON default."""
    if args.top is None:
        return JSON_TOP if args.json else TEXT_TOP
    if args.top < 0:
        raise TraceError(f"gaps: --top {args.top}: give a count (0 for all)")
    return args.top or None


def cmd_gaps(args: argparse.Namespace) -> int:
    top = _top(args)
    trace = load_trace(args.trace)
    if not args.json and args.phase is None:
        # The text shows the largest few: keep the rest as columns (10^5 gaps at 1M events).
        print(render_top_gaps(trace, top if top is not None else sys.maxsize))
        return 0
    gaps = analyse_gaps(trace, phase=args.phase, evidence_top=top if top is not None else 100)
    if args.json:
        rows = largest(gaps)[:top] if top is not None else largest(gaps)
        print_json({"origin_ns": trace.meta.origin_ns, "total": len(gaps), "gaps": [gap_json(g) for g in rows]})
    else:
        print(render_gaps(trace, gaps, top if top is not None else sys.maxsize))
    return 0


def render_smells(trace: Trace, findings) -> str:
    from gaplens.analysis.smells import rollup

    if not findings:
        return "no smells: the thresholds scale with the step time, and nothing crossed them"
    lines = []
    for g in rollup(trace, findings):
        lines.append(f"{g.kind:<13} GPU {g.device}  {g.line}")
        if len(g.findings) > 1:
            for f in sorted(g.findings, key=lambda f: -f.dur_ns)[:3]:
                lines.append(f"    {fmt_ns(f.start_ns):>10} +{fmt_ns(f.dur_ns):<10} {f.summary}")
            if len(g.findings) > 3:
                lines.append(f"    … {len(g.findings) - 3} more (--json lists each)")
    lines.append("")
    lines.append("levers:")
    for kind, lever in dict.fromkeys((f.kind, f.lever) for f in findings):  # each distinct lever once
        lines.append(f"  {kind:<13} {lever}")
    return "\n".join(lines)


def cmd_smells(args: argparse.Namespace) -> int:
    from gaplens.analysis.smells import rollup, smells

    trace = load_trace(args.trace)
    findings = smells(trace)
    if args.json:
        print_json(
            {
                "origin_ns": trace.meta.origin_ns,
                "smells": [f.to_json() for f in findings],
                "groups": [g.to_json() for g in rollup(trace, findings)],
            }
        )
    else:
        print(render_smells(trace, findings))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from gaplens.analysis.protocol.report import report_markdown
    from gaplens.store.notes import notes_for_trace

    # The input, a symlink or a FIFO is refused before any work (exit 2); the file is written atomically.
    out = output_file(args.output, [args.trace], "report -o") if args.output else None
    trace = load_trace(args.trace)
    saved = notes_for_trace(trace, warn=lambda m: print(f"gaplens: warning: {m}", file=sys.stderr))
    text = clean_text(report_markdown(trace, notes=saved), keep_newlines=True)  # file names may hold anything
    if out is not None:
        write_output(output_file(out, [args.trace], "report -o"), text.encode("utf-8"))
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


COMMANDS = {"gaps": cmd_gaps, "smells": cmd_smells, "report": cmd_report}


def add_parsers(sub) -> None:
    p = sub.add_parser("gaps", help="blank regions, largest first, with critical-path flag and cause")
    p.add_argument("trace")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--top", type=int, default=None, help=f"the N largest (default: text {TEXT_TOP}, JSON {JSON_TOP}; 0: all)"
    )
    p.add_argument("--phase", default=None, help="only inside the phases with this name")
    p = sub.add_parser("smells", help="picket fences, host islands, copies on the path, sync cliffs")
    p.add_argument("trace")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p = sub.add_parser("report", help="the six-step reading protocol as Markdown")
    p.add_argument("trace")
    p.add_argument("-o", "--output", default=None, help="write to FILE.md instead of stdout")
