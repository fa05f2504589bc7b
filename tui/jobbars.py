"""The job overview's rows as glyphs: one character bar per rank on the job's aligned clock; no Textual here.

Per cell and rank, three shares of the cell's time: compute, communication spent waiting for
a peer, and the rest of communication. The largest (at least ``MIN_SHARE``) picks the glyph:

    compute █   communication ▒   waiting for a peer ░   nothing ' '

    rank 0   ██████░░░░░░░░░░░░░░▒▒████▒▒▒████      <- waits inside the all_to_all
    rank 1   ██████            ▒▒▒▒████▒▒▒████      <- the straggler: idle (host), then arrives
    marks                        │  ▼                <- a collective that kept ranks waiting; the straggling one

Compute and communication come from each rank's coarse profile (cumulative time, sampled by the
worker); waiting from the matched collectives ([own arrival, last arrival]). Everything is
shifted onto the job's clock by the rank's offset, so one collective sits in one column.
"""

from __future__ import annotations

import numpy as np

from gaplens.analysis.busy import BusySpans
from gaplens.analysis.job.reading import JobReading
from gaplens.analysis.job.straggler import held_up

IDLE, COMPUTE, COMM, WAIT = 0, 1, 2, 3
GLYPHS = " █▒░"
CLASSES = ("idle", "compute", "comm", "wait")
MIN_SHARE = 0.1


def job_window(job: JobReading) -> tuple[int, int]:
    """First to last GPU activity of any aligned rank, on the job's clock."""
    m = job.matched
    spans = [
        (r.window_ns[0] + int(m.offsets_ns[i]), r.window_ns[1] + int(m.offsets_ns[i]))
        for i, r in enumerate(m.readings)
        if m.aligned[i]
    ]
    if not spans:
        return 0, 1
    return min(a for a, _ in spans), max(max(b for _, b in spans), min(a for a, _ in spans) + 1)


def edges(t0: int, t1: int, cols: int) -> np.ndarray:
    return np.floor(t0 + (t1 - t0) * (np.arange(cols + 1) / max(cols, 1))).astype(np.int64)


def wait_spans(job: JobReading, row: int) -> BusySpans:
    """[arrival, last arrival) of every collective in which this rank waited, on the job's clock."""
    m, w = job.matched, job.waits
    ok = m.present[row] & (w.wait_ns[row] > 0)
    start = m.start_ns[row, ok]
    return BusySpans(start, start + w.wait_ns[row, ok])


def shares(job: JobReading, row: int, cell_edges: np.ndarray) -> np.ndarray:
    """(3, cols): compute, communication other than waiting, waiting; each a share of its cell."""
    m = job.matched
    off = int(m.offsets_ns[row])
    compute, comm = m.readings[row].profile.shares(cell_edges - off)
    width = np.maximum(np.diff(cell_edges), 1)
    waits = wait_spans(job, row)
    wait = np.diff(waits.busy_before(cell_edges)) / width if waits.start.size else np.zeros(width.size)
    return np.stack((compute, np.clip(comm - wait, 0, 1), np.clip(wait, 0, 1)))


def row_classes(job: JobReading, row: int, cell_edges: np.ndarray) -> np.ndarray:
    """Class per cell (IDLE, COMPUTE, COMM, WAIT)."""
    s = shares(job, row, cell_edges)
    best = np.argmax(s, axis=0)
    return np.where(s.max(axis=0) >= MIN_SHARE, best + 1, IDLE).astype(np.int8)


def row_text(classes: np.ndarray) -> str:
    return "".join(GLYPHS[c] for c in classes.tolist())


def marks(job: JobReading, cell_edges: np.ndarray) -> str:
    """``│`` where a collective that kept ranks waiting completed its arrivals; ``▼`` the straggling moment."""
    cols = cell_edges.size - 1
    out = np.full(cols, " ", dtype="<U1")
    w = job.waits
    held = w.last_ns[held_up(w, job.step_ns)]
    for t in held.tolist():
        c = int(np.searchsorted(cell_edges, t, "right")) - 1
        if 0 <= c < cols:
            out[c] = "│"
    s = job.straggler
    if s is not None:
        c = int(np.searchsorted(cell_edges, s.arrival_ns, "right")) - 1
        if 0 <= c < cols:
            out[c] = "▼"
    return "".join(out.tolist())
