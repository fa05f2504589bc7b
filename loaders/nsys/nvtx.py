"""NVTX ranges and marks of an nsys export (``NVTX_EVENTS``) as annotation Parts.

Names are ``COALESCE(StringIds[textId], text)``; a non-default domain prefixes the name
as ``domain:range``, resolved per process from the domain-create rows (eventType 75).
Push/pop and start/end ranges both become annotations on the starting thread; a start/end
range that ends on another thread says so in its details; a NULL end stays open until
the end of the trace (the caller fills ``OPEN_END`` once every table is read).
"""

from __future__ import annotations

import numpy as np

from gaplens.loaders.kinds import Kind, LaneKind
from gaplens.loaders.nsys.parts import Context, Part, process_scope, split_tid
from gaplens.loaders.nsys.sql import NULL, Columns, Int
from gaplens.loaders.validate import TIME_LIMIT_NS, int_or_none

NVTX = "NVTX_EVENTS"
MARK = 34
PUSH_POP = (59, 70)  # NvtxPushPopRange, NVTXT push/pop
START_END = (60, 71)  # NvtxStartEndRange, NVTXT start/end
DOMAIN_CREATE = 75
THREAD_NAME = 39
OPEN_END = NULL  # end of a range that was never closed


def read_nvtx(ctx: Context) -> tuple[Part | None, dict[tuple[int, int], str]]:
    """Ranges and marks, plus thread names set through nvtxNameOsThread."""
    rows = _rows(ctx)
    if not rows:
        return None, {}
    start, end, etype, gtid, end_gtid, text_id, text_col, domain = zip(*rows, strict=True)
    texts = [ctx.strings.get(t, "") if t is not None else "" for t in text_id]
    texts = [a or ("" if b is None else str(b)) for a, b in zip(texts, text_col, strict=True)]
    gtid_a = np.array([g or 0 for g in gtid], dtype=np.int64)
    etype_a = np.array(etype, dtype=np.int64)
    scope = process_scope(gtid_a)
    pid, tid = split_tid(gtid_a)

    domains: dict[tuple[int, int], str] = {}
    thread_names: dict[tuple[int, int], str] = {}
    for i in np.flatnonzero(np.isin(etype_a, (DOMAIN_CREATE, THREAD_NAME))).tolist():
        if etype_a[i] == DOMAIN_CREATE and domain[i] is not None:
            domains[(int(scope[i]), int(domain[i]))] = texts[i]
        elif etype_a[i] == THREAD_NAME and texts[i]:
            thread_names[(int(pid[i]), int(tid[i]))] = texts[i]

    keep = np.flatnonzero(np.isin(etype_a, (MARK, *PUSH_POP, *START_END)))
    if keep.size == 0:
        return None, thread_names
    names = np.empty(keep.size, np.int32)
    details = np.zeros(keep.size, np.int32)
    ends = np.empty(keep.size, np.int64)
    for j, i in enumerate(keep.tolist()):
        label = texts[i] or "(unnamed range)"
        dom = domain[i]
        if dom:  # domain 0 is the default domain: no prefix, as nsys prints ":name"
            label = f"{domains.get((int(scope[i]), int(dom)), f'domain {dom}')}:{label}"
        names[j] = ctx.names.add(label)
        e = end[i]
        if etype_a[i] == MARK:
            ends[j] = start[i]
        elif e is None:
            ends[j] = OPEN_END
            details[j] = ctx.details.add("never closed: open until the end of the trace")
        else:
            ends[j] = e
            if end_gtid[i] is not None and end_gtid[i] != gtid[i]:
                _, etid = split_tid(np.array([end_gtid[i]], np.int64))
                details[j] = ctx.details.add(f"start/end range ending on thread {int(etid[0])}")
    kind = np.where(etype_a[keep] == MARK, int(Kind.MARK), int(Kind.ANNOTATION)).astype(np.int8)
    part = Part.make(
        LaneKind.ANNOTATIONS,
        pid[keep],
        tid[keep],
        np.array(start, dtype=np.int64)[keep],
        ends,
        names,
        kind,
        detail=details,
    )
    return part, thread_names


def _rows(ctx: Context) -> list[tuple]:
    """The table's rows of the event types read, in rowid order, each value judged; rows without a usable
    start or type are skipped (and counted). Empty when the table or its start/eventType columns are absent."""
    sc = ctx.schema
    if not sc.has(NVTX):
        return []
    c = Columns(sc, NVTX)
    if not c.has("start", "eventType"):
        ctx.repairs.note(f"{NVTX} lacks its start or eventType column: its rows are not shown")
        return []
    types = (MARK, *PUSH_POP, *START_END, DOMAIN_CREATE, THREAD_NAME)
    specs = [
        c.int("start", lo=-TIME_LIMIT_NS, hi=TIME_LIMIT_NS),
        c.int("end"),
        c.int("eventType"),
        c.int("globalTid"),
        c.int("endGlobalTid"),
        c.int("textId"),
        Int(f"CAST({sc.col(NVTX, 'text')} AS TEXT)"),  # text, not judged as an integer
        c.int("domainId"),
    ]
    sel = ", ".join(sp.sql for sp in specs)
    raw = ctx.reader.con().execute(f'SELECT {sel} FROM {NVTX} WHERE "eventType" IN {types} ORDER BY rowid').fetchall()
    rows, bad = _judged(raw, specs, text_column=6)
    if bad:
        ctx.reader.bad[NVTX] = ctx.reader.bad.get(NVTX, 0) + bad
    usable = [r for r in rows if r[0] is not None and r[2] is not None]
    ctx.repairs.add("NVTX rows without a usable start skipped", len(rows) - len(usable))
    return usable


def _judged(rows: list[tuple], specs: list[Int], text_column: int) -> tuple[list[tuple], int]:
    """Rows with every integer column an int64 in its range or None; and how many values were not."""
    out = []
    bad = 0
    for row in rows:
        vals = list(row)
        for j, (v, sp) in enumerate(zip(row, specs, strict=True)):
            if j == text_column or v is None:
                continue
            iv = None if isinstance(v, bool | float) else int_or_none(v, floats=False)
            if iv is None or not sp.lo <= iv <= sp.hi:
                bad += 1
                iv = None
            vals[j] = iv
        out.append(tuple(vals))
    return out, bad
