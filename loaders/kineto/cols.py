"""Kineto events of one Arrow batch into a ``Block`` (the per-event path, ``slow``, gives the same).

Vectorised on the batch's buffers with numpy (``loaders.columns``): per-batch
dictionaries of the string columns, lookup tables, and detail strings formatted once
per distinct value. String values of number fields arrive in their twins (``fields.twin``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from gaplens.loaders.columns import (
    Strings,
    decimal_units,
    encode_rows,
    encode_slices,
    factorize,
    floats,
    ints,
    list_matrix,
    valid,
)
from gaplens.loaders.kineto.context import Block, Context, lane_codes, note_metadata
from gaplens.loaders.kineto.dims import Found
from gaplens.loaders.kineto.fields import (
    CATEGORIES,
    COLL_STRS,
    COPY_KINDS,
    FLOAT_ARGS,
    GPU_LANES,
    IGNORED,
    KERNEL_ARGS,
    LIST_ARGS,
    OP_STR_LISTS,
    SYNC_INTS,
    kernel_detail,
    memcpy_kind,
    stream_of,
    twin,
)
from gaplens.loaders.kineto.opdetail import op_detail
from gaplens.loaders.model import Kind, LaneKind
from gaplens.loaders.syncs import sync_detail
from gaplens.loaders.validate import TIME_LIMIT_NS, as_int


@dataclass
class Dims:
    """``Input Dims`` and ``Input Strides`` found in a block's text (``dims.find_dims``): each as
    (event index, code, texts)."""

    dims: Found
    strides: Found


def _global(ctx: Context, table: dict[str, int], codes: np.ndarray, texts: list[str]) -> np.ndarray:
    """File-wide ids for per-batch codes; only the values that occur are registered, in order of appearance."""
    local, used = factorize(codes)
    return ctx.code(table, [texts[int(c)] for c in used])[local]


def _time(arr: pa.Array, scale: int) -> tuple[np.ndarray, np.ndarray]:
    """(ns int64, valid) from a decimal µs column, exactly (truncated below 1 ns)."""
    if scale != 3:
        import pyarrow.compute as pc  # only for writers that print more than 3 fraction digits

        arr = pc.cast(arr, pa.decimal128(38, 3), safe=False)
    ns, ok = decimal_units(arr)
    ok &= np.abs(ns) <= TIME_LIMIT_NS  # the boundary's range: never wrap past int64 later
    return ns, ok


def _twin_of(parent: pa.StructArray, key: str) -> pa.Array | None:
    """The string values of ``key`` (its twin field), when this file has any."""
    index = parent.type.get_field_index(twin(key))
    return None if index < 0 else parent.field(index)


def _int_arg(parent: pa.StructArray, key: str, fill: int) -> tuple[np.ndarray, np.ndarray]:
    """(values, present) of an integer arg, string values (the twin) read like ``as_int`` reads them."""
    arr = parent.field(key)
    values, present = ints(arr, fill), valid(arr)
    other = _twin_of(parent, key)
    if other is not None and other.null_count < len(other):
        s = Strings(other)
        lut = np.asarray([as_int(t, fill) for t in s.texts()], np.int64)
        use = s.valid & ~present
        values[use] = lut[s.codes[use]]
        present |= use
    return values, present


def from_arrow(
    ctx: Context, batch: pa.RecordBatch, dims: Dims | None = None, scale: int = 3, file_pos: np.ndarray | None = None
) -> Block:
    """Vectorised: one Arrow batch of raw events to the kept duration events.

    ``file_pos``, for a batch whose rows are not in the file's order (``pyevents``): where each row's
    event is in its block. Names and lanes are then numbered, and the kept events returned, in that
    order, as they are for a batch in order. (Named pids and tids are numbered in the batch's order:
    the reader splits a block only when its Python events have none.)
    """
    ph = Strings(batch.column("ph"))
    ph_texts = ph.texts()
    is_x = np.asarray([p == "X" for p in ph_texts], bool)[ph.codes]
    is_m = np.asarray([p == "M" for p in ph_texts], bool)[ph.codes]
    cat = Strings(batch.column("cat"))
    lower = [c.lower() for c in cat.texts()]
    kind_lut = np.asarray(
        [CATEGORIES[c][0] if c in CATEGORIES else (-2 if c in IGNORED else -1) for c in lower], np.int8
    )
    lane_lut = np.asarray([CATEGORIES[c][1] if c in CATEGORIES else -1 for c in lower], np.int8)
    kind_all = kind_lut[cat.codes]
    unknown = is_x & (kind_all == -1)
    if unknown.any():
        for code, count in enumerate(np.bincount(cat.codes[unknown], minlength=len(lower)).tolist()):
            if count:
                ctx.unknown[lower[code]] = ctx.unknown.get(lower[code], 0) + count
    keep = is_x & (kind_all >= 0)
    start, start_ok = _time(batch.column("ts"), scale)
    dur, dur_ok = _time(batch.column("dur"), scale)
    bad_start = keep & ~start_ok
    keep &= start_ok
    bad_dur = keep & (~dur_ok | (dur < 0))
    ctx.bad_start += int(bad_start.sum())
    ctx.bad_time += int(bad_dur.sum())
    rows = np.flatnonzero(keep)
    lane_kind = lane_lut[cat.codes[rows]]
    gpu = np.isin(lane_kind, np.asarray(GPU_LANES, np.int8))
    meta = _metadata_rows(batch, np.flatnonzero(is_m))
    _register_named_ids(ctx, batch, meta, rows[~gpu])
    for _, what, value, pid, tid in meta:
        note_metadata(ctx, what, value, pid, tid)
    if rows.size == 0:
        return Block.empty()
    kind = kind_all[rows]
    name = Strings(batch.column("name"))
    name_texts = name.texts("None")
    name_codes = name.codes[rows]
    copy_lut = np.asarray([memcpy_kind(s) for s in name_texts], np.int8)
    other = kind == Kind.MEMCPY_OTHER
    kind[other] = copy_lut[name_codes[other]]

    args = batch.column("args")
    corr, _ = _int_arg(args, "correlation", -1)
    a = np.zeros(rows.size, np.int64)
    b = np.zeros(rows.size, np.int64)
    if not gpu.all():
        a[~gpu], b[~gpu] = _host_keys(ctx, batch, rows[~gpu])
    if gpu.any():
        g = rows[gpu]
        device, stream = _gpu_keys(ctx, batch, args, g)
        a[gpu] = device
        b[gpu] = np.where(lane_kind[gpu] == LaneKind.GPU_SYNC, -1, stream)
    is_copy = np.isin(kind, np.asarray(COPY_KINDS, np.int8))
    nbytes = np.zeros(rows.size, np.int64)
    if is_copy.any():
        nbytes[is_copy] = _int_arg(args, "bytes", 0)[0][rows[is_copy]]
    detail_id = np.zeros(rows.size, np.int32)
    _details(ctx, detail_id, args, rows, kind, gpu, nbytes, dims)
    order = np.argsort(file_pos[rows], kind="stable") if file_pos is not None else slice(None)
    return Block(
        lane=lane_codes(ctx, lane_kind[order], a[order], b[order]),
        start=start[rows[order]],
        dur=np.where(bad_dur[rows], 0, dur[rows])[order],
        name_id=_global(ctx, ctx.names, name_codes[order], name_texts),
        kind=kind[order],
        corr=corr[rows[order]],
        nbytes=nbytes[order],
        detail_id=detail_id[order],
    )


def _strings_of(batch: pa.RecordBatch, name: str) -> pa.Array:
    """A string column of the batch; all nulls when this parse did not ask for it (a twin not yet seen)."""
    index = batch.schema.get_field_index(name)
    return batch.column(index) if index >= 0 else pa.nulls(batch.num_rows, pa.string())


def _id_column(ints_arr: pa.Array, strs_arr: pa.Array, rows: np.ndarray, conv) -> np.ndarray:
    """A pid/tid column at ``rows``: the int, else the string through ``conv``, else ``conv(0)``.

    ``conv`` sees the strings of these rows only, in order of first appearance, as the
    per-event path would call it.
    """
    out = ints(ints_arr, 0)[rows]
    has_int = valid(ints_arr)[rows]
    if has_int.all():
        return out
    s = Strings(strs_arr)
    texts: list = [*s.texts(), 0]
    codes = np.where(s.valid, s.codes, len(texts) - 1)[rows][~has_int]
    local, used = factorize(codes)
    out[~has_int] = np.asarray([conv(texts[int(c)]) for c in used], np.int64)[local]
    return out


def _host_keys(ctx: Context, batch: pa.RecordBatch, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a = _id_column(batch.column("pid"), _strings_of(batch, "pis"), rows, ctx.host_id)
    b = _id_column(batch.column("tid"), _strings_of(batch, "tis"), rows, ctx.host_id)
    return a, b


def _gpu_keys(ctx: Context, batch: pa.RecordBatch, args: pa.StructArray, g: np.ndarray):
    """(device, stream) of GPU rows: the pid names the device unless it is a label; streams from args or tid."""
    pid_i, pid_s = batch.column("pid"), _strings_of(batch, "pis")
    pid_int = valid(pid_i)[g]
    dev_arg, dev_ok = _int_arg(args, "device", 0)
    s = Strings(pid_s)
    texts = s.texts()
    pid_str = s.valid[g] & ~pid_int
    codes = np.where(s.valid, s.codes, 0)[g] if texts else np.zeros(g.size, np.int64)
    num = np.asarray([as_int(t, -1) for t in texts] or [-1], np.int64)[codes]
    fallback = np.asarray([as_int(t, 0) for t in texts] or [0], np.int64)[codes]
    # A label pid ("GPU 0" style or negative): the device arg, else the label read as a number, else 0.
    device = np.where(dev_ok[g], dev_arg[g], np.where(pid_str, fallback, 0))
    device = np.where(pid_str & (num >= 0), num, device)
    device = np.where(pid_int, ints(pid_i, 0)[g], device)

    stream, stream_ok = _int_arg(args, "stream", 0)
    tid_i, tid_s = batch.column("tid"), _strings_of(batch, "tis")
    from_tid = ints(tid_i, 0)[g]
    tid_int = valid(tid_i)[g]
    if not tid_int.all():
        t = Strings(tid_s)
        lut = np.asarray([stream_of(x) for x in t.texts()] + [0], np.int64)
        tcodes = np.where(t.valid, t.codes, len(lut) - 1)[g]
        from_tid = np.where(tid_int, from_tid, lut[tcodes])
    return device, np.where(stream_ok[g], stream[g], from_tid)


def _details(ctx, detail_id, args, rows, kind, gpu, nbytes, dims: Dims | None) -> None:
    kernels = np.flatnonzero(kind == Kind.KERNEL)
    if kernels.size:
        _kernel_details(ctx, detail_id, args, rows, kernels)
    copies = np.flatnonzero(np.isin(kind, np.asarray(COPY_KINDS, np.int8)))
    if copies.size:
        uniq, inv = np.unique(nbytes[copies], return_inverse=True)
        detail_id[copies] = ctx.code(ctx.details, [f"bytes {v}" for v in uniq.tolist()])[inv.reshape(-1)]
    syncs = np.flatnonzero(kind == Kind.SYNC)
    if syncs.size:
        _sync_details(ctx, detail_id, args, rows, syncs)
    if dims is not None and dims.dims[0].size:
        # Events of this batch that were kept, host-side, and carry Input Dims.
        d_rows, d_codes, _ = dims.dims
        pos = np.searchsorted(rows, d_rows)
        hit = (pos < rows.size) & (rows[np.minimum(pos, rows.size - 1)] == d_rows)
        pos, codes = pos[hit], d_codes[hit]
        host = ~gpu[pos]
        if host.any():
            _op_details(ctx, detail_id, args, rows, pos[host], codes[host], dims)


def _op_details(ctx: Context, detail_id: np.ndarray, args: pa.StructArray, rows, pos, dims_codes, dims: Dims) -> None:
    """An op's detail: its Input Dims and the other recorded args the floor sizes it from (``opdetail``),
    one string per distinct combination, in order of first appearance."""
    at = rows[pos]
    s_rows, s_codes, s_texts = dims.strides
    strides = np.full(at.size, -1, np.int64)
    if s_rows.size:
        j = np.minimum(np.searchsorted(s_rows, at), s_rows.size - 1)
        hit = s_rows[j] == at
        strides[hit] = s_codes[j[hit]]
    lists = [_string_lists(args.field(key), at) for key in OP_STR_LISTS]
    flops = floats(args.field("flops"))[at]
    has_flops = np.isfinite(flops)
    table = np.stack(
        [
            dims_codes.astype(np.int64),
            strides.astype(np.int64),
            *(codes for codes, _ in lists),
            has_flops.astype(np.int64),
            np.where(has_flops, flops, 0.0).view(np.int64),
        ],
        axis=1,
    )
    inverse, first = encode_rows(np.ascontiguousarray(table, dtype=np.int64))
    texts = []
    for d, st, types, concrete, with_flops, bits in table[first].tolist():
        texts.append(
            op_detail(
                dims.dims[2][d],
                lists[0][1][types] if types >= 0 else None,
                lists[1][1][concrete] if concrete >= 0 else None,
                s_texts[st] if st >= 0 else None,
                float(np.int64(bits).view(np.float64)) if with_flops else None,
            )
        )
    detail_id[pos] = ctx.code(ctx.details, texts)[inverse.reshape(-1)]


def _string_lists(arr: pa.ListArray, at: np.ndarray) -> tuple[np.ndarray, list[list]]:
    """(code per row of ``at``, -1 where null; the distinct lists) of a list<string> column.

    Each row's value is the run of its items' codes, compared as bytes (``encode_slices``):
    exact whatever the strings hold.
    """
    ok = valid(arr)[at]
    if not ok.any():
        return np.full(at.size, -1, np.int64), []
    offsets = ints(arr.offsets, 0)
    items = Strings(arr.values)
    texts: list[str | None] = list(items.texts())
    if items.null_code >= 0:
        texts[items.null_code] = None
    item_codes = np.ascontiguousarray(items.codes, dtype=np.int32).view(np.uint8)
    starts = np.where(ok, offsets[at], 0) * 4
    ends = np.where(ok, offsets[at + 1], 0) * 4
    codes, first, _, _ = encode_slices(item_codes, starts, ends)
    values = [[texts[c] for c in items.codes[starts[f] // 4 : ends[f] // 4].tolist()] for f in first.tolist()]
    return np.where(ok, codes, -1), values


def _kernel_details(ctx: Context, detail_id: np.ndarray, args: pa.StructArray, rows, kernels) -> None:
    """One detail string per distinct combination of the kernel args, formatted by ``kernel_detail``."""
    at = rows[kernels]
    columns: list[np.ndarray] = []
    readers = []
    for key, _ in KERNEL_ARGS:
        arr = args.field(key)
        if key in COLL_STRS:  # text values: read through the same path as a number's string twin
            s = Strings(arr)
            columns += [np.full(at.size, -1, np.int64), np.where(s.valid, s.codes, -1)[at]]
            readers.append((key, 1, s.texts()))
            continue
        other = _twin_of(args, key)
        if other is not None and other.null_count < len(other):
            s = Strings(other)
            s_texts = s.texts()
            text_code = np.where(s.valid, s.codes, -1)[at]
        else:
            s_texts, text_code = [], np.full(at.size, -1, np.int64)
        if key in LIST_ARGS:
            matrix, lengths = list_matrix(arr)
            cols = [lengths[at], *(matrix[at].T if matrix.shape[1] else [])]
        elif key in FLOAT_ARGS:
            f = floats(arr)[at]
            cols = [np.where(np.isnan(f), -1, 0), np.where(np.isnan(f), 0, f).view(np.int64)]
        else:
            cols = [np.where(valid(arr)[at], 0, -1), ints(arr, 0)[at]]
        columns += [*cols, text_code]
        readers.append((key, len(cols), s_texts))
    table = np.ascontiguousarray(np.stack(columns, axis=1), dtype=np.int64)
    inverse, first = encode_rows(table)
    # The same kernels come back block after block: a row of numbers alone (no text codes,
    # which number this block's strings only) is formatted once per file.
    layout = tuple(width for _, width, _ in readers)
    code_at = list(itertools.accumulate(width + 1 for width in layout))
    texts = []
    for row in table[first].tolist():
        memo_key = None if any(row[c - 1] >= 0 for c in code_at) else (layout, *row)
        known = ctx.kernel_texts.get(memo_key) if memo_key is not None else None
        if known is not None:
            texts.append(known)
            continue
        values: dict = {}
        i = 0
        for key, width, s_texts in readers:
            cols, code = row[i : i + width], row[i + width]
            i += width + 1
            if code >= 0 and cols[0] == -1:
                values[key] = s_texts[code]
            elif key in LIST_ARGS:
                if cols[0] >= 0:
                    values[key] = cols[1 : 1 + cols[0]]
            elif key in FLOAT_ARGS:
                if cols[0] == 0:
                    values[key] = float(np.int64(cols[1]).view(np.float64))
            elif cols[0] == 0:
                values[key] = cols[1]
        texts.append(kernel_detail(values))
        if memo_key is not None:
            ctx.kernel_texts[memo_key] = texts[-1]
    detail_id[kernels] = ctx.code(ctx.details, texts)[inverse.reshape(-1)]


def _sync_details(ctx: Context, detail_id: np.ndarray, args: pa.StructArray, rows: np.ndarray, syncs) -> None:
    """Sync rows are few: one ``syncs.sync_detail`` string per distinct (kind, streams, record)."""
    at = rows[syncs]
    kinds = Strings(args.field("cuda_sync_kind"))
    kind_texts = kinds.texts("")
    kind_codes = kinds.codes[at]
    values = [_int_arg(args, f, -1)[0][at] for f in SYNC_INTS]
    keys = np.ascontiguousarray(np.stack([kind_codes.astype(np.int64), *values], axis=1))
    inverse, first = encode_rows(keys)
    texts = [sync_detail(kind_texts[k], stream, on, rec) for k, stream, on, rec in keys[first].tolist()]
    detail_id[syncs] = ctx.code(ctx.details, texts)[inverse.reshape(-1)]


_Meta = tuple[int, str | None, str, int | str, int | str]


def _metadata_rows(batch: pa.RecordBatch, m: np.ndarray) -> list[_Meta]:
    """(row, name, value, pid, tid) of the (few) ``M`` events that carry a name value."""
    rows = m.tolist()
    if not rows:
        return []
    names = Strings.at(batch.column("name"), rows)
    values = Strings.at(batch.column("args").field("name"), rows)
    pis, tis = Strings.at(_strings_of(batch, "pis"), rows), Strings.at(_strings_of(batch, "tis"), rows)
    pid_i, tid_i = ints(batch.column("pid"), 0)[m], ints(batch.column("tid"), 0)[m]
    pid_ok, tid_ok = valid(batch.column("pid"))[m], valid(batch.column("tid"))[m]
    out: list[_Meta] = []
    for j, row in enumerate(rows):
        value = values[j]
        if value is None:
            continue
        pid_s, tid_s = pis[j], tis[j]
        pid = int(pid_i[j]) if pid_ok[j] else (pid_s if pid_s is not None else 0)
        tid = int(tid_i[j]) if tid_ok[j] else (tid_s if tid_s is not None else 0)
        out.append((row, names[j], value, pid, tid))
    return out


def _register_named_ids(ctx: Context, batch: pa.RecordBatch, meta: list[_Meta], host_rows: np.ndarray) -> None:
    """Give the block's named pids/tids their ids in the order the per-event reader meets them.

    That reader goes event by event, the pid before the tid, through the ``M`` events that
    name a process or thread and the kept host events; ``Context.host_id`` numbers a name
    when first asked, so asking here, in that order, fixes every id before the columns
    are read.
    """
    pis, tis = _strings_of(batch, "pis"), _strings_of(batch, "tis")
    if pis.null_count == len(pis) and tis.null_count == len(tis):
        return
    slots = [host_rows * 2, host_rows * 2 + 1]
    for at, name, _, _, _ in meta:
        if name in ("process_name", "thread_name"):
            slots.append(np.asarray([2 * at], np.int64))
        if name == "thread_name":
            slots.append(np.asarray([2 * at + 1], np.int64))
    slot = np.sort(np.concatenate(slots))
    row, is_tid = slot >> 1, (slot & 1).astype(bool)
    texts: list[str | None] = []
    codes = np.full(slot.size, -1, np.int64)
    for column, ints_column, which in ((pis, "pid", ~is_tid), (tis, "tid", is_tid)):
        s = Strings(column)
        named = which & s.valid[row] & ~valid(batch.column(ints_column))[row]
        codes[named] = s.codes[row[named]] + len(texts)
        texts += s.texts()
    used, first = np.unique(codes[codes >= 0], return_index=True)
    for code in used[np.argsort(first)].tolist():
        ctx.host_id(texts[code])
