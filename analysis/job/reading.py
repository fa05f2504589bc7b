"""A job's reading: the ranks' small tables put together (``read_job``) and the ``ranks --json`` contract.

Pure and cheap: it reads ``RankReading``s (``analysis.job.ranks``), which workers made from the
traces, and never a trace itself, so its memory grows with ranks × collectives only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gaplens.analysis.job.align import Matched, match, number_ranks
from gaplens.analysis.job.ranks import RankReading
from gaplens.analysis.job.straggler import Straggler, Waits, find_straggler, waits
from gaplens.analysis.steps import common_step


@dataclass
class RankRow:
    """One line of the rank table."""

    row: int
    rank: int
    reading: RankReading
    wait_ns: int  # time it waited in collectives
    imposed_ns: int  # waiting it imposed on the others (in total)
    late: int  # collectives in which it arrived last
    offset_ns: int | None  # applied to its clock; None: not aligned

    def to_json(self) -> dict:
        r = self.reading
        return {
            "rank": self.rank,
            "source": r.source,
            "pid": r.pid,
            "device": r.device,
            "busy_pct": r.busy_pct,
            "compute_ns": r.compute_ns,
            "comm_ns": r.comm_ns,
            "exposed_comm_ns": r.exposed_comm_ns,
            "wait_ns": self.wait_ns,
            "step_ns": r.step_ns,
        }


@dataclass
class JobReading:
    matched: Matched
    waits: Waits
    straggler: Straggler | None
    candidate: Straggler | None  # the strongest candidate, also when it is under the thresholds
    step_ns: int  # the ranks' common step (``analysis.steps.common_step``), else the median window
    rows: list[RankRow]  # sorted by the waiting each rank imposes, most first
    notes: list[str] = field(default_factory=list)  # what was skipped, numbered or not aligned
    task_cpu_s: float = 0.0  # CPU the per-rank tasks took in their workers (set by ``analysis.job.run``)

    @property
    def collectives(self) -> int:
        return len(self.matched)

    def by_rank(self) -> list[RankRow]:
        return sorted(self.rows, key=lambda r: r.rank)

    def to_json(self) -> dict:
        """The ``gaplens ranks --json`` contract (DESIGN.md, Command line)."""
        s = self.straggler
        return {
            "ranks": [r.to_json() for r in self.rows],
            "straggler": None
            if s is None
            else {
                "rank": s.rank,
                "device": s.device,
                "late_share": s.late_share,
                "wait_imposed_ns": s.wait_imposed_per_step_ns,
                "cause": s.cause,
                "evidence": s.evidence,
            },
            "collectives": self.collectives,
            "clock_offsets_ns": {str(r.rank): r.offset_ns for r in self.by_rank()},
        }


def read_job(readings: list[RankReading], notes: list[str] | None = None) -> JobReading:
    """Number the ranks, match their collectives, align clocks, measure waits and name the straggler."""
    ordered, ranks, rank_notes = number_ranks(readings)
    m = match(ordered, ranks)
    # The job's step: its ranks' common step (synchronous ranks share it); without one, the window.
    common = common_step([r.step_label for r in ordered], [r.step_ns for r in ordered])
    step_ns = common.median_ns or int(np.median([r.window_ns[1] - r.window_ns[0] for r in ordered] or [0]))
    w = waits(m, step_ns)
    straggler, candidate = find_straggler(m, w, step_ns)
    n_rows = len(ordered)
    wait = w.rank_wait() if len(m) else np.zeros(n_rows, np.int64)
    imposed = (np.bincount(w.last_row, weights=w.imposed_ns, minlength=n_rows) if len(m) else np.zeros(n_rows)).astype(
        np.int64
    )
    late = np.bincount(w.last_row, minlength=n_rows) if len(m) else np.zeros(n_rows, np.int64)
    rows = [
        RankRow(
            i,
            ranks[i],
            ordered[i],
            int(wait[i]),
            int(imposed[i]),
            int(late[i]),
            int(m.offsets_ns[i]) if m.aligned[i] else None,
        )
        for i in range(n_rows)
    ]
    rows.sort(key=lambda r: (-r.imposed_ns, r.rank))
    return JobReading(m, w, straggler, candidate, step_ns, rows, [*(notes or []), *rank_notes, *m.notes])
