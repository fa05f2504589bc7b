"""Steps and memory rows: which annotation family is "a step", and what crosses the bus each step.

A step family is a set of non-overlapping phases whose names differ only by a
number (``decode_step 0..31``, ``train_step 2..4``, ``iteration 1 (profiled)``);
the family with most members wins, the shallower on a tie. Its median GPU span is
the step time that smells scale their thresholds by. Without a family the whole
GPU window is one step.

Memory rows: per copy direction, copies and bytes per step. Steady decode should
move almost nothing across the bus; a copy that repeats every step is a lever.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from gaplens.analysis.busy import gpu_window
from gaplens.analysis.phases import Phase, phases
from gaplens.loaders.model import Kind, Trace

_NUMBERED = re.compile(r"^(?P<prefix>.*?)[\s#_-]*(?P<n>\d+)(?P<suffix>\s*\(.*\))?$")
DIRECTIONS = {
    Kind.MEMCPY_HTOD: "HtoD",
    Kind.MEMCPY_DTOH: "DtoH",
    Kind.MEMCPY_DTOD: "DtoD",
    Kind.MEMCPY_PEER: "PtoP",
    Kind.MEMCPY_OTHER: "other",
}
HOST_DEVICE = (Kind.MEMCPY_HTOD, Kind.MEMCPY_DTOH)


@dataclass(frozen=True)
class Steps:
    family: str  # the shared name prefix, "" when the whole window is one step
    spans: list[tuple[int, int]]  # GPU spans, time order
    host_spans: list[tuple[int, int]]
    names: list[str]

    @property
    def step_ns(self) -> int:
        d = [e - s for s, e in self.spans]
        return int(np.median(d)) if d else 0


def steps(trace: Trace, found: list[Phase] | None = None) -> Steps:
    """The step family of a trace (see module docstring)."""
    found = phases(trace) if found is None else found
    families: dict[tuple[str, int], list[Phase]] = {}
    for p in found:
        m = _NUMBERED.match(p.name)
        if m is None or p.end_ns <= p.start_ns:
            continue
        families.setdefault((m.group("prefix").strip(), p.depth), []).append(p)
    best: tuple[int, int, str, list[Phase]] | None = None
    for (prefix, depth), members in families.items():
        members.sort(key=lambda p: p.host_start_ns)
        starts = np.asarray([p.host_start_ns for p in members])
        ends = np.asarray([p.host_end_ns for p in members])
        if len(members) < 2 or bool(np.any(starts[1:] < ends[:-1])):
            continue
        key = (len(members), -depth)
        if best is None or key > best[:2]:
            best = (key[0], key[1], prefix, members)
    if best is None:
        w0, w1 = gpu_window(trace)
        h0, h1 = (int(trace.start_ns.min()), int(trace.end_ns.max())) if len(trace) else (w0, w1)
        return Steps("", [(w0, w1)], [(h0, h1)], ["whole trace"])
    members = best[3]
    return Steps(
        best[2],
        [(p.start_ns, p.end_ns) for p in members],
        [(p.host_start_ns, p.host_end_ns) for p in members],
        [p.name for p in members],
    )


def copies(trace: Trace) -> np.ndarray:
    return np.flatnonzero(np.isin(trace.kind, np.asarray([int(k) for k in DIRECTIONS], np.int8)))


def step_of(trace: Trace, idx: np.ndarray, st: Steps) -> np.ndarray:
    """Step number of each GPU op, by when its launch call started (else when it started); -1 outside."""
    launched = trace.launch[idx] >= 0
    t = np.where(launched, trace.start_ns[np.maximum(trace.launch[idx], 0)], trace.start_ns[idx])
    out = np.full(idx.size, -1, dtype=np.int64)
    for spans, use in ((st.host_spans, launched), (st.spans, ~launched)):
        lo = np.asarray([a for a, _ in spans], np.int64)
        hi = np.asarray([b for _, b in spans], np.int64)
        order = np.argsort(lo, kind="stable")
        lo, hi = lo[order], hi[order]
        k = np.searchsorted(lo, t, "right") - 1
        ok = use & (k >= 0) & (t < hi[np.maximum(k, 0)])
        out[ok] = order[k[ok]]
    return out


def memory_rows(trace: Trace, st: Steps | None = None) -> list[dict]:
    """Per direction: copies and bytes in all, per step (mean), and whether every step repeats them."""
    st = steps(trace) if st is None else st
    idx = copies(trace)
    if idx.size == 0:
        return []
    k = step_of(trace, idx, st)
    n_steps = max(len(st.spans), 1)
    rows = []
    for kind, label in DIRECTIONS.items():
        m = trace.kind[idx] == int(kind)
        if not m.any():
            continue
        in_step = m & (k >= 0)
        per_step_bytes = np.bincount(k[in_step], weights=trace.bytes[idx][in_step], minlength=n_steps)
        per_step_count = np.bincount(k[in_step], minlength=n_steps)
        dur = trace.end_ns[idx][m] - trace.start_ns[idx][m]
        rows.append(
            {
                "direction": label,
                "count": int(m.sum()),
                "bytes": int(trace.bytes[idx][m].sum()),
                "total_ns": int(dur.sum()),
                "steps": n_steps if st.family else 0,
                "copies_per_step": round(float(per_step_count.mean()), 2) if st.family else None,
                "bytes_per_step": int(per_step_bytes.mean()) if st.family else None,
                "every_step": bool(st.family) and bool(np.all(per_step_count > 0)),
            }
        )
    return rows
