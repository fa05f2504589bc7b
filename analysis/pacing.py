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

from collections.abc import Iterator, Sequence

import numpy as np

from gaplens.analysis.busy import compute_mask, device_splits
from gaplens.analysis.critical_path import Edge, graph
from gaplens.analysis.gaps import CAUSES, gap_columns
from gaplens.analysis.memo import per_trace
from gaplens.analysis.phases import Phase, int_column, phases
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
    return pacing_rows(trace, [t0], [t1], [name], [device])[0]


def _widths(lo: np.ndarray, hi: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(members, gather index) per distinct width ``hi - lo`` > 0: the segments ``[lo, hi)`` of one width side by
    side as rows of a matrix, so numpy's reductions along a row give what they give on the segment alone."""
    width = np.maximum(hi - lo, 0)
    order = np.argsort(width, kind="stable")
    w_sorted = width[order]
    cuts = np.flatnonzero(np.diff(w_sorted)) + 1
    for members in np.split(order, cuts):
        w = int(width[members[0]]) if members.size else 0
        if w == 0:
            continue
        for a in range(0, members.size, max(1, _GATHER_BLOCK // w)):
            m = members[a : a + max(1, _GATHER_BLOCK // w)]
            yield m, lo[m, None] + np.arange(w)


#: Elements gathered per block of equal-width segments (a few arrays of this many int64: ~32 MB each).
_GATHER_BLOCK = 1 << 22


def _busy_parts(trace: Trace, t0: np.ndarray, t1: np.ndarray, dev: list[int | None]) -> dict[str, np.ndarray]:
    """``span_busy_ns`` of compute, communication and copies for every span, on its device (every device when None)."""
    splits = device_splits(trace)
    all_ids = [d.id for d in trace.meta.devices]
    out = {part: np.zeros(t0.size, np.int64) for part in ("compute", "comm", "copy")}
    positive = t1 > t0
    for d in all_ids:
        if d not in splits:
            continue
        on = np.asarray([x == d or x is None for x in dev], bool) & positive
        if not on.any():
            continue
        for part, acc in out.items():
            busy = getattr(splits[d], part)
            acc[on] += busy.busy_before(t1[on]) - busy.busy_before(t0[on])
    return out


def _host_blank(trace: Trace, t0: np.ndarray, t1: np.ndarray, dev: list[int | None]) -> tuple[np.ndarray, np.ndarray]:
    """``host_blank_ns`` of every span: (blank, host-caused) summed over its devices in ``trace.meta.devices`` order."""
    regions = host_blank_by_device(trace)
    blank = np.zeros(t0.size, np.float64)
    host = np.zeros(t0.size, np.float64)
    every = [x.id for x in trace.meta.devices]
    for d in every + [d for d in regions if d not in every]:  # a span on every device adds them in this order
        if d not in regions:
            continue
        on = np.flatnonzero(np.asarray([x == d or (x is None and d in every) for x in dev], bool))
        if on.size == 0:
            continue
        s, e, h = regions[d]
        a, b = t0[on], t1[on]
        lo = np.searchsorted(e, a, side="right")
        hi = np.searchsorted(s, b, side="left")
        for m, at in _widths(lo, hi):
            clip = np.maximum(np.minimum(e[at], b[m, None]) - np.maximum(s[at], a[m, None]), 0)
            blank[on[m]] += clip.sum(axis=1)
            host[on[m]] += (clip * h[at]).sum(axis=1)
    return blank.astype(np.int64), host.astype(np.int64)


def _op_columns(trace: Trace, t0: np.ndarray, t1: np.ndarray, dev: list[int | None]) -> dict[str, np.ndarray]:
    """Per span, of the compute ops starting in it on its device: count, launch-bound and device-bound counts,
    traced launches, clamped lags, the lag percentiles and the median op (-1 where there is none)."""
    n = t0.size
    cols = {k: np.zeros(n, np.int64) for k in ("ops", "launch", "device", "has", "clamped")}
    for k in ("p10", "median", "p90", "max", "median_op"):
        cols[k] = np.full(n, -1, np.int64)
    gr = graph(trace)
    keys = np.asarray([-1 if d is None else d for d in dev], np.int64)
    none_key = np.asarray([d is None for d in dev], bool)
    for key, (ops, starts) in compute_ops_by_start(trace).items():
        on = np.flatnonzero(none_key if key is None else (~none_key & (keys == key)))
        if on.size == 0 or ops.size == 0:
            continue
        lo = np.searchsorted(starts, t0[on], side="left")
        hi = np.maximum(np.searchsorted(starts, t1[on], side="left"), lo)
        a = trace.launch[ops]
        has = a >= 0
        b = gr.binding[ops]
        cum = {
            "launch": np.r_[0, np.cumsum(b == Edge.LAUNCH)],
            "device": np.r_[0, np.cumsum(np.isin(b, (Edge.STREAM, Edge.WAIT)))],
            "has": np.r_[0, np.cumsum(has)],
        }
        cols["ops"][on] = hi - lo
        for k, c in cum.items():
            cols[k][on] = c[hi] - c[lo]
        # Lags of the ops with a traced launch, in start order: a span's are a run of them.
        raw_lag = trace.start_ns[ops[has]] - trace.end_ns[a[has]]
        neg = np.r_[0, np.cumsum(raw_lag < 0)]
        h_lo, h_hi = cum["has"][lo], cum["has"][hi]
        cols["clamped"][on] = neg[h_hi] - neg[h_lo]
        lag = np.maximum(raw_lag, 0)
        for m, at in _widths(h_lo, h_hi):
            rows = lag[at]
            p10, p90 = np.percentile(rows, [10, 90], axis=1)
            cols["p10"][on[m]], cols["p90"][on[m]] = p10.astype(np.int64), p90.astype(np.int64)
            cols["median"][on[m]] = np.median(rows, axis=1).astype(np.int64)
            cols["max"][on[m]] = rows.max(axis=1)
        kd = trace.end_ns[ops] - trace.start_ns[ops]
        for m, at in _widths(lo, hi):
            cols["median_op"][on[m]] = np.median(kd[at], axis=1).astype(np.int64)
    return cols


def _pct(part: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """``round(100 * part / dur, 2)`` each."""
    return _rounded(100.0 * part / dur, 2)


def _rounded(x: np.ndarray, digits: int) -> np.ndarray:
    """``round(v, digits)`` of each value as Python rounds it (the decimal nearest the exact binary value, ties to
    even), in numpy: rint(v * 10**digits) / 10**digits is that value wherever v * 10**digits lies clearly off a
    half (its rounding error cannot move it across one, and the division is correctly rounded); the values near a
    half (``_NEAR_HALF``), beyond 2**52 or not finite are rounded by Python itself. 100k phases' shares were
    100k ``round`` calls, then one per distinct value after a sort (~0.1 s of pacing)."""
    x = np.asarray(x, np.float64)
    scale = 10.0**digits
    with np.errstate(over="ignore", invalid="ignore"):
        y = x * scale
        out = np.rint(y) / scale
        off_half = np.abs(y - np.floor(y) - 0.5) > np.maximum(_NEAR_HALF, np.abs(y) * _NEAR_HALF_REL)
    python = ~(np.isfinite(y) & off_half & (np.abs(y) < 2.0**52))
    if python.any():
        at = np.flatnonzero(python)
        out[at] = [round(v, digits) for v in x[at].tolist()]
    return out


#: Within this of a half (absolute, and relative to the scaled value), a value is rounded by Python: far wider
#: than the error of scaling a double (half a unit in its last place, ~1e-16 relative).
_NEAR_HALF = 1e-6
_NEAR_HALF_REL = 1e-12


def pacing_columns(
    trace: Trace, t0: Sequence[int] | np.ndarray, t1: Sequence[int] | np.ndarray, devices: Sequence[int | None]
) -> dict[str, np.ndarray]:
    """The numbers of ``pacing_rows``, one array per field over the spans (a framework's NVTX range per layer per
    step is 100k phases: one row at a time was 100k rounds of binary searches and percentiles, most of a report;
    and 100k dicts cost more than the numbers in them). ``code`` indexes ``VERDICTS``; the shares are rounded as
    Python rounds them."""
    s = np.asarray(t0, np.int64).reshape(-1)
    e = np.asarray(t1, np.int64).reshape(-1)
    dev = list(devices)
    n_all = max(len(trace.meta.devices), 1)
    dur = np.maximum(e - s, 1) * np.asarray([n_all if d is None else 1 for d in dev], np.int64)
    busy = _busy_parts(trace, s, e, dev)
    blank, host = _host_blank(trace, s, e, dev)
    c = _op_columns(trace, s, e, dev)
    busy_r, comm_r, copy_r, host_r = (_pct(x, dur) for x in (busy["compute"], busy["comm"], busy["copy"], host))
    ops = c["ops"]
    most = 100 * MOSTLY
    # Communication, copies or nothing filled the span: no op-level reading applies (codes 1-3).
    early = np.select([(comm_r > most) & (busy_r < most), (copy_r > most) & (busy_r < most), ops == 0], [1, 2, 3], 0)
    launch_bound = c["launch"] / np.maximum(ops, 1)  # as ``count / ops`` in Python: one correctly rounded division
    device_bound = c["device"] / np.maximum(ops, 1)
    host_paced = (host >= HOST_PACED_SHARE * dur) & (host > MOSTLY * blank)
    code = np.select(
        [early > 0, c["has"] == 0, host_paced | ((launch_bound > MOSTLY) & (busy_r < most)), device_bound > MOSTLY],
        [early, 4, 5, 6],
        7,
    )
    out: dict[str, np.ndarray] = {"start_ns": s, "end_ns": e, "code": code.astype(np.int8)}
    out |= {"busy_pct": busy_r, "comm_pct": comm_r, "copy_pct": copy_r, "host_blank_pct": host_r}
    out |= {
        "launch_bound_pct": _rounded(100.0 * launch_bound, 1),
        "device_bound_pct": _rounded(100.0 * device_bound, 1),
    }
    return out | {k: c[k] for k in ("ops", "has", "clamped", "median_op", "p10", "median", "p90", "max")}


def pacing_rows(
    trace: Trace,
    t0: Sequence[int] | np.ndarray,
    t1: Sequence[int] | np.ndarray,
    names: Sequence[str],
    devices: Sequence[int | None],
    extra: dict[str, Sequence] | None = None,
) -> list[dict]:
    """``pacing_row`` of many spans, all at once (``pacing_columns``). ``extra``'s columns close each row
    (``pacing``'s depth and pid)."""
    return _rows(pacing_columns(trace, t0, t1, devices), names, devices, extra)


def _rows(
    cols: dict[str, np.ndarray], names: Sequence[str], devices: Sequence[int | None], extra: dict[str, Sequence] | None
) -> list[dict]:
    """One dict per span from ``pacing_columns``, its keys in the JSON's order."""
    busy_l, comm_l, copy_l, host_l, launch_pct, device_pct = (
        cols[k].tolist()
        for k in ("busy_pct", "comm_pct", "copy_pct", "host_blank_pct", "launch_bound_pct", "device_bound_pct")
    )
    ops_l, has_l, clamped_l, op_l = (cols[k].tolist() for k in ("ops", "has", "clamped", "median_op"))
    p10_l, median_l, p90_l, max_l = (cols[q].tolist() for q in ("p10", "median", "p90", "max"))
    out = []
    for k, (a, b, name, device, v) in enumerate(
        zip(cols["start_ns"].tolist(), cols["end_ns"].tolist(), names, devices, cols["code"].tolist(), strict=True)
    ):
        row: dict = {
            "name": name,
            "start_ns": a,
            "end_ns": b,
            "ops": ops_l[k],
            "device": device,
            "busy_pct": busy_l[k],
            "comm_pct": comm_l[k],
            "copy_pct": copy_l[k],
            "host_blank_pct": host_l[k],
        }
        if v < 4:  # no launches to pace: the verdict says why (the keys' order is the JSON's)
            row.update(verdict=VERDICTS[v], launch_bound_pct=0.0, lag_ns={})
        else:
            lags = {"p10": p10_l[k], "median": median_l[k], "p90": p90_l[k], "max": max_l[k]} if has_l[k] else {}
            row.update(
                clamped=clamped_l[k],
                launch_bound_pct=launch_pct[k],
                device_bound_pct=device_pct[k],
                lag_ns=lags,
                median_op_ns=op_l[k],
                verdict=VERDICTS[v],
            )
        out.append(row)
    for key, column in (extra or {}).items():
        for row, value in zip(out, column, strict=True):
            row[key] = value
    return out


#: Verdicts by the codes ``pacing_rows`` computes them as (0 unused).
VERDICTS = ("", "comm-bound", "copy-bound", "idle", "unknown", "cpu-bound", "device-paced", "mixed")


def _phase_devices(trace: Trace, found: list[Phase]) -> list[int | None]:
    """The device each phase was timed on (None: host-only)."""
    lane_device = [ln.device for ln in trace.lanes]
    return [lane_device[k] if k >= 0 else None for k in int_column(found, "lane").tolist()]


@per_trace
def phase_pacing(trace: Trace) -> dict[str, np.ndarray]:
    """``pacing_columns`` of every phase (``analysis.phases``), kept with the trace: the report's table reads these
    columns, never 100k rows."""
    found = phases(trace)
    return pacing_columns(
        trace, int_column(found, "start_ns"), int_column(found, "end_ns"), _phase_devices(trace, found)
    )


def pacing(trace: Trace, found: list[Phase] | None = None) -> list[dict]:
    """One pacing row per phase (its GPU span, on its device), in time order."""
    if found is None:
        found, cols = phases(trace), phase_pacing(trace)
    else:
        cols = pacing_columns(
            trace, int_column(found, "start_ns"), int_column(found, "end_ns"), _phase_devices(trace, found)
        )
    extra = {"depth": int_column(found, "depth").tolist(), "pid": int_column(found, "pid").tolist()}
    return _rows(cols, [p.name for p in found], _phase_devices(trace, found), extra)
