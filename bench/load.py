"""`python -m bench load`: Kineto load time against the JSON floor, peak memory per event, reopen time.

Two traces, both real samples tiled in time with the writer's own layout
(``bench.synth``): a ``record_shapes`` + ``with_stack`` capture tiled to 1M events
(``tests/data/options_all.json.gz`` when present, else ``shapes_stack``) and an
inference capture (``decode_eager``) tiled to 5M events, over 1 GB of JSON.
``--quick`` tiles them to 100k and 200k events.

For each, in one run:

- **load**: a cold load (no gaplens cache) in a fresh interpreter, best of N; the
  same child reports how many events took the per-event path (``LoadStats``) and the
  CPU time of all its threads (gunzip, the parse-and-classify pool, the merge), which says
  what the load needs from an idle machine when the box is shared.
- **floor**: gunzip of the file (the stdlib's zlib, as a bare ``json.loads`` of a
  ``gzip.open`` would) plus the fastest plain parse of the same bytes (orjson, msgspec
  when installed), nothing else, timed in wall and in CPU seconds. The ratio against a
  floor that inflates with zlib-ng too, as the loader does, is printed beside it. The event array is parsed in
  pieces of at most 256 MB (cut between events) so a gigabyte file fits in memory;
  each piece alone parses at least as fast as the whole would.
- **CPU ratio**: the load child's CPU time over all its threads (``time.process_time`` around
  the load) against the floor's CPU time (gunzip + parse, single-threaded, in this process).
  Unlike the wall ratio it hardly moves with the machine's load or core count: it says how
  much work the load does per byte compared with the floor, not how well it overlaps.
- **peak**: the whole child process's peak resident size (VmHWM: interpreter,
  imports and all) divided by the events in the file.
- **reopen**: in a fresh interpreter, a cache hit plus the readings of
  ``gaplens summary`` and of ``gaplens gaps`` (its top 20), per 1M events; the readings
  are kept with the cache entry (``store.readings``), and the same reopen with them
  recomputed (``GAPLENS_READINGS_CACHE=0``, as before they were kept) is printed beside it.

- **cold summary**: ``gaplens summary`` through the CLI in a fresh interpreter with an empty
  cache: its wall time against the floor, and the whole process's peak (parse, columns, names
  and the readings on top), the figure the memory targets are set on.

Targets (``bench.targets``; issues 11, 23, 31): load and cold summary <= 0.5 x floor (wall), the
cold summary's peak <= 200 B/event at 1M events and <= 120 at 5M, 0 slow-path events, reopen
<= 0.5 s per 1M events. The box is shared: the ratios, measured in the same run, are
what to compare; the load average is printed with the numbers.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from types import ModuleType

from bench.children import child_env
from bench.targets import (
    LOAD_OVER_FLOOR,
    REOPEN_S_PER_1M,
    Figure,
    at_most,
    load_average,
    peak_met,
    peak_target,
    print_figures,
)

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
OPTIONS_ALL = ROOT / "tests" / "data" / "options_all.json.gz"
SHAPES_STACK = ROOT / "tests" / "data" / "shapes_stack.json.gz"
DECODE = SHARED / "samples" / "decode_eager.json.gz"
PIECE = 256 << 20  # bytes of JSON per floor parse
SEP = b"},\n  {"


def peak_rss():
    # VmHWM: the high-water mark of this process since exec. (ru_maxrss can carry the
    # parent's size over from the fork that started it.)
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


_PEAK = "\n" + inspect.getsource(peak_rss)  # the same function, for the children

_LOAD_CHILD = (
    _PEAK
    + r"""
import json, sys, time
from gaplens.loaders import load
from gaplens.loaders.kineto.reader import LoadStats
stats = LoadStats()
t0, c0 = time.perf_counter(), time.process_time()
trace = load(sys.argv[1], use_cache=False, stats=stats)
elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
print(json.dumps({"s": elapsed, "cpu": cpu, "loaded": len(trace), "events": stats.events, "slow": stats.slow_events,
                  "layout": stats.layout_blocks, "structure": stats.structure_blocks, "rewinds": stats.rewinds,
                  "peak": peak_rss()}))
"""
)

# A cold `gaplens summary` as a user runs it (the CLI, an empty cache): its wall time and the whole
# process's peak, the figure the memory targets are set on (the readings come on top of the load).
_SUMMARY_CHILD = (
    _PEAK
    + r"""
import contextlib, io, json, sys, time
t0 = time.perf_counter()
from gaplens.tui.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main(["summary", sys.argv[1]])
print(json.dumps({"s": time.perf_counter() - t0, "code": code, "peak": peak_rss()}))
"""
)

_REOPEN_CHILD = r"""
import json, sys, time
from gaplens import store
store.install()
from gaplens.loaders import load
load(sys.argv[1])  # makes sure the entry exists (a miss when the loaders changed)
from gaplens.analysis import memo
from gaplens.analysis.gaps import gap_columns
from gaplens.tui.commands.summary import render_text
from gaplens.tui.commands.readings import render_top_gaps
memo.clear()
t0 = time.perf_counter()
trace = load(sys.argv[1])
hit = time.perf_counter() - t0
render_text(trace, 10)
t1 = time.perf_counter()
render_top_gaps(trace, 20)
t2 = time.perf_counter()
print(json.dumps({"hit": hit, "summary": t1 - t0, "gaps": t2 - t1, "s": t2 - t0}))
"""


_CACHE = {"dir": ""}  # where the children keep reopen entries, apart from the user's cache


def _run_child(code: str, path: str, **extra_env: str) -> dict:
    """Run ``code`` in a fresh interpreter: its last line of output, as JSON."""
    env = child_env(**{"GAPLENS_CACHE_DIR": _CACHE["dir"], **extra_env})
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.run([sys.executable, "-c", code, path], stdout=out, stderr=err, env=env, cwd=ROOT)
        out.seek(0)
        err.seek(0)
        if proc.returncode:
            raise RuntimeError(f"benchmark child failed: {err.read().decode(errors='replace')[-2000:]}")
        return json.loads(out.read().decode().strip().splitlines()[-1])


def _gunzip_s(path: str, inflate=zlib) -> tuple[float, int, float]:
    """Seconds to decompress the whole file (output discarded), its decompressed size, and the CPU seconds."""
    d = inflate.decompressobj(wbits=47)
    size = 0
    t0, c0 = time.perf_counter(), time.process_time()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            size += len(d.decompress(block))
    return time.perf_counter() - t0, size, time.process_time() - c0


def _pieces(path: str) -> list[bytes]:
    """The document as JSON texts of at most PIECE bytes: the array's events in slices, each a JSON array."""
    raw = zlib.decompress(Path(path).read_bytes(), 47)
    if len(raw) <= PIECE:
        return [raw]
    start = raw.index(b"[", raw.index(b'"traceEvents"')) + 1
    end = raw.rindex(b"]")
    out = [raw[:start] + b"]}"]
    at = start
    while at < end:
        cut = raw.rfind(SEP, at, at + PIECE) if end - at > PIECE else -1
        stop = cut + 1 if cut > at else end
        out.append(b"[" + raw[at:stop].strip().lstrip(b",") + b"]")
        at = stop + 1
    del raw
    return out


def _parse_s(pieces: list[bytes], repeats: int) -> tuple[dict[str, float], dict[str, float]]:
    """Best-of-N wall seconds of each plain JSON parser over all the pieces, and best-of-N CPU seconds.

    The bench process runs nothing else meanwhile, so its process CPU time is the parser's."""
    import orjson

    parsers = {"orjson": orjson.loads}
    try:
        import msgspec

        parsers["msgspec"] = msgspec.json.decode
    except ImportError:
        pass
    times, cpus = {}, {}
    for name, parse in parsers.items():
        best = best_cpu = float("inf")
        for _ in range(repeats):
            total = cpu = 0.0
            for piece in pieces:
                gc.collect()
                t0, c0 = time.perf_counter(), time.process_time()
                doc = parse(piece)
                total += time.perf_counter() - t0
                cpu += time.process_time() - c0
                del doc
            best, best_cpu = min(best, total), min(best_cpu, cpu)
        times[name], cpus[name] = best, best_cpu
    return times, cpus


def _warm_memory(size: int) -> None:
    """Touch ``size`` bytes once in a throwaway child: a VM's first touch of its memory is slow,
    and would land on whichever measurement came first."""
    code = f"import numpy as np; a = np.ones({size}, np.uint8); print('{{}}')"
    _run_child(code, "")


def _cold_summary(path: str) -> dict:
    """One cold `gaplens summary` in a fresh interpreter with a cache of its own, emptied after."""
    cache = tempfile.mkdtemp(prefix="gaplens-bench-summary-")
    try:
        return _run_child(_SUMMARY_CHILD, path, GAPLENS_CACHE_DIR=cache)
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def bench_one(label: str, path: str, events: int, repeats: int) -> dict:
    runs = [_run_child(_LOAD_CHILD, path) for _ in range(repeats)]
    summaries = [_cold_summary(path) for _ in range(repeats)]
    result = min(runs, key=lambda r: r["s"])
    load_cpu = min(r["cpu"] for r in runs)
    peak = max(r["peak"] for r in runs)
    gunzip, size, gunzip_cpu = _gunzip_s(path)
    inflate: ModuleType = zlib
    with contextlib.suppress(ImportError):  # what the loader inflates with (loaders.files), when it has it
        from zlib_ng import zlib_ng as inflate
    gunzip_ng = _gunzip_s(path, inflate)[0]
    pieces = _pieces(path)
    parsers, parsers_cpu = _parse_s(pieces, 1 if size > PIECE else repeats)
    del pieces
    fastest = min(parsers, key=lambda k: parsers[k])
    floor = gunzip + parsers[fastest]
    floor_cpu = gunzip_cpu + parsers_cpu[fastest]
    _run_child(_REOPEN_CHILD, path)  # writes the cache entry
    reopen = min((_run_child(_REOPEN_CHILD, path) for _ in range(repeats)), key=lambda r: r["s"])
    # The same reopen with the readings recomputed, as before store.readings kept them.
    recomputed = min(
        (_run_child(_REOPEN_CHILD, path, GAPLENS_READINGS_CACHE="0") for _ in range(repeats)), key=lambda r: r["s"]
    )
    row = {
        "trace": label,
        "events": result["events"],
        "json_mb": size / 1e6,
        "load_s": result["s"],
        "load_cpu_s": load_cpu,
        "floor_s": floor,
        "floor_cpu_s": floor_cpu,
        "cpu_ratio": load_cpu / floor_cpu,
        "gunzip_s": gunzip,
        "ratio_zlib_ng_floor": result["s"] / (gunzip_ng + parsers[fastest]),
        "parsers_s": parsers,
        "ratio": result["s"] / floor,
        "events_per_s": result["events"] / result["s"],
        "slow_events": result["slow"],
        "peak_bytes": peak,
        "bytes_per_event": peak / result["events"],
        "reopen_s": reopen["s"],
        "reopen_per_1m_s": reopen["s"] * 1e6 / result["events"],
        "reopen_parts_s": reopen,
        "reopen_recomputed_s": recomputed["s"],
        "blocks": {"layout": result["layout"], "structure": result["structure"], "rewinds": result["rewinds"]},
        "summary_s": min(r["s"] for r in summaries),
        "summary_peak_bytes": max(r["peak"] for r in summaries),
        "summary_bytes_per_event": max(r["peak"] for r in summaries) / result["events"],
        "summary_bytes_per_kept_event": max(r["peak"] for r in summaries) / result["loaded"],
        "kept_events": result["loaded"],
        "load_average": load_average(),
    }
    print(
        f"{label:<28} {row['events']:>10,} {row['json_mb']:>7.0f} {row['load_s']:>7.2f} {floor:>7.2f} "
        f"{row['ratio']:>6.2f} {row['cpu_ratio']:>6.2f} {row['events_per_s'] / 1e6:>7.2f}M {row['slow_events']:>5} "
        f"{row['bytes_per_event']:>6.0f} {row['reopen_per_1m_s']:>8.2f}"
    )
    parsers_text = ", ".join(f"{k} {v:.2f}s" for k, v in parsers.items())
    parts = f"hit {reopen['hit']:.2f}s, summary {reopen['summary'] - reopen['hit']:.2f}s, gaps {reopen['gaps']:.2f}s"
    print(f"{'':<28} floor = gunzip {gunzip:.2f}s + {fastest} ({parsers_text}); reopen {reopen['s']:.2f}s ({parts})")
    again = recomputed["s"] * 1e6 / result["events"]
    print(
        f"{'':<28} reopen with the readings recomputed (GAPLENS_READINGS_CACHE=0): {recomputed['s']:.2f}s "
        f"= {again:.2f} s/1M (summary {recomputed['summary'] - recomputed['hit']:.2f}s, gaps {recomputed['gaps']:.2f}s)"
    )
    print(
        f"{'':<28} with the loader's inflater ({inflate.__name__}) in the floor too: gunzip {gunzip_ng:.2f}s, "
        f"ratio {row['ratio_zlib_ng_floor']:.2f}"
    )
    print(
        f"{'':<28} cold `gaplens summary` (fresh interpreter, empty cache): {row['summary_s']:.2f}s "
        f"= {row['summary_s'] / floor:.2f}x the floor; peak {row['summary_peak_bytes'] / 2**20:.0f} MiB = "
        f"{row['summary_bytes_per_event']:.0f} B/event ({row['summary_bytes_per_kept_event']:.0f} per kept event, "
        f"{row['kept_events']:,} kept)"
    )
    idle = f"on 2 idle cores >= {load_cpu / 2:.2f}s"
    print(
        f"{'':<28} CPU ratio {row['cpu_ratio']:.2f}: load CPU {load_cpu:.2f}s over all threads vs floor CPU "
        f"{floor_cpu:.2f}s (gunzip {gunzip_cpu:.2f}s + {fastest} {parsers_cpu[fastest]:.2f}s); {idle}"
    )
    return row


def figures(row: dict) -> list[Figure]:
    """The row's figures against their targets (``bench.targets``)."""
    label, events, floor = row["trace"], row["events"], row["floor_s"]
    peak_goal = peak_target(events)
    base = f"floor {floor:.2f} s (gunzip + parse)"
    load = row["load_average"]
    reopen = row["reopen_per_1m_s"]
    return [
        Figure(
            f"{label}: cold load",
            f"{row['ratio']:.2f}x ({row['load_s']:.2f} s)",
            f"<= {LOAD_OVER_FLOOR}x floor",
            base,
            at_most(row["ratio"], LOAD_OVER_FLOOR),
            load,
        ),
        Figure(
            f"{label}: cold summary",
            f"{row['summary_s'] / floor:.2f}x ({row['summary_s']:.2f} s)",
            f"<= {LOAD_OVER_FLOOR}x floor",
            base,
            at_most(row["summary_s"] / floor, LOAD_OVER_FLOOR),
            load,
        ),
        Figure(
            f"{label}: cold summary peak",
            f"{row['summary_bytes_per_event']:.0f} B/event ({row['summary_peak_bytes'] / 2**20:.0f} MiB)",
            f"<= {peak_goal} B/event",
            f"JSON {row['json_mb'] * 1e6 / events:.0f} B/event ({row['json_mb']:.0f} MB)",
            peak_met(row["summary_bytes_per_event"], events),
            load,
        ),
        Figure(f"{label}: slow-path events", f"{row['slow_events']}", "0", "-", row["slow_events"] == 0, load),
        Figure(
            f"{label}: reopen",
            f"{reopen:.2f} s/1M",
            f"<= {REOPEN_S_PER_1M} s/1M",
            f"gunzip {row['gunzip_s'] * 1e6 / events:.2f} s/1M",
            at_most(reopen, REOPEN_S_PER_1M),
            load,
        ),
    ]


def run(args) -> None:
    from bench.synth import synthetic

    quick = bool(getattr(args, "quick", False))
    repeats = 1 if quick else 2
    shapes = OPTIONS_ALL if OPTIONS_ALL.exists() else SHAPES_STACK
    targets = []
    if shapes.exists():
        path, n = synthetic(str(shapes), 100_000 if quick else 1_000_000)
        targets.append((f"{shapes.name.split('.')[0]} x{n / 1e6:.1f}M", path, n))
    if DECODE.exists():
        path, n = synthetic(str(DECODE), 200_000 if quick else 5_000_000)
        targets.append((f"{DECODE.name.split('.')[0]} x{n / 1e6:.1f}M", path, n))
    if not targets:
        print("load: no sample to tile (tests/data and ../shared/samples are missing); skipped")
        return
    _CACHE["dir"] = tempfile.mkdtemp(prefix="gaplens-bench-cache-")
    _warm_memory(min(8 << 30, 2 * max(Path(p).stat().st_size for _, p, _ in targets) * 12))
    load_avg = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"targets: load and cold summary <= {LOAD_OVER_FLOOR}x floor, cold summary peak <= {peak_target(1)} "
        f"B/event at 1M (<= {peak_target(10**9)} at 5M; whole process), 0 slow-path events, reopen <= "
        f"{REOPEN_S_PER_1M} s/1M events"
    )
    print(f"load average before: {load_avg} ({os.cpu_count()} cores)")
    print(
        f"{'trace':<28} {'events':>10} {'JSON MB':>7} {'load s':>7} {'floor s':>7} {'ratio':>6} {'cpu x':>6} "
        f"{'ev/s':>8} {'slow':>5} {'B/ev':>6} {'reopen/1M':>9}"
    )
    rows = [bench_one(label, path, n, repeats) for label, path, n in targets]
    print(f"load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print_figures("load", [f for row in rows for f in figures(row)])
    shutil.rmtree(_CACHE["dir"], ignore_errors=True)
    if os.environ.get("GAPLENS_BENCH_JSON"):
        Path(os.environ["GAPLENS_BENCH_JSON"]).write_text(json.dumps(rows, indent=2))
