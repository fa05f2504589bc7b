"""The reader's fast path: a plain table's integer columns decoded from its pages (``nsys_btree``) on its threads.

Why: SQLite hands values out one at a time. Formatting a kernel row as ``group_concat``
text and parsing it back costs ~2 µs; the record itself is ~80 bytes that numpy decodes
for a whole batch of pages at once in ~0.3 µs a row.

Batches of leaf pages run on the reader's threads; each writes its rows straight into
columns sized by SQLite's own row count, right after the rows of the batch before it,
so no batch keeps a copy until a join. A table that is not plain (a view, generated
columns, a float among the integers, an overflow page, a WAL file...), or whose rows
are not SQLite's count, is read through SQL instead: the numbers are the same either way.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Callable

import numpy as np

from gaplens.loaders.nsys.btree import NotPlain, PageFile
from gaplens.loaders.nsys.ints import NULL, Drop, Int, Where, in_range
from gaplens.loaders.nsys.pool import Pool

BATCH_BYTES = 2 << 20  # leaf pages decoded at once: their temporaries stay in the cache
_QUOTED = re.compile(r'^"([A-Za-z_][A-Za-z0-9_]*)"$')
Read = Callable[[], dict[str, np.ndarray]]


def read_pages(
    reader: Pool,
    pages: PageFile,
    table: str,
    keys: list[str],
    specs: list[Int],
    where: Where,
    sql_read: Callable[[], Read],
) -> Read | None:
    """Schedule the table's batches on the reader's threads; None when the table is not plain.

    The function returned waits for them; a batch that turns out not to be plain (a float,
    say), or a row count that differs from SQLite's, sends the table through ``sql_read``.
    """
    found = layout(reader.con(), table)
    if found is None or (isinstance(where, str) and where):
        return None
    root, position = found
    stored = [_stored_column(sp.sql) for sp in specs]
    names = [name for name in stored if name is not None]
    if len(names) < len(stored) or any(name and name not in position for name in names):
        return None  # an expression, or a column that is not a plain stored one
    drop = (where.column, where.value) if isinstance(where, Drop) else None
    if drop is not None and drop[0] not in position:
        return None
    if len({position[name] for name in names if name}) < sum(1 for name in names if name):
        return None  # one field for two keys: each would judge the other's values
    fields = sorted({position[name] for name in [*names, *(drop[:1] if drop else ())] if name})
    try:
        leaves = pages.leaves(root)
    except NotPlain:
        return None
    index = {f: j for j, f in enumerate(fields)}
    judged = [(index[position[name]], spec) for name, spec in zip(names, specs, strict=True) if name]
    keeps: dict[tuple[int, int], np.ndarray] = {}  # (first row, rows) of a batch -> the rows the Drop keeps

    def count() -> int:
        return int(reader.con().execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])

    def check(start: int, cols: list[np.ndarray]) -> int:
        """Values out of range among the rows kept become NULL and are counted (per batch, on a thread)."""
        keep = None
        if drop is not None:
            col = cols[index[position[drop[0]]]]
            keep = np.where(col == NULL, 0, col) != drop[1]
            keeps[start, keep.size] = keep
        return sum(in_range(cols[j], spec, keep) for j, spec in judged)

    read = _read_fields(reader, pages, leaves, fields, count, check)

    def result() -> dict[str, np.ndarray]:
        try:
            cols, rows, bad = read()
        except (NotPlain, IndexError, ValueError, OSError):
            return sql_read()()
        reader.add_bad(table, bad)
        if keeps and not all(bool(k.all()) for k in keeps.values()):
            keep = np.concatenate([keeps[s] for s in sorted(keeps)])
            cols = [c[keep] for c in cols]
            rows = int(np.count_nonzero(keep))
        return {
            key: cols[index[position[name]]] if name else np.full(rows, NULL, np.int64)
            for key, name in zip(keys, names, strict=True)
        }

    return result


def _read_fields(
    reader: Pool,
    pages: PageFile,
    leaves: np.ndarray,
    fields: list[int],
    count: Callable[[], int],
    check: Callable[[int, list[np.ndarray]], int],
) -> Callable[[], tuple[list[np.ndarray], int, int]]:
    """Batches of ``leaves`` decoded on the reader's threads into columns sized by ``count()``.

    ``check(first row, the batch's slices of the columns)`` runs after each batch and
    returns a number to add up. The function returned waits for every batch and yields
    (one int64 column per field, rows, the sum of the checks); it raises ``NotPlain``
    when a batch is not plain or the rows are not ``count()``.
    """
    per = max(1, BATCH_BYTES // pages.page_size)
    batches = [leaves[i : i + per] for i in range(0, leaves.size, per)]
    placement = _Placement(len(batches), len(fields))

    def counted() -> int:
        try:
            placement.allocate(count())
        except BaseException:
            placement.fail()
            raise
        return 0

    def one(i: int, batch: np.ndarray) -> int:
        try:
            pages.decode(batch, fields, NULL, lambda n: placement.place(i, n))
            return check(*placement.placed(i))
        except BaseException:
            placement.fail()
            raise

    futures = [reader.run(counted), *(reader.run(one, i, b) for i, b in enumerate(batches))]

    def result() -> tuple[list[np.ndarray], int, int]:
        # Every batch is waited for, even after a failure: none may still be writing.
        errors, total = [], 0
        for f in futures:
            try:
                total += f.result()
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]
        return placement.finish(), placement.total, total

    return result


class _Placement:
    """Where each batch's rows go: batch i starts where batch i-1 ended, in columns sized by SQLite's count."""

    def __init__(self, batches: int, width: int) -> None:
        self._cv = threading.Condition()
        self._ends: list[int] = [-1] * batches
        self._width = width
        self._columns: list[np.ndarray] | None = None
        self._failed = False
        self.total = -1

    def allocate(self, total: int) -> None:
        with self._cv:
            self.total = total
            self._columns = [np.empty(total, np.int64) for _ in range(self._width)]
            self._cv.notify_all()

    def place(self, i: int, n: int) -> list[np.ndarray]:
        """The columns' slices for batch ``i`` of ``n`` rows, once batch i-1 has its place."""
        with self._cv:
            self._cv.wait_for(lambda: self._failed or self._ready(i))
            if self._failed or self._columns is None:
                raise NotPlain
            start = self._ends[i - 1] if i else 0
            if start + n > self.total:  # more rows than SQLite counts
                self._failed = True
                self._cv.notify_all()
                raise NotPlain
            self._ends[i] = start + n
            self._cv.notify_all()
        return self.placed(i)[1]

    def placed(self, i: int) -> tuple[int, list[np.ndarray]]:
        """(first row, the columns' slices) of batch ``i``, once placed."""
        start, end = self._ends[i - 1] if i else 0, self._ends[i]
        assert self._columns is not None and end >= 0
        return start, [c[start:end] for c in self._columns]

    def _ready(self, i: int) -> bool:
        return self._columns is not None and (i == 0 or self._ends[i - 1] >= 0)

    def fail(self) -> None:
        with self._cv:
            self._failed = True
            self._cv.notify_all()

    def finish(self) -> list[np.ndarray]:
        """The columns, once every batch is in place and the rows are SQLite's count."""
        rows = self._ends[-1] if self._ends else 0
        if self._failed or self._columns is None or rows != self.total:
            raise NotPlain
        return self._columns


def _stored_column(sql: str) -> str | None:
    """The column a spec's SQL names: "" for ``NULL`` (an absent column), None for any other expression."""
    if sql == "NULL":
        return ""
    m = _QUOTED.match(sql)
    return m.group(1) if m else None


def layout(con: sqlite3.Connection, table: str) -> tuple[int, dict[str, int]] | None:
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
