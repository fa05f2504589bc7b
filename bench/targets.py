"""The targets the benchmarks are held to, and the one table every section ends with.

Each figure is printed beside its target and its baseline (what it is measured against, timed in
the same run: the bare parse, a bare gunzip, the JSON's size), with met or missed and the box's
load average when it was taken: on a shared box a time means little without it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# ---- the targets (issue 31 unless said) ----------------------------------------------------------
#: Peak resident size of a cold ``gaplens summary`` (whole process: interpreter, imports, parse,
#: columns, readings) per event of a record_shapes + with_stack trace of ~1M events ...
PEAK_B_PER_EVENT_1M = 200
#: ... and of ~5M events, where the interpreter's and the imports' fixed ~65 MB weigh less per event.
PEAK_B_PER_EVENT_5M = 120
#: Above this many events a trace is held to the 5M target (half way, in events, between the two sizes).
BIG_TRACE_EVENTS = 3_000_000
#: Below this many events the memory targets say nothing (``--quick``'s 100k-event traces): the
#: interpreter and its imports alone are ~65 MB, 650 B/event at 100k.
SMALL_TRACE_EVENTS = 900_000
#: A cold load, or a cold ``summary``, over the bare parse (gunzip + orjson), wall time (issue 23).
LOAD_OVER_FLOOR = 0.5
#: The viewer's cold first frame over the bare parse.
COLD_FIRST_FRAME_OVER_FLOOR = 0.4
#: The viewer's warm open, readings on screen, over a bare gunzip of the file.
WARM_READINGS_OVER_GUNZIP = 0.8
#: Readings computed on a cold open (critical path, regions, causes, steps, smells, floor), s per 1M events.
READINGS_S_PER_1M = 1.0
#: One what-if change, cold (its readings and the replay), s per 1M events.
WHATIF_S_PER_1M = 1.0
#: nsys rows read per second at 10M rows (issue 23).
NSYS_ROWS_PER_S = 1e6
#: A reopen (cache hit + summary and gaps readings), s per 1M events (issue 23).
REOPEN_S_PER_1M = 0.5


def peak_target(events: int) -> int:
    """The B/event target of a trace of ``events``: the 1M one, or the 5M one for big traces."""
    return PEAK_B_PER_EVENT_5M if events >= BIG_TRACE_EVENTS else PEAK_B_PER_EVENT_1M


def peak_met(bytes_per_event: float, events: int) -> bool | None:
    """Whether a peak meets its target; None (not judged) for traces too small for the target to apply."""
    return None if events < SMALL_TRACE_EVENTS else bytes_per_event <= peak_target(events)


def load_average() -> str:
    """The 1-minute load average, and the cores: beside every figure, as the box is shared."""
    return f"{os.getloadavg()[0]:.1f}/{os.cpu_count()}"


@dataclass
class Figure:
    """One measured figure against its target, read at ``load`` (load average / cores)."""

    name: str
    value: str
    target: str
    baseline: str
    met: bool | None  # None: not judged (a --quick size the target is not set on)
    load: str = ""

    def __post_init__(self) -> None:
        self.load = self.load or load_average()


def at_most(value: float, limit: float) -> bool:
    return value <= limit


def print_figures(section: str, figures: list[Figure]) -> None:
    """The section's figures as one table: figure, value, target, baseline, met/missed, load."""
    if not figures:
        return
    head = ("figure", "value", "target", "baseline", "", "load")
    verdicts = {True: "met", False: "MISSED", None: "n/a"}
    rows = [(f.name, f.value, f.target, f.baseline, verdicts[f.met], f.load) for f in figures]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    print(f"-- {section}: each figure beside its target and its baseline (load: 1-min load average / cores)")
    for row in [head, *rows]:
        print("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
