"""The readings the viewer shows, through one adapter so it works before and after gap analysis lands.

``analysis.gaps.analyse_gaps`` (critical-path flags, causes) is preferred; without it
every blank region counts as marked and the largest one is highlighted. Gaps are
kept as columns (a trace of 10M events has over a million of them); a ``Gap`` object
is made only for the one the user looks at.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from analysis.busy import device_busy, gpu_window
from analysis.gaps import Gap, complement
from analysis.phases import Phase, phases
from loaders.model import Trace


@dataclass
class GapTable:
    """Blank regions in time order as numpy columns, with the analysed objects when there are any."""

    start: np.ndarray
    end: np.ndarray
    device: np.ndarray
    on_path: np.ndarray  # bool: on the critical path (all True when not analysed)
    objects: list[Gap] | None = None

    @classmethod
    def of(cls, gaps: list[Gap]) -> GapTable:
        gaps = sorted(gaps, key=lambda g: (g.start_ns, g.device))
        return cls(
            np.asarray([g.start_ns for g in gaps], np.int64),
            np.asarray([g.end_ns for g in gaps], np.int64),
            np.asarray([g.device for g in gaps], np.int64),
            np.asarray([bool(g.on_critical_path) for g in gaps], bool),
            gaps,
        )

    @classmethod
    def empty(cls) -> GapTable:
        z = np.empty(0, np.int64)
        return cls(z, z, z, np.empty(0, bool))

    def __len__(self) -> int:
        return int(self.start.size)

    def __getitem__(self, k: int) -> Gap:
        if self.objects is not None:
            return self.objects[k]
        return Gap(int(self.device[k]), int(self.start[k]), int(self.end[k]))

    def index_at(self, device: int, t_ns: float) -> int:
        """The gap of ``device`` covering ``t_ns``, or -1 (vectorised; runs once per key press)."""
        hit = np.flatnonzero((self.device == device) & (self.start <= t_ns) & (self.end > t_ns))
        return int(hit[0]) if hit.size else -1


@dataclass
class Readings:
    gaps: GapTable = field(default_factory=GapTable.empty)
    largest: Gap | None = None  # the largest on the critical path (or largest overall)
    phases: list[Phase] = field(default_factory=list)
    analysed: bool = False  # True when critical-path flags and causes are real

    def marked(self) -> np.ndarray:
        """Indices of the gaps drawn on GPU rows: those on the critical path once that is known."""
        if not self.analysed:
            return np.arange(len(self.gaps))
        return np.flatnonzero(self.gaps.on_path)


def gap_readings(trace: Trace) -> tuple[GapTable, Gap | None, bool]:
    """(gaps in time order, the one to highlight, whether critical-path analysis ran)."""
    try:
        from analysis import gaps as mod

        analyse = getattr(mod, "analyse_gaps", None)
        if analyse is not None:
            table = GapTable.of(list(analyse(trace)))
            return table, _largest(mod, trace, table), True
    except Exception:  # a reading in progress elsewhere must not break the viewer
        pass
    table = _blank_columns(trace)
    if not len(table):
        return table, None, False
    return table, table[int(np.argmax(table.end - table.start))], False


def _blank_columns(trace: Trace) -> GapTable:
    """``analysis.gaps.blank_regions`` as columns: same definition, no per-gap objects."""
    parts = []
    for dev in (d.id for d in trace.meta.devices):
        busy = device_busy(trace, dev)
        w0, w1 = gpu_window(trace, dev)
        s, e = complement(busy, w0, w1)
        parts.append((s, e, np.full(s.size, dev, np.int64)))
    if not parts:
        return GapTable.empty()
    s, e, d = (np.concatenate(c) for c in zip(*parts, strict=True))
    order = np.lexsort((d, s))
    return GapTable(s[order], e[order], d[order], np.ones(s.size, bool))


def _largest(mod, trace: Trace, table: GapTable) -> Gap | None:
    gaps = table.objects or []
    pick = getattr(mod, "largest_on_critical_path", None)
    if pick is not None:
        for arg in (gaps, trace):
            try:
                found = pick(arg)
            except TypeError:
                continue
            if found is None or hasattr(found, "start_ns"):
                return found
    on_path = [g for g in gaps if g.on_critical_path] or gaps
    return max(on_path, key=lambda g: g.dur_ns, default=None)


def compute(trace: Trace) -> Readings:
    gaps, largest, analysed = gap_readings(trace)
    try:
        ph = phases(trace)
    except Exception:
        ph = []
    return Readings(gaps, largest, ph, analysed)
