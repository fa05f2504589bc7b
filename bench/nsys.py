"""`python -m bench nsys`: load speed of nsys exports, in rows per second.

Rows are the events the loader produced from table rows (API calls, kernels, copies,
sync records, NVTX ranges). Two inputs: the largest real nsys sample (timed warm, once
its gzip is unpacked into the cache, plus the one-off unpack) and a synthetic export
with the real schema (``bench.nsys_synth``: 5M kernels + 5M launch calls, or 250k
with ``--quick``). Best of N wall time; CPU time shows the two-thread column fetch. The
synthetic export is also loaded once in a fresh interpreter for the whole process's
peak resident size per row (target 200 B/row).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.nsys_synth import make_export
from gaplens.loaders import load

SAMPLES = Path(__file__).resolve().parent.parent.parent / "shared" / "samples"


def _time_load(path: str, repeats: int) -> tuple[float, float, int]:
    best_wall, best_cpu, rows = float("inf"), float("inf"), 0
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        trace = load(path, use_cache=False)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        rows = len(trace)
        best_wall, best_cpu = min(best_wall, wall), min(best_cpu, cpu)
    return best_wall, best_cpu, rows


def _line(label: str, rows: int, wall: float, cpu: float) -> str:
    rate = rows / wall / 1e6
    return f"{label:<34} {rows:>10,} rows  {wall * 1000:8.0f} ms  cpu {cpu * 1000:6.0f} ms  {rate:6.2f} M rows/s"


def run(args) -> None:
    quick = bool(getattr(args, "quick", False))
    repeats = 2 if quick else 3
    with tempfile.TemporaryDirectory(prefix="gaplens-bench-nsys-") as tmp:
        # A private cache so the first open really unpacks.
        os.environ["GAPLENS_CACHE_DIR"] = str(Path(tmp) / "cache")
        real = sorted(SAMPLES.glob("nsys_*.sqlite.gz"), key=lambda p: p.stat().st_size)
        if real:
            largest = str(real[-1])
            t0 = time.perf_counter()
            first = load(largest, use_cache=False)
            cold = time.perf_counter() - t0
            print(f"{real[-1].name}: first open incl. gunzip to cache {cold * 1000:.0f} ms ({len(first):,} rows)")
            wall, cpu, rows = _time_load(largest, repeats + 1)
            print(_line(f"{real[-1].name} (gunzipped copy cached, trace cache off)", rows, wall, cpu))
        else:
            print("no nsys sample found beside the checkout; real-file timing skipped")
        kernels = 250_000 if quick else 5_000_000
        synth = Path(tmp) / "synthetic.sqlite"
        t0 = time.perf_counter()
        make_export(synth, kernels=kernels)
        took = time.perf_counter() - t0
        print(f"synthetic export: {kernels:,} kernels + {kernels:,} launches written in {took:.1f} s")
        wall, cpu, rows = _time_load(str(synth), 1 if not quick else repeats)
        print(_line(f"synthetic {kernels // 1000}k kernels", rows, wall, cpu))
        target = "meets" if rows / wall >= 1e6 else "misses"
        print(f"target >= 1 M rows/s: {target} ({rows / wall / 1e6:.2f} M rows/s, {os.cpu_count()} cores)")
        peak = _peak_rss(str(synth))
        print(f"peak resident (fresh interpreter, imports included): {peak / 1e6:.0f} MB = {peak / rows:.0f} B/row")
        print(f"load average: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


def _peak_rss(path: str) -> int:
    """VmHWM of a fresh interpreter that loads ``path`` (trace cache off)."""
    code = (
        "import sys; from gaplens.loaders import load; load(sys.argv[1], use_cache=False)\n"
        "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0])"
    )
    out = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, check=True)
    return int(out.stdout.strip()) * 1024
