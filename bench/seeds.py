"""Small, complete seed traces in both formats, written from code: the bases of the bad-input corpus and the fuzzer.

The Kineto seed has every kind of row a reading looks at (phases, CPU ops, launches,
kernels with args, copies, syncs, a GPU annotation, profiler overhead, metadata); the
nsys seed is ``bench.nsys_synth`` (the real 2025.3 DDL) with copies and NVTX ranges.
``dumps`` writes JSON with ``Raw`` tokens, so a value can be any text (``NaN``,
``1e999000``, a number past 64 bits) exactly as a damaged writer would put it.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from bench.nsys_synth import make_export

BASE_NS = 1_751_410_836_000_000_000


@dataclass(frozen=True)
class Raw:
    """A JSON token written verbatim."""

    text: str


def dumps(value: object) -> bytes:
    """JSON with ``Raw`` tokens kept verbatim; strings may hold lone surrogates (written escaped)."""
    return _dump(value).encode("utf-8", "surrogatepass")


def _dump(value: object) -> str:
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_dump(str(k))}: {_dump(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_dump(v) for v in value) + "]"
    return json.dumps(value)  # ensure_ascii: control characters and surrogates as \u escapes


def _us(ns: int) -> Raw:
    """Relative µs as Kineto writes them since 2024: ``"{µs}.{ns:03}"``."""
    return Raw(f"{ns // 1000}.{ns % 1000:03d}")


def kineto_doc() -> dict:
    """A four-step decode loop: phases, ops, launches, kernels, a copy, a sync, host islands, overhead."""
    pid, tid, gpu, stream = 4242, 4242, 0, 7
    events: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "ts": 0, "args": {"name": "python3"}},
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "ts": 0, "args": {"name": "thread 4242 (python)"}},
        {"ph": "M", "name": "process_name", "pid": gpu, "tid": 0, "ts": 0, "args": {"name": "python3"}},
        {"ph": "M", "name": "process_labels", "pid": gpu, "tid": 0, "ts": 0, "args": {"labels": "GPU 0"}},
    ]
    corr = 100
    t = 1_000_000
    for step in range(4):
        step_start = t
        events.append(_x("cpu_op", "tokenize", pid, tid, t, 40_000))  # a host island
        t += 45_000
        for k in range(3):
            corr += 1
            events.append(_x("cpu_op", "aten::mm", pid, tid, t, 12_000, {"Input Dims": [[4, 512], [512, 512]]}))
            events.append(_x("python_function", "model.py(12): forward", pid, tid, t, 11_000))
            events.append(_x("cuda_runtime", "cudaLaunchKernel", pid, tid, t + 2_000, 6_000, {"correlation": corr}))
            args = {
                "correlation": corr,
                "device": gpu,
                "stream": stream,
                "grid": [128, 1, 1],
                "block": [256, 1, 1],
                "registers per thread": 64,
                "shared memory": 0,
                "est. achieved occupancy %": 50,
            }
            events.append(_x("kernel", f"sm90_gemm_{k}", gpu, stream, t + 9_000, 3_000 + 1_000 * k, args))
            t += 15_000
        corr += 1
        events.append(_x("cuda_runtime", "cudaMemcpyAsync", pid, tid, t, 5_000, {"correlation": corr}))
        copy = {"correlation": corr, "device": gpu, "stream": stream, "bytes": 1 << 20}
        events.append(_x("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", gpu, stream, t + 3_000, 8_000, copy))
        t += 12_000
        corr += 1
        events.append(_x("cuda_runtime", "cudaStreamSynchronize", pid, tid, t, 20_000, {"correlation": corr}))
        sync = {"correlation": corr, "device": gpu, "stream": stream, "cuda_sync_kind": "Stream Sync"}
        events.append(_x("cuda_sync", "Stream Sync", gpu, stream, t + 1_000, 18_000, sync))
        t += 25_000
        events.append(_x("user_annotation", f"decode_step#{step}", pid, tid, step_start, t - step_start))
        events.append(_x("gpu_user_annotation", f"decode_step#{step}", gpu, stream, step_start + 50_000, 60_000))
        t += 30_000  # idle between steps
    events.append(_x("overhead", "Activity Buffer Request", pid, tid, t, 5_000))
    return {
        "schemaVersion": 1,
        "deviceProperties": [
            {"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150109880320, "computeMajor": 9, "numSms": 132}
        ],
        "cuda_runtime_version": 12090,
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
        "record_shapes": 1,
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": BASE_NS,
        "traceEvents": events,
        "traceName": "seed.pt.trace.json",
    }


def _x(cat: str, name: str, pid: int, tid: int, ts_ns: int, dur_ns: int, args: dict | None = None) -> dict:
    ev: dict = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": _us(ts_ns), "dur": _us(dur_ns)}
    if args is not None:
        ev["args"] = args
    return ev


def write_nsys(path: str | Path, kernels: int = 120) -> Path:
    """A small real-schema nsys export: launches, kernels, NVTX ranges, copies, enum tables."""
    path = Path(path)
    make_export(path, kernels=kernels, processes=1, nvtx_every=20)
    con = sqlite3.connect(path)
    try:
        gpid = (1 << 48) | (1000 << 24)
        con.executemany(
            "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, contextId, streamId, correlationId,"
            " globalPid, bytes, copyKind, srcKind, dstKind) VALUES (?, ?, 0, 1, 7, ?, ?, ?, ?, 0, 2)",
            [
                (1_000_000_000 + i * 400_000 + 15_000, 1_000_000_000 + i * 400_000 + 19_000, 90_000 + i, gpid, 4096, 1)
                for i in range(6)
            ],
        )
        con.executemany("INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES (?, ?, ?)", [(1, "HTOD", "Host-to-Device")])
        con.executemany(
            "INSERT INTO ENUM_CUDA_MEM_KIND VALUES (?, ?, ?)", [(0, "PAGEABLE", "Pageable"), (2, "DEVICE", "Device")]
        )
        con.commit()
    finally:
        con.close()
    return path
