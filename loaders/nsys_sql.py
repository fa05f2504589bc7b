"""Bulk reads from an nsys SQLite export: schema probing, integer columns into numpy, strings and enums.

Integer columns are fetched as one ``group_concat`` text per column and chunk of rowids
and parsed by numpy: SQLite formats the numbers in C, nothing is boxed per row, and
chunks of one table run on two threads (``sqlite3`` releases the GIL while stepping).

SQLite stores any type in any column, so integer columns are read uncast: a chunk in
which some value is not an integer (text, real, blob) fails its numpy parse and is read
row by row, where each such value reads as NULL. Values outside a column's range
(``Int``) read as NULL too; both are counted (``Reader.bad``), never cast into a wrong
number. A column missing from the table reads as NULL, never as the string literal
SQLite would make of a double-quoted unknown name. Chunks follow the rowids that exist: sparse or negative
rowids cost a walk of the table, never an allocation per possible rowid.
"""

from __future__ import annotations

import functools
import re
import sqlite3
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gaplens.loaders.nsys_files import connect
from gaplens.loaders.nsys_pages import NotPlain, PageFile
from gaplens.loaders.validate import INT64_MAX, INT64_MIN, Repairs, int_or_none

#: Stands in for SQL NULL in integer columns (group_concat would skip NULLs and misalign columns).
NULL = int(np.iinfo(np.int64).min) + 1
CHUNK_ROWS = 1 << 17
WORKERS = 2
PAGES = True  # decode plain tables from their pages (tests turn it off to compare with SQL)

# Built-in enum labels for exports without ENUM_* tables (2022.2); the file's table wins.
BUILTIN_ENUMS: dict[str, dict[int, str]] = {
    "ENUM_CUDA_MEMCPY_OPER": {
        0: "Unknown",
        1: "Host-to-Device",
        2: "Device-to-Host",
        3: "Host-to-Array",
        4: "Array-to-Host",
        5: "Array-to-Array",
        6: "Array-to-Device",
        7: "Device-to-Array",
        8: "Device-to-Device",
        9: "Host-to-Host",
        10: "Peer-to-Peer",
        11: "Unified Host-to-Device",
        12: "Unified Device-to-Host",
        13: "Unified Device-to-Device",
    },
    "ENUM_CUDA_MEM_KIND": {
        0: "Pageable",
        1: "Pinned",
        2: "Device",
        3: "Array",
        4: "Managed",
        5: "Device Static",
        6: "Managed Static",
        7: "Unknown",
    },
    "ENUM_CUPTI_SYNC_TYPE": {
        0: "Unknown",
        1: "Event sync",
        2: "Stream wait sync",
        3: "Stream sync",
        4: "Context sync",
    },
}

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class Schema:
    """Tables and their columns, probed once; every query selects by column name."""

    columns: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def probe(cls, con: sqlite3.Connection) -> Schema:
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")]
        out = cls()
        for name in names:
            if isinstance(name, str) and IDENT.match(name):
                cols = [r[1] for r in con.execute(f'PRAGMA table_info("{name}")')]
                out.columns[name] = [c for c in cols if isinstance(c, str) and IDENT.match(c)]
        return out

    def has(self, table: str, column: str | None = None) -> bool:
        cols = self.columns.get(table)
        return cols is not None and (column is None or column in cols)

    def col(self, table: str, *candidates: str) -> str:
        """The first present column as a quoted SQL name, else ``NULL`` (columns move between versions)."""
        for c in candidates:
            if self.has(table, c):
                return f'"{c}"'
        return "NULL"


@dataclass(frozen=True)
class Int:
    """One integer column to read: its SQL (a quoted column name, or ``NULL``) and the range it may hold."""

    sql: str
    lo: int = INT64_MIN + 2  # INT64_MIN + 1 is the NULL marker
    hi: int = INT64_MAX - 1  # numpy saturates text past int64 to INT64_MAX


class Columns:
    """The integer columns of one table, by name, with their ranges; absent columns read as NULL."""

    def __init__(self, schema: Schema, table: str) -> None:
        self.schema = schema
        self.table = table

    def has(self, *columns: str) -> bool:
        return all(self.schema.has(self.table, c) for c in columns)

    def int(self, *candidates: str, lo: int = INT64_MIN + 2, hi: int = INT64_MAX - 1) -> Int:
        """The first present of ``candidates`` (columns move between versions), read in [lo, hi]."""
        return Int(self.schema.col(self.table, *candidates), lo, hi)


Spec = Int | str  # a bare string is SQL read with the default range


def _spec(value: Spec) -> Int:
    return value if isinstance(value, Int) else Int(value)


def _parse(text: str | None, n: int) -> np.ndarray | None:
    """The int64 values of a group_concat text, or None when any value is not a plain integer."""
    if n == 0:
        return np.empty(0, np.int64)
    if text is None or text.endswith(","):
        return None
    try:
        arr = np.fromstring(text, dtype=np.int64, sep=",")
    except ValueError:
        return None
    return arr if arr.size == n else None


def _chunk_sql(table: str, exprs: Sequence[str], where: str) -> str:
    # No CAST: a value that is not an integer (text, real, blob) fails the numpy parse of its
    # chunk, which is then read row by row and judged value by value (``_matrix``).
    cols = ", ".join(f"group_concat(ifnull({e}, {NULL}))" for e in exprs)
    cond = f"rowid BETWEEN ? AND ?{f' AND ({where})' if where else ''}"
    return f'SELECT count(*), {cols} FROM "{table}" WHERE {cond}'


def _slow_chunk(
    con: sqlite3.Connection, table: str, exprs: Sequence[str], where: str, lo: int, hi: int
) -> tuple[list[np.ndarray], int]:
    """Row-by-row read of a chunk holding values that are not plain integers."""
    cond = f"rowid BETWEEN ? AND ?{f' AND ({where})' if where else ''}"
    rows = con.execute(f'SELECT {", ".join(exprs)} FROM "{table}" WHERE {cond} ORDER BY rowid', (lo, hi)).fetchall()
    return _matrix(rows, len(exprs))


def _matrix(rows: list[tuple], width: int) -> tuple[list[np.ndarray], int]:
    """Columns of fetched rows as int64 arrays, and how many values were not integers (read as NULL)."""
    mat = np.full((len(rows), width), NULL, dtype=np.int64)
    bad = 0
    for i, row in enumerate(rows):
        for j, v in enumerate(row):
            if v is None:
                continue
            iv = None if isinstance(v, bool | float) else int_or_none(v, floats=False)
            if iv is None:
                bad += 1
            else:
                mat[i, j] = iv
    return [mat[:, j].copy() for j in range(width)], bad


def _in_range(col: np.ndarray, spec: Int, counted: np.ndarray | None = None) -> int:
    """Values outside the spec's range become NULL, in place; returns how many (among ``counted`` rows)."""
    out = (col != NULL) & ((col < spec.lo) | (col > spec.hi))
    n = int(np.count_nonzero(out))
    if n:
        col[out] = NULL
        if counted is not None:
            n = int(np.count_nonzero(out & counted))
    return n


def chunk_bounds(con: sqlite3.Connection, table: str, lo: int, hi: int, chunk: int) -> list[tuple[int, int]]:
    """Rowid ranges of about ``chunk`` rows each, covering [lo, hi].

    Dense rowids (the usual case) give fixed-width ranges. When the spread of rowids is
    larger than the file could hold rows (sparse, negative or huge rowids), the ranges
    come from walking the rowids that exist, so their number follows the rows.
    """
    pages = con.execute("PRAGMA page_count").fetchone()[0] or 0
    page_size = con.execute("PRAGMA page_size").fetchone()[0] or 4096
    most_rows = max(int(pages) * int(page_size) // 2, chunk)
    if hi - lo < most_rows:
        return [(a, min(a + chunk - 1, hi)) for a in range(lo, hi + 1, chunk)]
    bounds = []
    a = lo
    sql = f'SELECT rowid FROM "{table}" WHERE rowid >= ? ORDER BY rowid LIMIT 1 OFFSET ?'
    while a <= hi:
        row = con.execute(sql, (a, chunk - 1)).fetchone()
        b = hi if row is None else min(int(row[0]), hi)
        bounds.append((a, b))
        if b >= hi:
            break
        a = b + 1
    return bounds


@dataclass(frozen=True)
class Drop:
    """Rows to leave out: those whose integer ``column`` (NULL read as 0) equals ``value``."""

    column: str
    value: int

    @property
    def sql(self) -> str:
        return f'ifnull("{self.column}", 0) != {self.value}'


Where = str | Drop  # SQL text (read through SQL only), or a Drop (pages or SQL)
_QUOTED = re.compile(r'^"([A-Za-z_][A-Za-z0-9_]*)"$')


class Reader:
    """Integer-column reader over one export, with a connection per worker thread."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._pages: PageFile | bool | None = False  # False: not opened yet
        self.bad: dict[str, int] = {}  # values that were not integers or out of range, per table

    def con(self) -> sqlite3.Connection:
        c = getattr(self._local, "con", None)
        if c is None:
            c = connect(self.uri)
            self._local.con = c
            with self._lock:
                self._all.append(c)
        return c

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        for c in self._all:
            c.close()
        self._all.clear()
        if isinstance(self._pages, PageFile):
            self._pages.close()
        self._pages = False

    def submit(self, table: str, exprs: Mapping[str, Spec], where: Where = "") -> Callable[[], dict[str, np.ndarray]]:
        """Schedule a read of ``table``'s integer columns (by key) on the worker threads.

        Returns a function that waits for the reads and yields int64 arrays in rowid order:
        NULL, a value that is not an integer and a value outside its column's range all
        read as ``NULL``; the last two are counted in ``self.bad[table]``. Scheduling every
        table before waiting keeps both cores busy on small tables too. Plain tables are
        decoded from their pages (``nsys_pages``), the rest through SQL, with equal results.
        """
        keys = list(exprs)
        specs = [_spec(e) for e in exprs.values()]
        con = self.con()
        where_sql = where.sql if isinstance(where, Drop) else where
        try:
            # Two subqueries: one query with both aggregates would scan the whole table.
            lo, hi = con.execute(
                f'SELECT (SELECT min(rowid) FROM "{table}"), (SELECT max(rowid) FROM "{table}")'
            ).fetchone()
        except sqlite3.OperationalError:  # WITHOUT ROWID table: one unchunked read
            sel = ", ".join(sp.sql for sp in specs)
            rows = con.execute(f'SELECT {sel} FROM "{table}"' + (f" WHERE {where_sql}" if where_sql else ""))
            cols, bad = _matrix(rows.fetchall(), len(specs))
            self._count(table, bad + sum(_in_range(c, sp) for c, sp in zip(cols, specs, strict=True)))
            out = dict(zip(keys, cols, strict=True))
            return lambda: out
        if lo is None:
            empty = {k: np.empty(0, np.int64) for k in keys}
            return lambda: empty
        sql_read = functools.partial(self._submit_sql, table, keys, specs, where_sql, int(lo), int(hi))
        if PAGES and not (isinstance(where, str) and where):
            paged = self._submit_pages(table, keys, specs, where, sql_read)
            if paged is not None:
                return paged
        return sql_read()

    def _submit_sql(
        self, table: str, keys: list[str], specs: list[Int], where: str, lo: int, hi: int
    ) -> Callable[[], dict[str, np.ndarray]]:
        """Chunks of rowids through SQL, one ``group_concat`` text per column and chunk."""
        sqls = [sp.sql for sp in specs]
        sql = _chunk_sql(table, sqls, where)

        def one(bounds: tuple[int, int]) -> list[np.ndarray]:
            a, b = bounds
            c = self.con()
            row = c.execute(sql, (a, b)).fetchone()
            n = int(row[0])
            parsed = [_parse(t, n) for t in row[1:]]
            cols = [x for x in parsed if x is not None]
            bad = 0
            if len(cols) < len(parsed):  # some value was not a plain integer
                cols, bad = _slow_chunk(c, table, sqls, where, a, b)
            self._count(table, bad + sum(_in_range(col, sp) for col, sp in zip(cols, specs, strict=True)))
            return cols

        bounds = chunk_bounds(self.con(), table, lo, hi, CHUNK_ROWS)
        if WORKERS < 2:
            parts = [one(ab) for ab in bounds]
            futures = None
        else:
            futures = [self._workers().submit(one, ab) for ab in bounds]

        def result() -> dict[str, np.ndarray]:
            got: list[list[Any]] = [list(p) for p in (parts if futures is None else (f.result() for f in futures))]
            return _joined(keys, got)

        return result

    def _submit_pages(
        self,
        table: str,
        keys: list[str],
        specs: list[Int],
        where: Where,
        sql_read: Callable[[], Callable[[], dict[str, np.ndarray]]],
    ) -> Callable[[], dict[str, np.ndarray]] | None:
        """The table decoded from its pages, batch by batch on the workers; None when it is not plain.

        A batch that turns out not to be plain (a float, say), or a row count that differs
        from SQLite's, sends the whole table through ``sql_read`` instead.
        """
        pages = self._page_file()
        if pages is None:
            return None
        layout = _layout(self.con(), table)
        if layout is None:
            return None
        root, position = layout
        stored = [_stored_column(sp.sql) for sp in specs]
        names = [name for name in stored if name is not None]
        if len(names) < len(stored) or any(name and name not in position for name in names):
            return None  # an expression, or a column that is not a plain stored one
        drop = (where.column, where.value) if isinstance(where, Drop) else None
        if drop is not None and drop[0] not in position:
            return None
        fields = sorted({position[name] for name in [*names, *(drop[:1] if drop else ())] if name})
        if len({position[name] for name in names if name}) < sum(1 for name in names if name):
            return None  # one field for two keys: each would judge the other's values
        try:
            leaves = pages.leaves(root)
        except NotPlain:
            return None
        index = {f: j for j, f in enumerate(fields)}
        judged = [(index[position[name]], spec) for name, spec in zip(names, specs, strict=True) if name]
        keeps: dict[int, np.ndarray] = {}  # first row of a batch -> which of its rows the Drop keeps

        def count() -> int:
            return int(self.con().execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])

        def check(start: int, cols: list[np.ndarray]) -> int:
            """Values out of range among the rows kept become NULL, counted (in a worker, per batch)."""
            keep = None
            if drop is not None:
                col = cols[index[position[drop[0]]]]
                keep = np.where(col == NULL, 0, col) != drop[1]
                keeps[start] = keep
            return sum(_in_range(cols[j], spec, keep) for j, spec in judged)

        def submit(fn: Callable[..., Any], *args: Any) -> Any:
            return _Done(fn, args) if WORKERS < 2 else self._workers().submit(fn, *args)

        read = pages.read_fields(leaves, fields, NULL, submit, count, check)

        def result() -> dict[str, np.ndarray]:
            try:
                cols, rows, bad = read()
            except (NotPlain, IndexError, ValueError, OSError):
                return sql_read()()
            self._count(table, bad)
            if keeps and not all(bool(k.all()) for k in keeps.values()):
                keep = np.concatenate([keeps[s] for s in sorted(keeps)])
                cols = [c[keep] for c in cols]
                rows = int(np.count_nonzero(keep))
            return {
                key: cols[index[position[name]]] if name else np.full(rows, NULL, np.int64)
                for key, name in zip(keys, names, strict=True)
            }

        return result

    def _page_file(self) -> PageFile | None:
        """The export opened for page reads, once per load; None when it is not a plain file."""
        if self._pages is False:
            path = next((row[2] for row in self.con().execute("PRAGMA database_list") if row[1] == "main"), "")
            self._pages = PageFile.open(path) if path else None
        return self._pages if isinstance(self._pages, PageFile) else None

    def _workers(self) -> ThreadPoolExecutor:
        if self._pool is None:  # one pool (and one connection per worker) for the whole load
            self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="nsys-read")
        return self._pool

    def _count(self, table: str, n: int) -> None:
        if n:
            with self._lock:
                self.bad[table] = self.bad.get(table, 0) + n

    def ints(self, table: str, exprs: Mapping[str, Spec], where: Where = "") -> dict[str, np.ndarray]:
        """Columns of ``table`` as int64 arrays, read now."""
        return self.submit(table, exprs, where)()


class _Done:
    """A call made now, with a future's ``result()`` (the single-thread path)."""

    def __init__(self, fn: Callable[..., Any], args: tuple) -> None:
        try:
            self._value, self._error = fn(*args), None
        except Exception as exc:  # re-raised by result(), as a future would
            self._value, self._error = None, exc

    def result(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._value


def _joined(keys: Sequence[Any], got: list[list[Any]]) -> dict[Any, np.ndarray]:
    """Column by column, each chunk's column dropped once joined."""
    if not got:
        return {k: np.empty(0, np.int64) for k in keys}
    out = {}
    for j, k in enumerate(keys):
        out[k] = np.concatenate([p[j] for p in got])
        for p in got:
            p[j] = None
    return out


def _stored_column(sql: str) -> str | None:
    """The column a spec's SQL names: "" for ``NULL`` (an absent column), None for any other expression."""
    if sql == "NULL":
        return ""
    m = _QUOTED.match(sql)
    return m.group(1) if m else None


def _layout(con: sqlite3.Connection, table: str) -> tuple[int, dict[str, int]] | None:
    """(root page, {column: field position in the record}) of a plain rowid table, else None.

    Not plain: a view or virtual table, generated or hidden columns (not stored in field
    order), and primary-key columns (an INTEGER PRIMARY KEY is the rowid, stored as NULL).
    """
    row = con.execute("SELECT type, rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()
    if row is None or row[0] != "table" or not isinstance(row[1], int) or row[1] < 2:
        return None
    try:
        info = con.execute(f'PRAGMA table_xinfo("{table}")').fetchall()
    except sqlite3.Error:
        return None
    position = {}
    for i, (cid, name, _type, _notnull, _default, pk, hidden) in enumerate(info):
        if cid != i or hidden:
            return None
        if not pk:
            position[name] = i
    return row[1], position


def read_strings(con: sqlite3.Connection, schema: Schema, repairs: Repairs | None = None) -> dict[int, str]:
    """StringIds as {id: text}; rows whose id is not an integer are left out (and counted)."""
    if not schema.has("StringIds", "id") or not schema.has("StringIds", "value"):
        return {}
    out: dict[int, str] = {}
    bad = 0
    for i, v in con.execute("SELECT id, value FROM StringIds"):
        sid = int_or_none(i, floats=False) if not isinstance(i, bool) else None
        if sid is None:
            bad += 1
        else:
            out[sid] = v if isinstance(v, str) else ("" if v is None else _text(v))
    if repairs is not None:
        repairs.add("StringIds rows with an id that is not an integer ignored", bad)
    return out


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def read_meta(con: sqlite3.Connection, schema: Schema) -> dict[str, str]:
    """Export metadata from ``META_DATA_EXPORT`` (2024+) or ``EXPORT_META_DATA`` (older)."""
    out: dict[str, str] = {}
    for table in ("EXPORT_META_DATA", "META_DATA_EXPORT"):
        if schema.has(table, "name") and schema.has(table, "value"):
            for name, value in con.execute(f"SELECT name, value FROM {table}"):
                out[_text(name).replace("OUTUPT", "OUTPUT")] = "" if value is None else _text(value)
    return out


def read_enum(con: sqlite3.Connection, schema: Schema, table: str) -> dict[int, str]:
    """An enum's labels, from the file when it has the table, else the built-in copy."""
    values = dict(BUILTIN_ENUMS.get(table, {}))
    if schema.has(table, "id"):
        label = "label" if schema.has(table, "label") else "name"
        if not schema.has(table, label):
            return values
        for i, text in con.execute(f'SELECT id, "{label}" FROM {table}'):
            key = int_or_none(i, floats=False) if not isinstance(i, bool) else None
            if key is not None and text is not None:
                values[key] = _text(text)
    return values
