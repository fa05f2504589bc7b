"""Kineto / PyTorch-profiler Chrome-trace JSON (.json, .json.gz) into the lane model.

Covers every era in FORMATS.md Part 1: bare arrays (2020), old category names,
string pids/tids and ``"stream 7"``, the three time encodings (read as decimals,
so exact), duplicate or missing ``M`` metadata, truncated files. Launch links come
from ``args.correlation`` within the file, never from flow events alone.

The path is columnar: stream-gunzip, re-frame the event array as NDJSON in blocks
(``jsonframe``), parse each block with Arrow's C++ JSON reader against an explicit
schema, and classify with lookup tables (``kineto_cols``). A block Arrow refuses
(mixed types inside a field) goes through the per-event fallback (``kineto_slow``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.json as pj

from gaplens.loaders.events import ordered_lanes
from gaplens.loaders.files import Source
from gaplens.loaders.jsonframe import Framed, frame_events
from gaplens.loaders.kineto_cols import SCHEMA, Block, Context, from_arrow
from gaplens.loaders.kineto_slow import from_lines
from gaplens.loaders.model import (
    CPU_KINDS,
    GPU_WORK_KINDS,
    Device,
    Kind,
    LaneKind,
    Meta,
    Trace,
    TraceError,
    build_trace,
)
from gaplens.loaders.validate import Repairs, as_int, clean_top, kineto_repairs, saturating_end

Progress = Callable[[str, float], None]

BLOCK_SIZE = 1 << 20  # bytes of JSON per Arrow parse: the numpy scan's temporaries are ~6x this
_READ = pj.ReadOptions(use_threads=True, block_size=1 << 19)  # two chunks per block for Arrow's threads
_PARSE = pj.ParseOptions(explicit_schema=SCHEMA, unexpected_field_behavior="ignore")
# The system allocator gives freed parse buffers back to malloc, where the numpy work
# after parsing reuses them; Arrow's default pool keeps them to itself (+50 MB at 1M events).
_POOL = pa.system_memory_pool()


def load_kineto(path: str, progress: Progress | None = None) -> Trace:
    """Read a Kineto trace file (plain or gzip) into a Trace."""
    source = Source(path, progress)
    framed = Framed()
    ctx = Context()
    blocks: list[Block] = []
    # Arrow parses block i on a worker (it releases the GIL) while this thread
    # gunzips and frames block i+1; classification stays here, in file order.
    pending: deque[tuple[np.ndarray, Future]] = deque()
    with ThreadPoolExecutor(max_workers=1) as pool:
        for ndjson in frame_events(source.chunks(), framed, BLOCK_SIZE):
            pending.append((ndjson, pool.submit(_read_json, ndjson)))
            if len(pending) > 1:
                blocks.extend(_classify(ctx, *pending.popleft()))
        while pending:
            blocks.extend(_classify(ctx, *pending.popleft()))
    # A cut gzip stream also cuts the JSON: one line says both.
    damage = "; ".join(source.warnings + framed.warnings)
    if framed.events == 0:
        if damage:
            raise TraceError(f"{path}: damaged before its first event ({damage})")
        raise TraceError(f"{path}: the trace holds no events (empty traceEvents)")
    repairs = kineto_repairs(damage, ctx.malformed, ctx.bad_start, ctx.bad_time)
    if progress is not None:
        progress("building", 0.0)
    return _build(ctx, blocks, clean_top(framed.top, repairs), Meta(source_format="kineto", path=path), repairs)


def _classify(ctx: Context, ndjson: np.ndarray, parsed: Future) -> list[Block]:
    try:
        table = parsed.result()
    except pa.ArrowInvalid:
        return [from_lines(ctx, ndjson.tobytes())]
    return [from_arrow(ctx, batch) for batch in table.combine_chunks().to_batches()]


def _read_json(ndjson: np.ndarray) -> pa.Table:
    source = pa.BufferReader(pa.py_buffer(ndjson))
    return pj.read_json(source, read_options=_READ, parse_options=_PARSE, memory_pool=_POOL)


def _build(ctx: Context, blocks: list[Block], top: dict, meta: Meta, repairs: Repairs) -> Trace:
    for key, value in top.items():
        if key not in ("traceEvents", "deviceProperties") and not isinstance(value, dict | list):
            meta.extra[key] = value
    if "distributedInfo" in top:
        meta.extra["distributedInfo"] = top["distributedInfo"]
    meta.source_version = _fingerprint(top)
    if ctx.unknown:
        meta.extra["unknown_categories"] = ctx.unknown
    meta.processes = ctx.processes
    meta.threads = ctx.threads
    props = {}
    for dev in top.get("deviceProperties") or top.get("computeProperties") or []:
        if isinstance(dev, dict) and "id" in dev:
            props[as_int(dev["id"], -1)] = dev

    def cat(name: str, dtype) -> np.ndarray:
        # Drop each block's column once joined, so the peak holds one copy, not two.
        parts = [getattr(b, name) for b in blocks]
        for b in blocks:
            setattr(b, name, None)
        return np.concatenate(parts).astype(dtype, copy=False) if parts else np.empty(0, dtype)

    base = as_int(top.get("baseTimeNanoseconds") or 0, 0)
    start = cat("start", np.int64) + base
    end = saturating_end(start, cat("dur", np.int64))
    keys = [(LaneKind(k[0]), k[1], k[2]) for k in ctx.lanes]
    lanes, remap = ordered_lanes(keys)
    kind = cat("kind", np.int8)
    meta.devices = [
        Device(d, str(props.get(d, {}).get("name", f"GPU {d}")), props.get(d, {}))
        for d in sorted({ln.device for ln in lanes if ln.is_gpu})
    ]
    meta.lacks = _lacks(kind)
    return build_trace(
        meta,
        lanes,
        list(ctx.names),
        list(ctx.details),
        remap[cat("lane", np.int32)] if keys else np.empty(0, np.int32),
        start,
        end,
        cat("name_id", np.int32),
        kind,
        cat("corr", np.int64),
        cat("nbytes", np.int64),
        cat("detail_id", np.int32),
        corr_scope=None,
        repairs=repairs,
    )


def _lacks(kind: np.ndarray) -> list[str]:
    present = set(np.unique(kind).tolist())
    lacks = []
    if not present & {int(k) for k in CPU_KINDS}:
        lacks.append("cpu")
    if int(Kind.CUDA_API) not in present:
        lacks.append("cuda_api")
    elif not present & {int(Kind.CPU_OP), int(Kind.PYTHON), int(Kind.ANNOTATION)}:
        lacks.append("cpu_ops")  # CUDA activities only: the runtime calls but not what the host ran
    if not present & {int(k) for k in GPU_WORK_KINDS}:
        lacks.append("gpu")
    return lacks


def _fingerprint(top: dict) -> str:
    if top.get("__bare_array__"):
        return "kineto (bare array, <=2020-12)"
    schema = top.get("schemaVersion")
    base = "baseTimeNanoseconds" in top
    return f"kineto schema {schema if schema is not None else '?'}" + (
        ", relative ts + baseTimeNanoseconds" if base else ""
    )


def require_events(trace: Trace) -> Trace:
    if len(trace) == 0:
        raise TraceError("the trace holds no duration events (empty traceEvents)")
    return trace
