"""`gaplens compare BEFORE AFTER`: two traces side by side, the differences, and a verdict."""

from __future__ import annotations

import argparse
import sys

from gaplens.analysis.compare import METRICS, compare_readings, gate, parse_fail_on, read
from gaplens.analysis.units import fmt_bytes, fmt_ns
from gaplens.tui.commands.common import load_trace, print_json


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compare",
        help="before/after: busy share, phases, largest blank region, step time, kernels, copies",
        description="Compare two traces of the same workload (before and after an experiment).",
    )
    p.add_argument("before", help="trace before the change")
    p.add_argument("after", help="trace after the change")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--fail-on",
        action="append",
        default=[],
        metavar="EXPR",
        # argparse %-formats help text: the metrics' own "%" must be doubled.
        help=f"exit 3 when a condition holds ({METRICS.replace('%', '%%')}; several allowed, or comma-separated)",
    )


def run(args: argparse.Namespace) -> int:
    conditions = parse_fail_on(args.fail_on) if args.fail_on else []
    before, after = load_trace(args.before), load_trace(args.after)
    rb, ra = read(before), read(after)
    result = compare_readings(rb, ra)
    status = 0
    if conditions:
        result["gate"] = gate(conditions, rb, ra)
        status = result["gate"]["exit_status"]
    if args.json:
        print_json(result)
    else:
        print(render_text(result))
    if status == 2:
        why = next(c["reason"] for c in result["gate"]["conditions"] if c["holds"] is None)
        print(f"gaplens: the gate cannot judge every condition: {why}", file=sys.stderr)
    return status


def _pct_change(c: dict) -> str:
    if c.get("pct") is None:
        return ""
    return f"{c['pct']:+.0f}%"


def _row(label: str, before: str, after: str, change: str) -> str:
    return f"  {label:<30} {before:>16} {after:>16}  {change}"


def _ns(v) -> str:
    return "—" if v is None else fmt_ns(v)


def _num(v, digits: int = 0) -> str:
    if v is None:
        return "—"
    return f"{v:,.{digits}f}"


def render_text(r: dict) -> str:
    """``compare``'s text: the side-by-side figures, the largest blank region, phases, blank time by cause,
    the verdict and the gate."""
    b, a = r["before"], r["after"]
    lines = [f"before  {b['path']}", f"after   {a['path']}", ""]
    lines += _figure_lines(r) + _gap_lines(r["gap"]) + _phase_lines(r["phases"]) + _cause_lines(r)
    lines += ["", f"verdict: {r['verdict']}"]
    lines += [f"warning: {w}" for w in r["warnings"]]
    if "gate" in r:
        lines.append("")
        lines += [_gate_line(c) for c in r["gate"]["conditions"]]
    return "\n".join(lines)


def _figure_lines(r: dict) -> list[str]:
    b, a = r["before"], r["after"]
    lines = [_row("", "before", "after", "change")]
    busy = r["busy_pct"]
    lines.append(
        _row(
            "GPU busy",
            f"{busy['before']:.1f}%",
            f"{busy['after']:.1f}%",
            f"{busy['diff']:+.1f} pts",
        )
    )
    comp = r["compute_pct"]
    lines.append(_row("compute share", f"{comp['before']:.1f}%", f"{comp['after']:.1f}%", f"{comp['diff']:+.1f} pts"))
    lines.append(_row("GPU window", _ns(b["window_ns"]), _ns(a["window_ns"]), ""))
    label = r["step_label"] or "step"
    st = r["step_time_ns"]
    lines.append(_row(f"{label} time (median)", _ns(st["before"]), _ns(st["after"]), _pct_change(st)))
    k = r["kernels"]
    lines.append(_row("kernels", _num(k["before"]), _num(k["after"]), _pct_change(k)))
    kps = r["kernels_per_step"]
    lines.append(_row(f"kernels per {label}", _num(kps["before"]), _num(kps["after"]), _pct_change(kps)))
    c = r["copies"]
    lines.append(_row("copies", _num(c["before"]), _num(c["after"]), _pct_change(c)))
    cps, bps = r["copies_per_step"], r["copy_bytes_per_step"]
    lines.append(_row(f"copies per {label}", _num(cps["before"], 1), _num(cps["after"], 1), _pct_change(cps)))
    lines.append(
        _row(
            f"copied per {label}",
            "—" if bps["before"] is None else fmt_bytes(bps["before"]),
            "—" if bps["after"] is None else fmt_bytes(bps["after"]),
            _pct_change(bps),
        )
    )
    return lines


def _gap_lines(g: dict) -> list[str]:
    lines = ["", "largest blank region on the critical path"]
    for side, gap in (("before", g["before"]), ("after", g["after"])):
        if gap is None:
            lines.append(f"  {side:<7} none")
            continue
        where = f" in {gap['phase']}" if gap["phase"] else ""
        size = f"{fmt_ns(gap['dur_ns'])} at {fmt_ns(gap['start_ns'])}"
        lines.append(f"  {side:<7} {size}{where}, cause {gap['cause']}")
    if g.get("where") and g.get("after_ns") is not None:
        lines.append(
            _row(
                f"largest blank in {g['where']}",
                fmt_ns(g["before_ns"]),
                fmt_ns(g["after_ns"]),
                f"{g['pct']:+.0f}%",
            )
        )
        per = g.get("blank_per_occurrence_ns")
        if per:
            lines.append(_row(f"blank per {g['where']}", fmt_ns(per[0]), fmt_ns(per[1]), ""))
    return lines


def _phase_lines(phases: list[dict]) -> list[str]:
    lines = [
        "",
        "phases (matched by family: decode_step 7 is decode_step; warm-up steps and what ran in them set apart)",
    ]
    lines.append(f"  {'phase':<30} {'busy before':>12} {'busy after':>12} {'span before':>12} {'span after':>12}")
    for p in phases:
        pb, pa = p["busy_pct"], p["dur_ns"]
        n0, n1 = p["count"]
        name = p["name"][:24] + (f" ×{max(n0, n1)}" if max(n0, n1) > 1 else "")
        lines.append(
            f"  {name:<30} {_opt_pct(pb['before']):>12} {_opt_pct(pb['after']):>12} "
            f"{_ns(pa['before']):>12} {_ns(pa['after']):>12}"
        )
    return lines


def _cause_lines(r: dict) -> list[str]:
    """Blank time on the critical path by cause, when both sides were read in the same scope."""
    b, a = r["before"], r["after"]
    label = r["step_label"] or "step"
    lines: list[str] = []
    causes = sorted(set(b["blank_by_cause"]) | set(a["blank_by_cause"]))
    same_steps = b["blank_scope"] != "per step" or (b["steps"] or {}).get("label") == (a["steps"] or {}).get("label")
    if causes and b["blank_scope"] == a["blank_scope"] and same_steps:
        scope = f"per {label}" if b["blank_scope"] == "per step" else "in the window"
        lines += ["", f"blank time on the critical path by cause, {scope}"]
        for c in causes:
            nb, na = b["blank_by_cause"].get(c, 0), a["blank_by_cause"].get(c, 0)
            lines.append(_row(c, fmt_ns(nb), fmt_ns(na), fmt_ns(na - nb) if na != nb else ""))
    return lines


def _gate_value(v, unit: str) -> str:
    if v is None:
        return "—"
    return f"{v:.1f}%" if unit == "%" else fmt_ns(v)


def _gate_line(c: dict) -> str:
    """One line per condition: what was measured and whether it fails the gate."""
    if c["holds"] is None:
        return f"gate {c['expr']}: cannot judge: {c['reason']}"
    if c.get("change_infinite"):
        change = "new" if c["after"] > c["before"] else "gone"
    else:
        change = f"{c['change_pct']:+.1f}%"
    what = {"kernel": f"kernel {c['glob']}", "compute": "compute share"}.get(c["metric"], c["metric"])
    if c["metric"] == "compute" and not c.get("change_infinite"):
        change += " relative"
    per = " per step" if c["unit"] == "ns per step" else ""
    if c.get("scope") == "steady steps" and c["metric"] in ("gap", "compute"):
        per = " in steady steps"  # warm-up steps set apart: say so beside a number THE gap's line may not show
    verdict = "FAIL" if c["holds"] else "pass"
    return (
        f"gate {c['expr']}: {verdict}: {what}{per} {_gate_value(c['before'], c['unit'])} -> "
        f"{_gate_value(c['after'], c['unit'])} ({change})"
    )


def _opt_pct(v) -> str:
    return "—" if v is None else f"{v:.1f}%"
