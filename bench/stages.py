"""`python -m bench.stages TRACE [--workers N] [--block MB]`: where one Kineto load spends its CPU.

``bench load`` says how fast a load is; this says why. It times, in this process, each
stage of one cold load with the CPU clock of the thread that runs it (framing and the
build on the reading thread; the Input Dims scan, Arrow's parse and the classification on
the parse threads, summed over them), and prints the whole-process peak per event. On a
many-core host the sum of the parse threads' stages over the wall time says how well they
overlap; what the reading thread does alone (framing, merge, build) bounds the load from
below. This is how the pandas import inside pyarrow 25's ``to_pandas_dtype`` (0.5 s of a
2 s load on the H200 host) and the framer's extra copies showed up.
"""

from __future__ import annotations

import argparse
import collections
import sys
import threading
import time
from collections.abc import Callable

from bench.load import peak_rss


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
    args = parser.parse_args(argv)

    from gaplens.loaders.kineto import jsonblocks
    from gaplens.loaders.kineto import reader as kineto

    if args.workers:
        kineto.WORKERS = args.workers
    if args.block:
        kineto.BLOCK_SIZE = kineto.BIG_BLOCK_SIZE = int(args.block * (1 << 20))
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
