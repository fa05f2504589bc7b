"""Bulk reads from an nsys SQLite export: schema probing, integer columns into numpy, strings and enums.

A table's integer columns come from its pages when the table is plain (``nsys_pages``),
else through SQL in chunks (``nsys_chunks``); both judge values alike (``nsys_ints``):
NULL, a value that is not an integer and a value outside its column's range read as
``NULL``, and the last two are counted in ``Reader.bad``.
"""

from __future__ import annotations

import functools
import re
import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from gaplens.loaders.nsys.btree import PageFile
from gaplens.loaders.nsys.chunks import read_chunks
from gaplens.loaders.nsys.ints import NULL, Drop, Int, Spec, Where, as_spec, in_range, judged
from gaplens.loaders.nsys.pages import read_pages
from gaplens.loaders.nsys.pool import Pool
from gaplens.loaders.validate import INT64_MAX, INT64_MIN, Repairs, int_or_none

__all__ = [
    "NULL",
    "Columns",
    "Drop",
    "Int",
    "Reader",
    "Schema",
    "Spec",
    "Where",
    "read_enum",
    "read_meta",
    "read_strings",
]

CHUNK_ROWS = 1 << 17
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
    views: set[str] = field(default_factory=set)  # never read: a view can compute rows without end

    @classmethod
    def probe(cls, con: sqlite3.Connection) -> Schema:
        rows = con.execute("SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view')").fetchall()
        out = cls()
        for name, kind in rows:
            if not isinstance(name, str) or not IDENT.match(name):
                continue
            if kind != "table":
                out.views.add(name)
                continue
            cols = [r[1] for r in con.execute(f'PRAGMA table_info("{name}")')]
            out.columns[name] = [c for c in cols if isinstance(c, str) and IDENT.match(c)]
        return out

    def has(self, table: str, column: str | None = None) -> bool:
        """Whether ``table`` (and ``column``) exists; a view where gaplens reads a table is refused."""
        if table in self.views:
            # An nsys export holds tables only; a (recursive) view in its place yields rows forever.
            raise sqlite3.DatabaseError(f"{table} is a view, not a table: refused")
        cols = self.columns.get(table)
        return cols is not None and (column is None or column in cols)

    def col(self, table: str, *candidates: str) -> str:
        """The first present column as a quoted SQL name, else ``NULL`` (columns move between versions)."""
        for c in candidates:
            if self.has(table, c):
                return f'"{c}"'
        return "NULL"


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


class Reader(Pool):
    """Integer-column reader over one export: each table from its pages when plain, else through SQL."""

    def __init__(self, uri: str) -> None:
        super().__init__(uri)
        self._pages: PageFile | bool | None = False  # False: not opened yet

    def close(self) -> None:
        super().close()
        if isinstance(self._pages, PageFile):
            self._pages.close()
        self._pages = False

    def submit(self, table: str, exprs: Mapping[str, Spec], where: Where = "") -> Callable[[], dict[str, np.ndarray]]:
        """Schedule a read of ``table``'s integer columns (by key) on the worker threads.

        Returns a function that waits for the reads and yields int64 arrays in rowid order.
        Scheduling every table before waiting keeps both cores busy on small tables too.
        """
        keys = list(exprs)
        specs = [as_spec(e) for e in exprs.values()]
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
            cols, bad = judged(rows.fetchall(), len(specs))
            self.add_bad(table, bad + sum(in_range(c, sp) for c, sp in zip(cols, specs, strict=True)))
            out = dict(zip(keys, cols, strict=True))
            return lambda: out
        if lo is None:
            empty = {k: np.empty(0, np.int64) for k in keys}
            return lambda: empty
        sql_read = functools.partial(read_chunks, self, table, keys, specs, where_sql, int(lo), int(hi), CHUNK_ROWS)
        pages = self._page_file() if PAGES else None
        paged = read_pages(self, pages, table, keys, specs, where, sql_read) if pages is not None else None
        return paged if paged is not None else sql_read()

    def page_ints(self, table: str, exprs: Mapping[str, Spec]) -> dict[str, np.ndarray] | None:
        """Every row's integer columns decoded from the table's pages, or None where the pages cannot say exactly
        (no plain file or table, a value that is not an integer or reads like NULL): then read through SQL.
        Values out of range are counted in ``bad`` as ``ints`` counts them."""
        pages = self._page_file() if PAGES else None
        if pages is None:
            return None
        keys = list(exprs)
        specs = [as_spec(e) for e in exprs.values()]
        paged = read_pages(self, pages, table, keys, specs, "", _not_paged)
        try:
            return paged() if paged is not None else None
        except _NotPaged:
            return None

    def _page_file(self) -> PageFile | None:
        """The export opened for page reads, once per load; None when it is not a plain file."""
        if self._pages is False:
            path = next((row[2] for row in self.con().execute("PRAGMA database_list") if row[1] == "main"), "")
            self._pages = PageFile.open(path) if path else None
        return self._pages if isinstance(self._pages, PageFile) else None

    def ints(self, table: str, exprs: Mapping[str, Spec], where: Where = "") -> dict[str, np.ndarray]:
        """Columns of ``table`` as int64 arrays, read now."""
        return self.submit(table, exprs, where)()


class _NotPaged(Exception):
    """The pages could not be read exactly (``Reader.page_ints``): the caller reads through SQL."""


def _not_paged() -> Callable[[], dict[str, np.ndarray]]:
    """``read_pages``' way through SQL, for ``page_ints``: there is none, the caller has its own."""
    raise _NotPaged


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
