"""Columns decoded from a table's pages equal SQLite's answer, or the table is read through SQL."""

from __future__ import annotations

import dataclasses
import gzip
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gaplens.loaders.nsys.pages as nsys_pages
import gaplens.loaders.nsys.pool as nsys_pool
import gaplens.loaders.nsys.sql as nsys_sql
from gaplens.loaders import load
from gaplens.loaders.nsys.files import sqlite_uri
from gaplens.loaders.nsys.sql import NULL, Drop, Int, Reader
from tests.conftest import PUBLIC, ROOT, SAMPLES
from tests.test_nsys_sql import _judge

RANGE = Int('"b"', lo=-1000, hi=1000)
EXPORTS = [
    *sorted(SAMPLES.glob("nsys_*.sqlite.gz")),
    *sorted((SAMPLES / "edge").glob("*.sqlite.gz")),
    *sorted((PUBLIC / "pipit").glob("*.sqlite")),
    *sorted((ROOT / "tests" / "data").glob("nsys_*.sqlite.gz")),
]


@pytest.fixture
def paths_taken(monkeypatch):
    """Tables read through SQL, by name (a table read from its pages never reaches SQL)."""
    sql: list[str] = []
    original = nsys_sql.read_chunks

    def spy(reader, table, *args):
        sql.append(table)
        return original(reader, table, *args)

    monkeypatch.setattr(nsys_sql, "read_chunks", spy)
    return sql


def _values(rng: np.random.Generator, n: int, odd: float) -> list[object]:
    """Integers of every stored width (0, 1 and NULL included), and now and then a value that is not one."""
    bits = rng.integers(0, 64, n)
    ints = (rng.integers(-(2**62), 2**62, n) >> (63 - bits)).tolist()
    special = rng.random(n)
    out: list[object] = []
    for v, s in zip(ints, special, strict=True):
        if s < 0.05:
            out.append(None)
        elif s < 0.08:
            out.append(int(s * 100) % 2)  # 0 and 1 are stored without a body
        elif s < 0.09:
            out.append(int(rng.choice([2**63 - 1, -(2**63), NULL])))
        elif s > 1 - odd:
            out.append(rng.choice(np.array([1.5, "12", "x", b"\x01", 2.0], dtype=object)))
        else:
            out.append(v)
    return out


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.sampled_from([0, 1, 7, 300, 2500]),
    page_size=st.sampled_from([512, 1024, 4096, 65536]),
    sparse=st.booleans(),
    odd=st.sampled_from([0.0, 0.0, 0.001]),
    added=st.booleans(),
    drop=st.sampled_from([None, 0, 1]),  # 0 drops NULLs too, as ifnull(a, 0) != 0 does
    batch=st.sampled_from([1, 3, 4096]),
    workers=st.sampled_from([1, 2]),
)
def test_pages_equal_the_rowwise_fetch(
    tmp_path_factory, monkeypatch, paths_taken, seed, n, page_size, sparse, odd, added, drop, batch, workers
):
    """Multi-level trees, every serial type, sparse rowids, a filter, an added column, batches of any size
    placed in order by either thread; odd values go to SQL."""
    paths_taken.clear()
    monkeypatch.setattr(nsys_pages, "BATCH_BYTES", batch * page_size)
    monkeypatch.setattr(nsys_pool, "WORKERS", workers)
    rng = np.random.default_rng(seed)
    db = str(tmp_path_factory.mktemp("pages") / "t.sqlite")
    con = sqlite3.connect(db)
    con.execute(f"PRAGMA page_size = {page_size}")
    con.execute("CREATE TABLE t (pad TEXT, a INTEGER, b INTEGER)")
    rowids = rng.choice(np.arange(-(2**40), 2**40, 2**20), n, replace=False) if sparse else np.arange(1, n + 1)
    rows = list(
        zip(
            rowids.tolist(),
            ["p" * int(k) for k in rng.integers(0, 40, n)],
            _values(rng, n, odd),
            _values(rng, n, odd),
            strict=True,
        )
    )
    half = n // 2 if added else n
    con.executemany("INSERT INTO t (rowid, pad, a, b) VALUES (?, ?, ?, ?)", rows[:half])
    if added:  # older rows have no field for the new column: SQLite reads its default
        con.execute("ALTER TABLE t ADD COLUMN c INTEGER")
        con.executemany("INSERT INTO t (rowid, pad, a, b) VALUES (?, ?, ?, ?)", rows[half:])
    con.commit()
    con.close()
    where = Drop("a", drop) if drop is not None else ""
    reader = Reader(sqlite_uri(db, immutable=True))
    try:
        got = reader.ints("t", {"a": '"a"', "b": RANGE, "none": "NULL"}, where)
    finally:
        reader.close()
    con = sqlite3.connect(db)
    try:
        sql = "SELECT a, b FROM t" + (f" WHERE {where.sql}" if isinstance(where, Drop) else "") + " ORDER BY rowid"
        raw = con.execute(sql).fetchall()
    finally:
        con.close()
    assert got["a"].tolist() == [_judge(a, -(2**63) + 2, 2**63 - 2) for a, _ in raw]
    assert got["b"].tolist() == [_judge(b, RANGE.lo, RANGE.hi) for _, b in raw]
    assert got["none"].tolist() == [NULL] * len(raw)
    stored = sum(1 for r in raw for v in r if v is not None and v != NULL)  # the marker itself reads as NULL
    kept = int(np.count_nonzero(got["a"] != NULL) + np.count_nonzero(got["b"] != NULL))
    assert reader.bad.get("t", 0) == stored - kept
    if not odd and not any(v == NULL for r in rows for v in r[2:]):  # the marker itself goes to SQL
        assert paths_taken == []


def _table(path: Path, ddl: str, rows: list[tuple], wal: bool = False) -> None:
    con = sqlite3.connect(path)
    if wal:
        con.execute("PRAGMA journal_mode = WAL")
    con.execute(ddl)
    con.executemany(f"INSERT INTO t VALUES ({', '.join('?' * len(rows[0]))})", rows)
    con.commit()
    con.close()


def _read(path: Path, exprs: dict) -> dict[str, list[int]]:
    reader = Reader(sqlite_uri(str(path), immutable=False))
    try:
        return {k: v.tolist() for k, v in reader.ints("t", exprs).items()}
    finally:
        reader.close()


def test_plain_table_is_read_from_pages(tmp_path, paths_taken):
    _table(tmp_path / "t.sqlite", "CREATE TABLE t (a INTEGER, b INTEGER)", [(i, -i) for i in range(5000)])
    got = _read(tmp_path / "t.sqlite", {"a": '"a"', "b": '"b"'})
    assert got == {"a": list(range(5000)), "b": [-i for i in range(5000)]}
    assert paths_taken == []


def test_extreme_rowids_are_nine_byte_varints(tmp_path, paths_taken):
    con = sqlite3.connect(tmp_path / "t.sqlite")
    con.execute("CREATE TABLE t (a INTEGER)")
    con.executemany("INSERT INTO t (rowid, a) VALUES (?, ?)", [(-(2**63), 1), (2**63 - 1, 2), (5, 3), (2**56, 4)])
    con.commit()
    con.close()
    assert _read(tmp_path / "t.sqlite", {"a": '"a"'}) == {"a": [1, 3, 4, 2]}
    assert paths_taken == []


@pytest.mark.parametrize(
    ("ddl", "rows", "wal"),
    [
        ("CREATE TABLE t (a INTEGER, b INTEGER)", [(1, 2), (3, 4)], True),  # pages may still be in the -wal
        ("CREATE TABLE t (a INTEGER, b INTEGER)", [(1, 2), (3.5, 4)], False),  # a float: SQL judges it
        ("CREATE TABLE t (a INTEGER, b BLOB)", [(1, b"x" * 9000), (3, b"")], False),  # overflow pages
        ("CREATE TABLE t (a INTEGER PRIMARY KEY, b INTEGER)", [(5, 2), (9, 4)], False),  # a is the rowid
        ("CREATE TABLE t (a INTEGER, b INTEGER AS (a * 2))", [(1,), (3,)], False),  # a generated column
    ],
)
def test_tables_that_are_not_plain_are_read_through_sql(tmp_path, paths_taken, ddl, rows, wal):
    path = tmp_path / "t.sqlite"
    _table(path, ddl, rows, wal)
    exprs = {"a": '"a"', "b": '"b"'}
    assert _read(path, exprs) == _reference(path, exprs)
    assert paths_taken == ["t"]


def _reference(path: Path, exprs: dict) -> dict[str, list[int]]:
    con = sqlite3.connect(path)
    try:
        rows = con.execute(f"SELECT {', '.join(exprs.values())} FROM t ORDER BY rowid").fetchall()
    finally:
        con.close()
    return {k: [_judge(r[j], -(2**63) + 2, 2**63 - 2) for r in rows] for j, k in enumerate(exprs)}


def test_damaged_leaf_reads_as_sqlite_says(tmp_path):
    """A leaf page that is not a leaf: the pages are refused and SQLite's own error stands."""
    path = tmp_path / "t.sqlite"
    _table(path, "CREATE TABLE t (a INTEGER, b INTEGER)", [(i, i) for i in range(20_000)])
    raw = bytearray(path.read_bytes())
    con = sqlite3.connect(path)
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 't'").fetchone()[0]
    con.close()
    page_size = int.from_bytes(raw[16:18], "big")
    leaf = next(p for p in range(root + 1, len(raw) // page_size + 1) if raw[(p - 1) * page_size] == 13)
    raw[(leaf - 1) * page_size] = 0x42
    path.write_bytes(bytes(raw))
    with pytest.raises(sqlite3.DatabaseError, match="malformed"):
        _read(path, {"a": '"a"'})


@pytest.mark.parametrize("export", EXPORTS, ids=lambda p: p.name)
def test_exports_load_the_same_from_pages_and_through_sql(tmp_path, monkeypatch, paths_taken, export):
    """Every column of the Trace, every name and warning: the real exports read alike both ways."""
    src = tmp_path / "export.sqlite"
    with gzip.open(export) if export.suffix == ".gz" else open(export, "rb") as fin, open(src, "wb") as fout:
        shutil.copyfileobj(fin, fout)
    monkeypatch.setattr(nsys_sql, "PAGES", False)
    sql = load(src, use_cache=False)
    monkeypatch.setattr(nsys_sql, "PAGES", True)
    paths_taken.clear()
    pages = load(src, use_cache=False)
    assert paths_taken == []
    for f in dataclasses.fields(sql):
        a, b = getattr(sql, f.name), getattr(pages, f.name)
        if isinstance(a, np.ndarray):
            assert a.dtype == b.dtype and np.array_equal(a, b), f.name
        else:
            assert a == b, f.name
