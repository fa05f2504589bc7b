"""The last resort for blocks the Arrow reader still refuses: a per-event loop with the same output.

Mixed JSON types are not a reason to come here (``cols`` reads them through
twin keys, ``dims`` reads Input Dims from the text); what is left is input
Arrow cannot read at all, e.g. a value of a type no twin covers. Such a block is
decoded line by line by the stdlib (numbers as ``Decimal``, so times stay exact) and
classified here. Undecodable lines are counted and dropped. The tests hold this path
equal to the Arrow one on real traces.
"""

from __future__ import annotations

import json
from decimal import Decimal

import numpy as np

from gaplens.loaders.kineto.context import Block, Context, lane_codes, note_metadata
from gaplens.loaders.kineto.dims import dims_text, list_text
from gaplens.loaders.kineto.fields import (
    CATEGORIES,
    COPY_KINDS,
    GPU_LANES,
    IGNORED,
    KERNEL_ARGS,
    kernel_detail,
    memcpy_kind,
    stream_of,
)
from gaplens.loaders.kineto.opdetail import flops_value, op_detail, string_list
from gaplens.loaders.model import Kind, LaneKind
from gaplens.loaders.syncs import sync_detail
from gaplens.loaders.validate import as_int, time_ns


def _decode(line: bytes) -> dict | None:
    try:
        ev = json.loads(line.decode("utf-8", "replace"), parse_float=Decimal)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the parser's stack
        return None
    return ev if isinstance(ev, dict) else None


def from_lines(ctx: Context, ndjson: bytes) -> Block:
    """Classify the events of one NDJSON block with a Python loop."""
    lane_kind: list[int] = []
    a_col: list[int] = []
    b_col: list[int] = []
    cols: dict[str, list] = {k: [] for k in ("start", "dur", "name", "kind", "corr", "nbytes", "detail")}
    for line in ndjson.split(b"\n"):
        ev = _decode(line)
        if ev is None:
            ctx.malformed += 1
            continue
        pid = ev.get("pid", ev.get("pis"))
        tid = ev.get("tid", ev.get("tis"))
        raw_args = ev.get("args")
        args: dict = raw_args if isinstance(raw_args, dict) else {}
        if ev.get("ph") == "M":
            note_metadata(ctx, ev.get("name"), args.get("name"), 0 if pid is None else pid, 0 if tid is None else tid)
            continue
        if ev.get("ph") != "X":
            continue
        cat = str(ev.get("cat", "")).lower()
        spec = CATEGORIES.get(cat)
        if spec is None:
            if cat not in IGNORED:
                ctx.unknown[cat] = ctx.unknown.get(cat, 0) + 1
            continue
        kind, lk = spec
        start = time_ns(ev.get("ts"))
        if start is None:
            ctx.bad_start += 1
            continue
        dur = time_ns(ev.get("dur"))
        if dur is None or dur < 0:
            ctx.bad_time += 1
            dur = 0
        name = ev.get("name")
        name = name if isinstance(name, str) else str(name)
        nbytes, detail = 0, ""
        if lk in GPU_LANES:
            device = as_int(args.get("device", pid if pid is not None else 0), 0)
            if not isinstance(pid, str) or as_int(pid, -1) >= 0:
                device = as_int(pid if pid is not None else device, device)
            stream = as_int(args.get("stream", stream_of(tid if tid is not None else 0)), 0)
            if kind == Kind.MEMCPY_OTHER:
                kind = memcpy_kind(name)
            if kind in COPY_KINDS:
                nbytes = as_int(args.get("bytes", 0), 0)
                detail = f"bytes {nbytes}"
            elif kind == Kind.KERNEL:
                detail = kernel_detail({k: args[k] for k, _ in KERNEL_ARGS if k in args})
            elif kind == Kind.SYNC:
                detail = _sync_detail(args)
            a, b = device, (-1 if lk == LaneKind.GPU_SYNC else stream)
        else:
            a, b = ctx.host_id(pid if pid is not None else 0), ctx.host_id(tid if tid is not None else 0)
            dims = args.get("Input Dims", args.get("Input dims"))
            if dims:
                detail = op_detail(
                    dims_text(dims),
                    string_list(args.get("Input type")),
                    string_list(args.get("Concrete Inputs")),
                    list_text("Input Strides", args.get("Input Strides")),
                    flops_value(args.get("flops")),
                )
        lane_kind.append(int(lk))
        a_col.append(a)
        b_col.append(b)
        for key, value in zip(
            cols, (start, dur, name, int(kind), as_int(args.get("correlation", -1), -1), nbytes, detail), strict=True
        ):
            cols[key].append(value)
    if not lane_kind:
        return Block.empty()
    return Block(
        lane=lane_codes(ctx, np.asarray(lane_kind, np.int8), np.asarray(a_col, np.int64), np.asarray(b_col, np.int64)),
        start=np.asarray(cols["start"], np.int64),
        dur=np.asarray(cols["dur"], np.int64),
        name_id=ctx.code(ctx.names, cols["name"]),
        kind=np.asarray(cols["kind"], np.int8),
        corr=np.asarray(cols["corr"], np.int64),
        nbytes=np.asarray(cols["nbytes"], np.int64),
        detail_id=ctx.code(ctx.details, cols["detail"]),
    )


def _sync_detail(args: dict) -> str:
    kind = args.get("cuda_sync_kind")
    return sync_detail(
        "" if kind is None else str(kind),
        as_int(args.get("stream", -1), -1),
        as_int(args.get("wait_on_stream", -1), -1),
        as_int(args.get("wait_on_cuda_event_record_corr_id", -1), -1),
    )
