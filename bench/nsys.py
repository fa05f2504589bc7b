"""`python -m bench nsys`: load speed of nsys exports, in rows per second.

Rows are the events the loader produced from table rows (API calls, kernels, copies,
sync records, NVTX ranges). Two inputs: the largest real nsys sample (timed warm, once
its gzip is unpacked into the cache, plus the one-off unpack; best of N wall time, CPU
time shows the two-thread column fetch) and synthetic exports with the real schema
(``bench.nsys_synth``: N/2 kernels + N/2 launch calls).

For the synthetic exports, the read paths (``bench.nsys_paths``): the page decoder, the loader's SQL chunks, plain
``sqlite3`` and ADBC (``adbc-driver-sqlite``, when installed) reading the same integer columns,
and the whole load with pages on and off, at 100k, 1M and 10M rows (``--quick``: 100k;
``GAPLENS_BENCH_NSYS_ROWS=100000,1000000`` picks others), each in a fresh interpreter: wall
and CPU time, rows/s and the peak. Issue 23 keeps the page decoder only if it beats every
other way by >= 1.5x at 10M rows; the last line says whether it does.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from bench.nsys_paths import WAYS, measure
from bench.nsys_synth import make_export
from bench.targets import NSYS_ROWS_PER_S, Figure, print_figures
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
        paths(Path(tmp), quick)


TARGET_ROWS_S = NSYS_ROWS_PER_S  # issue 23: nsys at a million rows a second at 10M rows, on 2 cores
KEEP_PAGES_IF = 1.5  # issue 23: the page decoder stays only if it wins by this much at 10M rows


def paths(tmp: Path, quick: bool) -> None:
    """Pages vs SQL vs ADBC at each size: wall, CPU, rows/s, peak; then the decision at the largest."""
    sizes = [int(x) for x in os.environ.get("GAPLENS_BENCH_NSYS_ROWS", "").split(",") if x.strip()]
    sizes = sizes or ([100_000] if quick else [100_000, 1_000_000, 10_000_000])
    print(f"read paths (integer columns of kernels + launch calls; fresh interpreter each; {os.cpu_count()} cores)")
    print(
        f"{'rows':>10} {'way':<13} {'wall s':>7} {'cpu s':>7} {'M rows/s':>8} {'cpu M/s':>8} {'peak MB':>8} "
        f"{'B/row':>6} {'whole B/row':>11}"
    )
    best: dict[str, dict] = {}
    for rows in sizes:
        export = tmp / f"paths_{rows}.sqlite"
        make_export(export, kernels=rows // 2)
        repeats = 1 if rows >= 5_000_000 else 2
        best = {}
        sums = set()
        for way in WAYS:
            runs = [r for r in (measure(str(export), way) for _ in range(repeats)) if r is not None]
            if not runs:
                print(f"{rows:>10,} {way:<13} not installed (pip install adbc-driver-sqlite)")
                continue
            r = min(runs, key=lambda x: x["s"])
            r["cpu"] = min(x["cpu"] for x in runs)
            best[way] = r
            if r["events"] is None:
                sums.add(r["sum"])
            grown = (r["peak"] - r["base"]) / rows
            print(
                f"{rows:>10,} {way:<13} {r['s']:>7.2f} {r['cpu']:>7.2f} {rows / r['s'] / 1e6:>8.2f} "
                f"{rows / r['cpu'] / 1e6:>8.2f} {r['peak'] / 1e6:>8.0f} {grown:>6.0f} {r['peak'] / rows:>11.0f}"
            )
        if len(sums) > 1:
            print(f"{'':>10} the column reads disagree: {sorted(sums)}")
        export.unlink()
    print("  (B/row: peak minus the peak after imports; whole: the process's peak, target 200; per row)")
    _decide(sizes[-1], best)
    print(f"load average: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


def _decide(rows: int, best: dict[str, dict]) -> None:
    if "pages" not in best:
        return
    others = {k: v for k, v in best.items() if k in ("sql chunks", "sqlite3", "adbc")}
    if not others:
        return
    rival = min(others, key=lambda k: others[k]["s"])
    wall = others[rival]["s"] / best["pages"]["s"]
    rival_cpu = min(others, key=lambda k: others[k]["cpu"])
    cpu = others[rival_cpu]["cpu"] / best["pages"]["cpu"]
    verdict = "keep the page decoder" if min(wall, cpu) >= KEEP_PAGES_IF else "the page decoder does not earn its keep"
    print(
        f"at {rows:,} rows: pages is {wall:.2f}x faster than {rival} (wall) and {cpu:.2f}x ({rival_cpu}, CPU); "
        f"rule >= {KEEP_PAGES_IF}x: {verdict}"
    )
    if "load (pages)" in best:
        rate = rows / best["load (pages)"]["s"]
        plain = others.get("sqlite3")
        baseline = f"sqlite3 fetchmany {rows / plain['s'] / 1e6:.2f}M rows/s" if plain else "-"
        figure = Figure(
            f"nsys whole load (pages), {rows / 1e6:g}M rows",
            f"{rate / 1e6:.2f}M rows/s ({best['load (pages)']['s']:.2f} s)",
            f">= {TARGET_ROWS_S / 1e6:g}M rows/s",
            baseline,
            rate >= TARGET_ROWS_S,
        )
        print_figures("nsys", [figure])
