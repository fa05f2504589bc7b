"""`gaplens summary`: devices, GPU work totals, busy share, phases, top kernels/API/ranges."""

from __future__ import annotations

from gaplens.analysis.steps import steps
from gaplens.analysis.summary import summary
from gaplens.analysis.units import fmt_bytes, fmt_ns
from gaplens.loaders.model import Trace

#: Phase families printed before "… N more": a system-wide capture has thousands of ranges.
MAX_FAMILIES = 40


def busy_line(gpu: dict, devices: int = 1) -> str:
    """The one busy reading in words: busy, compute, communication, idle and the profiler's share.

    Idle is summed over the devices: on two GPUs it can exceed the window, so the line says so
    (the nsys DDP report read "GPU window 6.08 s ... idle 10.1 s").
    """
    text = f"GPU busy {gpu['busy_pct']:.1f}%"
    if gpu["comm_ns"]:
        text += (
            f" (compute {gpu['compute_pct']:.1f}%, communication {fmt_ns(gpu['comm_ns'])}, "
            f"{fmt_ns(gpu['exposed_comm_ns'])} of it exposed)"
        )
    if gpu["idle_ns"]:
        summed = f" summed over {devices} GPUs" if devices > 1 else ""
        text += (
            f"; idle {fmt_ns(gpu['idle_ns'])}{summed} (nothing asked), "
            f"compute {gpu['active_compute_pct']:.1f}% of the rest"
        )
    if gpu["profiler_pct"] >= 0.05:
        text += f"; the profiler itself took {gpu['profiler_pct']:.1f}%"
    return text


def render_text(trace: Trace, top: int = 10) -> str:
    s = summary(trace, top, phase_rows=False)  # the text prints the families, not a row per phase
    lines = [f"{s['source']['path']}  ({s['source']['version']})", ""]
    w0, w1 = s["window_ns"]
    if s["kernels"]["count"] + s["memcpy"]["count"] + s["memset"]["count"] == 0:
        # no GPU work was read: a "GPU window" here is the host's span, and 0% busy would blame the device
        lines.append(f"GPU window   none: no GPU work in the trace (its host events span {fmt_ns(w1 - w0)})")
    else:
        lines.append(f"GPU window   {fmt_ns(w1 - w0)}   {busy_line(s['gpu'], len(s['devices']))}")
    for d in s["devices"]:
        comm = f", comm {fmt_ns(d['comm_ns'])} ({fmt_ns(d['exposed_comm_ns'])} exposed)" if d["comm_ns"] else ""
        lines.append(
            f"  GPU {d['id']}  {d['name']}  streams {', '.join(map(str, d['streams']))}  "
            f"busy {fmt_ns(d['busy_ns'])} of {fmt_ns(d['window_ns'][1] - d['window_ns'][0])} ({d['busy_pct']:.1f}%), "
            f"compute {fmt_ns(d['compute_ns'])}{comm}"
        )
    if s["clock"]:
        lines.append(f"warning: {s['clock']['message']}")
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
    lines += step_lines(s, trace)
    lines += phase_lines(s)
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


def step_line(step: dict, warm_text: str = "") -> str:
    """``train_step ×4, median 40.8 ms`` with the warm-up steps it set apart (``warm_text``: them in words)."""
    text = f"{step['label']} ×{step['count']}, median {fmt_ns(step['median_ns'])}"
    warm = step["warmup"]
    if warm:
        named = warm_text or ", ".join(warm[:3]) + (f" and {len(warm) - 3} more" if len(warm) > 3 else "")
        text += f" (warm-up set apart: {named})"
    return text


def step_lines(s: dict, trace: Trace | None = None) -> list[str]:
    """The step (``analysis.steps``): one line, or one per process when several have steps."""
    if not s.get("step"):
        return []

    def warm(pid: int | None) -> str:
        return steps(trace, pid).warmup_text() if trace is not None else ""

    by_pid = s.get("step_by_process") or {}
    if len(by_pid) < 2:
        return [f"step         {step_line(s['step'], warm(None))}"]
    return ["step", *(f"  process {pid}  {step_line(st, warm(int(pid)))}" for pid, st in by_pid.items())]


def _step_of(s: dict, pid: int) -> dict | None:
    """The step of process ``pid`` (``step_by_process`` when several processes have one)."""
    by_pid = s.get("step_by_process") or {}
    return by_pid.get(str(pid)) if by_pid else s.get("step")


def phase_lines(s: dict) -> list[str]:
    """Phase families (``decode_step ×32``), grouped by process when there is more than one."""
    rows = s["phase_families"]
    if not rows:
        return []
    lines = ["", "phases (GPU span as CUDA events would time it; busy = compute share of that span)"]
    pids = list(dict.fromkeys(r["pid"] for r in rows))
    shown = 0
    for pid in pids:
        if len(pids) > 1:
            lines.append(f"  process {pid} {s['processes'].get(str(pid), '')}".rstrip())
        mine = [r for r in rows if r["pid"] == pid]
        base = min(r["depth"] for r in mine)
        for r in mine:
            if shown == MAX_FAMILIES:
                break
            shown += 1
            indent = "  " * (min(r["depth"] - base, 6) + (1 if len(pids) > 1 else 0))
            name = r["family"] if r["count"] == 1 else f"{r['family']} ×{r['count']}"
            each = f"median {fmt_ns(r['median_ns'])}" if r["count"] > 1 else fmt_ns(r["total_ns"])
            st = _step_of(s, pid)
            if st and st["warmup"] and r["family"] == st["label"] and r["count"] == st["count"]:
                # the step's own row quotes the step's steady median, not a second "median" over every member
                # (round-3 copy_bound: "step train_step ×6, median 101 ms" above "train_step ×6 median 102 ms")
                each = f"steady median {fmt_ns(st['median_ns'])}"
            dev = f"  GPU {','.join(map(str, r['devices']))}" if r["devices"] and len(s["devices"]) > 1 else ""
            lines.append(f"  {indent}{name[:48]:<{50 - len(indent)}} {each:>17}  busy {r['busy_pct']:5.1f}%{dev}")
    if len(rows) > shown:
        lines.append(f"  … {len(rows) - shown:,} more phase families (--json lists every phase)")
    return lines
