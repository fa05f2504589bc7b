"""Pacing per phase: who sets the pace, the host (CPU-bound) or the device (device-paced)?

Launch lag = GPU op start − end of the call that launched it.

    CPU-bound       call ▕▏   call ▕▏   call ▕▏          lag ≈ 0, gaps between ops
                     op   █     op   █     op  █
    device-paced    call▕▏▕▏▕▏▕▏                          lag grows, ops shoulder to shoulder
                     op  ████████████████████

The verdict uses what set each op's start on the critical-path graph: an op whose
start waited for its launch call is host-paced, one that waited for the previous op
on its stream is device-paced. A phase is ``cpu-bound`` when most of its ops waited
for their launch and the device computed less than half of the phase (``words.MOSTLY``), or when
its blank time is mostly host work (blank regions caused by host code, syncs or launches)
and that host work holds at least ``HOST_PACED_SHARE`` of the phase, whatever its ops did:
a training step whose forward queues GEMMs far ahead and then logs for 2 ms after ``.item()``
is paced by its host, however device-paced its forward reads;
``device-paced`` when most ops waited for the device; ``mixed`` otherwise. Only compute
counts: a phase whose span the device spent mostly in communication is ``comm-bound``
(waiting for a peer sets no pace), one spent mostly in copies ``copy-bound``, and one whose
device ran nothing is ``idle``. Launch lag is never negative: an op that started before its call
returned (graph launches, host/device clock skew) has lag 0.
"""

from __future__ import annotations

import numpy as np

from gaplens.analysis.busy import compute_mask, span_busy_ns
from gaplens.analysis.critical_path import Edge, graph
from gaplens.analysis.gaps import CAUSES, gap_columns
from gaplens.analysis.memo import per_trace
from gaplens.analysis.phases import Phase, phases
from gaplens.analysis.words import MOSTLY
from gaplens.loaders.model import Trace

#: Host-caused blank time filling this share of a phase makes its host the pacer. The device-paced
#: phases of the bundled and round-3 traces wait on their host for at most 19% of their span
#: (nested_steps' forward; the ddp ranks' forward and train_step 11-18%: per-op dispatch gaps,
#: a data wait); host-paced ones for 30-96% (round-3 island_fault 46%, graphs_fixed 34%).
HOST_PACED_SHARE = 0.25
#: Blank-region causes in which the device waited for host work (not for a peer, a copy, a dependency).
HOST_CAUSES = ("host", "sync", "launch")


@per_trace
def compute_ops_by_start(trace: Trace) -> dict[int | None, tuple[np.ndarray, np.ndarray]]:
    """Compute ops and their starts, sorted by start, per device and (key None) over all devices.

    A phase's ops are then two binary searches away: one pass over every event per phase made a
    report on 10k ranges cost O(ranges x events) (12.7 s for 10k ranges on a small trace).
    """
    ops = np.flatnonzero(compute_mask(trace))
    starts = trace.start_ns[ops]
    order = np.argsort(starts, kind="stable")
    ops, starts = ops[order], starts[order]
    out: dict[int | None, tuple[np.ndarray, np.ndarray]] = {None: (ops, starts)}
    dev = trace.device_of_event()[ops]
    for d in np.unique(dev).tolist():
        keep = dev == d
        out[int(d)] = (ops[keep], starts[keep])
    return out


@per_trace
def host_blank_by_device(trace: Trace) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per device: its blank regions' starts and ends (disjoint, in order) and each one's host-caused share."""
    g = gap_columns(trace)
    host = g.shares[:, [CAUSES.index(c) for c in HOST_CAUSES]].sum(axis=1) if len(g) else np.zeros(0)
    out = {}
    for d in np.unique(g.device).tolist():
        m = g.device == d
        order = np.argsort(g.start_ns[m], kind="stable")
        out[int(d)] = (g.start_ns[m][order], g.end_ns[m][order], host[m][order])
    return out


def host_blank_ns(trace: Trace, t0: int, t1: int, devices: list[int]) -> tuple[int, int]:
    """Blank time in [t0, t1) summed over ``devices``, and the part of it in which the device waited for host work.

    device  ███░░░░░░████░░░░███     ░ blank regions, each weighted by its host-caused share
              t0 [..............) t1  and clipped to the span
    """
    regions = host_blank_by_device(trace)
    blank = total = 0.0
    for d in devices:
        if d not in regions:
            continue
        s, e, h = regions[d]
        lo = int(np.searchsorted(e, t0, side="right"))
        hi = int(np.searchsorted(s, t1, side="left"))
        if hi > lo:
            clip = np.maximum(np.minimum(e[lo:hi], t1) - np.maximum(s[lo:hi], t0), 0)
            blank += float(clip.sum())
            total += float((clip * h[lo:hi]).sum())
    return int(blank), int(total)


def pacing_row(trace: Trace, t0: int, t1: int, name: str = "", device: int | None = None) -> dict:
    """Launch-lag distribution, binding shares and verdict for compute ops starting in [t0, t1).

    ``device`` restricts the reading to one device (a phase's); all devices when None.
    """
    gr = graph(trace)
    devices = [device] if device is not None else [d.id for d in trace.meta.devices]
    # Compute only: copies and collectives set no pace.
    none = np.empty(0, np.int64)
    ops, starts = compute_ops_by_start(trace).get(device, (none, none))
    lo, hi = np.searchsorted(starts, [t0, t1], side="left")
    sel = ops[lo:hi]
    row: dict = {"name": name, "start_ns": t0, "end_ns": t1, "ops": int(sel.size), "device": device}
    dur = max(t1 - t0, 1) * max(len(devices), 1)
    compute = span_busy_ns(trace, t0, t1, devices)
    comm = span_busy_ns(trace, t0, t1, devices, "comm")
    copy = span_busy_ns(trace, t0, t1, devices, "copy")
    row["busy_pct"] = round(100.0 * compute / dur, 2)
    row["comm_pct"] = round(100.0 * comm / dur, 2)
    row["copy_pct"] = round(100.0 * copy / dur, 2)
    blank, host = host_blank_ns(trace, t0, t1, devices)
    row["host_blank_pct"] = round(100.0 * host / dur, 2)
    if row["comm_pct"] > 100 * MOSTLY and row["busy_pct"] < 100 * MOSTLY:
        row.update({"verdict": "comm-bound", "launch_bound_pct": 0.0, "lag_ns": {}})
        return row
    if row["copy_pct"] > 100 * MOSTLY and row["busy_pct"] < 100 * MOSTLY:
        row.update({"verdict": "copy-bound", "launch_bound_pct": 0.0, "lag_ns": {}})
        return row
    if sel.size == 0:
        row.update({"verdict": "idle", "launch_bound_pct": 0.0, "lag_ns": {}})
        return row
    a = trace.launch[sel]
    has = a >= 0
    # An op can start before its launch call returns (graph launches, clocks of host and device a few
    # hundred ns apart): no negative lag is printed, it is zero (row["clamped"] counts them).
    raw_lag = trace.start_ns[sel][has] - trace.end_ns[a[has]]
    row["clamped"] = int((raw_lag < 0).sum())
    lag = np.maximum(raw_lag, 0)
    b = gr.binding[sel]
    launch_bound = float(np.mean(b == Edge.LAUNCH))
    device_bound = float(np.mean(np.isin(b, (Edge.STREAM, Edge.WAIT))))
    row["launch_bound_pct"] = round(100.0 * launch_bound, 1)
    row["device_bound_pct"] = round(100.0 * device_bound, 1)
    row["lag_ns"] = (
        {
            "p10": int(np.percentile(lag, 10)),
            "median": int(np.median(lag)),
            "p90": int(np.percentile(lag, 90)),
            "max": int(lag.max()),
        }
        if lag.size
        else {}
    )
    kd = trace.end_ns[sel] - trace.start_ns[sel]
    row["median_op_ns"] = int(np.median(kd))
    host_paced = host >= HOST_PACED_SHARE * dur and host > MOSTLY * blank
    if not has.any():
        row["verdict"] = "unknown"
    elif host_paced or (launch_bound > MOSTLY and row["busy_pct"] < 100 * MOSTLY):
        row["verdict"] = "cpu-bound"
    elif device_bound > MOSTLY:
        row["verdict"] = "device-paced"
    else:
        row["verdict"] = "mixed"
    return row


def pacing(trace: Trace, found: list[Phase] | None = None) -> list[dict]:
    """One pacing row per phase (its GPU span, on its device), in time order."""
    found = phases(trace) if found is None else found
    return [
        pacing_row(trace, p.start_ns, p.end_ns, p.name, trace.lanes[p.lane].device if p.lane >= 0 else None)
        | {"depth": p.depth, "pid": p.pid}
        for p in found
    ]
