"""The integer columns an nsys reader asks for, and how their values are judged.

SQLite stores any type in any column, so a column is read in a range (``Int``): NULL, a
value that is not an integer and a value outside the range all read as ``NULL``; the
last two are counted, never cast into a wrong number. ``Drop`` leaves rows out by one
column's value, a filter both ways of reading a table apply alike (through SQL in
``nsys_chunks``, from the pages in ``nsys_pages``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gaplens.loaders.validate import INT64_MAX, INT64_MIN, int_or_none

#: Stands in for SQL NULL in integer columns (group_concat would skip NULLs and misalign columns).
NULL = int(np.iinfo(np.int64).min) + 1


@dataclass(frozen=True)
class Int:
    """One integer column to read: its SQL (a quoted column name, or ``NULL``) and the range it may hold."""

    sql: str
    lo: int = INT64_MIN + 2  # INT64_MIN + 1 is the NULL marker
    hi: int = INT64_MAX - 1  # numpy saturates text past int64 to INT64_MAX


Spec = Int | str  # a bare string is SQL read with the default range


def as_spec(value: Spec) -> Int:
    return value if isinstance(value, Int) else Int(value)


@dataclass(frozen=True)
class Drop:
    """Rows to leave out: those whose integer ``column`` (NULL read as 0) equals ``value``."""

    column: str
    value: int

    @property
    def sql(self) -> str:
        return f'ifnull("{self.column}", 0) != {self.value}'


Where = str | Drop  # SQL text (read through SQL only), or a Drop (from the pages or through SQL)


def in_range(col: np.ndarray, spec: Int, counted: np.ndarray | None = None) -> int:
    """Values outside the spec's range become NULL, in place; returns how many (among ``counted`` rows)."""
    out = (col != NULL) & ((col < spec.lo) | (col > spec.hi))
    n = int(np.count_nonzero(out))
    if n:
        col[out] = NULL
        if counted is not None:
            n = int(np.count_nonzero(out & counted))
    return n


def judged(rows: list[tuple], width: int) -> tuple[list[np.ndarray], int]:
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
