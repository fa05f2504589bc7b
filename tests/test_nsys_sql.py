"""The bulk integer reader's SQL path equals a plain row-by-row fetch, whatever the table holds and however rowids run.

(Tables read from their pages are checked against the same fetch in ``test_nsys_pages``.)
"""

from __future__ import annotations

import sqlite3
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gaplens.loaders.nsys.sql as nsys_sql
from gaplens.loaders.nsys.files import sqlite_uri
from gaplens.loaders.nsys.sql import NULL, Int, Reader
from gaplens.loaders.validate import int_or_none

INT64 = st.integers(min_value=-(2**63) + 2, max_value=2**63 - 1)
CELL = st.one_of(INT64, st.none(), st.sampled_from([1.5, 2.0, "12", " 7 ", "x", "1e5", b"\x01", b"12", "9" * 25]))
ROWID = st.integers(min_value=-(2**63), max_value=2**63 - 1)
RANGE = Int('"b"', lo=-1000, hi=1000)


@pytest.fixture(autouse=True)
def _through_sql(monkeypatch):
    monkeypatch.setattr(nsys_sql, "PAGES", False)


def _judge(v: object, lo: int, hi: int) -> int:
    """What the reader must make of one stored value: an int64 in range, else NULL."""
    if v is None or isinstance(v, float):
        return NULL
    iv = v if isinstance(v, int) else int_or_none(v, floats=False)
    return iv if iv is not None and lo <= iv <= hi else NULL


def _reference(db: str, table: str, where: str, order: str) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        sql = f"SELECT a, b FROM {table}" + (f" WHERE {where}" if where else "") + f" ORDER BY {order}"
        rows = con.execute(sql).fetchall()
    finally:
        con.close()
    return [(_judge(a, -(2**63) + 2, 2**63 - 2), _judge(b, RANGE.lo, RANGE.hi)) for a, b in rows]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(st.tuples(CELL, CELL), max_size=60),
    rowids=st.one_of(st.none(), st.lists(ROWID, min_size=60, max_size=60, unique=True)),
    deleted=st.sets(st.integers(min_value=1, max_value=60), max_size=10),
    chunk=st.integers(min_value=1, max_value=16),
    without_rowid=st.booleans(),
    filtered=st.booleans(),
)
def test_reader_equals_rowwise_fetch(
    tmp_path_factory, monkeypatch, rows, rowids, deleted, chunk, without_rowid, filtered
):
    db = str(tmp_path_factory.mktemp("sql") / "t.sqlite")
    con = sqlite3.connect(db)
    if without_rowid:
        con.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, a, b) WITHOUT ROWID")
        con.executemany("INSERT INTO t VALUES (?, ?, ?)", [(i, a, b) for i, (a, b) in enumerate(rows)])
    elif rowids is not None:  # sparse, negative, extreme rowids
        con.execute("CREATE TABLE t (a, b)")
        con.executemany(
            "INSERT INTO t (rowid, a, b) VALUES (?, ?, ?)", [(r, a, b) for r, (a, b) in zip(rowids, rows, strict=False)]
        )
    else:
        con.execute("CREATE TABLE t (a, b)")
        con.executemany("INSERT INTO t VALUES (?, ?)", rows)
        con.executemany("DELETE FROM t WHERE rowid = ?", [(d,) for d in deleted])  # rowid gaps
    con.commit()
    con.close()
    monkeypatch.setattr(nsys_sql, "CHUNK_ROWS", chunk)
    where = "ifnull(CAST(a AS INTEGER), 0) != 7" if filtered else ""
    reader = Reader(sqlite_uri(db, immutable=True))
    try:
        got = reader.ints("t", {"a": '"a"', "b": RANGE}, where)
    finally:
        reader.close()
    want = _reference(db, "t", where, "k" if without_rowid else "rowid")
    assert got["a"].dtype == np.int64
    assert got["a"].tolist() == [r[0] for r in want]
    assert got["b"].tolist() == [r[1] for r in want]
    # Every value that was stored but read as NULL is counted.
    stored = sum(1 for r in _raw(db, where) for v in r if v is not None)
    kept = sum(1 for r in want for v in r if v != NULL)
    assert reader.bad.get("t", 0) == stored - kept


def _raw(db: str, where: str) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT a, b FROM t" + (f" WHERE {where}" if where else "")).fetchall()
    finally:
        con.close()


def test_extreme_rowids_cost_rows_not_rowid_space(tmp_path):
    """Two rows at rowids -2**63 and 2**63-1: the reader walks them, it does not plan 2**64 / chunk reads."""
    db = tmp_path / "sparse.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE t (a)")
    con.executemany("INSERT INTO t (rowid, a) VALUES (?, ?)", [(-(2**63), 1), (2**63 - 1, 2), (5, 3)])
    con.commit()
    con.close()
    reader = Reader(sqlite_uri(str(db), immutable=True))
    t0 = time.perf_counter()
    try:
        got = reader.ints("t", {"a": '"a"'})
    finally:
        reader.close()
    assert got["a"].tolist() == [1, 3, 2]
    assert time.perf_counter() - t0 < 2.0
