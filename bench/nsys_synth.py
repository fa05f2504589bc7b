"""A synthetic nsys SQLite export with the real 2025.3 schema, for benchmarks and loader tests.

The DDL in ``nsys_schema.sql`` is copied verbatim from a real export's sqlite_master.
Rows are generated inside SQLite with recursive CTEs (no per-row Python), so a
1M-kernel file takes a couple of seconds to write. Each process gets its own
correlation ids starting at 1, as real multi-process captures do, so a loader that
joins launches on correlation id alone links kernels to the wrong process.

    python -m bench.nsys_synth OUT.sqlite [--kernels N] [--processes P]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
from pathlib import Path

DDL = Path(__file__).with_name("nsys_schema.sql")
VM = 1 << 48
KERNEL_NAMES = 64
STREAMS = (7, 13, 21)


def global_tid(pid: int, tid: int) -> int:
    return VM | (pid << 24) | tid


def make_export(path: str | os.PathLike, kernels: int = 1_000_000, processes: int = 1, nvtx_every: int = 1000) -> dict:
    """Write the export; returns what was written (row counts, per-process pids) for assertions."""
    path = Path(path)
    if path.exists():
        path.unlink()
    con = sqlite3.connect(path)
    con.executescript(DDL.read_text())
    cur = con.cursor()
    cur.execute("PRAGMA journal_mode = OFF")
    cur.execute("PRAGMA synchronous = OFF")
    strings = ["cudaLaunchKernel_v7000", "cudaMemcpyAsync_v3020", "cudaStreamSynchronize_v3020", "python3"]
    short = [f"kernel_{i}" for i in range(KERNEL_NAMES)]
    dem = [f"void ns::kernel_{i}<float, {i % 7}>(float const*, float*, int)" for i in range(KERNEL_NAMES)]
    all_strings = strings + short + dem
    cur.executemany("INSERT INTO StringIds VALUES (?, ?)", list(enumerate(all_strings)))
    short0, dem0 = len(strings), len(strings) + KERNEL_NAMES
    cur.execute(
        "INSERT INTO TARGET_INFO_GPU (vmId, id, name, busLocation, totalMemory, smCount, cuDevice, computeMajor,"
        " computeMinor) VALUES (?, 0, 'NVIDIA H200 (synthetic)', '0000:00:06.0', 150109880320, 132, 0, 9, 0)",
        (VM,),
    )
    cur.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (1795947171926890507, '', '')")
    for k, v in (
        ("EXPORT_PRODUCT_VERSION", "2025.3.2.0"),
        ("EXPORT_SCHEMA_VERSION", "3.20.3"),
        ("EXPORT_PARAM_TIME_NORMALIZE", "false"),
        ("EXPORT_PARAM_TIME_SHIFT", "0"),
    ):
        cur.execute("INSERT INTO META_DATA_EXPORT VALUES (?, ?)", (k, v))
    per = max(kernels // processes, 1)
    pids = []
    for p in range(processes):
        pid = 1000 + p
        pids.append(pid)
        gtid = global_tid(pid, pid)
        gpid = global_tid(pid, 0)
        cur.execute("INSERT INTO PROCESSES VALUES (?, ?, 'python3')", (gpid, pid))
        cur.execute("INSERT INTO ThreadNames VALUES (3, 0, ?)", (gtid,))
        base = 1_000_000_000 + p * 7_000  # processes interleave in time
        # One launch per kernel: 4 µs launch call, the kernel runs 2..12 µs later for 3..9 µs.
        cur.execute(
            f"""
            WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < {per})
            INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId, nameId,
                returnValue, callchainId)
            SELECT {base} + i * 20000, {base} + i * 20000 + 4000, 0, {gtid}, i, 0, 0, NULL FROM c
            """
        )
        cur.execute(
            f"""
            WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < {per})
            INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, greenContextId, streamId,
                correlationId, globalPid, demangledName, shortName, mangledName, launchType, cacheConfig,
                registersPerThread, gridX, gridY, gridZ, blockX, blockY, blockZ, staticSharedMemory,
                dynamicSharedMemory, localMemoryPerThread, localMemoryTotal, gridId, sharedMemoryExecuted,
                graphNodeId, sharedMemoryLimitConfig)
            SELECT {base} + i * 20000 + 6000 + (i % 5) * 1000,
                   {base} + i * 20000 + 9000 + (i % 5) * 1000 + (i % 7) * 1000,
                   0, 1, NULL, {STREAMS[p % len(STREAMS)]}, i, {gpid},
                   {dem0} + i % {KERNEL_NAMES}, {short0} + i % {KERNEL_NAMES}, NULL, 1, 0,
                   32 + (i % 4) * 8, 128 + (i % 3), 1, 1, 256, 1, 1, 0, (i % 2) * 1024, 0, 0, i, 0, NULL, 0
            FROM c
            """
        )
        nvtx = per // nvtx_every
        if nvtx:
            cur.execute(
                f"""
                WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i < {nvtx - 1})
                INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId)
                SELECT {base} + (i * {nvtx_every} + 1) * 20000 - 100,
                       {base} + ((i + 1) * {nvtx_every}) * 20000 + 4100, 59, 'step ' || i, {gtid}, 0
                FROM c
                """
            )
    con.commit()
    con.close()
    return {"kernels": per * processes, "api": per * processes, "pids": pids, "per_process": per}


#: The per-layer range names ``add_layer_ranges`` cycles through: what a framework's NVTX-per-module emits.
LAYER_NAMES = ("embed", "attn.qkv", "attn.core", "attn.out", "mlp.up", "mlp.act", "mlp.down", "norm")


def add_layer_ranges(path: str | os.PathLike, nested: bool = False) -> int:
    """One NVTX range per launch (``nested``: also one around each pair of launches), as frameworks that
    emit a range per layer per step do; returns the number of ranges added. Run after ``make_export``."""
    con = sqlite3.connect(path)
    cur = con.cursor()
    names = ", ".join(f"({k}, '{n}')" for k, n in enumerate(LAYER_NAMES))
    # a range opens 50 ns before its launch call and closes 50 ns after it (the call takes 4 µs)
    cur.execute(
        f"""
        WITH names(k, n) AS (VALUES {names})
        INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId)
        SELECT r.start - 50, r.end + 50, 59, names.n, r.globalTid, 0
        FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN names ON names.k = r.correlationId % {len(LAYER_NAMES)}
        """
    )
    added = con.total_changes
    if nested:
        cur.execute(
            """
            INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId)
            SELECT min(start) - 100, max(end) + 100, 59, 'block', globalTid, 0
            FROM CUPTI_ACTIVITY_KIND_RUNTIME GROUP BY globalTid, (correlationId - 1) / 2
            """
        )
    added = con.total_changes
    con.commit()
    con.close()
    return added


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.nsys_synth", description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--kernels", type=int, default=1_000_000)
    parser.add_argument("--processes", type=int, default=1)
    args = parser.parse_args(argv)
    info = make_export(args.out, args.kernels, args.processes)
    print(f"wrote {args.out}: {info['kernels']} kernels, {info['api']} API rows, processes {info['pids']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
