"""Ways to read an nsys export's integer columns, timed alike: the page decoder, SQL, ADBC.

Each way reads the columns the loader reads from the two big tables of a synthetic export
(``bench.nsys_synth``: kernels with their ids, launch geometry and names; launch calls)
into one int64 numpy array per column, in a fresh interpreter, and reports its wall and CPU
time and the whole process's peak resident size (VmHWM, imports included). The ways:

- ``pages``: the loader's ``Reader.ints`` with the hand-written page decoder
  (``loaders/nsys/pages.py``, ``nsys_btree.py``, ``nsys_ints.py``), two threads.
- ``sql chunks``: the same ``Reader.ints`` through SQL (``nsys_chunks``: a ``group_concat``
  text per column and chunk of rowids parsed by numpy), two threads.
- ``sqlite3``: plain ``sqlite3`` ``fetchmany`` of 64k rows into numpy, one thread.
- ``adbc``: ``adbc-driver-sqlite`` (``fetch_arrow_table``, Arrow to numpy), one thread;
  skipped when the package is absent (``pip install adbc-driver-sqlite``: bench only).
- ``load (pages)`` / ``load (sql)``: the whole ``gaplens`` load of the export, both read paths.

Rows are the rows of the two tables (kernels + launch calls).

    python -m bench.nsys_paths EXPORT.sqlite WAY
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from bench.children import child_env

ROOT = Path(__file__).resolve().parent.parent
KERNEL_COLUMNS = (
    *("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "shortName", "demangledName"),
    *("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ"),
    *("registersPerThread", "staticSharedMemory", "dynamicSharedMemory"),
)
RUNTIME_COLUMNS = ("start", "end", "globalTid", "correlationId", "nameId")
TABLES = {"CUPTI_ACTIVITY_KIND_KERNEL": KERNEL_COLUMNS, "CUPTI_ACTIVITY_KIND_RUNTIME": RUNTIME_COLUMNS}
WAYS = ("pages", "sql chunks", "sqlite3", "adbc", "load (pages)", "load (sql)")
FETCH_ROWS = 1 << 16


def _peak() -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmHWM:"))


def _reader_ints(path: str, pages: bool) -> dict:
    from gaplens.loaders.nsys import sql as nsys_sql

    was, nsys_sql.PAGES = nsys_sql.PAGES, pages
    reader = nsys_sql.Reader(f"file:{path}?mode=ro")
    try:
        schema = nsys_sql.Schema.probe(reader.con())
        waits = []
        for table, cols in TABLES.items():
            c = nsys_sql.Columns(schema, table)
            waits.append(reader.submit(table, {f"{table}.{name}": c.int(name) for name in cols}))
        return {k: v for wait in waits for k, v in wait().items()}
    finally:
        reader.close()
        nsys_sql.PAGES = was


def _sqlite3(path: str) -> dict:
    import sqlite3

    import numpy as np

    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    out = {}
    for table, cols in TABLES.items():
        cur = con.execute(f'SELECT {", ".join(cols)} FROM "{table}"')
        parts = []
        while batch := cur.fetchmany(FETCH_ROWS):
            parts.append(np.array(batch, dtype=np.int64))
        block = np.concatenate(parts) if parts else np.empty((0, len(cols)), np.int64)
        out.update({f"{table}.{c}": np.ascontiguousarray(block[:, i]) for i, c in enumerate(cols)})
    con.close()
    return out


def _adbc(path: str) -> dict:
    import adbc_driver_sqlite.dbapi as adbc
    import numpy as np

    out = {}
    with adbc.connect(path) as con, con.cursor() as cur:
        for table, cols in TABLES.items():
            cur.execute(f'SELECT {", ".join(cols)} FROM "{table}"')
            got = cur.fetch_arrow_table()
            for c in cols:
                column = got.column(c)
                out[f"{table}.{c}"] = np.concatenate([chunk.to_numpy() for chunk in column.chunks]).astype(np.int64)
            del got
    return out


def _load(path: str, pages: bool) -> int:
    from gaplens.loaders import load
    from gaplens.loaders.nsys import sql as nsys_sql

    was, nsys_sql.PAGES = nsys_sql.PAGES, pages
    try:
        return len(load(path, use_cache=False))
    finally:
        nsys_sql.PAGES = was


def read(path: str, way: str) -> dict:
    """The columns one way reads (``TABLE.column`` -> int64 array), in this process."""
    return {
        "pages": lambda: _reader_ints(path, True),
        "sql chunks": lambda: _reader_ints(path, False),
        "sqlite3": lambda: _sqlite3(path),
        "adbc": lambda: _adbc(path),
    }[way]()


def child(path: str, way: str) -> dict:
    import numpy as np

    from gaplens.loaders.nsys import sql as nsys_sql  # imports paid before the clock, like numpy's

    del nsys_sql
    if way == "adbc":
        import adbc_driver_sqlite.dbapi  # noqa: F401
    base = _peak()
    t0, c0 = time.perf_counter(), time.process_time()
    events = None
    if way.startswith("load"):
        cols, events = {}, _load(path, way == "load (pages)")
    else:
        cols = read(path, way)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    digest = sum(int(np.asarray(v, np.int64).sum(dtype=np.int64)) & 0xFFFFFFFF for v in cols.values())
    return {"s": wall, "cpu": cpu, "peak": _peak(), "base": base, "sum": digest, "events": events}


def measure(path: str, way: str) -> dict | None:
    """One way in a fresh interpreter; None when the way is not installed."""
    if way == "adbc":
        import importlib.util

        if importlib.util.find_spec("adbc_driver_sqlite") is None:
            return None
    env = child_env()
    out = subprocess.run(
        [sys.executable, "-m", "bench.nsys_paths", path, way], capture_output=True, text=True, env=env, cwd=ROOT
    )
    if out.returncode:
        raise RuntimeError(f"nsys read child ({way}) failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    print(json.dumps(child(sys.argv[1], sys.argv[2])))
