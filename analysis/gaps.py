"""Blank regions: maximal intervals inside a window where a device runs nothing on any stream.

    stream 7   ███   ██      ████
    stream 13     ██            ██
    gaps             [  ]  [   ]        <- complement of the union, clipped to the window

``blank_regions`` only finds where the device waited; ``analyse_gaps`` adds whether
the critical path ran through host work during each one (``analysis.critical_path``:
the device waited for the host when host-side path segments cover at least half
the gap) and why (``analysis.causes``). The largest gap on the path is the one the
viewer highlights and the report zooms into.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gaplens.analysis.busy import BusySpans, device_busy, gpu_window, gpu_work
from gaplens.loaders.model import Trace

CAUSES = ("sync", "copy", "launch", "host", "unknown")


@dataclass
class Gap:
    device: int
    start_ns: int
    end_ns: int
    on_critical_path: bool = False
    cause: str = "unknown"
    shares: dict[str, float] = field(default_factory=dict)  # cause -> share of the gap, sums to 1
    evidence: list[int] = field(default_factory=list)  # event indices that explain it
    message: str = ""  # e.g. what better trace to collect

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns


def blank_regions(
    trace: Trace,
    device: int | None = None,
    window: tuple[int, int] | None = None,
    min_ns: int = 1,
) -> list[Gap]:
    """Blank regions of each device (or one), in time order, at least ``min_ns`` long."""
    devs, starts, ends = _region_arrays(trace, device, window, min_ns)
    return [Gap(d, s, e) for d, s, e in zip(devs.tolist(), starts.tolist(), ends.tolist(), strict=True)]


def complement(busy: BusySpans, w0: int, w1: int) -> tuple[np.ndarray, np.ndarray]:
    """Idle spans of ``busy`` inside [w0, w1)."""
    if w1 <= w0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    s = np.clip(busy.start, w0, w1)
    e = np.clip(busy.end, w0, w1)
    keep = e > s
    s, e = s[keep], e[keep]
    gap_s = np.concatenate(([w0], e))
    gap_e = np.concatenate((s, [w1]))
    keep = gap_e > gap_s
    return gap_s[keep], gap_e[keep]


#: A gap is on the critical path when host-side path segments cover this share of it.
ON_PATH_SHARE = 0.5


def phase_windows(trace: Trace, phase: str) -> list[tuple[int, int]]:
    """GPU spans of every phase with this name (a name can repeat: ``transfer`` in each step)."""
    from gaplens.analysis.phases import phases

    return [(p.start_ns, p.end_ns) for p in phases(trace) if p.name == phase and p.end_ns > p.start_ns]


@dataclass
class GapColumns:
    """Analysed blank regions of one window as columns, in (start, device) order.

    A trace of 10M events has over a million gaps: the viewer keeps these arrays and
    makes a ``Gap`` only for the one the user looks at.
    """

    device: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    on_path: np.ndarray  # bool
    cause: np.ndarray  # index into analysis.causes.CAUSE_NAMES
    shares: np.ndarray  # (n, 4) in analysis.causes.CLASS_ORDER
    message: list[str]
    next_op: np.ndarray  # the GPU op that ended each gap (-1 at the window's end)

    def __len__(self) -> int:
        return int(self.start_ns.size)

    def gap(self, trace: Trace, k: int, with_evidence: bool = True) -> Gap:
        """Gap ``k`` as an object, with its evidence events when asked."""
        from gaplens.analysis.causes import CAUSE_NAMES, CLASS_ORDER, UNKNOWN, evidence

        c = int(self.cause[k])
        shares = dict(zip(CLASS_ORDER, self.shares[k].tolist(), strict=True)) if c < UNKNOWN else {"unknown": 1.0}
        g = Gap(
            int(self.device[k]),
            int(self.start_ns[k]),
            int(self.end_ns[k]),
            bool(self.on_path[k]),
            CAUSE_NAMES[c],
            shares,
            [],
            self.message[k],
        )
        if with_evidence:
            g.evidence = evidence(trace, g.start_ns, g.end_ns, int(self.next_op[k]))
        return g

    def to_gaps(self, trace: Trace, evidence_top: int) -> list[Gap]:
        """Every gap as an object; the ``evidence_top`` largest get their evidence events."""
        from gaplens.analysis.causes import CAUSE_NAMES, CLASS_ORDER, UNKNOWN, evidence

        sy, co, la, ho = CLASS_ORDER
        # A dict literal per gap is the cheapest way to hand 10^5 gaps their shares.
        gaps = [
            Gap(
                d, s, e, o, CAUSE_NAMES[c], {sy: r0, co: r1, la: r2, ho: r3} if c < UNKNOWN else {"unknown": 1.0}, [], m
            )
            for d, s, e, o, c, (r0, r1, r2, r3), m in zip(
                self.device.tolist(),
                self.start_ns.tolist(),
                self.end_ns.tolist(),
                self.on_path.tolist(),
                self.cause.tolist(),
                self.shares.tolist(),
                self.message,
                strict=True,
            )
        ]
        for k in np.argsort(-(self.end_ns - self.start_ns), kind="stable")[:evidence_top].tolist():
            gaps[k].evidence = evidence(trace, gaps[k].start_ns, gaps[k].end_ns, int(self.next_op[k]))
        return gaps

    def largest_on_path(self) -> int:
        """Index of THE highlighted region (largest on the path, earliest on ties), or -1."""
        on = np.flatnonzero(self.on_path)
        if on.size == 0:
            return -1
        dur = self.end_ns[on] - self.start_ns[on]
        return int(on[np.lexsort((self.start_ns[on], -dur))[0]])


def gap_columns(
    trace: Trace, window: tuple[int, int] | None = None, device: int | None = None, min_ns: int = 1
) -> GapColumns:
    """Blank regions of one window with on-path flag, cause, shares and message, as arrays."""
    from gaplens.analysis.causes import UNKNOWN, classify, next_ops
    from gaplens.analysis.critical_path import critical_path

    devs, starts, ends = _region_arrays(trace, device, window, min_ns)
    nxt = np.full(starts.size, -1, np.int64)
    if starts.size == 0:
        return GapColumns(devs, starts, ends, np.zeros(0, bool), np.zeros(0, np.int8), np.zeros((0, 4)), [], nxt)
    host = critical_path(trace, window).time_in(starts, ends)
    for dev in np.unique(devs).tolist():
        m = devs == dev
        nxt[m] = next_ops(trace, gpu_work(trace, dev), ends[m])
    cause, frac, message = classify(trace, starts, ends, nxt)
    on = (host >= ON_PATH_SHARE * (ends - starts)) & (cause < UNKNOWN)
    return GapColumns(devs, starts, ends, on, cause, frac, message, nxt)


def analyse_gaps(
    trace: Trace,
    window: tuple[int, int] | None = None,
    phase: str | None = None,
    device: int | None = None,
    min_ns: int = 1,
    evidence_top: int = 100,
) -> list[Gap]:
    """Blank regions in time order with on-path flag, cause, shares, message; evidence for the largest.

    ``phase`` selects every phase of that name (a ``TraceError`` when none exists);
    ``evidence_top`` bounds how many of the largest gaps get their evidence events listed.
    """
    from gaplens.loaders.model import TraceError

    windows: Sequence[tuple[int, int] | None]
    if phase is not None:
        windows = phase_windows(trace, phase)
        if not windows:
            raise TraceError(f"no phase named {phase!r} in this trace")
    else:
        windows = [window]
    out: list[Gap] = []
    for win in windows:
        out.extend(gap_columns(trace, win, device, min_ns).to_gaps(trace, evidence_top))
    if len(windows) > 1:
        out.sort(key=lambda g: (g.start_ns, g.device))
    return out


def _region_arrays(
    trace: Trace, device: int | None, window: tuple[int, int] | None, min_ns: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(device, start, end) of blank regions in (start, device) order, without building objects."""
    devices = [device] if device is not None else [d.id for d in trace.meta.devices]
    parts = []
    for dev in devices:
        busy = device_busy(trace, dev)
        w0, w1 = window if window is not None else gpu_window(trace, dev)
        s, e = complement(busy, w0, w1)
        keep = (e - s) >= min_ns
        parts.append((np.full(int(keep.sum()), dev, np.int64), s[keep], e[keep]))
    if not parts:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64)
    d = np.concatenate([p[0] for p in parts])
    s = np.concatenate([p[1] for p in parts]).astype(np.int64)
    e = np.concatenate([p[2] for p in parts]).astype(np.int64)
    order = np.lexsort((d, s))
    return d[order], s[order], e[order]


def largest(gaps: list[Gap]) -> list[Gap]:
    """Largest first; ties by time."""
    return sorted(gaps, key=lambda g: (-g.dur_ns, g.start_ns))


def largest_on_critical_path(trace_or_gaps, window: tuple[int, int] | None = None) -> Gap | None:
    """THE highlighted region: the largest blank region on the critical path (None if no gap is on it)."""
    gaps = trace_or_gaps if isinstance(trace_or_gaps, list) else analyse_gaps(trace_or_gaps, window)
    on = [g for g in gaps if g.on_critical_path]
    return min(on, key=lambda g: (-g.dur_ns, g.start_ns)) if on else None


def gap_json(g: Gap) -> dict:
    """One gap as the `gaplens gaps --json` contract spells it."""
    return {
        "device": g.device,
        "start_ns": g.start_ns,
        "end_ns": g.end_ns,
        "dur_ns": g.dur_ns,
        "on_critical_path": g.on_critical_path,
        "cause": g.cause,
        "shares": g.shares,
        "evidence": g.evidence,
        "message": g.message,
    }
