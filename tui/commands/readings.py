"""`gaplens gaps`, `gaplens smells` and `gaplens report`: the readings, headless."""

from __future__ import annotations

import argparse
import sys

from gaplens.analysis.gaps import Gap, analyse_gaps, gap_json, largest
from gaplens.analysis.phases import phases
from gaplens.analysis.report import phase_at
from gaplens.analysis.units import fmt_ns
from gaplens.loaders.model import Trace, TraceError
from gaplens.loaders.text import clean_text
from gaplens.tui.commands.common import load_trace, print_json


def _shares(g: Gap) -> str:
    return " ".join(f"{c} {100 * v:.0f}%" for c, v in sorted(g.shares.items(), key=lambda kv: -kv[1]) if v >= 0.005)


def render_gaps(trace: Trace, gaps: list[Gap], top: int) -> str:
    found = phases(trace)
    idle = sum(g.dur_ns for g in gaps)
    on = [g for g in gaps if g.on_critical_path]
    lines = [
        f"{len(gaps):,} blank regions, {fmt_ns(idle)} idle; {len(on):,} on the critical path "
        f"({fmt_ns(sum(g.dur_ns for g in on))})",
        "",
        f"  {'#':>3} {'GPU':>3} {'start':>10} {'length':>10} {'path':>4}  {'cause':<7} {'shares':<30} phase / evidence",
    ]
    for k, g in enumerate(largest(gaps)[:top], 1):
        phase = phase_at(trace, g.start_ns, g.end_ns, found)
        ev = ", ".join(trace.name(i)[:40] for i in g.evidence[2:4])
        mark = " ●" if g.on_critical_path else ""
        lines.append(
            f"  {k:>3} {g.device:>3} {fmt_ns(g.start_ns):>10} {fmt_ns(g.dur_ns):>10} {mark:>4}  {g.cause:<7} "
            f"{_shares(g)[:30]:<30} {phase[:30]}{' · ' if phase and ev else ''}{ev}"
        )
        if g.message:
            lines.append(f"      {g.message}")
    if len(gaps) > top:
        lines.append(f"  … {len(gaps) - top:,} more (--top N)")
    lines.append("")
    lines.append("● the critical path ran through host work during the gap: the device waited for the host")
    return "\n".join(lines)


def cmd_gaps(args: argparse.Namespace) -> int:
    trace = load_trace(args.trace)
    gaps = analyse_gaps(trace, phase=args.phase, evidence_top=args.top if args.top is not None else 100)
    if args.json:
        rows = largest(gaps)[: args.top] if args.top is not None else largest(gaps)
        print_json({"origin_ns": trace.meta.origin_ns, "gaps": [gap_json(g) for g in rows]})
    else:
        print(render_gaps(trace, gaps, args.top if args.top is not None else 20))
    return 0


def render_smells(trace: Trace, findings) -> str:
    if not findings:
        return "no smells: the thresholds scale with the step time, and nothing crossed them"
    lines = []
    for f in findings:
        lines.append(f"{f.kind:<13} GPU {f.device}  {fmt_ns(f.start_ns):>10} +{fmt_ns(f.dur_ns):<10} {f.summary}")
    lines.append("")
    lines.append("levers:")
    from gaplens.analysis.smells import LEVERS

    for kind in dict.fromkeys(f.kind for f in findings):
        lines.append(f"  {kind:<13} {LEVERS[kind]}")
    return "\n".join(lines)


def cmd_smells(args: argparse.Namespace) -> int:
    from gaplens.analysis.smells import smells

    trace = load_trace(args.trace)
    findings = smells(trace)
    if args.json:
        print_json({"origin_ns": trace.meta.origin_ns, "smells": [f.to_json() for f in findings]})
    else:
        print(render_smells(trace, findings))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from gaplens.analysis.notes import notes_for_trace
    from gaplens.analysis.report import report_markdown

    trace = load_trace(args.trace)
    saved = notes_for_trace(trace, warn=lambda m: print(f"gaplens: warning: {m}", file=sys.stderr))
    text = clean_text(report_markdown(trace, notes=saved), keep_newlines=True)  # file names may hold anything
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            raise TraceError(f"cannot write {args.output}: {exc.strerror}") from exc
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


COMMANDS = {"gaps": cmd_gaps, "smells": cmd_smells, "report": cmd_report}


def add_parsers(sub) -> None:
    p = sub.add_parser("gaps", help="blank regions, largest first, with critical-path flag and cause")
    p.add_argument("trace")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--top", type=int, default=None, help="only the N largest (text default 20, JSON all)")
    p.add_argument("--phase", default=None, help="only inside the phases with this name")
    p = sub.add_parser("smells", help="picket fences, host islands, copies on the path, sync cliffs")
    p.add_argument("trace")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p = sub.add_parser("report", help="the six-step reading protocol as Markdown")
    p.add_argument("trace")
    p.add_argument("-o", "--output", default=None, help="write to FILE.md instead of stdout")
