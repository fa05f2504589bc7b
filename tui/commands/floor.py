"""`gaplens floor TRACE [--json] [--gpu-spec FILE]`: each GPU op, phase and the whole trace against the floor."""

from __future__ import annotations

import argparse

from gaplens.analysis.floor.gpuspecs import DTYPES, SpecError
from gaplens.analysis.floor.reading import floor_json
from gaplens.analysis.floor.roof import latency_paced, per_second
from gaplens.analysis.units import fmt_bytes, fmt_ns
from gaplens.loaders.model import Trace, TraceError
from gaplens.loaders.text import clean_text
from gaplens.store.gpuspecs import default_spec_path
from gaplens.tui.commands.common import load_trace, print_json
from gaplens.tui.commands.fit import short_name

#: Op rows printed before "… N more" (the JSON has them all).
MAX_OPS = 25
#: Phase rows printed before "… N more".
MAX_PHASES = 30
#: An op name inside a sentence: room for "Memcpy HtoD (Pageable -> Device)" and an aten name; kernels' long
#: template names are cut at a word boundary.
NAME_IN_LINE = 64


def add_parser(sub) -> None:
    p = sub.add_parser("floor", help="the hardware floor per op, phase and step (needs record_shapes)")
    p.add_argument("trace")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--gpu-spec",
        metavar="FILE",
        default=None,
        help=f"a JSON file of GPU rows that add to or replace the built-in table (default: {default_spec_path()} "
        "when it exists)",
    )


def run(args: argparse.Namespace) -> int:
    trace = load_trace(args.trace)
    try:
        data = floor_json(trace, args.gpu_spec)
    except SpecError as exc:
        raise TraceError(str(exc)) from None
    if args.json:
        print_json(data)
    else:
        print(render_text(trace, data))
    return 0


def _pct(x: float | None) -> str:
    return f"{x:.0%}" if x is not None else "—"


def _rate(v: float | None, unit: float, suffix: str) -> str:
    return f"{v / unit:,.1f} {suffix}" if v else "—"


def gpu_lines(gpu: dict | None) -> list[str]:
    """The GPU row named: device, table row, peaks, bandwidths, source."""
    if gpu is None:
        return ["GPU: the trace names no device"]
    if gpu["spec"] is None:
        return [
            f"GPU {gpu['device']}  {clean_text(gpu['name'])}: {gpu['why']}; FLOPs and bytes without a floor "
            "(add a row with --gpu-spec FILE)"
        ]
    spec = gpu["spec"]
    peaks = ", ".join(f"{d} {spec['peak_flops'][d] / 1e12:,.1f}" for d in DTYPES if d in spec["peak_flops"])
    mine = ", your file" if spec["user"] else ""
    lines = [
        f"GPU {gpu['device']}  {clean_text(gpu['name'])}  →  {spec['name']} [{spec['key']}{mine}]",
        f"  dense peak TFLOP/s: {peaks}",
        f"  memory {spec['mem_bytes_per_s'] / 1e12:.2f} TB/s; host link {spec['link_bytes_per_s'] / 1e9:.0f} GB/s "
        f"one way ({spec['link'] or 'host link'})",
        f"  source: {spec['source']}" + (f" ({spec['note']})" if spec["note"] else ""),
    ]
    others = [d for d in gpu.get("devices", []) if d["device"] != gpu["device"]]
    if others:
        lines.append("  other devices: " + ", ".join(f"GPU {d['device']} {d['spec'] or 'no row'}" for d in others))
    return lines


def render_text(trace: Trace, data: dict) -> str:
    """``floor``'s text: the GPU, the totals, the step, the lever, then the phase, op and copy tables."""
    lines = gpu_lines(data["gpu"])
    lines.append("")
    if data["notes"]:
        lines += [f"note: {n}" for n in data["notes"]]
        lines.append("")
    lines += _total_lines(data["total"]) + _step_lines(data.get("step"))
    lever = data.get("lever")
    if lever:
        lines.append(f"lever ({lever['window']}): {clean_text(lever['text'])}")
    lines += _phase_lines(data["phases"]) + _op_lines(data["ops"]) + _copy_lines(data["copies"])
    return "\n".join(lines)


def _total_lines(tot: dict) -> list[str]:
    lines: list[str] = []
    sized = tot["time_ns"] - tot["unsized_ns"]
    if sized > 0 and latency_paced(tot["floor_ns"], tot["sized_count"]):
        lines.append(
            f"GPU ops {tot['count']:,}: {fmt_ns(tot['time_ns'])} measured; sized {fmt_ns(sized)}, all small: "
            f"{tot['sized_count']:,} ops with a floor of {fmt_ns(tot['floor_ns'])} in all, each paced by its own "
            f"latency, not by the roof; unsized {fmt_ns(tot['unsized_ns'])}"
        )
    elif sized > 0:
        lines.append(
            f"GPU ops {tot['count']:,}: {fmt_ns(tot['time_ns'])} measured; sized {fmt_ns(sized)} with a floor of "
            f"{fmt_ns(tot['floor_ns'])} ({_pct(tot['efficiency'])} of the roof, {tot['bound'] or '—'}-bound); "
            f"unsized {fmt_ns(tot['unsized_ns'])}"
        )
    else:
        lines.append(f"GPU ops {tot['count']:,}: {fmt_ns(tot['time_ns'])} measured, none with a floor")
    if tot["excess"]:
        lines.append(
            "  time above the floor: "
            + ", ".join(
                f"{short_name(e['name'], NAME_IN_LINE)} {fmt_ns(e['excess_ns'])} ({e['bound']})" for e in tot["excess"]
            )
        )
    return lines


def _step_lines(st: dict | None) -> list[str]:
    lines: list[str] = []
    if st and st["efficiency"] is not None and latency_paced(st["median_floor_ns"], st["median_sized_count"]):
        lines.append(
            f"step {clean_text(st['label'])} ×{st['count']} ({st['steady']} steady, {fmt_ns(st['median_ns'])} each): "
            f"GPU ops {fmt_ns(st['median_time_ns'])} per step; the sized ones are small ({st['median_sized_count']:,} "
            f"ops, {fmt_ns(st['median_sized_ns'])}, a floor of {fmt_ns(st['median_floor_ns'])}; medians): "
            "their time is per-op latency, not the roof"
        )
    elif st and st["efficiency"] is not None:
        ex = ", ".join(f"{short_name(e['name'], NAME_IN_LINE)} {fmt_ns(e['excess_ns'])}" for e in st["excess"])
        whole = st["median_sized_ns"] >= st["median_time_ns"]
        sized = "all sized" if whole else f"sized {fmt_ns(st['median_sized_ns'])}"
        lines.append(
            f"step {clean_text(st['label'])} ×{st['count']} ({st['steady']} steady, {fmt_ns(st['median_ns'])} each): "
            f"GPU ops {fmt_ns(st['median_time_ns'])} per step, {sized}, against a floor of "
            f"{fmt_ns(st['median_floor_ns'])} (medians; the sized ops reach {_pct(st['efficiency'])} of the roof, "
            f"{st['bound'] or '—'}-bound)"
            + (f"; above the floor over the {st['steady']} steady steps: {ex}" if ex else "")
        )
    return lines


def _phase_lines(phases: list[dict]) -> list[str]:
    lines: list[str] = []
    if phases:
        lines += [
            "",
            "phases (GPU ops launched inside each phase, by the launch call's time on the host)",
            f"  {'phase':<28} {'ops':>6} {'measured':>10} {'floor':>10} {'roof':>5} {'bound':<8} "
            f"{'unsized':>10}  above the floor",
        ]
        for p in phases[:MAX_PHASES]:
            ex = ", ".join(f"{short_name(e['name'], NAME_IN_LINE)} {fmt_ns(e['excess_ns'])}" for e in p["excess"])
            times = f" ×{p['instances']}" if p["instances"] > 1 else ""
            name = short_name(p["name"], 28 - len(times)) + times
            lines.append(
                f"  {name:<28} {p['count']:>6,} {fmt_ns(p['time_ns']):>10} "
                f"{fmt_ns(p['floor_ns']):>10} {_pct(p['efficiency']):>5} {p['bound'] or '—':<8} "
                f"{fmt_ns(p['unsized_ns']):>10}  {ex}"
            )
        if len(phases) > MAX_PHASES:
            lines.append(f"  … {len(phases) - MAX_PHASES} more (--json)")
    return lines


def _op_lines(ops: list[dict]) -> list[str]:
    lines: list[str] = []
    lines += [
        "",
        "ops (totals over instances; roof = floor / measured)",
        f"  {'op':<34} {'dtype':<5} {'calls':>6} {'measured':>10} {'floor':>10} {'roof':>5} {'bound':<8} "
        f"{'TFLOP/s':>8} {'GB/s':>8}  shape",
    ]
    for r in ops[:MAX_OPS]:
        sized_ns = r["time_ns"] - r["unsized_ns"]
        tflops = per_second(r["flops"], sized_ns or r["time_ns"])
        gbs = per_second(r["bytes"], sized_ns)
        floor = fmt_ns(r["floor_ns"]) if r["floor_ns"] is not None else "unsized"
        lines.append(
            f"  {short_name(r['name'], 34):<34} {r['dtype'] or '—':<5} {r['count']:>6,} {fmt_ns(r['time_ns']):>10} "
            f"{floor:>10} {_pct(r['efficiency']):>5} {r['bound'] or '—':<8} {_rate(tflops, 1e12, ''):>8} "
            f"{_rate(gbs, 1e9, ''):>8}  {short_name(r['shape'], 40)}"
        )
    if len(ops) > MAX_OPS:
        lines.append(f"  … {len(ops) - MAX_OPS} more (--json)")
    return lines


def _copy_lines(copies: list[dict]) -> list[str]:
    lines: list[str] = []
    if copies:
        lines += ["", "host↔device copies against the link"]
        for c in copies:
            rate = _rate(c["bytes_per_s"], 1e9, "GB/s")
            link = _rate(c["link_bytes_per_s"], 1e9, "GB/s")
            against = f"of {link}" if c["link_bytes_per_s"] else "; no link peak for this GPU"
            rate = rate if c["bytes_per_s"] else "no rate"
            size = fmt_bytes(c["bytes"]) if c["bytes"] is not None else "size ?"
            lines.append(
                f"  {short_name(c['name'], 36):<36} {c['count']:>5,} {size:>10} "
                f"{fmt_ns(c['time_ns']):>10}  {rate}{'' if against.startswith(';') else ' '}{against}"
            )
            if c["note"]:
                lines.append(f"    {c['note']}")
    return lines
