"""The readings the viewer shows: analysed blank regions as columns, the highlighted one, phases.

A trace of 10M events has over a million blank regions, so they stay numpy columns
(``analysis.gaps.GapColumns``); a ``Gap`` object, evidence included, is made only for
the one the user looks at.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gaplens.analysis.clock import clock_check
from gaplens.analysis.gaps import Gap, GapColumns, gap_columns
from gaplens.analysis.phases import Phase, phases
from gaplens.loaders.model import Trace


@dataclass
class GapTable:
    """Blank regions in (start, device) order; indexing makes the ``Gap`` of one of them."""

    trace: Trace | None = None
    cols: GapColumns | None = None

    @property
    def start(self) -> np.ndarray:
        return self.cols.start_ns if self.cols is not None else np.empty(0, np.int64)

    @property
    def end(self) -> np.ndarray:
        return self.cols.end_ns if self.cols is not None else np.empty(0, np.int64)

    @property
    def device(self) -> np.ndarray:
        return self.cols.device if self.cols is not None else np.empty(0, np.int64)

    @property
    def on_path(self) -> np.ndarray:
        return self.cols.on_path if self.cols is not None else np.empty(0, bool)

    def __len__(self) -> int:
        return len(self.cols) if self.cols is not None else 0

    def __getitem__(self, k: int) -> Gap:
        if self.cols is None or self.trace is None:
            raise IndexError(k)
        return self.cols.gap(self.trace, int(k))

    def index_at(self, device: int, t_ns: float) -> int:
        """The gap of ``device`` covering ``t_ns``, or -1 (vectorised; runs once per key press)."""
        hit = np.flatnonzero((self.device == device) & (self.start <= t_ns) & (self.end > t_ns))
        return int(hit[0]) if hit.size else -1


@dataclass
class Readings:
    gaps: GapTable = field(default_factory=GapTable)
    largest: Gap | None = None  # the largest on the critical path
    phases: list[Phase] = field(default_factory=list)
    analysed: bool = False  # False until the worker has computed the readings
    clock_offset: bool = False  # host and device clocks disagree (``analysis.clock``): the header says so

    def marked(self) -> np.ndarray:
        """Indices of the gaps drawn on GPU rows: those on the critical path once that is known."""
        if not self.analysed:
            return np.arange(len(self.gaps))
        return np.flatnonzero(self.gaps.on_path)


def compute(trace: Trace) -> Readings:
    """Every reading the viewer needs, computed once per trace (in a worker)."""
    table = GapTable(trace, gap_columns(trace))
    k = table.cols.the_index() if table.cols is not None else -1
    return Readings(table, table[k] if k >= 0 else None, phases(trace), True, clock_check(trace) is not None)
