"""The NVTX reader judges a column at a time: the same values, NULLs and counts as one value at a time."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gaplens.loaders import load
from gaplens.loaders.model import Kind
from gaplens.loaders.nsys.ints import Int
from gaplens.loaders.nsys.nvtx import _judged
from gaplens.loaders.validate import int_or_none
from tests.conftest import SAMPLES

SMELLS = SAMPLES / "nsys_smells.sqlite.gz"
INT64 = st.integers(-(2**63), 2**63 - 1)
#: What SQLite hands back for a column that any row may fill with any type.
VALUES = st.one_of(
    st.none(), INT64, st.floats(allow_nan=True), st.text(max_size=6), st.sampled_from([" 7 ", "12", "x"])
)


def _one_at_a_time(values: tuple, spec: Int) -> tuple[list[int | None], int]:
    """The reader's former rule, value by value: an int64 in range, else None (and counted unless NULL)."""
    out: list[int | None] = []
    bad = 0
    for v in values:
        if v is None:
            out.append(None)
            continue
        iv = None if isinstance(v, bool | float) else int_or_none(v, floats=False)
        if iv is None or not spec.lo <= iv <= spec.hi:
            bad += 1
            iv = None
        out.append(iv)
    return out, bad


def _as_list(vals: np.ndarray, is_set: np.ndarray) -> list[int | None]:
    return [int(v) if s else None for v, s in zip(vals.tolist(), is_set.tolist(), strict=True)]


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.lists(INT64, max_size=20),  # the fast paths: plain ints,
        st.lists(st.none(), max_size=5),  # an empty column,
        st.lists(st.one_of(st.none(), INT64), max_size=20),  # ints and NULLs,
        st.lists(VALUES, max_size=20),  # anything a hand-edited export holds
    ),
    st.sampled_from([Int("x"), Int("x", lo=-1000, hi=1000), Int("x", lo=0, hi=2**40)]),
)
def test_column_judged_as_value_by_value(values, spec):
    vals, is_set, bad = _judged(tuple(values), spec)
    assert (_as_list(vals, is_set), bad) == _one_at_a_time(tuple(values), spec)


def _add_ranges(path: Path, rows_for) -> None:
    """Insert ``rows_for(tid)`` (start, end, eventType, text, globalTid, endGlobalTid, textId, domainId) into the
    export's NVTX_EVENTS, ``tid`` being the thread of its first range."""
    con = sqlite3.connect(path)
    (tid,) = con.execute("SELECT globalTid FROM NVTX_EVENTS LIMIT 1").fetchone()
    con.executemany(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, endGlobalTid, textId, domainId)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        rows_for(tid),
    )
    con.commit()
    con.close()


def test_hostile_values_read_as_missing_and_counted(smells_copy):
    """Text numbers are read, floats and words are not (counted), a row without a start is skipped, and
    names are interned once per (text, domain, process): repeated names share one id."""
    _add_ranges(
        smells_copy,
        lambda tid: [
            ("5000000000", 5_000_000_100, 59, "text start", tid, None, None, 0),  # a numeric text start is read
            (5_000_000_200, 5_000_000_300.5, 59, "float end", tid, None, None, 0),  # a float end: missing -> open
            ("soon", 5_000_000_500, 59, "word start", tid, None, None, 0),  # no usable start: skipped
            (5_000_000_600, 5_000_000_700, 59, "twice", tid, None, None, "x"),  # a word domain: default domain
            (5_000_000_800, 5_000_000_900, 59, "twice", tid, None, None, 0),
        ],
    )
    trace = load(smells_copy)
    base = trace.meta.origin_ns
    ann = np.flatnonzero(trace.kind == int(Kind.ANNOTATION))
    by_name: dict[str, list[int]] = {}
    for i in ann.tolist():
        by_name.setdefault(trace.names[int(trace.name_id[i])], []).append(i)
    assert "word start" not in by_name
    (i,) = by_name["text start"]
    assert int(trace.start_ns[i]) + base == 5_000_000_000 and int(trace.end_ns[i]) + base == 5_000_000_100
    (i,) = by_name["float end"]
    assert "open until the end" in trace.details[int(trace.detail_id[i])]
    twice = by_name["twice"]
    assert len(twice) == 2 and len({int(trace.name_id[i]) for i in twice}) == 1
    said = " ".join(trace.meta.warnings)
    assert "NVTX rows without a usable start skipped" in said
    assert "non-integer or out-of-range values in NVTX_EVENTS read as missing" in said


def _annotations(trace) -> tuple:
    ann = np.flatnonzero(np.isin(trace.kind, [int(Kind.ANNOTATION), int(Kind.MARK)]))
    return (
        trace.start_ns[ann].tolist(),
        trace.end_ns[ann].tolist(),
        [trace.names[int(i)] for i in trace.name_id[ann].tolist()],
        [trace.details[int(i)] for i in trace.detail_id[ann].tolist()],
        trace.depth[ann].tolist(),
        list(trace.meta.warnings),
    )


@pytest.mark.parametrize("hostile", [False, True])
def test_rows_from_the_pages_equal_rows_through_sql(smells_copy, monkeypatch, tmp_path, hostile):
    """The integer columns decoded from the pages (every row, then the types read) give the rows, names, details
    and counts that SQL's row-by-row read gives; a table the pages cannot read exactly goes through SQL."""
    from gaplens.loaders.nsys import sql

    def rows(tid: int) -> list[tuple]:
        out = [
            (5_000_000_000 + 100 * k, 5_000_000_050 + 100 * k, 59, f"layers.{k % 7}", tid, None, None, 0)
            for k in range(50)
        ]
        out += [
            (5_000_010_000, None, 59, "never closed", tid, None, None, 0),
            (1, 2, 33, "a category", tid, None, None, 0),
        ]
        if hostile:
            out.append((5_000_020_000, 5_000_020_100.5, 59, "float end", tid, None, None, 0))
        return out

    _add_ranges(smells_copy, rows)
    paged = _annotations(load(smells_copy))
    monkeypatch.setattr(sql, "PAGES", False)
    monkeypatch.setenv("GAPLENS_CACHE_DIR", str(tmp_path / "cache-sql"))
    assert _annotations(load(smells_copy)) == paged


def test_a_value_out_of_range_in_a_row_not_read_is_not_counted(smells_copy):
    """The pages decode every row; a value out of range in a row of a type the reader skips (a category row)
    sends the read through SQL, which never judges that row: no value is reported missing."""
    con = sqlite3.connect(smells_copy)
    (tid,) = con.execute("SELECT globalTid FROM NVTX_EVENTS LIMIT 1").fetchone()
    con.execute(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, endGlobalTid, textId, domainId)"
        " VALUES (?, NULL, 33, 'a category', ?, NULL, NULL, 0)",
        (2**62 + 5, tid),  # past the start column's range
    )
    con.commit()
    con.close()
    trace = load(smells_copy)
    assert "NVTX_EVENTS" not in " ".join(trace.meta.warnings)
    assert int((trace.kind == int(Kind.ANNOTATION)).sum()) == 21  # the export's own ranges, all read
