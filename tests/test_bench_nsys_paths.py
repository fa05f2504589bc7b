"""bench nsys compares like with like: every way of reading the export yields the columns plain SQL does."""

from __future__ import annotations

import importlib.util
import sqlite3

import numpy as np
import pytest

from bench.nsys_paths import TABLES, read
from bench.nsys_synth import make_export

WAYS = ["pages", "sql chunks", "sqlite3"]
if importlib.util.find_spec("adbc_driver_sqlite") is not None:  # bench-only install
    WAYS.append("adbc")


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    path = tmp_path_factory.mktemp("nsys") / "small.sqlite"
    make_export(path, kernels=3_000)
    return str(path)


def _truth(path: str) -> dict[str, list[int]]:
    con = sqlite3.connect(path)
    out = {}
    for table, cols in TABLES.items():
        for c in cols:
            out[f"{table}.{c}"] = [r[0] for r in con.execute(f'SELECT "{c}" FROM "{table}" ORDER BY rowid')]
    con.close()
    return out


@pytest.mark.parametrize("way", WAYS)
def test_every_way_reads_the_same_columns(export, way):
    truth = _truth(export)
    got = read(export, way)
    assert sorted(got) == sorted(truth)
    for key, values in truth.items():
        assert len(values) == 3_000
        assert got[key].dtype == np.int64 and got[key].tolist() == values, key
