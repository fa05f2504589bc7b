"""Kineto events (an Arrow batch, or dicts on the fallback path) into lane-model columns.

Both paths produce the same ``Block`` for the same events; the Arrow one is vectorised
(lookup tables over per-batch dictionaries, detail strings built by Arrow compute),
the dict one is a plain loop kept for blocks Arrow refuses (mixed types in a field).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from gaplens.loaders.model import Kind, LaneKind
from gaplens.loaders.syncs import sync_detail
from gaplens.loaders.validate import as_int, decimal_ns, int_or_none

# cat (lower case) -> (event kind, lane kind). Memcpy direction comes from the name.
CATEGORIES: dict[str, tuple[Kind, LaneKind]] = {
    "cpu_op": (Kind.CPU_OP, LaneKind.CPU_OPS),
    "operator": (Kind.CPU_OP, LaneKind.CPU_OPS),
    "python_function": (Kind.PYTHON, LaneKind.CPU_OPS),
    "user_annotation": (Kind.ANNOTATION, LaneKind.ANNOTATIONS),
    "user": (Kind.ANNOTATION, LaneKind.ANNOTATIONS),
    "cuda_runtime": (Kind.CUDA_API, LaneKind.CUDA_API),
    "cuda_driver": (Kind.CUDA_API, LaneKind.CUDA_API),
    "runtime": (Kind.CUDA_API, LaneKind.CUDA_API),
    "privateuse1_runtime": (Kind.CUDA_API, LaneKind.CUDA_API),
    "privateuse1_driver": (Kind.CUDA_API, LaneKind.CUDA_API),
    "xpu_runtime": (Kind.CUDA_API, LaneKind.CUDA_API),
    "xpu_driver": (Kind.CUDA_API, LaneKind.CUDA_API),
    "mtia_runtime": (Kind.CUDA_API, LaneKind.CUDA_API),
    "kernel": (Kind.KERNEL, LaneKind.STREAM),
    "gpu_memcpy": (Kind.MEMCPY_OTHER, LaneKind.STREAM),
    "memcpy": (Kind.MEMCPY_OTHER, LaneKind.STREAM),
    "gpu_memset": (Kind.MEMSET, LaneKind.STREAM),
    "memset": (Kind.MEMSET, LaneKind.STREAM),
    "gpu_user_annotation": (Kind.GPU_ANNOTATION, LaneKind.GPU_ANNOTATIONS),
    "cuda_profiler_range": (Kind.GPU_ANNOTATION, LaneKind.GPU_ANNOTATIONS),
    "cuda_sync": (Kind.SYNC, LaneKind.GPU_SYNC),
    "xpu_sync": (Kind.SYNC, LaneKind.GPU_SYNC),
    "overhead": (Kind.OVERHEAD, LaneKind.OVERHEAD),
}
IGNORED = {"trace", "cpu_instant_event", "external_correlation"}
GPU_LANES = (LaneKind.STREAM, LaneKind.GPU_ANNOTATIONS, LaneKind.GPU_SYNC)
COPY_KINDS = (Kind.MEMCPY_HTOD, Kind.MEMCPY_DTOH, Kind.MEMCPY_DTOD, Kind.MEMCPY_PEER, Kind.MEMCPY_OTHER, Kind.MEMSET)
KERNEL_ARGS = (
    ("grid", "grid"),
    ("block", "block"),
    ("registers per thread", "regs"),
    ("shared memory", "smem"),
    ("est. achieved occupancy %", "occupancy %"),
)

_S, _I = pa.string(), pa.int64()
# ts/dur as decimals: exact for any number text (and numeric strings), unlike float64.
_TIME = pa.decimal128(38, 9)
_DIMS = pa.list_(pa.list_(_I))
SCHEMA = pa.schema(
    [
        ("ph", _S),
        ("cat", _S),
        ("name", _S),
        ("pid", _I),
        ("pis", _S),  # a string pid, renamed by the framer so the int column stays int
        ("tid", _I),
        ("tis", _S),
        ("ts", _TIME),
        ("dur", _TIME),
        (
            "args",
            pa.struct(
                [
                    ("correlation", _I),
                    ("bytes", _I),
                    ("device", _I),
                    ("stream", _I),
                    ("grid", pa.list_(_I)),
                    ("block", pa.list_(_I)),
                    ("registers per thread", _I),
                    ("shared memory", _I),
                    ("est. achieved occupancy %", pa.float64()),
                    ("cuda_sync_kind", _S),
                    ("wait_on_stream", _I),
                    ("wait_on_cuda_event_record_corr_id", _I),
                    ("name", _S),
                    ("Input Dims", _DIMS),
                    ("Input dims", _DIMS),
                ]
            ),
        ),
    ]
)
_DIGITS = re.compile(r"-?\d+")
# cuda_sync args that name streams and the event record: the waiting stream first (FORMATS.md 1.7).
_SYNC_INTS = ("stream", "wait_on_stream", "wait_on_cuda_event_record_corr_id")


def memcpy_kind(name: str) -> Kind:
    """Direction from the writer's name: ``Memcpy HtoD (Pageable -> Device)``."""
    if "HtoD" in name or "HostToDevice" in name:
        return Kind.MEMCPY_HTOD
    if "DtoH" in name or "DeviceToHost" in name:
        return Kind.MEMCPY_DTOH
    if "DtoD" in name or "DeviceToDevice" in name:
        return Kind.MEMCPY_DTOD
    if "PtoP" in name or "Peer" in name:
        return Kind.MEMCPY_PEER
    return Kind.MEMCPY_OTHER


def stream_of(tid) -> int:
    """Stream number from a tid: ``7`` or ``"stream 7"`` (0 when it is not an int64)."""
    if isinstance(tid, int):
        return as_int(tid, 0)
    m = _DIGITS.search(str(tid)[:200])
    return as_int(m.group(0), 0) if m else 0


@dataclass
class Context:
    """State shared by the blocks of one file: dictionaries, names, counts."""

    names: dict[str, int] = field(default_factory=dict)
    details: dict[str, int] = field(default_factory=lambda: {"": 0})
    lanes: dict[tuple[int, int, int], int] = field(default_factory=dict)
    named_ids: dict[str, int] = field(default_factory=dict)
    processes: dict[int, str] = field(default_factory=dict)
    threads: dict[tuple[int, int], str] = field(default_factory=dict)
    unknown: dict[str, int] = field(default_factory=dict)
    bad_time: int = 0  # events kept with an unusable dur (set to 0)
    bad_start: int = 0  # events skipped: no usable ts
    malformed: int = 0

    def host_id(self, value) -> int:
        """Stable int for a pid/tid that may be an int, a numeric string or a name (or a number past int64)."""
        num = None if isinstance(value, bool) else int_or_none(value, floats=False)
        if num is not None:
            return num
        return self.named_ids.setdefault(str(value)[:200], -1000 - len(self.named_ids))

    def code(self, table: dict[str, int], values: list[str]) -> np.ndarray:
        return np.fromiter((table.setdefault(v, len(table)) for v in values), np.int32, len(values))


@dataclass
class Block:
    """Kept duration events of one block; ``start``/``dur`` are ns relative to the base."""

    lane: np.ndarray
    start: np.ndarray
    dur: np.ndarray
    name_id: np.ndarray
    kind: np.ndarray
    corr: np.ndarray
    nbytes: np.ndarray
    detail_id: np.ndarray

    @staticmethod
    def empty() -> Block:
        i64 = np.empty(0, np.int64)
        i32 = np.empty(0, np.int32)
        return Block(i32, i64, i64, i32, np.empty(0, np.int8), i64, i64, i32)


def lane_codes(ctx: Context, lane_kind: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Lane ids (in order of first appearance over the file) for (kind, a, b) triples."""
    if lane_kind.size == 0:
        return np.empty(0, np.int32)
    # Hash factorisation keeps first-appearance order and avoids sorting every event.
    ca, ua = pd.factorize(a)
    cb, ub = pd.factorize(b)
    key = (lane_kind.astype(np.int64) * len(ua) + ca) * len(ub) + cb
    codes, uniq = pd.factorize(key)
    lut = np.empty(len(uniq), np.int32)
    for j, k in enumerate(uniq.tolist()):
        rest, ib = divmod(k, len(ub))
        kind, ia = divmod(rest, len(ua))
        lut[j] = ctx.lanes.setdefault((int(kind), int(ua[ia]), int(ub[ib])), len(ctx.lanes))
    return lut[codes]


# ---- Arrow path --------------------------------------------------------------


def _np(arr: pa.Array, fill) -> np.ndarray:
    return pc.fill_null(arr, fill).to_numpy(zero_copy_only=False)


def _valid(arr: pa.Array) -> np.ndarray:
    return arr.is_valid().to_numpy(zero_copy_only=False)


def strings(arr: pa.Array) -> list:
    """Python strings of a string column; Arrow does not check UTF-8, so bad bytes are replaced."""
    try:
        return arr.to_pylist()
    except UnicodeDecodeError:
        raw = arr.cast(pa.binary()).to_pylist()
        return [None if b is None else b.decode("utf-8", "replace") for b in raw]


def _dict(arr: pa.Array, null: str) -> tuple[np.ndarray, list[str]]:
    """Codes and unique values of a string column; nulls become ``null``."""
    enc = pc.dictionary_encode(arr)
    uniq = strings(enc.dictionary)
    codes = enc.indices
    if codes.null_count:
        codes = pc.fill_null(codes, len(uniq))
        uniq.append(null)
    return codes.to_numpy(zero_copy_only=False), uniq


def _time(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(ns int64, usable) from the decimal µs column, exactly; the boundary (``validate``) rules."""
    return decimal_ns(arr)


def _ids_from(ctx: Context, ints: pa.Array, strs: pa.Array, conv) -> np.ndarray:
    """Int column with string values mapped through ``conv`` (per unique string)."""
    out = _np(ints, 0).astype(np.int64, copy=False)
    str_ok = _valid(strs) & ~_valid(ints)
    if str_ok.any():
        codes, uniq = _dict(strs, "")
        lut = np.asarray([conv(s) for s in uniq], dtype=np.int64)
        out = out.copy()
        out[str_ok] = lut[codes[str_ok]]
    return out


def _join(*parts: pa.Array) -> pa.Array:
    """Non-null parts joined by two spaces, null when all are null.

    Pairwise, because ``binary_join_element_wise(null_handling="skip")`` (pyarrow 26)
    drops the rows where every part is null, shifting every later row.
    """
    out = parts[0]
    for part in parts[1:]:
        out = pc.coalesce(pc.binary_join_element_wise(out, part, "  "), out, part)
    return out


def _labelled(label: str, arr: pa.Array) -> pa.Array:
    if pa.types.is_list(arr.type):
        arr = pc.binary_join(pc.cast(arr, pa.list_(pa.string())), "×")
    else:
        arr = pc.cast(arr, pa.string())
    return pc.binary_join_element_wise(label + " ", arr, "")


def _dims_text(dims: pa.Array) -> pa.Array:
    """Python-style text of a list of int lists: ``[[1, 2], []]``."""
    inner = pc.list_flatten(dims)
    inner_text = pc.binary_join(pc.cast(inner, pa.list_(pa.string())), ", ")
    inner_text = pc.binary_join_element_wise("[", pc.fill_null(inner_text, ""), "]", "")
    lengths = _np(pc.list_value_length(dims), 0)
    offsets = pa.array(np.concatenate(([0], np.cumsum(lengths))).astype(np.int32))
    outer = pa.ListArray.from_arrays(offsets, inner_text)
    return pc.binary_join_element_wise("Input Dims [", pc.binary_join(outer, ", "), "]", "")


def _set_details(ctx: Context, detail_id: np.ndarray, rows: np.ndarray, text: pa.Array) -> None:
    if rows.size == 0:
        return
    codes, uniq = _dict(text, "")
    detail_id[rows] = ctx.code(ctx.details, uniq)[codes]


def from_arrow(ctx: Context, batch: pa.RecordBatch) -> Block:
    """Vectorised: one Arrow batch of raw events to the kept duration events."""
    ph_codes, ph_uniq = _dict(batch.column("ph"), "")
    is_x = np.asarray([p == "X" for p in ph_uniq], bool)[ph_codes]
    is_m = np.asarray([p == "M" for p in ph_uniq], bool)[ph_codes]
    args = batch.column("args")
    if is_m.any():
        _metadata_arrow(ctx, batch, np.flatnonzero(is_m))
    cat_codes, cat_uniq = _dict(batch.column("cat"), "")
    lower = [c.lower() for c in cat_uniq]
    kind_lut = np.asarray(
        [CATEGORIES[c][0] if c in CATEGORIES else (-2 if c in IGNORED else -1) for c in lower], np.int8
    )
    lane_lut = np.asarray([CATEGORIES[c][1] if c in CATEGORIES else -1 for c in lower], np.int8)
    kind_all = kind_lut[cat_codes]
    unknown = is_x & (kind_all == -1)
    if unknown.any():
        for code, count in enumerate(np.bincount(cat_codes[unknown], minlength=len(lower)).tolist()):
            if count:
                ctx.unknown[lower[code]] = ctx.unknown.get(lower[code], 0) + count
    keep = is_x & (kind_all >= 0)
    start, start_ok = _time(batch.column("ts"))
    dur, dur_ok = _time(batch.column("dur"))
    bad_start = keep & ~start_ok
    keep &= start_ok
    bad_dur = keep & (~dur_ok | (dur < 0))
    ctx.bad_start += int(bad_start.sum())
    ctx.bad_time += int(bad_dur.sum())
    dur = np.where(bad_dur, 0, dur)
    rows = np.flatnonzero(keep)
    if rows.size == 0:
        return Block.empty()
    idx = pa.array(rows)
    kind = kind_all[rows]
    lane_kind = lane_lut[cat_codes[rows]]
    name_codes, name_uniq = _dict(batch.column("name").take(idx), "None")
    name_lut = ctx.code(ctx.names, name_uniq)
    copy_lut = np.asarray([memcpy_kind(s) for s in name_uniq], np.int8)
    other = kind == Kind.MEMCPY_OTHER
    kind[other] = copy_lut[name_codes[other]]

    arg = {name: args.field(name).take(idx) for name in ("correlation", "bytes", "device", "stream")}
    corr = _np(arg["correlation"], -1)
    pid_i, pid_s = batch.column("pid").take(idx), batch.column("pis").take(idx)
    tid_i, tid_s = batch.column("tid").take(idx), batch.column("tis").take(idx)
    gpu = np.isin(lane_kind, np.asarray(GPU_LANES, np.int8))
    a = _ids_from(ctx, pid_i, pid_s, ctx.host_id)
    b = _ids_from(ctx, tid_i, tid_s, ctx.host_id)
    if gpu.any():
        a, b = _gpu_keys(a, b, gpu, lane_kind, arg, pid_i, pid_s, tid_i, tid_s)
    nbytes = np.where(np.isin(kind, np.asarray(COPY_KINDS, np.int8)), _np(arg["bytes"], 0), 0)
    detail_id = np.zeros(rows.size, np.int32)
    _details_arrow(ctx, detail_id, args, rows, kind, lane_kind, nbytes)
    return Block(
        lane=lane_codes(ctx, lane_kind, a, b),
        start=start[rows],
        dur=dur[rows],
        name_id=name_lut[name_codes],
        kind=kind,
        corr=corr.astype(np.int64, copy=False),
        nbytes=nbytes.astype(np.int64, copy=False),
        detail_id=detail_id,
    )


def _gpu_keys(a, b, gpu, lane_kind, arg, pid_i, pid_s, tid_i, tid_s):
    """(device, stream) for GPU rows: the pid names the device unless it is a label."""
    dev_arg_ok = _valid(arg["device"])
    dev_arg = _np(arg["device"], 0)
    pid_is_int = _valid(pid_i)
    pid_str_ok = _valid(pid_s) & ~pid_is_int
    device = np.where(dev_arg_ok, dev_arg, 0)
    if pid_str_ok.any():
        codes, uniq = _dict(pid_s, "")
        num = np.asarray([as_int(s, -1) for s in uniq], np.int64)[codes]
        device = np.where(pid_str_ok & (num >= 0), num, device)
        device = np.where(pid_str_ok & (num < 0) & ~dev_arg_ok, np.minimum(num, 0), device)
    device = np.where(pid_is_int, _np(pid_i, 0), device)
    stream = _np(tid_i, 0).astype(np.int64)
    tid_str_ok = _valid(tid_s) & ~_valid(tid_i)
    if tid_str_ok.any():
        codes, uniq = _dict(tid_s, "")
        stream = np.where(tid_str_ok, np.asarray([stream_of(s) for s in uniq], np.int64)[codes], stream)
    stream = np.where(_valid(arg["stream"]), _np(arg["stream"], 0), stream)
    stream = np.where(lane_kind == LaneKind.GPU_SYNC, -1, stream)
    return np.where(gpu, device, a), np.where(gpu, stream, b)


def _details_arrow(ctx, detail_id, args, rows, kind, lane_kind, nbytes) -> None:
    kernels = np.flatnonzero(kind == Kind.KERNEL)
    if kernels.size:
        take = pa.array(rows[kernels])
        parts = [_labelled(label, args.field(key).take(take)) for key, label in KERNEL_ARGS]
        _set_details(ctx, detail_id, kernels, pc.fill_null(_join(*parts), ""))
    copies = np.flatnonzero(np.isin(kind, np.asarray(COPY_KINDS, np.int8)))
    if copies.size:
        uniq, inv = np.unique(nbytes[copies], return_inverse=True)
        detail_id[copies] = ctx.code(ctx.details, [f"bytes {v}" for v in uniq.tolist()])[inv]
    syncs = np.flatnonzero(kind == Kind.SYNC)
    if syncs.size:
        _sync_details(ctx, detail_id, args, rows, syncs)
    host = np.flatnonzero(~np.isin(lane_kind, np.asarray(GPU_LANES, np.int8)))
    if host.size:
        dims = pc.coalesce(args.field("Input Dims"), args.field("Input dims")).take(pa.array(rows[host]))
        has = _np(pc.list_value_length(dims), 0) > 0
        if has.any():
            _set_details(ctx, detail_id, host[has], _dims_text(dims.filter(pa.array(has))))


def _sync_details(ctx: Context, detail_id: np.ndarray, args: pa.Array, rows: np.ndarray, syncs: np.ndarray) -> None:
    """Sync rows are few: one ``syncs.sync_detail`` string per distinct (kind, streams, record)."""
    take = pa.array(rows[syncs])
    kind_codes, kinds = _dict(args.field("cuda_sync_kind").take(take), "")
    ints = [_np(args.field(f).take(take), -1).astype(np.int64) for f in _SYNC_INTS]
    keys = np.stack([kind_codes.astype(np.int64), *ints], axis=1)
    uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
    texts = [sync_detail(kinds[k], stream, on, rec) for k, stream, on, rec in uniq.tolist()]
    detail_id[syncs] = ctx.code(ctx.details, texts)[inverse.reshape(-1)]


def _metadata_arrow(ctx: Context, batch: pa.RecordBatch, rows: np.ndarray) -> None:
    """Process and thread names from the (few) ``M`` events; the first name wins."""
    sub = batch.take(pa.array(rows))
    names = strings(sub.column("name"))
    values = strings(sub.column("args").field("name"))
    pids = _either(sub.column("pid"), sub.column("pis"))
    tids = _either(sub.column("tid"), sub.column("tis"))
    for name, value, pid, tid in zip(names, values, pids, tids, strict=True):
        _metadata(ctx, name, value, 0 if pid is None else pid, 0 if tid is None else tid)


def _metadata(ctx: Context, name, value, pid, tid) -> None:
    if not isinstance(value, str):
        return
    if name == "process_name":
        ctx.processes.setdefault(ctx.host_id(pid), value)
    elif name == "thread_name":
        ctx.threads.setdefault((ctx.host_id(pid), ctx.host_id(tid)), value)


def _either(ints: pa.Array, strs: pa.Array) -> list:
    return [i if i is not None else s for i, s in zip(ints.to_pylist(), strings(strs), strict=True)]
