"""`python -m bench.stages TRACE [--workers N] [--block MB] [--memory]`: where one Kineto load spends its CPU,
and (``--memory``) where a cold ``summary``'s memory goes.

``bench load`` says how fast a load is; this says why. It times, in this process, each
stage of one cold load with the CPU clock of the thread that runs it (framing and the
build on the reading thread; the Input Dims scan, Arrow's parse and the classification on
the parse threads, summed over them), and prints the whole-process peak per event. On a
many-core host the sum of the parse threads' stages over the wall time says how well they
overlap; what the reading thread does alone (framing, merge, build) bounds the load from
below. This is how the pandas import inside pyarrow 25's ``to_pandas_dtype`` (0.5 s of a
2 s load on the H200 host) and the framer's extra copies showed up.

``--memory`` also runs the readings of ``gaplens summary`` on the loaded trace and prints, for
each stage on the reading thread (imports, parse, build, readings), the process's peak resident
size during it (Linux: the peak is reset between stages through ``/proc/self/clear_refs``) and
what stays resident after it, then the resident size taken apart: the interpreter and imports,
the Trace's columns, its names and details, the readings kept for the trace's life (``memo``),
and the rest (freed heap the C allocator keeps, the parse's leftovers).
"""

from __future__ import annotations

import argparse
import collections
import sys
import threading
import time
from collections.abc import Callable

from bench.load import peak_rss

MiB = 1 << 20


def _status() -> tuple[int, int]:
    """(resident, peak resident) bytes of this process now."""
    values = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(("VmRSS:", "VmHWM:")):
                values[line[:5]] = int(line.split()[1]) * 1024
    return values.get("VmRSS", 0), values.get("VmHWM", 0)


def _reset_peak() -> bool:
    """Start a new peak (Linux 4.0+: ``5`` to ``clear_refs`` resets VmHWM); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


class _Stages:
    """The peak during, and the resident size after, each stage of the reading thread."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, int, int]] = []
        self.stage = "interpreter and imports"
        self.resets = _reset_peak()

    def mark(self, next_stage: str) -> None:
        rss, peak = _status()
        self.rows.append((self.stage, peak, rss))
        self.stage = next_stage
        _reset_peak()

    def around(self, fn: Callable, name: str) -> Callable:
        def run(*args, **kwargs):
            self.mark(name)
            try:
                return fn(*args, **kwargs)
            finally:
                self.mark(f"after {name}")

        return run


def _nbytes(value, seen: set[int], depth: int = 0) -> int:
    """numpy bytes reachable from a reading (dataclasses, dicts, lists), each array counted once."""
    import dataclasses

    import numpy as np

    if id(value) in seen or depth > 6:
        return 0
    seen.add(id(value))
    if isinstance(value, np.ndarray):
        return value.nbytes
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return sum(_nbytes(getattr(value, f.name), seen, depth + 1) for f in dataclasses.fields(value))
    if isinstance(value, dict):
        return sum(_nbytes(v, seen, depth + 1) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(_nbytes(v, seen, depth + 1) for v in value)
    if hasattr(value, "__dict__"):
        return _nbytes(vars(value), seen, depth + 1)
    return 0


def _memory(trace_path: str, kineto, stages: _Stages) -> None:
    """Load ``trace_path`` and compute ``summary``'s readings, marking the stages; print where the memory went."""
    import dataclasses
    import sys as _sys

    import numpy as np

    from gaplens.analysis import memo
    from gaplens.loaders.kineto.reader import LoadStats
    from gaplens.tui.commands.summary import render_text

    kineto._read_all = stages.around(kineto._read_all, "parse")
    kineto._build = stages.around(kineto._build, "build")
    stats = LoadStats()
    stages.mark("start")
    imports = _status()[0]
    trace = kineto.load_kineto(trace_path, stats=stats)
    stages.mark("readings")
    render_text(trace, 10)
    stages.mark("end")
    events = stats.events
    print(f"{trace_path}: {events:,} events in the file, {len(trace):,} kept")
    print(f"  {'stage':<24} {'peak MiB':>9} {'B/event':>8} {'after MiB':>10}")
    for stage, peak, rss in stages.rows[1:]:
        if stage.startswith("after ") or stage == "start":
            continue
        print(f"  {stage:<24} {peak / MiB:9.1f} {peak / events:8.0f} {rss / MiB:10.1f}")
    top = max(peak for _, peak, _ in stages.rows)
    print(
        f"  whole process peak {top / MiB:.1f} MiB = {top / events:.0f} B/event"
        + ("" if stages.resets else " (per-stage peaks unavailable: no clear_refs)")
    )
    fields = {f.name for f in dataclasses.fields(trace)}
    columns = sum(v.nbytes for k, v in vars(trace).items() if k in fields and isinstance(v, np.ndarray))
    texts = sum(_sys.getsizeof(t) for t in (*trace.names, *trace.details))
    texts += _sys.getsizeof(trace.names) + _sys.getsizeof(trace.details)
    seen = {id(v) for k, v in vars(trace).items() if k in fields}
    kept = sum(_nbytes(hit[1], seen) for table in memo._MEMOS for hit in table.values())
    kept += sum(v.nbytes for k, v in vars(trace).items() if k not in fields and isinstance(v, np.ndarray))
    rss = _status()[0]
    parts = [
        ("interpreter and imports", imports),
        ("the Trace's columns", columns),
        ("names and details", texts),
        ("readings kept (memo)", kept),
        ("the rest (free heap, leftovers)", rss - imports - columns - texts - kept),
    ]
    print(f"  resident after the readings: {rss / MiB:.1f} MiB")
    for name, size in parts:
        print(f"    {name:<32} {size / MiB:8.1f} MiB {size / events:6.0f} B/event")


def _timed(table: collections.Counter, lock: threading.Lock, name: str, fn: Callable) -> Callable:
    def run(*args, **kwargs):
        c0 = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            with lock:
                table[name] += time.thread_time() - c0

    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.stages", description=__doc__)
    parser.add_argument("trace", help="a Kineto .json or .json.gz")
    parser.add_argument("--workers", type=int, help="parse threads (default: the loader's choice for this machine)")
    parser.add_argument("--block", type=float, help="MB of JSON per block (default: the loader's)")
    parser.add_argument("--memory", action="store_true", help="where a cold summary's memory goes, stage by stage")
    args = parser.parse_args(argv)
    marks = _Stages()

    from gaplens.loaders.kineto import jsonblocks
    from gaplens.loaders.kineto import reader as kineto

    if args.workers:
        kineto.WORKERS = args.workers
    if args.block:
        kineto.BLOCK_SIZE = kineto.BIG_BLOCK_SIZE = int(args.block * (1 << 20))
    if args.memory:
        _memory(args.trace, kineto, marks)
        return 0
    cpu: collections.Counter = collections.Counter()
    lock = threading.Lock()
    stages = {
        "framing (reading thread)": (jsonblocks.EventBlocks, "__next__"),
        "merge (reading thread)": (kineto, "_settle"),
        "build (reading thread)": (kineto, "_build"),
        "blank separators (parse threads)": (kineto, "arrow_input"),
        "Input Dims scan (parse threads)": (kineto, "find_dims"),
        "Arrow parse (parse threads)": (kineto, "_read_json"),
        "classification (parse threads)": (kineto, "from_arrow"),
    }
    for name, (owner, attr) in stages.items():
        setattr(owner, attr, _timed(cpu, lock, name, getattr(owner, attr)))
    t0, c0 = time.perf_counter(), time.process_time()
    trace = kineto.load_kineto(args.trace)
    wall, total = time.perf_counter() - t0, time.process_time() - c0
    print(f"{args.trace}: {len(trace):,} events kept, load {wall:.3f} s, CPU {total:.3f} s over all threads")
    for name in stages:
        print(f"  {name:<34} {cpu[name]:7.3f} s CPU")
    print(f"  peak {peak_rss() / max(len(trace), 1):.0f} B per kept event (imports included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
