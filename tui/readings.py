"""The readings the viewer shows, through one adapter so it works before and after gap analysis lands.

``analysis.gaps.analyse_gaps`` (critical-path flags, causes) is preferred; without it
every blank region counts as marked and the largest one is highlighted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from analysis.gaps import Gap, blank_regions
from analysis.phases import Phase, phases
from loaders.model import Trace


@dataclass
class Readings:
    gaps: list[Gap] = field(default_factory=list)  # time order
    largest: Gap | None = None  # the largest on the critical path (or largest overall)
    phases: list[Phase] = field(default_factory=list)
    analysed: bool = False  # True when critical-path flags and causes are real

    def marked(self) -> list[Gap]:
        """The gaps drawn on GPU rows: those on the critical path once that is known."""
        if not self.analysed:
            return self.gaps
        return [g for g in self.gaps if g.on_critical_path]


def gap_readings(trace: Trace) -> tuple[list[Gap], Gap | None, bool]:
    """(gaps in time order, the one to highlight, whether critical-path analysis ran)."""
    try:
        from analysis import gaps as mod

        analyse = getattr(mod, "analyse_gaps", None)
        if analyse is not None:
            gaps = sorted(analyse(trace), key=lambda g: (g.start_ns, g.device))
            largest = _largest(mod, trace, gaps)
            return gaps, largest, True
    except Exception:  # a reading in progress elsewhere must not break the viewer
        pass
    gaps = blank_regions(trace)
    largest = max(gaps, key=lambda g: g.dur_ns, default=None)
    return gaps, largest, False


def _largest(mod, trace: Trace, gaps: list[Gap]) -> Gap | None:
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
