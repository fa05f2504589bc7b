"""`python -m bench load`: Kineto load speed, peak memory per event and the ratio to the floor.

The floor is gunzip plus the fastest plain JSON parse of the same bytes (orjson,
msgspec, and pyarrow.json when it can read the document at all), doing nothing
else. Loads run in a fresh subprocess each, so the peak resident size is the
load's own: it is measured from the interpreter with gaplens imported and warmed
on a tiny trace (Arrow's compute registry alone is ~45 MB, whatever the trace),
and from the bare import too; the marginal bytes per event (slope between the
smallest and largest trace) leaves out the fixed block buffers.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
import zlib
from pathlib import Path

SHARED = Path(__file__).resolve().parent.parent.parent / "shared"
LARGEST = SHARED / "samples" / "decode_eager.json.gz"
PUBLIC_LARGE = SHARED / "public-samples" / "hta" / "large_216k_events.json.gz"
WARMUP = SHARED / "samples" / "train_step.json.gz"

_CHILD = r"""
import gc, json, resource, sys, time
def rss():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
def hwm():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
from gaplens.loaders import load
from gaplens.loaders.jsonblocks import Framed
imported = rss()
if sys.argv[2]:
    load(sys.argv[2], use_cache=False)
gc.collect()
warm = rss()
try:
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # reset the high-water mark to the current size
except OSError:
    pass
t0 = time.perf_counter()
trace = load(sys.argv[1], use_cache=False)
elapsed = time.perf_counter() - t0
print(json.dumps({"s": elapsed, "peak": hwm(), "imported": imported, "warm": warm, "loaded": len(trace)}))
"""


def _child_load(path: str) -> dict:
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=str(root))
    warm = str(WARMUP) if WARMUP.exists() else ""
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, path, warm], capture_output=True, text=True, env=env, check=True, cwd=root
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _floor(path: str, repeats: int) -> tuple[float, float, dict[str, float]]:
    """(gunzip s, fastest parse s, every parser's s) on the same bytes."""
    import orjson

    raw = Path(path).read_bytes()

    def best(fn) -> float:
        times = []
        for _ in range(repeats):
            gc.collect()
            t0 = time.perf_counter()
            result = fn()
            times.append(time.perf_counter() - t0)
            del result
        return min(times)

    gzipped = raw[:2] == b"\x1f\x8b"
    gunzip = best(lambda: zlib.decompress(raw, 47)) if gzipped else 0.0
    data = zlib.decompress(raw, 47) if gzipped else raw
    parsers = {"orjson": lambda: orjson.loads(data)}
    try:
        import msgspec

        parsers["msgspec"] = lambda: msgspec.json.decode(data)
    except ImportError:
        pass
    times = {name: best(fn) for name, fn in parsers.items()}
    times["pyarrow.json"] = _pyarrow_whole(data)
    valid = {k: v for k, v in times.items() if v == v}
    return gunzip, min(valid.values()), times


def _pyarrow_whole(data: bytes) -> float:
    """pyarrow.json on the document as it is (one object); NaN when it cannot read it."""
    import pyarrow as pa
    import pyarrow.json as pj

    opts = pj.ReadOptions(block_size=len(data) + 1, use_threads=True)
    t0 = time.perf_counter()
    try:
        pj.read_json(pa.BufferReader(data), read_options=opts, parse_options=pj.ParseOptions(newlines_in_values=True))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return float("nan")
    return time.perf_counter() - t0


def _events(path: str) -> int:
    from gaplens.loaders.files import Source
    from gaplens.loaders.jsonblocks import Framed, frame_events

    framed = Framed()
    for _ in frame_events(Source(path).chunks(), framed):
        pass
    return framed.events


def _cache_hit(path: str) -> float:
    from gaplens.loaders import cache, load

    if cache.lookup(path) is None:
        load(path)
    t0 = time.perf_counter()
    trace = load(path)
    elapsed = time.perf_counter() - t0
    del trace
    return elapsed


def bench_one(label: str, path: str, repeats: int) -> dict:
    events = _events(path)
    runs = [_child_load(path) for _ in range(repeats)]
    run = min(runs, key=lambda r: r["s"])
    gunzip, parse, parsers = _floor(path, repeats)
    floor = gunzip + parse
    hit = _cache_hit(path)
    peak_warm = max(run["peak"] - run["warm"], 0)
    peak_import = max(run["peak"] - run["imported"], 0)
    row = {
        "trace": label,
        "events": events,
        "loaded": run["loaded"],
        "load_s": run["s"],
        "events_per_s": events / run["s"],
        "peak_bytes": peak_warm,
        "bytes_per_event": peak_warm / events,
        "bytes_per_event_from_import": peak_import / events,
        "floor_s": floor,
        "ratio": run["s"] / floor,
        "cache_hit_s": hit,
        "gunzip_s": gunzip,
        "parsers_s": parsers,
    }
    fastest = min((k for k, v in parsers.items() if v == v), key=lambda k: parsers[k])
    parsers_text = ", ".join(f"{k} {'n/a' if v != v else f'{v:.2f}s'}" for k, v in parsers.items())
    print(
        f"{label:<22} {events:>9,} events  load {run['s']:6.2f}s  {row['events_per_s'] / 1e3:7.0f}k ev/s  "
        f"peak {row['bytes_per_event']:5.0f} B/ev (from import {row['bytes_per_event_from_import']:.0f})  "
        f"floor {floor:5.2f}s (gunzip {gunzip:.2f} + {fastest})  x{row['ratio']:.2f}  cache hit {hit:.3f}s"
    )
    print(f"{'':<22} parsers: {parsers_text}")
    return row


def run(args) -> None:
    from bench.synth import synthetic

    quick = bool(getattr(args, "quick", False))
    repeats = 1 if quick else 2
    targets = [("decode_eager", str(LARGEST))]
    if not quick and PUBLIC_LARGE.exists():
        targets.append(("hta large_216k", str(PUBLIC_LARGE)))
    want = 250_000 if quick else 1_000_000
    path, n = synthetic(str(LARGEST), want)
    targets.append((f"synthetic {n / 1e6:.2f}M", path))
    print("targets: load <= 3x floor, peak <= 200 B/event (over the warmed interpreter)")
    rows = [bench_one(label, p, repeats) for label, p in targets if Path(p).exists()]
    if len(rows) >= 2:
        # The slope between the smallest and the largest trace: the cost of one more event,
        # free of the fixed ~30 MB of block buffers and allocator arenas.
        small, big = rows[0], rows[-1]
        slope = (big["peak_bytes"] - small["peak_bytes"]) / max(big["events"] - small["events"], 1)
        print(f"marginal peak: {slope:.0f} B/event ({small['trace']} -> {big['trace']})")
    if os.environ.get("GAPLENS_BENCH_JSON"):
        Path(os.environ["GAPLENS_BENCH_JSON"]).write_text(json.dumps(rows, indent=2))
