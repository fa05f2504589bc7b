"""`gaplens whatif TRACE [--remove CAUSE]... [--graph PHASE]... [--scale GLOB=FACTOR]...`: predicted window and step."""

from __future__ import annotations

import argparse

from gaplens.analysis.units import fmt_ns
from gaplens.analysis.whatif import REMOVABLE, Change, parse_graph, parse_remove, parse_scale, whatif
from gaplens.loaders import TraceError
from gaplens.tui.commands.common import load_trace, print_json


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "whatif",
        help="predicted window and step time if a cause went away or GPU ops ran faster",
        description="Replay the trace's critical-path graph with a change and predict window and step times.",
    )
    p.add_argument("trace")
    p.add_argument(
        "--remove",
        action="append",
        default=[],
        metavar="CAUSE",
        help=f"take the host time behind blank regions of this cause off its threads ({', '.join(REMOVABLE)})",
    )
    p.add_argument(
        "--graph",
        action="append",
        default=[],
        metavar="PHASE",
        help="capture every instance of PHASE (a range name or family, or 'step') as a CUDA graph",
    )
    p.add_argument(
        "--scale",
        action="append",
        default=[],
        metavar="GLOB=FACTOR",
        help="GPU ops whose name matches GLOB take FACTOR times as long (e.g. 'Memcpy HtoD*=0.12', '*gemm*=0.5')",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")


def changes_of(args: argparse.Namespace) -> list[Change]:
    """The changes asked for, in command-line order; malformed ones are unusable input (exit 2)."""
    try:
        return (
            [parse_remove(c) for c in args.remove]
            + [parse_graph(g) for g in args.graph]
            + [parse_scale(s) for s in args.scale]
        )
    except ValueError as exc:
        raise TraceError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    changes = changes_of(args)
    trace = load_trace(args.trace)
    try:
        result = whatif(trace, changes)
    except ValueError as exc:  # a change the trace refuses (--graph of a phase that synchronises)
        raise TraceError(str(exc)) from None
    if args.json:
        print_json(result)
    else:
        print(render_text(args.trace, changes, result))
    return 0


def pct_change(measured: int | None, predicted: int | None) -> str:
    """``-12.3%``: the predicted change against the measured time (empty without a measured time)."""
    if not measured or predicted is None:
        return ""
    return f"{100.0 * (predicted - measured) / measured:+.1f}%"


def change_line(d: dict) -> str:
    """One change of ``whatif()["changes"]`` in words: what it took off (the CLI and the viewer say the same)."""
    if d["kind"] == "graph":
        return (
            f"--graph {d['target']}: {d['instances']:,} instances of {d['label']} as {d['graphs']:,} graph launches, "
            f"{d['ops']:,} GPU ops; {fmt_ns(d['host_ns'])} of host time taken off"
        )
    if d["kind"] == "scale":
        return (
            f"--scale '{d['glob']}={d['factor']:g}': {d['ops']:,} GPU ops, "
            f"{fmt_ns(d['gpu_ns'])} -> {fmt_ns(d['gpu_ns_after'])}"
        )
    taken = f", {fmt_ns(d['host_ns'])} of host time taken off" if d.get("host_ns") is not None else ""
    unblocked = f", {d['calls_unblocked']:,} blocking calls no longer wait" if d["calls_unblocked"] else ""
    if d.get("calls_removed"):
        unblocked += f", {d['calls_removed']:,} memory-management calls cost nothing"
    if d.get("pipeline_ns"):
        unblocked += f", {fmt_ns(d['pipeline_ns'])} of waiting for the next batch taken off"
    if d.get("copies_off_stream"):
        unblocked += f", {d['copies_off_stream']:,} copies off the compute stream"
    return (
        f"--remove {d['cause']}: {d['regions']:,} blank regions ({fmt_ns(d['blank_ns'])}, "
        f"{d['on_critical_path']:,} on the critical path){taken}{unblocked}"
    )


def render_text(path: str, changes: list[Change], r: dict) -> str:
    lines = [f"whatif  {path}"]
    if not r["changes"]:
        lines.append("change  none (the replay reproduces the trace)")
    lines += [f"change  {change_line(d)}" for d in r["changes"]]
    lines.append("")
    lines.append(f"  {'':<28} {'measured':>12} {'predicted':>12}  change")
    w = r["window_ns"]
    lines.append(
        f"  {'GPU window':<28} {fmt_ns(w['measured']):>12} {fmt_ns(w['predicted']):>12}  "
        f"{pct_change(w['measured'], w['predicted'])}"
    )
    st = r["steps"]
    if st["count"]:
        label = f"{st['label']} (median of {st['count']})"
        lines.append(
            f"  {label:<28} {fmt_ns(st['measured_median_ns']):>12} {fmt_ns(st['predicted_median_ns']):>12}  "
            f"{pct_change(st['measured_median_ns'], st['predicted_median_ns'])}"
        )
    lines += [f"note: {n}" for n in r["notes"]]
    return "\n".join(lines)
