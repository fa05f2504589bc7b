"""The Python API: load a trace, then read its events and readings as pandas DataFrames.

    >>> import gaplens
    >>> t = gaplens.load("samples/decode_eager.json.gz")
    >>> t.events().head()                       # every event, names decoded, times in ns
    >>> gaplens.gaps(t).head()                  # blank regions, largest first
    >>> gaplens.kernels_summary(t).head()       # nsys-stats-like table per kernel name

Times are integer nanoseconds from ``trace.meta.origin_ns`` (the ``--json`` contract).
Each reading is the function the viewer and the CLI call; this module only shapes
its result. pandas is imported when one of these is called, never by ``import gaplens``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gaplens.loaders import Progress, Trace, TraceError
from gaplens.loaders import load as _load

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "Trace",
    "TraceError",
    "api_summary",
    "gaps",
    "kernels_summary",
    "load",
    "phases",
    "ranges_summary",
    "smells",
    "summary",
]


def load(path, progress: Progress | None = None, use_cache: bool = True) -> Trace:
    """Open a Kineto JSON(.gz) or nsys SQLite(.gz) / .nsys-rep trace (cached after the first load)."""
    from gaplens import store

    store.install()
    return _load(path, progress=progress, use_cache=use_cache)


def summary(trace: Trace, top: int = 10) -> dict:
    """The ``gaplens summary --json`` reading as a dict."""
    from gaplens.analysis.summary import summary as _summary

    return _summary(trace, top)


def gaps(trace: Trace, window: tuple[int, int] | None = None, evidence_top: int = 100) -> pd.DataFrame:
    """Blank regions, largest first: device, start/end/dur (ns), on_critical_path, cause, shares, message.

    ``evidence`` (event indices that explain a gap) is listed for the ``evidence_top`` largest.
    """
    import numpy as np
    import pandas as pd

    from gaplens.analysis.gaps import CAUSES, gap_columns

    cols = gap_columns(trace, window)
    dur = cols.end_ns - cols.start_ns
    order = np.lexsort((cols.start_ns, -dur))
    evidence: list[list[int]] = [[] for _ in range(order.size)]
    for rank, k in enumerate(order[:evidence_top].tolist()):
        evidence[rank] = cols.gap(trace, k).evidence
    frame = pd.DataFrame(
        {
            "device": cols.device[order],
            "start_ns": cols.start_ns[order],
            "end_ns": cols.end_ns[order],
            "dur_ns": dur[order],
            "on_critical_path": cols.on_path[order].astype(bool),
            "cause": pd.Categorical.from_codes(cols.cause[order].astype(np.int64), categories=list(CAUSES)),
            **{f"share_{c}": cols.shares[order, j] for j, c in enumerate(CAUSES)},
            "message": [cols.message[k] for k in order.tolist()],
            "evidence": evidence,
        }
    )
    frame.attrs["origin_ns"] = trace.meta.origin_ns
    return frame


def smells(trace: Trace) -> pd.DataFrame:
    """The four smells (picket fence, host island, copy on path, sync cliff) with place, evidence and lever."""
    import pandas as pd

    from gaplens.analysis.smells import smells as _smells

    rows = [f.to_json() for f in _smells(trace)]
    columns = ["kind", "start_ns", "end_ns", "dur_ns", "device", "summary", "lever", "evidence"]
    frame = pd.DataFrame(rows, columns=list(dict.fromkeys([*columns, *(k for r in rows for k in r)])))
    frame.attrs["origin_ns"] = trace.meta.origin_ns
    return frame


def phases(trace: Trace) -> pd.DataFrame:
    """The user's ranges placed on the GPU (CUDA-event semantics), with their host span and GPU busy share."""
    import pandas as pd

    from gaplens.analysis.phases import phases as _phases
    from gaplens.analysis.summary import phases_json

    frame = pd.DataFrame(phases_json(trace, _phases(trace)))
    frame.attrs["origin_ns"] = trace.meta.origin_ns
    return frame


def _stats_frame(trace: Trace, key: str) -> pd.DataFrame:
    import pandas as pd

    from gaplens.analysis.stats import table_stats

    st = table_stats(trace)[key]
    return pd.DataFrame(
        {
            "name": [st.name(k) for k in range(len(st))],
            "count": st.count,
            "total_ns": st.total_ns,
            "avg_ns": st.avg_ns,
            "med_ns": st.med_ns,
            "min_ns": st.min_ns,
            "max_ns": st.max_ns,
            "pct": st.pct,
        }
    )


def kernels_summary(trace: Trace) -> pd.DataFrame:
    """Per kernel name: count, total, avg, median, min, max (ns) and share of kernel time, largest total first."""
    return _stats_frame(trace, "kernels")


def api_summary(trace: Trace) -> pd.DataFrame:
    """Per CUDA API call name, the same columns as ``kernels_summary``."""
    return _stats_frame(trace, "cuda_api")


def ranges_summary(trace: Trace) -> pd.DataFrame:
    """Per range name (NVTX / record_function annotations), the same columns as ``kernels_summary``."""
    return _stats_frame(trace, "ranges")
