"""Bulk reads from an nsys SQLite export: schema probing, integer columns into numpy, strings and enums.

Integer columns are fetched as one ``group_concat`` text per column and chunk of rowids
and parsed by numpy: SQLite formats the numbers in C, nothing is boxed per row, and
chunks of one table run on two threads (``sqlite3`` releases the GIL while stepping).
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gaplens.loaders.nsys_files import connect

#: Stands in for SQL NULL in integer columns (group_concat would skip NULLs and misalign columns).
NULL = int(np.iinfo(np.int64).min) + 1
CHUNK_ROWS = 1 << 17
WORKERS = 2

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

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class Schema:
    """Tables and their columns, probed once; every query selects by column name."""

    columns: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def probe(cls, con: sqlite3.Connection) -> Schema:
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")]
        out = cls()
        for name in names:
            if _IDENT.match(name):
                out.columns[name] = [r[1] for r in con.execute(f'PRAGMA table_info("{name}")')]
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


def _parse(text: str | None, n: int) -> np.ndarray | None:
    if n == 0:
        return np.empty(0, np.int64)
    if text is None:
        return None
    try:
        arr = np.fromstring(text, dtype=np.int64, sep=",")
    except ValueError:
        return None
    return arr if arr.size == n else None


def _chunk_sql(table: str, exprs: Sequence[str], where: str) -> str:
    cols = ", ".join(f"group_concat(ifnull(CAST({e} AS INTEGER), {NULL}))" for e in exprs)
    cond = f"rowid BETWEEN ? AND ?{f' AND ({where})' if where else ''}"
    return f'SELECT count(*), {cols} FROM "{table}" WHERE {cond}'


def _slow_chunk(
    con: sqlite3.Connection, table: str, exprs: Sequence[str], where: str, lo: int, hi: int
) -> list[np.ndarray]:
    """Row-by-row fallback for chunks holding values that are not plain integers."""
    sel = ", ".join(f"ifnull(CAST({e} AS INTEGER), {NULL})" for e in exprs)
    cond = f"rowid BETWEEN ? AND ?{f' AND ({where})' if where else ''}"
    rows = con.execute(f'SELECT {sel} FROM "{table}" WHERE {cond} ORDER BY rowid', (lo, hi)).fetchall()
    mat = np.array(rows, dtype=np.int64).reshape(len(rows), len(exprs))
    return [mat[:, j].copy() for j in range(len(exprs))]


class Reader:
    """Integer-column reader over one export, with a connection per worker thread."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

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

    def submit(self, table: str, exprs: dict[str, str], where: str = "") -> Callable[[], dict[str, np.ndarray]]:
        """Schedule a read of ``table``'s columns (SQL expressions by key) on the worker threads.

        Returns a function that waits for the chunks and yields int64 arrays (NULL → ``NULL``).
        Scheduling every table before waiting keeps both cores busy on small tables too.
        """
        keys, sqls = list(exprs), list(exprs.values())
        con = self.con()
        try:
            lo, hi = con.execute(f'SELECT min(rowid), max(rowid) FROM "{table}"').fetchone()
        except sqlite3.OperationalError:  # WITHOUT ROWID table: one unchunked read
            rows = con.execute(
                f'SELECT {", ".join(f"ifnull(CAST({e} AS INTEGER), {NULL})" for e in sqls)} FROM "{table}"'
                + (f" WHERE {where}" if where else "")
            ).fetchall()
            mat = np.array(rows, dtype=np.int64).reshape(len(rows), len(sqls))
            out = {k: mat[:, j].copy() for j, k in enumerate(keys)}
            return lambda: out
        if lo is None:
            empty = {k: np.empty(0, np.int64) for k in keys}
            return lambda: empty
        sql = _chunk_sql(table, sqls, where)

        def one(a: int) -> list[np.ndarray]:
            b = min(a + CHUNK_ROWS - 1, int(hi))
            c = self.con()
            row = c.execute(sql, (a, b)).fetchone()
            n = int(row[0])
            parsed = [_parse(t, n) for t in row[1:]]
            cols = [x for x in parsed if x is not None]
            if len(cols) < len(parsed):  # some value was not a plain integer
                cols = _slow_chunk(c, table, sqls, where, a, b)
            return cols

        bounds = list(range(int(lo), int(hi) + 1, CHUNK_ROWS))
        if WORKERS < 2:
            parts = [one(a) for a in bounds]
            futures = None
        else:
            if self._pool is None:  # one pool (and one connection per worker) for the whole load
                self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="nsys-read")
            futures = [self._pool.submit(one, a) for a in bounds]

        def result() -> dict[str, np.ndarray]:
            got: list[list[Any]] = [list(p) for p in (parts if futures is None else (f.result() for f in futures))]
            out = {}
            for j, k in enumerate(keys):  # column by column, each chunk's column dropped once joined
                out[k] = np.concatenate([p[j] for p in got])
                for p in got:
                    p[j] = None
            return out

        return result

    def ints(self, table: str, exprs: dict[str, str], where: str = "") -> dict[str, np.ndarray]:
        """Columns of ``table`` as int64 arrays, read now."""
        return self.submit(table, exprs, where)()


def read_strings(con: sqlite3.Connection, schema: Schema) -> dict[int, str]:
    if not schema.has("StringIds"):
        return {}
    return {int(i): (v if isinstance(v, str) else str(v)) for i, v in con.execute("SELECT id, value FROM StringIds")}


def read_meta(con: sqlite3.Connection, schema: Schema) -> dict[str, str]:
    """Export metadata from ``META_DATA_EXPORT`` (2024+) or ``EXPORT_META_DATA`` (older)."""
    out: dict[str, str] = {}
    for table in ("EXPORT_META_DATA", "META_DATA_EXPORT"):
        if schema.has(table, "name") and schema.has(table, "value"):
            for name, value in con.execute(f"SELECT name, value FROM {table}"):
                out[str(name).replace("OUTUPT", "OUTPUT")] = "" if value is None else str(value)
    return out


def read_enum(con: sqlite3.Connection, schema: Schema, table: str) -> dict[int, str]:
    """An enum's labels, from the file when it has the table, else the built-in copy."""
    values = dict(BUILTIN_ENUMS.get(table, {}))
    if schema.has(table, "id"):
        label = "label" if schema.has(table, "label") else "name"
        for i, text in con.execute(f'SELECT id, "{label}" FROM {table}'):
            if i is not None and text is not None:
                values[int(i)] = str(text)
    return values
