"""Analysed blank regions: where each device waited, whether the critical path ran through it, and why.

``analysis.regions`` finds the stretches with no compute, already cut into idle and starved
pieces. Here each piece gets

- its cause (``analysis.causes``): ``comm`` when the device only communicated, ``copy`` when
  copies ran, ``profiler`` when the profiler's own work covers it, ``dependency`` when the op that
  ends it was queued before it began (the host was not late), else what the launching thread was
  doing; ``idle`` when nothing was asked, ``unknown`` when the trace lacks the host side;
- whether it is on the critical path: host-side path segments cover at least half of it (the
  device waited for the host), or, for communication, the collective on the path covers half
  of it, or, for copies, the copies and host segments on the path do. Idle, profiler and
  dependency regions never are: verdicts are about the work the host was late for, not the
  waiting room, the measuring instrument or the device's own dependencies.

``the_gap`` picks THE blank region every screen and command talks about: the largest on
the critical path that is not a one-off module load (``calls.module_load_regions``: warm-up, set apart
as step 6 sets it apart).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gaplens.analysis.calls import module_load_regions
from gaplens.analysis.causes import CAUSES, NOT_WORK, classify, next_compute_ops
from gaplens.analysis.critical_path import critical_path
from gaplens.analysis.evidence import evidence
from gaplens.analysis.memo import per_trace
from gaplens.analysis.phases import phases
from gaplens.analysis.regions import Gap, Regions, regions
from gaplens.loaders.model import Trace, TraceError

#: A gap is on the critical path when host-side path segments cover this share of it.
ON_PATH_SHARE = 0.5


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
    cause: np.ndarray  # index into CAUSES
    shares: np.ndarray  # (n, len(CAUSES)) share of each cause
    message: Sequence[str]  # ``cause_messages.GapMessages``: each written when first read
    next_op: np.ndarray  # the compute op that ended each gap (-1 at the window's end)
    warmup: np.ndarray  # bool: a one-off module load (``calls.module_load_regions``), never THE gap

    def __len__(self) -> int:
        return int(self.start_ns.size)

    def shares_of(self, k: int) -> dict[str, float]:
        """Gap ``k``'s non-zero shares by cause."""
        return {c: v for c, v in zip(CAUSES, self.shares[k].tolist(), strict=True) if v > 0}

    def gap(self, trace: Trace, k: int, with_evidence: bool = True) -> Gap:
        """Gap ``k`` as an object, with its evidence events when asked."""
        g = Gap(
            int(self.device[k]),
            int(self.start_ns[k]),
            int(self.end_ns[k]),
            bool(self.on_path[k]),
            CAUSES[int(self.cause[k])],
            self.shares_of(k),
            [],
            self.message[k],
        )
        if with_evidence:
            g.evidence = evidence(trace, g, int(self.next_op[k]))
        return g

    def to_gaps(self, trace: Trace, evidence_top: int) -> list[Gap]:
        """Every gap as an object; the ``evidence_top`` largest get their evidence events.

        Built column-wise: a 1M-event trace has 10^5 gaps, and a Python call per gap is the cost.
        """
        n = len(self)
        rows, cols = np.nonzero(self.shares)
        shares: list[dict[str, float]] = [{} for _ in range(n)]
        for r, c, v in zip(rows.tolist(), cols.tolist(), self.shares[rows, cols].tolist(), strict=True):
            shares[r][CAUSES[c]] = v
        gaps = [
            Gap(d, s, e, o, CAUSES[c], sh, [], m)
            for d, s, e, o, c, sh, m in zip(
                self.device.tolist(),
                self.start_ns.tolist(),
                self.end_ns.tolist(),
                self.on_path.tolist(),
                self.cause.tolist(),
                shares,
                self.message,
                strict=True,
            )
        ]
        for k in self.largest_first()[:evidence_top].tolist():
            gaps[k].evidence = evidence(trace, gaps[k], int(self.next_op[k]))
        return gaps

    def largest_first(self) -> np.ndarray:
        """Indices, largest gap first (earliest on ties)."""
        return np.lexsort((self.start_ns, -(self.end_ns - self.start_ns)))

    def largest_on_path(self) -> int:
        """Index of the largest gap on the critical path (earliest on ties), or -1."""
        return self._largest_of(np.flatnonzero(self.on_path))

    def the_index(self) -> int:
        """Index of THE blank region every screen talks about, or -1.

        The largest on the critical path; when none is (a device-paced trace, or one without
        its host side), the largest the device was asked to fill: never an idle stretch or the
        profiler's own flush. A one-off module load is warm-up, set apart as step 6 sets it apart: THE
        gap only when every candidate is one (then its message says so).
        """
        work = ~np.isin(self.cause, NOT_WORK)
        for pick in (self.on_path & ~self.warmup, work & ~self.warmup, self.on_path, work):
            k = self._largest_of(np.flatnonzero(pick))
            if k >= 0:
                return k
        return -1

    def _largest_of(self, idx: np.ndarray) -> int:
        if idx.size == 0:
            return -1
        dur = self.end_ns[idx] - self.start_ns[idx]
        return int(idx[np.lexsort((self.start_ns[idx], -dur))[0]])

    def time_by_cause(self) -> dict[str, int]:
        """Blank time per cause (whole gaps, by their cause)."""
        dur = self.end_ns - self.start_ns
        got = np.bincount(self.cause, weights=dur, minlength=len(CAUSES))
        return {c: int(v) for c, v in zip(CAUSES, got.tolist(), strict=True) if v > 0}


def _empty() -> GapColumns:
    e = np.empty(0, np.int64)
    none = np.zeros(0, bool)
    return GapColumns(e, e, e, none, np.zeros(0, np.int8), np.zeros((0, len(CAUSES))), [], e, none)


def gap_columns(
    trace: Trace, window: tuple[int, int] | None = None, device: int | None = None, min_ns: int = 1
) -> GapColumns:
    """Blank regions of one window with on-path flag, cause, shares and message, as arrays."""
    if window is None and device is None and min_ns == 1:
        return _default_columns(trace)
    return _columns(trace, regions(trace, device, window, min_ns), window)


@per_trace
def _default_columns(trace: Trace) -> GapColumns:
    """The default reading (every device, its whole GPU window), computed once per trace."""
    return _columns(trace, regions(trace), None)


def _columns(trace: Trace, reg: Regions, window: tuple[int, int] | None) -> GapColumns:
    if len(reg) == 0:
        return _empty()
    starts, ends, devs = reg.start_ns, reg.end_ns, reg.device
    nxt = next_compute_ops(trace, devs, ends)
    warm = module_load_regions(trace, starts, ends, nxt)
    cause, shares, message = classify(trace, reg, nxt, warm)
    path = critical_path(trace, window)
    dur = ends - starts
    host = path.time_in(starts, ends)
    comm = path.time_in(starts, ends, path.comm_side(trace))
    copy = path.time_in(starts, ends, path.copy_side(trace) | path.host_side())
    # Dependency regions are never on the path through the host: the host was not late.
    starved = np.isin(cause, [CAUSES.index(x) for x in ("sync", "alloc", "launch", "host")])
    on = (
        (starved & (host >= ON_PATH_SHARE * dur))
        | ((cause == CAUSES.index("comm")) & (comm >= ON_PATH_SHARE * dur))
        | ((cause == CAUSES.index("copy")) & (copy >= ON_PATH_SHARE * dur))
    )
    return GapColumns(devs, starts, ends, on, cause, shares, message, nxt, warm)


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


def phase_windows(trace: Trace, phase: str) -> list[tuple[int, int]]:
    """GPU spans of every phase with this name (a name can repeat: ``transfer`` in each step)."""
    return [(p.start_ns, p.end_ns) for p in phases(trace) if p.name == phase and p.end_ns > p.start_ns]


def blank_regions(
    trace: Trace, device: int | None = None, window: tuple[int, int] | None = None, min_ns: int = 1
) -> list[Gap]:
    """Blank regions of each device (or one), in time order, without their analysis."""
    reg = regions(trace, device, window, min_ns)
    return [
        Gap(d, s, e, cause="idle" if i else "unknown")
        for d, s, e, i in zip(
            reg.device.tolist(), reg.start_ns.tolist(), reg.end_ns.tolist(), reg.idle.tolist(), strict=True
        )
    ]


def largest(gaps: list[Gap]) -> list[Gap]:
    """Largest first; ties by time."""
    return sorted(gaps, key=lambda g: (-g.dur_ns, g.start_ns))


def the_gap(trace: Trace) -> Gap | None:
    """THE blank region (``GapColumns.the_index``), with its evidence; None when the device never waited."""
    cols = gap_columns(trace)
    k = cols.the_index()
    return cols.gap(trace, k) if k >= 0 else None


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
