"""Integer columns through SQL: one ``group_concat`` text per column and chunk of rowids, parsed by numpy.

SQLite formats the numbers in C, nothing is boxed per row, and the chunks of one table
run on the reader's threads (``sqlite3`` releases the GIL while stepping). Values are
read uncast: a chunk in which some value is not an integer (text, real, blob) fails its
numpy parse and is read row by row, where each value is judged alone (``nsys_ints``).
A column missing from the table reads as NULL, never as the string literal SQLite would
make of a double-quoted unknown name. Chunks follow the rowids that exist: sparse or
negative rowids cost a walk of the table, never an allocation per possible rowid.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from gaplens.loaders.nsys.ints import NULL, Int, in_range, judged
from gaplens.loaders.nsys.pool import Pool


def read_chunks(
    reader: Pool, table: str, keys: list[str], specs: list[Int], where: str, lo: int, hi: int, chunk: int
) -> Callable[[], dict[str, np.ndarray]]:
    """Schedule the chunks of rowids [lo, hi] on the reader's threads; the function returned joins them."""
    sqls = [sp.sql for sp in specs]
    sql = _chunk_sql(table, sqls, where)

    def one(bounds: tuple[int, int]) -> list[np.ndarray]:
        a, b = bounds
        c = reader.con()
        row = c.execute(sql, (a, b)).fetchone()
        n = int(row[0])
        parsed = [_parse(t, n) for t in row[1:]]
        cols = [x for x in parsed if x is not None]
        bad = 0
        if len(cols) < len(parsed):  # some value was not a plain integer
            cols, bad = _slow_chunk(c, table, sqls, where, a, b)
        reader.add_bad(table, bad + sum(in_range(col, sp) for col, sp in zip(cols, specs, strict=True)))
        return cols

    futures = [reader.run(one, ab) for ab in chunk_bounds(reader.con(), table, lo, hi, chunk)]

    def result() -> dict[str, np.ndarray]:
        return _joined(keys, [list(f.result()) for f in futures])

    return result


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
    # chunk, which is then read row by row and judged value by value (``nsys_ints.judged``).
    cols = ", ".join(f"group_concat(ifnull({e}, {NULL}))" for e in exprs)
    cond = f"rowid BETWEEN ? AND ?{f' AND ({where})' if where else ''}"
    return f'SELECT count(*), {cols} FROM "{table}" WHERE {cond}'


def _slow_chunk(
    con: sqlite3.Connection, table: str, exprs: Sequence[str], where: str, lo: int, hi: int
) -> tuple[list[np.ndarray], int]:
    """Row-by-row read of a chunk holding values that are not plain integers."""
    cond = f"rowid BETWEEN ? AND ?{f' AND ({where})' if where else ''}"
    rows = con.execute(f'SELECT {", ".join(exprs)} FROM "{table}" WHERE {cond} ORDER BY rowid', (lo, hi)).fetchall()
    return judged(rows, len(exprs))


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


def _joined(keys: Sequence[str], got: list[list[Any]]) -> dict[str, np.ndarray]:
    """Column by column, each chunk's column dropped once joined."""
    if not got:
        return {k: np.empty(0, np.int64) for k in keys}
    out = {}
    for j, k in enumerate(keys):
        out[k] = np.concatenate([p[j] for p in got])
        for p in got:
            p[j] = None
    return out
