"""Kineto / PyTorch-profiler Chrome-trace JSON (.json, .json.gz) into the lane model.

Covers every era in FORMATS.md Part 1: bare arrays (2020), old category names,
string pids/tids and ``"stream 7"``, the three time encodings (read as decimals,
so exact), duplicate or missing ``M`` metadata, truncated files. Launch links come
from ``args.correlation`` within the file, never from flow events alone.

The path is columnar and runs on three kinds of threads at once: one gunzips
(``_Prefetch``); this one cuts blocks of whole events (``jsonblocks``: at the
writer's separator, or by structure); a pool, one thread per core, parses each block
with Arrow's C++ JSON reader and an explicit schema, finds its ``Input Dims`` text
(``dims``) and classifies its events (``cols``) against a Context of
the block's own; this one then merges each block's names, details and lanes into
the file's Context in file order (``Context.merge``: the ids come out as a single
thread would give them), copies its events into the file's columns (``Columns``) and
builds the Trace from them in place. zlib, Arrow and most numpy work
release the GIL. What Arrow refuses teaches the reader: a key
seen with a string value gets its twin, more fraction digits a wider decimal, and
a layout block it cannot read makes the framer rewind and cut by structure. Only a
block that still fails goes through the per-event fallback (``slow``).
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.json as pj

from gaplens.loaders import heap
from gaplens.loaders.build import build_columns
from gaplens.loaders.columns import POOL
from gaplens.loaders.events import ordered_lanes
from gaplens.loaders.files import GZIP_MAGIC, Progress, Source, read_head
from gaplens.loaders.kineto import pyevents
from gaplens.loaders.kineto.cols import Dims, from_arrow
from gaplens.loaders.kineto.context import Block, Columns, Context
from gaplens.loaders.kineto.dims import find_dims
from gaplens.loaders.kineto.fields import TWIN_KEYS, schema, twin
from gaplens.loaders.kineto.jsonblocks import EventBlocks, Piece, arrow_input, damage_warning
from gaplens.loaders.kineto.slow import from_lines
from gaplens.loaders.model import CPU_KINDS, GPU_WORK_KINDS, Device, Kind, LaneKind, Meta, Trace, TraceError
from gaplens.loaders.validate import Repairs, as_int, clean_top, kineto_repairs, saturating_end

_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 2
# Bytes of JSON per Arrow parse, and parse threads (one per core, within bounds). A block in
# flight holds ~2.5x its size (its text, Arrow's parse, then the classification's temporaries)
# and as many are in flight as threads (one more measured no faster), each thread keeping its
# own peak, which ``heap.many_threads`` bounds from ``MANY_THREADS`` threads on. On the 16-core
# H200 host a file of 1.26M events loaded on eight threads in 1.8-2.1 s at 191 B/event, on four
# in 2.1-2.5 s at 192-200 (without it: 8 threads 208-212 B/event). Past ~1 GB of JSON
# that fixed cost is small per event and bigger blocks pay: there 5.1M events load in
# 5.4-5.5 s at 79-84 B/event on eight threads (`bench load`; 2 MB blocks on six took 7.0 s).
WORKERS = max(2, min(8, _CORES))
BLOCK_SIZE, BIG_BLOCK_SIZE = 2 << 20, 4 << 20
MANY_THREADS = 4
#: A layout block's Python events parsed apart, without the args struct (``pyevents``: -15% CPU on a
#: with_stack load); ``GAPLENS_ONE_PARSE=1`` parses each block whole (the tests compare the two).
SPLIT_PYTHON = not os.environ.get("GAPLENS_ONE_PARSE")
BIG_JSON = 1 << 30  # bytes of JSON, estimated from the file (gzip: ~10x its size), that make a trace big
_MIXED = re.compile(r"Column\((/[^)]*)\) changed from \w+ to (?:string|number|array)")
_SCALE = re.compile(r"Failed to convert JSON to decimal128\(\d+, \d+\).* requires scale (\d+)")
_ARG_TWINS = {f"/args/{k}": k for k in TWIN_KEYS if k not in ("pid", "tid")} | {"/pid": "pid", "/tid": "tid"}


@dataclass
class LoadStats:
    """How one load read its events; the benchmark prints it and the tests hold it to zero slow events."""

    events: int = 0  # events read, of every phase
    layout_blocks: int = 0  # blocks cut at the writer's separator
    structure_blocks: int = 0  # blocks cut by the structural scan
    retried_blocks: int = 0  # parsed again after learning a twin key or a wider decimal
    rewinds: int = 0  # layout blocks Arrow refused, cut again by structure
    slow_events: int = 0  # events decoded one by one (``slow``)
    split_blocks: int = 0  # layout blocks whose Python events were parsed apart (``pyevents``)
    twins: list[str] = field(default_factory=list)


@dataclass
class _Parsed:
    block: Block | None  # the events classified against ``local``; None when Arrow refused the text
    local: Context | None
    rows: int  # events parsed
    error: str | None
    scale: int
    twins: frozenset[bytes]  # the twin keys this parse renamed
    split: bool = False  # its Python events were parsed apart


class _Reader:
    """What Arrow is told about this file, learned from what it refuses: twin keys and the decimal scale."""

    def __init__(self) -> None:
        self.twins: dict[bytes, bytes] = {}
        self.scale = 3
        self.kernel_texts: dict[tuple, str] = {}  # shared by the blocks' Contexts (Context.kernel_texts)
        self._options: dict[tuple[int, frozenset[str]], pj.ParseOptions] = {}
        self._python: dict[int, pj.ParseOptions] = {}  # id of one of _options -> the same without args

    def parse(self, piece: Piece) -> _Parsed:
        """Runs on a worker: the piece's events parsed by Arrow and classified, or Arrow's complaint."""
        twins, scale = dict(self.twins), self.scale
        text, ends = arrow_input(piece, twins)
        fields = frozenset(k.decode() for k in twins)
        if piece.gap is None:
            fields |= {"pid", "tid"}  # the structural scan renames string pids/tids itself
        options = self._options.get((scale, fields))
        if options is None:
            options = pj.ParseOptions(explicit_schema=schema(scale, fields), unexpected_field_behavior="ignore")
            self._options[(scale, fields)] = options
        # A with_stack trace's Python events apart, without the args struct (``pyevents``); not when one
        # of them has a named pid or tid (``from_arrow`` numbers those in the batch's order, not the file's).
        split = pyevents.split(piece.data, text, ends, piece.gap) if piece.gap is not None and SPLIT_PYTHON else None
        try:
            python = _batch(split.python, self._python_options(options)) if split is not None else None
            if python is not None and pyevents.named_ids(python):
                split = python = None
            if split is not None:
                text, ends = split.others, split.others_ends
            # Input Dims first: its scan's temporaries and Arrow's parse then peak one after the other.
            dims = Dims(*find_dims(text, ends))
            batch = _batch(text, options) if text.size else None
            if split is not None and python is not None:
                batch = split.merge(python, batch, options.explicit_schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            return _Parsed(None, None, 0, str(exc), scale, frozenset(twins))
        assert batch is not None
        local = Context(kernel_texts=self.kernel_texts)
        block = from_arrow(local, batch, dims, scale, split.file_pos if split is not None else None)
        return _Parsed(block, local, batch.num_rows, None, scale, frozenset(twins), split is not None)

    def _python_options(self, options: pj.ParseOptions) -> pj.ParseOptions:
        """``options`` without the ``args`` struct: for a block's Python events (``pyevents``)."""
        found = self._python.get(id(options))
        if found is None:
            fields = [f for f in options.explicit_schema if f.name != "args"]
            found = pj.ParseOptions(explicit_schema=pa.schema(fields), unexpected_field_behavior="ignore")
            self._python[id(options)] = found
        return found

    def learn(self, parsed: _Parsed, stats: LoadStats) -> bool:
        """Adapt to Arrow's complaint about a parse; False when a new parse cannot help."""
        error = parsed.error or ""
        m = _MIXED.search(error)
        if m and m.group(1) in _ARG_TWINS:
            key = _ARG_TWINS[m.group(1)].encode()
            if key not in self.twins:
                self.twins[key] = twin(key.decode()).encode()
                stats.twins.append(key.decode())
            return key not in parsed.twins  # else the rename could not reach this layout
        m = _SCALE.search(error)
        if m:
            wider = next((s for s in (9, 18) if s >= int(m.group(1))), None)
            if wider is not None and wider > self.scale:
                self.scale = wider
            return self.scale > parsed.scale
        return False


def _batch(text: np.ndarray, options: pj.ParseOptions) -> pa.RecordBatch:
    """Arrow's parse of one block's text, as one batch."""
    table = _read_json(text, options)
    batches = table.combine_chunks().to_batches()
    return batches[0] if batches else pa.RecordBatch.from_pylist([], schema=table.schema)


def _read_json(text: np.ndarray, options: pj.ParseOptions) -> pa.Table:
    """Arrow's reader on one block: a single chunk, so events may span lines; the pool threads run blocks."""
    read = pj.ReadOptions(use_threads=False, block_size=max(text.size + 1, 1 << 16))
    source = pa.BufferReader(pa.py_buffer(text))
    return pj.read_json(source, read_options=read, parse_options=options, memory_pool=POOL)


class _Prefetch:
    """Iterate decompressed chunks from a thread of its own, a few ahead: gunzip runs while blocks parse.

    Four chunks (~6 MB of JSON) keep the framer fed (zlib-ng inflates several times faster
    than the blocks parse); eight cost 5-8 MB more at the peak of a 1M-event load.
    """

    _END = object()

    def __init__(self, chunks: Iterator[bytes], depth: int = 4) -> None:
        self._queue: queue.Queue = queue.Queue(depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(chunks,), name="gaplens-gunzip", daemon=True)
        self._thread.start()

    def _run(self, chunks: Iterator[bytes]) -> None:
        try:
            for chunk in chunks:
                if not self._put(chunk):
                    return
            self._put(self._END)
        except BaseException as exc:  # handed to the reading thread, which raises it
            self._put(exc)

    def _put(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> Iterator[bytes]:
        while True:
            item = self._queue.get()
            if item is self._END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def load_kineto(path: str, progress: Progress | None = None, stats: LoadStats | None = None) -> Trace:
    """Read a Kineto trace file (plain or gzip) into a Trace."""
    stats = stats if stats is not None else LoadStats()
    source = Source(path, progress)
    json_bytes = source.size * (10 if read_head(path, 2) == GZIP_MAGIC else 1)
    block = BIG_BLOCK_SIZE if json_bytes >= BIG_JSON else BLOCK_SIZE
    workers = WORKERS
    # The parse threads only: the build is one thread, and reuses its freed columns best
    # (there, a fixed threshold made every column fault its pages in afresh: 0.4 s, not 0.23).
    threads = heap.many_threads(2 * block) if workers >= MANY_THREADS else contextlib.nullcontext()
    ctx = Context()
    reader = _Reader()
    kept = Columns()
    prefetch = _Prefetch(source.chunks())
    try:
        blocks = EventBlocks(iter(prefetch), block)
        with threads, ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gaplens-parse") as pool:
            _read_all(blocks, reader, pool, workers, ctx, stats, kept, source)
    finally:
        prefetch.close()
    # A cut gzip stream also cuts the JSON: one line says both.
    framing = list(blocks.warnings)
    if blocks.damaged_at is not None:
        framing.append(damage_warning(stats.events, blocks.damaged_at))
    damage = "; ".join(source.warnings + framing)
    if stats.events == 0:
        if damage:
            raise TraceError(f"{path}: damaged before its first event ({damage})")
        raise TraceError(f"{path}: the trace holds no events (empty traceEvents)")
    repairs = kineto_repairs(damage, ctx.malformed, ctx.bad_start, ctx.bad_time)
    if progress is not None:
        progress("building", 0.0)
    heap.trim()  # the parse threads' buffers, before the build
    return _build(
        ctx, kept, clean_top(blocks.top, repairs), Meta(source_format="kineto", path=path), repairs, cut=bool(damage)
    )


def _read_all(
    blocks: EventBlocks,
    reader: _Reader,
    pool: ThreadPoolExecutor,
    ahead: int,
    ctx: Context,
    stats: LoadStats,
    out: Columns,
    source: Source,
) -> None:
    """Frame ``ahead`` blocks, parse them on the pool, merge here in file order; rewind the framer when a
    layout block fails."""
    pending: deque[tuple[Piece, Future]] = deque()
    more = True
    while True:
        while more and len(pending) < ahead:
            piece = next(blocks, None)
            if piece is None:
                more = False
                break
            pending.append((piece, pool.submit(reader.parse, piece)))
        if not pending:
            return
        piece, future = pending.popleft()
        block = _settle(reader, piece, future.result(), ctx, stats)
        if block is None:  # a layout block Arrow refused: cut it and everything after by structure
            for _, later in pending:
                later.cancel()
            wait([later for _, later in pending])  # running ones still blank their pieces' commas
            pending.clear()
            blocks.rewind(piece.seq)
            stats.rewinds += 1
            more = True
            continue
        out.append(block, piece.offset + len(piece.data), source.inflated_size())
        if piece.gap is not None:
            stats.layout_blocks += 1
            blocks.confirm(piece.seq)
        else:
            stats.structure_blocks += 1


def _settle(reader: _Reader, piece: Piece, parsed: _Parsed, ctx: Context, stats: LoadStats) -> Block | None:
    """The piece's Block; None when a layout piece must be cut again by structure."""
    retried = False
    while parsed.error is not None:
        if reader.learn(parsed, stats):
            retried = True
            parsed = reader.parse(piece)
            continue
        if piece.gap is not None:
            return None
        ndjson = bytes(np.asarray(piece.data, np.uint8))
        lines = ndjson.count(b"\n") + 1
        stats.events += lines
        stats.slow_events += lines
        return from_lines(ctx, ndjson)
    stats.retried_blocks += retried
    stats.split_blocks += parsed.split
    assert parsed.block is not None and parsed.local is not None
    stats.events += parsed.rows
    return ctx.merge(parsed.local, parsed.block)


def _build(ctx: Context, kept: Columns, top: dict, meta: Meta, repairs: Repairs, cut: bool = False) -> Trace:
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

    cat = kept.take
    base = as_int(top.get("baseTimeNanoseconds") or 0, 0)
    start = cat("start")
    start += base
    end = saturating_end(start, cat("dur"), in_place=True)
    keys = [(LaneKind(k[0]), k[1], k[2]) for k in ctx.lanes]
    lanes, remap = ordered_lanes(keys)
    kind = cat("kind")
    meta.devices = [
        Device(d, str(props.get(d, {}).get("name", f"GPU {d}")), props.get(d, {}))
        for d in sorted({ln.device for ln in lanes if ln.is_gpu})
    ]
    meta.lacks = _lacks(kind)
    if cut and "gpu" in meta.lacks:
        repairs.note(GPU_CUT_OFF)  # on the cut file's one warning line: "GPU window 630 ms" beside 0 kernels
    cols = {
        "lane": remap[cat("lane")] if keys else np.empty(0, np.int32),
        "start": start,
        "end": end,
        "name_id": cat("name_id"),
        "kind": kind,
        "corr": cat("corr"),
        "bytes": cat("nbytes"),
        "detail_id": cat("detail_id"),
        "scope": None,
    }
    del start, end, kind
    return build_columns(meta, lanes, list(ctx.names), list(ctx.details), cols, repairs)


#: Said when a cut file kept no GPU work: Kineto writes the host's events before the device's, so a
#: truncated file loses the GPU side first, and its window and busy share say nothing about the device.
GPU_CUT_OFF = (
    "the GPU side was cut off: the file ends before its first kernel, copy or memset (Kineto writes the "
    "host's events first), so this reads the host side only; the GPU window and busy share say nothing "
    "about the device"
)


def _lacks(kind: np.ndarray) -> list[str]:
    present = set(np.flatnonzero(np.bincount(kind.view(np.uint8), minlength=256)).tolist())
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
