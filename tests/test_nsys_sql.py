"""The bulk integer reader equals a plain row-by-row fetch, whatever the table holds."""

from __future__ import annotations

import sqlite3

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gaplens.loaders.nsys_sql as nsys_sql
from gaplens.loaders.nsys_files import sqlite_uri
from gaplens.loaders.nsys_sql import NULL, Reader

INT64 = st.integers(min_value=-(2**63) + 2, max_value=2**63 - 1)
CELL = st.one_of(INT64, st.none(), st.sampled_from([1.5, "12", "x", b"\x01"]))


def _reference(db: str, table: str, where: str, order: str) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        sql = f"SELECT ifnull(CAST(a AS INTEGER), {NULL}), ifnull(CAST(b AS INTEGER), {NULL}) FROM {table}"
        return con.execute(sql + (f" WHERE {where}" if where else "") + f" ORDER BY {order}").fetchall()
    finally:
        con.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(st.tuples(CELL, CELL), max_size=60),
    deleted=st.sets(st.integers(min_value=1, max_value=60), max_size=10),
    chunk=st.integers(min_value=1, max_value=16),
    without_rowid=st.booleans(),
    filtered=st.booleans(),
)
def test_reader_equals_rowwise_fetch(tmp_path_factory, monkeypatch, rows, deleted, chunk, without_rowid, filtered):
    db = str(tmp_path_factory.mktemp("sql") / "t.sqlite")
    con = sqlite3.connect(db)
    if without_rowid:
        con.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, a, b) WITHOUT ROWID")
        con.executemany("INSERT INTO t VALUES (?, ?, ?)", [(i, a, b) for i, (a, b) in enumerate(rows)])
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
        got = reader.ints("t", {"a": "a", "b": "b"}, where)
    finally:
        reader.close()
    want = _reference(db, "t", where, "k" if without_rowid else "rowid")
    assert got["a"].dtype == np.int64
    assert got["a"].tolist() == [r[0] for r in want]
    assert got["b"].tolist() == [r[1] for r in want]
