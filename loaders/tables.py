"""A Trace's events as one Arrow table (and, through it, a pandas DataFrame), names decoded.

Row ``i`` is event ``i`` of the Trace: the numeric columns are the Trace's own arrays
(zero-copy where Arrow allows), and every string column is dictionary-encoded, so a
10M-event table holds each distinct name once. pyarrow and pandas are imported on the first
call (a Trace offers these tables, and importing a Trace must not cost pyarrow's import).

The Trace (``loaders.trace``) stands on this module for its ``to_arrow``/``events``, so what is
read of it is spelled here as ``Events`` rather than imported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

from gaplens.loaders.kinds import Kind, LaneKind
from gaplens.loaders.meta import Lane, Meta

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa


class Events(Protocol):
    """What the tables read of a Trace."""

    meta: Meta
    lanes: list[Lane]
    names: list[str]
    details: list[str]
    lane: np.ndarray
    depth: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    name_id: np.ndarray
    kind: np.ndarray
    corr: np.ndarray
    bytes: np.ndarray
    detail_id: np.ndarray
    launch: np.ndarray

    def __len__(self) -> int: ...


_KIND_NAMES = [k.name.lower() for k in sorted(Kind)]
_LANE_KIND_NAMES = [k.name.lower() for k in sorted(LaneKind)]


def _dictionary(codes: np.ndarray, values: list[str]) -> pa.DictionaryArray:
    """Strings as codes into ``values``; repeated values are merged (pandas categories must be unique)."""
    import pyarrow as pa

    uniq, inverse = np.unique(np.asarray(values, dtype=object), return_inverse=True)
    remap = inverse.reshape(-1).astype(np.int32)
    if len(values) == 0:
        return pa.DictionaryArray.from_arrays(pa.array(np.zeros(codes.size, np.int32)), pa.array([""]))
    return pa.DictionaryArray.from_arrays(pa.array(remap[codes]), pa.array(uniq.tolist(), pa.string()))


def events_table(trace: Events) -> pa.Table:
    """Every event: name, kind, times (ns from ``origin_ns``), lane, process, thread, device, stream, links."""
    import pyarrow as pa

    lanes = trace.lanes
    meta = trace.meta
    lane = trace.lane.astype(np.int64)

    def per_lane(values: list, dtype) -> np.ndarray:
        table = np.asarray(values, dtype=dtype) if lanes else np.zeros(0, dtype)
        return table[lane] if lanes else np.zeros(len(trace), dtype)

    columns = {
        "name": _dictionary(trace.name_id, trace.names),
        "kind": _dictionary(trace.kind.astype(np.int64), _KIND_NAMES),
        "start_ns": trace.start_ns,
        "end_ns": trace.end_ns,
        "dur_ns": trace.end_ns - trace.start_ns,
        "lane": trace.lane,
        "lane_name": _dictionary(lane, [ln.name for ln in lanes]),
        "lane_kind": _dictionary(per_lane([int(ln.kind) for ln in lanes], np.int64), _LANE_KIND_NAMES),
        "depth": trace.depth,
        "pid": per_lane([ln.pid for ln in lanes], np.int64),
        "tid": per_lane([ln.tid for ln in lanes], np.int64),
        "process": _dictionary(lane, [meta.processes.get(ln.pid, "") if ln.pid >= 0 else "" for ln in lanes]),
        "thread": _dictionary(lane, [meta.threads.get((ln.pid, ln.tid), "") if ln.pid >= 0 else "" for ln in lanes]),
        "device": per_lane([ln.device for ln in lanes], np.int64),
        "stream": per_lane([ln.stream for ln in lanes], np.int64),
        "correlation": trace.corr,
        "bytes": trace.bytes,
        "launch": trace.launch,
        "details": _dictionary(trace.detail_id, trace.details),
    }
    arrays = {k: v if isinstance(v, pa.Array) else pa.array(v) for k, v in columns.items()}
    schema_meta = {
        "origin_ns": str(meta.origin_ns),
        "source_format": meta.source_format,
        "path": meta.path,
    }
    return pa.table(arrays).replace_schema_metadata(schema_meta)


def events_frame(trace: Events) -> pd.DataFrame:
    """``events_table`` as pandas: string columns become categoricals, the index is the event number."""
    frame = events_table(trace).to_pandas()
    frame.attrs["origin_ns"] = trace.meta.origin_ns
    return frame
