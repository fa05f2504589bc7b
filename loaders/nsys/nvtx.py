"""NVTX ranges and marks of an nsys export (``NVTX_EVENTS``) as annotation Parts.

Names are ``COALESCE(StringIds[textId], text)``; a non-default domain prefixes the name
as ``domain:range``, resolved per process from the domain-create rows (eventType 75).
Push/pop and start/end ranges both become annotations on the starting thread; a start/end
range that ends on another thread says so in its details; a NULL end stays open until
the end of the trace (the caller fills ``OPEN_END`` once every table is read).

Frameworks emit a range per layer per step (100k rows and more, a few hundred names): the rows
are judged a column at a time and named once per distinct (text, domain, process), never per row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gaplens.loaders.kinds import Kind, LaneKind
from gaplens.loaders.nsys.parts import TID_MASK, Context, Part, process_scope, split_tid
from gaplens.loaders.nsys.sql import NULL, Columns, Int
from gaplens.loaders.validate import TIME_LIMIT_NS, int_or_none

NVTX = "NVTX_EVENTS"
MARK = 34
PUSH_POP = (59, 70)  # NvtxPushPopRange, NVTXT push/pop
START_END = (60, 71)  # NvtxStartEndRange, NVTXT start/end
DOMAIN_CREATE = 75
THREAD_NAME = 39
OPEN_END = NULL  # end of a range that was never closed
#: The Python types a column of plain integers holds (SQLite returns int64 values as int, NULL as None).
_PLAIN = frozenset({int, type(None)})


@dataclass
class _Rows:
    """The table's rows read: each integer column as int64 with a mask of the values that are set
    (judged: a value that is not an integer, or out of its range, is not set), and the text column."""

    start: np.ndarray
    end: np.ndarray
    etype: np.ndarray
    gtid: np.ndarray
    end_gtid: np.ndarray
    text_id: np.ndarray
    domain: np.ndarray
    ok: dict[str, np.ndarray]  # column name -> set values
    text: list[str | None]

    def __len__(self) -> int:
        return int(self.start.size)


def read_nvtx(ctx: Context) -> tuple[Part | None, dict[tuple[int, int], str]]:
    """Ranges and marks, plus thread names set through nvtxNameOsThread."""
    rows = _rows(ctx)
    if rows is None or not len(rows):
        return None, {}
    ok = rows.ok
    gtid_a = np.where(ok["gtid"], rows.gtid, 0)
    etype_a = rows.etype
    scope = process_scope(gtid_a)
    pid, tid = split_tid(gtid_a)

    def text(i: int) -> str:
        """The row's name: its StringIds text, else its own text column."""
        a = ctx.strings.get(int(rows.text_id[i]), "") if ok["text_id"][i] else ""
        b = rows.text[i]
        return a or ("" if b is None else str(b))

    domains: dict[tuple[int, int], str] = {}
    thread_names: dict[tuple[int, int], str] = {}
    for i in np.flatnonzero(np.isin(etype_a, (DOMAIN_CREATE, THREAD_NAME))).tolist():
        if etype_a[i] == DOMAIN_CREATE and ok["domain"][i]:
            domains[(int(scope[i]), int(rows.domain[i]))] = text(i)
        elif etype_a[i] == THREAD_NAME and text(i):
            thread_names[(int(pid[i]), int(tid[i]))] = text(i)

    keep = np.flatnonzero(np.isin(etype_a, (MARK, *PUSH_POP, *START_END)))
    if keep.size == 0:
        return None, thread_names
    # domain 0 is the default domain: no prefix, as nsys prints ":name"; a domain not set reads as 0 too
    domain = np.where(ok["domain"], rows.domain, 0)[keep]
    names = _names(ctx, rows, keep, domain, scope[keep], text, domains)
    is_mark = etype_a[keep] == MARK
    has_end = ok["end"][keep]
    ends = np.where(is_mark, rows.start[keep], np.where(has_end, rows.end[keep], OPEN_END))
    # Details in row order, as a row-by-row read would intern them.
    other_thread = ok["end_gtid"][keep] & (~ok["gtid"][keep] | (rows.end_gtid[keep] != rows.gtid[keep]))
    details = np.zeros(keep.size, np.int32)
    for j in np.flatnonzero(~is_mark & (~has_end | other_thread)).tolist():
        if not has_end[j]:
            details[j] = ctx.details.add("never closed: open until the end of the trace")
        else:
            etid = int(rows.end_gtid[keep[j]]) & TID_MASK
            details[j] = ctx.details.add(f"start/end range ending on thread {etid}")
    kind = np.where(is_mark, int(Kind.MARK), int(Kind.ANNOTATION)).astype(np.int8)
    part = Part.make(LaneKind.ANNOTATIONS, pid[keep], tid[keep], rows.start[keep], ends, names, kind, detail=details)
    return part, thread_names


def _names(
    ctx: Context,
    rows: _Rows,
    keep: np.ndarray,
    domain: np.ndarray,
    scope: np.ndarray,
    text,
    domains: dict[tuple[int, int], str],
) -> np.ndarray:
    """Each kept row's name id: one label per distinct (text id, text, domain, process), interned in order of
    first appearance, so the ids are those a row-by-row read would give."""
    codes: dict[str | None, int] = {}
    own = np.fromiter(map(codes.setdefault, [rows.text[i] for i in keep.tolist()], range(keep.size)), np.int64)
    text_id = np.where(rows.ok["text_id"][keep], rows.text_id[keep], NULL)
    _, first, inverse = np.unique(_dense(text_id, own, domain, scope), return_index=True, return_inverse=True)
    ids = np.empty(first.size, np.int32)
    for g in np.argsort(first, kind="stable").tolist():
        j = int(first[g])
        label = text(int(keep[j])) or "(unnamed range)"
        dom = int(domain[j])
        if dom:
            label = f"{domains.get((int(scope[j]), dom), f'domain {dom}')}:{label}"
        ids[g] = ctx.names.add(label)
    return ids[inverse.reshape(-1)]


def _dense(*columns: np.ndarray) -> np.ndarray:
    """One dense code per distinct tuple of the columns' values (kept below the rows' count: never overflows)."""
    key = np.unique(columns[0], return_inverse=True)[1].reshape(-1)
    for col in columns[1:]:
        dense = np.unique(col, return_inverse=True)[1].reshape(-1)
        key = np.unique(key * (int(dense.max()) + 1) + dense, return_inverse=True)[1].reshape(-1)
    return key


def _rows(ctx: Context) -> _Rows | None:
    """The table's rows of the event types read, in rowid order, each value judged; rows without a usable
    start or type are skipped (and counted). None when the table or its start/eventType columns are absent."""
    sc = ctx.schema
    if not sc.has(NVTX):
        return None
    c = Columns(sc, NVTX)
    if not c.has("start", "eventType"):
        ctx.repairs.note(f"{NVTX} lacks its start or eventType column: its rows are not shown")
        return None
    types = (MARK, *PUSH_POP, *START_END, DOMAIN_CREATE, THREAD_NAME)
    specs = {
        "start": c.int("start", lo=-TIME_LIMIT_NS, hi=TIME_LIMIT_NS),
        "end": c.int("end"),
        "etype": c.int("eventType"),
        "gtid": c.int("globalTid"),
        "end_gtid": c.int("endGlobalTid"),
        "text_id": c.int("textId"),
        "domain": c.int("domainId"),
    }
    text_sql = f"CAST({sc.col(NVTX, 'text')} AS TEXT)"  # text, not judged as an integer
    where = f'WHERE "eventType" IN {types} ORDER BY rowid'
    got = _from_pages(ctx, specs, types, f"SELECT {text_sql} FROM {NVTX} {where}")
    if got is not None:
        cols, ok, text = got
    else:
        sel = ", ".join([*(sp.sql for sp in specs.values()), text_sql])
        raw = ctx.reader.con().execute(f"SELECT {sel} FROM {NVTX} {where}").fetchall()
        if not raw:
            return None
        *values, text = zip(*raw, strict=True)
        del raw
        cols, ok = {}, {}
        bad = 0
        for (key, spec), col in zip(specs.items(), values, strict=True):
            cols[key], ok[key], n_bad = _judged(col, spec)
            bad += n_bad
        if bad:
            ctx.reader.bad[NVTX] = ctx.reader.bad.get(NVTX, 0) + bad
    if not len(text):
        return None
    usable = ok["start"] & ok["etype"]
    ctx.repairs.add("NVTX rows without a usable start skipped", int(usable.size - np.count_nonzero(usable)))
    if not usable.all():
        idx = np.flatnonzero(usable)
        cols = {k: v[idx] for k, v in cols.items()}
        ok = {k: v[idx] for k, v in ok.items()}
        text = tuple(text[i] for i in idx.tolist())
    return _Rows(**cols, ok=ok, text=list(text))


def _from_pages(
    ctx: Context, specs: dict[str, Int], types: tuple[int, ...], text_sql: str
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], tuple] | None:
    """The integer columns of the rows read, decoded from the table's pages (every row, then those of the types
    read), and their text through SQL; None when the pages cannot say exactly what the row-by-row read would:
    a table or value they cannot decode, or any value out of its range (the row-by-row read judges only the rows
    of the types read, so their count of bad values is its own)."""
    before = dict(ctx.reader.bad)
    bulk = ctx.reader.page_ints(NVTX, specs)
    if bulk is None or ctx.reader.bad != before:
        ctx.reader.bad.clear()
        ctx.reader.bad.update(before)
        return None
    keep = np.flatnonzero(np.isin(bulk["etype"], types))
    text = tuple(row[0] for row in ctx.reader.con().execute(text_sql))
    if len(text) != keep.size:  # the rows changed between the reads: read them again, together
        return None
    cols = {k: v[keep] for k, v in bulk.items()}
    ok = {k: v != NULL for k, v in cols.items()}
    return {k: np.where(ok[k], v, 0) for k, v in cols.items()}, ok, text


def _judged(values: tuple, spec: Int) -> tuple[np.ndarray, np.ndarray, int]:
    """One column's values as int64, which are set (an int64 in the spec's range), and how many were not
    (a value that is neither NULL nor such an integer). A column of plain integers and NULLs (an nsys export's)
    is judged in numpy; any other value sends the column through ``int_or_none`` value by value."""
    n = len(values)
    types = set(map(type, values))
    bad = 0
    if types == {int}:  # the usual column: one C conversion
        out, is_set = np.fromiter(values, np.int64, n), np.ones(n, bool)
    elif types <= {type(None)}:  # a column nsys left empty (endGlobalTid, textId of ranges named by text)
        out, is_set = np.zeros(n, np.int64), np.zeros(n, bool)
    elif types <= _PLAIN:
        obj = np.array(values, dtype=object)
        is_set = np.fromiter((v is not None for v in values), bool, n)
        out = np.where(is_set, obj, 0).astype(np.int64)
    else:
        out = np.zeros(n, np.int64)
        is_set = np.zeros(n, bool)
        for k, v in enumerate(values):
            if v is None:
                continue
            iv = None if isinstance(v, bool | float) else int_or_none(v, floats=False)
            if iv is None:
                bad += 1
            else:
                out[k], is_set[k] = iv, True
    outside = is_set & ((out < spec.lo) | (out > spec.hi))
    if outside.any():
        bad += int(np.count_nonzero(outside))
        is_set &= ~outside
        out[outside] = 0
    return out, is_set, bad
