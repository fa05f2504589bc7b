"""Memory rows: per copy direction, copies and bytes per step (the step: ``analysis.steps``).

Steady decode should move almost nothing across the bus; a copy that repeats every step is a lever.
"""

from __future__ import annotations

import numpy as np

from gaplens.analysis.steps import Steps, step_of, steps
from gaplens.loaders.model import Kind, Trace

#: The copy directions' labels, as memory rows and ``summary``'s ``by_direction`` print them.
DIRECTIONS = {
    Kind.MEMCPY_HTOD: "HtoD",
    Kind.MEMCPY_DTOH: "DtoH",
    Kind.MEMCPY_DTOD: "DtoD",
    Kind.MEMCPY_PEER: "PtoP",
    Kind.MEMCPY_OTHER: "other",
}
HOST_DEVICE = (Kind.MEMCPY_HTOD, Kind.MEMCPY_DTOH)


def copies(trace: Trace) -> np.ndarray:
    return np.flatnonzero(np.isin(trace.kind, np.asarray([int(k) for k in DIRECTIONS], np.int8)))


def memory_rows(trace: Trace, st: Steps | None = None) -> list[dict]:
    """Per direction: copies and bytes in all, per steady step (mean; warm-up steps set apart), and
    whether every steady step repeats them."""
    st = steps(trace) if st is None else st
    idx = copies(trace)
    if idx.size == 0:
        return []
    k = step_of(trace, idx, st)
    n_steps = max(st.count, 1)
    steady = st.steady_mask() if st else np.ones(n_steps, dtype=bool)
    rows = []
    for kind, label in DIRECTIONS.items():
        m = trace.kind[idx] == int(kind)
        if not m.any():
            continue
        in_step = m & (k >= 0)
        per_step_bytes = np.bincount(k[in_step], weights=trace.bytes[idx][in_step], minlength=n_steps)[steady]
        per_step_count = np.bincount(k[in_step], minlength=n_steps)[steady]
        dur = trace.end_ns[idx][m] - trace.start_ns[idx][m]
        rows.append(
            {
                "direction": label,
                "count": int(m.sum()),
                "bytes": int(trace.bytes[idx][m].sum()),
                "total_ns": int(dur.sum()),
                "steps": int(steady.sum()) if st.family else 0,
                "copies_per_step": round(float(per_step_count.mean()), 2) if st.family else None,
                "bytes_per_step": int(per_step_bytes.mean()) if st.family else None,
                "every_step": bool(st.family) and bool(np.all(per_step_count > 0)),
            }
        )
    return rows
