"""`gaplens summary`: devices, GPU work totals, busy share, phases, top kernels/API/ranges."""

from __future__ import annotations

from gaplens.analysis.summary import summary
from gaplens.analysis.units import fmt_bytes, fmt_ns
from gaplens.loaders.model import Trace


def render_text(trace: Trace, top: int = 10) -> str:
    s = summary(trace, top)
    lines = [f"{s['source']['path']}  ({s['source']['version']})", ""]
    w0, w1 = s["window_ns"]
    lines.append(
        f"GPU window   {fmt_ns(w1 - w0)}   GPU busy {fmt_ns(s['gpu']['busy_ns'])} ({s['gpu']['busy_pct']:.1f}%)"
    )
    for d in s["devices"]:
        lines.append(
            f"  GPU {d['id']}  {d['name']}  streams {', '.join(map(str, d['streams']))}  "
            f"busy {fmt_ns(d['busy_ns'])} of {fmt_ns(d['window_ns'][1] - d['window_ns'][0])} ({d['busy_pct']:.1f}%)"
        )
    k, m, ms = s["kernels"], s["memcpy"], s["memset"]
    lines.append(f"kernels      {k['count']:>8,}   {fmt_ns(k['total_ns'])}")
    lines.append(f"memcpy       {m['count']:>8,}   {fmt_ns(m['total_ns'])}   {fmt_bytes(m['bytes'])}")
    for label, d in m["by_direction"].items():
        lines.append(f"  {label:<10} {d['count']:>8,}   {fmt_ns(d['total_ns'])}   {fmt_bytes(d['bytes'])}")
    lines.append(f"memset       {ms['count']:>8,}   {fmt_ns(ms['total_ns'])}")
    if s["lacks"]:
        lines.append(f"trace lacks: {', '.join(s['lacks'])}")
    for w in s["warnings"]:
        lines.append(f"warning: {w}")
    if s["phases"]:
        lines += ["", "phases (GPU span as CUDA events would time it)"]
        for p in s["phases"]:
            indent = "  " * min(p["depth"], 6)
            lines.append(
                f"  {indent}{p['name'][:48]:<{50 - len(indent)}} {fmt_ns(p['dur_ns']):>10}  busy {p['busy_pct']:5.1f}%"
            )
    for title, key in (
        ("top kernels", "top_kernels"),
        ("top CUDA API calls", "top_cuda_api"),
        ("top ranges", "top_ranges"),
    ):
        rows = s[key]
        if not rows:
            continue
        lines += [
            "",
            f"{title} by total time",
            f"  {'share':>6} {'total':>10} {'count':>7} {'avg':>10} {'med':>10}  name",
        ]
        for r in rows:
            lines.append(
                f"  {r['pct']:5.1f}% {fmt_ns(r['total_ns']):>10} {r['count']:>7,} {fmt_ns(r['avg_ns']):>10} "
                f"{fmt_ns(r['med_ns']):>10}  {r['name'][:90]}"
            )
    return "\n".join(lines)
