"""`python -m bench viewer`: the viewer's first frame and readings-ready, cold and warm, through the real app.

The app runs headless (Textual's ``App.run_test`` at 120x40) in a fresh interpreter per
open, on the ``record_shapes`` + ``with_stack`` sample tiled to ~1M and ~5M events
(``bench.synth``; ``--quick``: 100k; ``GAPLENS_BENCH_VIEWER_EVENTS=1000000`` picks sizes).
Times run from the interpreter's start (imports included, as a user
waits for them):

- **first frame**: the timeline is mounted and drawn once (the model is built);
- **readings**: blank regions, critical-path flags and phases are on screen;
- the CPU seconds of the whole open (``getrusage`` of the child: steadier than wall time
  when the box is shared).

Three opens, in one run: **cold** (no gaplens cache: parse, build, compute and keep the
readings), **warm, recomputed** (trace from the cache, readings kept off: what every warm
open cost before ``store.readings``) and **warm** (trace and readings from the cache).
Targets (``bench.targets``, issue 31): warm readings on screen <= 0.8x a bare gunzip of the
file; cold first frame <= 0.4x the bare parse floor (gunzip + orjson), at 1M and 5M events.

``GAPLENS_BENCH_VIEWER_BOUND=python,gpu`` adds cold opens of a lighter load (``bench.bounds``):
**python**, every layout block's ``python_function`` events cut out and never parsed (a preview
drawn before the Python stacks); **gpu**, only the GPU streams' events kept (a frame of the GPU rows
alone). Each bounds what such a first frame could gain; its timeline lacks events, so it is a
measurement, never a reading.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

from bench.bounds import BOUNDS, BOUNDS_SAID
from bench.children import child_env
from bench.targets import COLD_FIRST_FRAME_OVER_FLOOR, WARM_READINGS_OVER_GUNZIP, Figure, at_most, print_figures

ROOT = Path(__file__).resolve().parent.parent
OPTIONS_ALL = ROOT / "tests" / "data" / "options_all.json.gz"
SIZE = (120, 40)
WARM_REPEATS = 2  # warm opens per cold one (they are short, and noisier)
TIMEOUT_S = 600  # one open of a 1M-event trace on a loaded box takes well under a minute

_CHILD = r"""
import time
t0 = time.perf_counter()
import asyncio, json, sys
from gaplens.tui.cli import main  # the CLI's own imports, paid by every `gaplens TRACE`
import os
if os.environ.get("GAPLENS_BENCH_BOUND"):  # pyarrow's import then precedes the early open's: a bound errs late
    from bench import bounds
    bounds.BOUNDS[os.environ["GAPLENS_BENCH_BOUND"]]()
from gaplens.tui.early import start
early = start(sys.argv[1])  # as gaplens.tui.cli.run_tui does, before the app's imports
from gaplens.tui.app import GaplensApp, make_app
out = {}
seen = GaplensApp.on_model_ready
def on_model_ready(self, msg):
    seen(self, msg)
    key = "readings" if msg.final else "first"
    out.setdefault(key + " handled", time.perf_counter() - t0)
    # Stamped once the screen has been drawn with this model.
    self.call_after_refresh(lambda: out.setdefault(key, time.perf_counter() - t0))
GaplensApp.on_model_ready = on_model_ready
app = make_app(sys.argv[1], early=early)
async def main():
    async with app.run_test(size=SIZE) as pilot:
        while "readings" not in out:
            if app.return_code is not None:
                raise SystemExit(f"the viewer exited: {app.error}")
            await asyncio.sleep(0.005)
        out["events"] = len(app.model.trace)
asyncio.run(main())
out.setdefault("first", out["readings"])  # a model that came with its readings is drawn once
print(json.dumps(out))
""".replace("SIZE", repr(SIZE))


def _open(path: str, cache: str, keep: bool, bound: str = "") -> dict:
    env = child_env(GAPLENS_CACHE_DIR=cache, GAPLENS_READINGS_CACHE="1" if keep else "0", GAPLENS_BENCH_BOUND=bound)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, path], capture_output=True, text=True, env=env, cwd=ROOT, timeout=TIMEOUT_S
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode:
        raise RuntimeError(f"viewer child failed: {out.stderr[-2000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    # The whole open's CPU seconds (imports, load, readings, drawing): steadier than wall time on a shared box.
    result["cpu"] = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return result


def _floor(path: str) -> tuple[float, float]:
    """Seconds of a bare gunzip of the file, and of gunzip + orjson.loads (the parse floor)."""
    import orjson

    t0 = time.perf_counter()
    raw = zlib.decompress(Path(path).read_bytes(), 47)
    gunzip = time.perf_counter() - t0
    t0 = time.perf_counter()
    orjson.loads(raw)
    return gunzip, gunzip + time.perf_counter() - t0


def run(args) -> None:
    from bench.synth import synthetic

    if not OPTIONS_ALL.exists():
        print("viewer: tests/data/options_all.json.gz missing; skipped")
        return
    quick = bool(getattr(args, "quick", False))
    sizes = [int(x) for x in os.environ.get("GAPLENS_BENCH_VIEWER_EVENTS", "").split(",") if x.strip()]
    sizes = sizes or ([100_000] if quick else [1_000_000, 5_000_000])
    print(
        f"targets: warm readings on screen <= {WARM_READINGS_OVER_GUNZIP}x a bare gunzip; cold first frame "
        f"<= {COLD_FIRST_FRAME_OVER_FLOOR}x the parse floor"
    )
    print(f"load average before: {', '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores)")
    figures: list[Figure] = []
    for size in sizes:
        path, _ = synthetic(str(OPTIONS_ALL), size)
        figures += bench_one(path, 1 if quick or size > 2_000_000 else 2)
    print(f"load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print_figures("viewer", figures)


def bench_one(path: str, repeats: int) -> list[Figure]:
    rows: dict[str, list[dict]] = {"cold": [], "warm, recomputed": [], "warm": []}
    bounds = [b.strip() for b in os.environ.get("GAPLENS_BENCH_VIEWER_BOUND", "").split(",") if b.strip()]
    for name in bounds:
        if name not in BOUNDS:
            raise SystemExit(f"GAPLENS_BENCH_VIEWER_BOUND: {name!r} is none of {', '.join(BOUNDS)}")
        rows[f"cold, {name} bound"] = []
    for _ in range(repeats):
        cache = tempfile.mkdtemp(prefix="gaplens-bench-viewer-")
        try:
            rows["cold"].append(_open(path, cache, keep=True))
            for _ in range(WARM_REPEATS):  # interleaved: the box's load moves under both alike
                rows["warm, recomputed"].append(_open(path, cache, keep=False))
                rows["warm"].append(_open(path, cache, keep=True))
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        for name in bounds:  # each in its own cache: it must neither read nor leave the whole trace's entry
            cache = tempfile.mkdtemp(prefix="gaplens-bench-viewer-")
            try:
                rows[f"cold, {name} bound"].append(_open(path, cache, keep=True, bound=name))
            finally:
                shutil.rmtree(cache, ignore_errors=True)
    gunzip, floor = min(_floor(path) for _ in range(repeats))
    events = rows["cold"][0]["events"]
    print(f"{Path(path).name}: {events:,} events; bare gunzip {gunzip:.2f} s; gunzip + orjson {floor:.2f} s")
    for name, runs in rows.items():
        first = min(r["first"] for r in runs)
        ready = min(r["readings"] for r in runs)
        handled = min(r.get("first handled", r["first"]) for r in runs)
        cpu = min(r["cpu"] for r in runs)
        print(
            f"  {name:<17} first frame {first:6.2f} s   readings {ready:6.2f} s   "
            f"(model handed to the UI at {handled:.2f} s; whole open {cpu:.2f} CPU s)"
        )
    warm = min(r["readings"] for r in rows["warm"])
    cold_first = min(r["first"] for r in rows["cold"])
    print(
        f"  warm readings vs bare gunzip: {warm / gunzip:.2f}x; "
        f"cold first frame vs parse floor: {cold_first / floor:.2f}x"
    )
    for name in bounds:
        runs = rows[f"cold, {name} bound"]
        first = min(r["first"] for r in runs)
        print(
            f"  {name} bound: {BOUNDS_SAID[name]} ({runs[0]['events']:,} of {events:,} events drawn): "
            f"first frame {first:.2f} s, {first / floor:.2f}x the whole file's parse floor"
        )
    label = f"{events / 1e6:.2f}M events"
    return [
        Figure(
            f"{label}: cold first frame",
            f"{cold_first / floor:.2f}x ({cold_first:.2f} s)",
            f"<= {COLD_FIRST_FRAME_OVER_FLOOR}x floor",
            f"floor {floor:.2f} s (gunzip + orjson)",
            at_most(cold_first / floor, COLD_FIRST_FRAME_OVER_FLOOR),
        ),
        Figure(
            f"{label}: warm open, readings on screen",
            f"{warm / gunzip:.2f}x ({warm:.2f} s)",
            f"<= {WARM_READINGS_OVER_GUNZIP}x gunzip",
            f"bare gunzip {gunzip:.2f} s",
            at_most(warm / gunzip, WARM_READINGS_OVER_GUNZIP),
        ),
    ]
