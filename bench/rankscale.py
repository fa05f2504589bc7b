"""`python -m bench rankscale`: 100, 1,000 and 10,000 small synthetic ranks on the process pool and on Dask.

Each rank is one gzipped Kineto file of ~200 KB: the real DDP rank of ``tests/data`` (H200, a
``ProfilerStep`` loop with 36 NCCL collectives: all_to_all and DDP's all-reduce buckets, ~11k
events, every category kept) under its own ``distributedInfo`` rank, a clock offset per host of 8
ranks and jitter on each collective arrival; the planted straggler is the real straggling rank
(20 ms longer in ``data_wait``). Files are written fast as two gzip members (valid gzip, read as one
stream): a small one per rank (header and its jittered collectives) and the rest of the events,
compressed once per template, so 10,000 files take seconds to write rather than minutes.

Each reading runs in a fresh interpreter, the client (``open_job``, the ``gaplens ranks`` process),
which reports its wall time, the resident high-water of its own process (``VmHWM``: the Dask
LocalCluster's scheduler runs in it; the workers are other processes) and its resident size before
the job (imports done, Dask's included), the straggler it found and a digest of ``ranks --json``
(pool and Dask must agree). ``GAPLENS_BENCH_RANKS=100,1000`` picks the sizes.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = tuple(ROOT / "tests" / "data" / f"ddp_straggler_rank{r}.json.gz" for r in (0, 1))
SIZES = (100, 1_000, 10_000)
QUICK_SIZES = (100, 1_000)
#: The planted straggler's rank (taken modulo the job's size): not the first, not the reference rank 0.
PLANTED = 37
#: Worker processes on either path: the dev box has 2 cores.
WORKERS = 2
RANKS_PER_HOST = 8
#: Up to this much later each collective arrives on a rank, its kernel ending where it did (as in ``bench.ranks``).
JITTER_US = 300.0
HOST_OFFSET_NS = 1_700_000_000
#: Free disk kept beyond the job's files: the box is shared.
DISK_MARGIN = 5 << 30
#: Levels of the two gzip members: the shared body as a writer would compress it, the small per-rank one fast.
BODY_LEVEL, HEAD_LEVEL = 6, 1
#: Readings per path for jobs of up to ``ROUNDS_UP_TO`` ranks (one above: 10,000 ranks take tens of minutes).
ROUNDS, ROUNDS_UP_TO = 2, 1_000


def _is_collective(ev: dict) -> bool:
    return ev.get("cat") == "kernel" and "Collective name" in ev.get("args", {})


class _Template:
    """One real rank split for writing: header keys, its collectives (jittered per rank), the rest gzipped once."""

    def __init__(self, path: Path) -> None:
        doc = orjson.loads(gzip.decompress(path.read_bytes()))
        events = doc.pop("traceEvents")
        tail = {"traceName": doc.pop("traceName")} if "traceName" in doc else {}
        self.header = doc
        self.coll = [e for e in events if _is_collective(e)]
        rest = [e for e in events if not _is_collective(e)]
        body = b"," + b",".join(orjson.dumps(e) for e in rest) + b"]"
        body += b"," + orjson.dumps(tail)[1:] if tail else b"}"
        self.body_gz = gzip.compress(body, BODY_LEVEL, mtime=0)

    def rank_file(self, rank: int, world: int, rng: random.Random) -> bytes:
        events = []
        for ev in self.coll:
            d = min(rng.uniform(0, JITTER_US), max(float(ev["dur"]) - 1.0, 0.0))
            events.append({**ev, "ts": round(float(ev["ts"]) + d, 3), "dur": round(float(ev["dur"]) - d, 3)})
        head = {
            **self.header,
            "distributedInfo": {**self.header["distributedInfo"], "rank": rank, "world_size": world},
            "baseTimeNanoseconds": self.header["baseTimeNanoseconds"] + (rank // RANKS_PER_HOST) * HOST_OFFSET_NS,
        }
        text = orjson.dumps(head)[:-1] + b',"traceEvents":[' + b",".join(orjson.dumps(e) for e in events)
        return gzip.compress(text, HEAD_LEVEL, mtime=0) + self.body_gz


def synthesise(folder: Path, n: int, straggler: int, seed: int = 12) -> list[str]:
    """``n`` rank files ``rank{r}.json.gz`` in ``folder``; the paths in rank order."""
    rng = random.Random(seed)
    templates = [_Template(p) for p in TEMPLATES]
    paths = []
    for r in range(n):
        path = folder / f"rank{r}.json.gz"
        path.write_bytes(templates[r == straggler].rank_file(r, n, rng))
        paths.append(str(path))
    return paths


def _status(key: str) -> int:
    """A ``/proc/self/status`` size in bytes (VmRSS, VmHWM); 0 where there is none."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _tree_cpu() -> float:
    """CPU seconds of this process and every live descendant (the pool's or the LocalCluster's workers, their
    start included), read while the workers are still up: the figure a loaded box inflates least."""
    import psutil  # Dask's dependency; here only

    me = psutil.Process()
    total = 0.0
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def child(mode: str, folder: str) -> dict:
    """One reading of the job in this (fresh) process, the client: what ``run`` prints."""
    import pickle

    from gaplens.analysis.job.run import open_job

    if mode == "dask":
        import dask.distributed  # noqa: F401  (imported before the baseline: the client pays it before any rank)
    cache = tempfile.TemporaryDirectory(prefix="gaplens-bench-cache-")  # no reading of another run's cache
    os.environ["GAPLENS_CACHE_DIR"] = cache.name
    base = _status("VmRSS")
    cpu0 = _tree_cpu()
    marks: dict[str, float] = {}
    t0 = time.perf_counter()

    def progress(done: int, total: int) -> None:
        if done == 1:
            marks["first"] = time.perf_counter() - t0
        if done == total:
            marks["last"] = time.perf_counter() - t0
            marks["all_cpu"] = _tree_cpu()

    kw = {"dask": f"local:{WORKERS}"} if mode == "dask" else {"workers": WORKERS}
    cpu = time.process_time()
    job = open_job([folder], progress=progress, **kw)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu
    cache.cleanup()
    hwm = _status("VmHWM")
    s = job.straggler
    sample = job.matched.readings[:100]
    return {
        "wall_s": wall,
        "first_s": marks.get("first", 0.0),
        "tasks_s": marks.get("last", wall),
        "cross_s": wall - marks.get("last", wall),
        "task_cpu_s": job.task_cpu_s,
        "client_cpu_s": cpu,
        "all_cpu_s": marks.get("all_cpu", 0.0) - cpu0,
        "ranks": len(job.rows),
        "straggler": None if s is None else s.rank,
        "cause": None if s is None else s.cause,
        "hwm_b": hwm,
        "base_b": base,
        "reading_b": sum(len(pickle.dumps(r)) for r in sample) / max(len(sample), 1),
        "digest": hashlib.sha256(orjson.dumps(job.to_json(), option=orjson.OPT_SORT_KEYS)).hexdigest()[:16],
    }


def _measure(mode: str, folder: Path) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.rankscale", "--child", mode, str(folder)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} reading failed: {proc.stderr.strip()[-2000:]}")
    return orjson.loads(proc.stdout.strip().splitlines()[-1])


def _load() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def _line(n: int, mode: str, m: dict, planted: int, load: tuple[float, float]) -> str:
    found = "found" if m["straggler"] == planted else f"NOT found (got {m['straggler']})"
    return (
        f"  {n:>6,} ranks  {mode:<4} {m['wall_s']:>7.1f} s  {1e3 * m['wall_s'] * WORKERS / n:>6.1f} ms/rank/core  "
        f"worker CPU {1e3 * m['task_cpu_s'] / n:>5.1f} ms/rank  client CPU {m['client_cpu_s']:>5.1f} s  "
        f"all processes {1e3 * m['all_cpu_s'] / n:>5.1f} ms CPU/rank  "
        f"first rank {m['first_s']:>4.1f} s  "
        f"cross-rank {m['cross_s']:>5.2f} s  client peak {m['hwm_b'] / 2**20:>6.0f} MiB "
        f"(+{(m['hwm_b'] - m['base_b']) / 2**20:.0f} over its {m['base_b'] / 2**20:.0f} MiB start; "
        f"{m['reading_b'] / 1024:.1f} KiB pickled per rank)  straggler {found}  load {load[0]:.1f}->{load[1]:.1f}"
    )


def run(args) -> None:
    if not all(p.exists() for p in TEMPLATES):
        print("rankscale: tests/data/ddp_straggler_rank*.json.gz not found, skipped")
        return
    import importlib.util

    modes = ["pool"] + (["dask"] if importlib.util.find_spec("distributed") is not None else [])
    if "dask" not in modes:
        print("  Dask: dask.distributed not installed (pip install 'gaplens[dask]'), skipped")
    env = os.environ.get("GAPLENS_BENCH_RANKS")
    sizes = tuple(int(x) for x in env.split(",")) if env else QUICK_SIZES if getattr(args, "quick", False) else SIZES
    print(
        f"{os.cpu_count()} cores, {WORKERS} workers on each path; per rank per core = wall x {WORKERS} / ranks; "
        "client peak = VmHWM of the gaplens process (Dask: its scheduler included, its workers not)"
    )
    for n in sizes:
        planted = PLANTED % n
        with tempfile.TemporaryDirectory(prefix="gaplens-bench-rankscale-") as tmp:
            folder = Path(tmp)
            need = n * 260_000 + DISK_MARGIN
            if shutil.disk_usage(folder).free < need:
                print(f"  {n:,} ranks: {need / 2**30:.1f} GiB of free disk needed in {folder}, skipped")
                continue
            t = time.perf_counter()
            paths = synthesise(folder, n, planted)
            size = sum(os.path.getsize(p) for p in paths)
            print(
                f"  {n:,} rank files, {size / n / 1024:.0f} KiB each ({size / 2**20:,.0f} MiB), written in "
                f"{time.perf_counter() - t:.1f} s; straggler planted at rank {planted}"
            )
            # The box is shared: up to 1,000 ranks each path runs twice, the order swapped in the second round.
            rounds = ROUNDS if n <= ROUNDS_UP_TO else 1
            got: dict[str, list[dict]] = {mode: [] for mode in modes}
            for k in range(rounds):
                for mode in modes if k % 2 == 0 else modes[::-1]:
                    before = _load()
                    m = _measure(mode, folder)
                    m["load"] = (before, _load())
                    got[mode].append(m)
                    print(_line(n, mode, m, planted, m["load"]))
                    sys.stdout.flush()
            if len(got) == 2:
                best = {mode: min(ms, key=lambda m: m["wall_s"]) for mode, ms in got.items()}
                same = {m["digest"] for ms in got.values() for m in ms}
                per = ", ".join(
                    f"{d['wall_s'] / p['wall_s']:.2f}x" for p, d in zip(got["pool"], got["dask"], strict=True)
                )
                ratio = best["dask"]["wall_s"] / best["pool"]["wall_s"]
                cpu = sum(m["all_cpu_s"] for m in got["dask"]) / sum(m["all_cpu_s"] for m in got["pool"])
                print(
                    f"  {n:>6,} ranks  dask / pool, best of each: {ratio:.2f}x "
                    f"(target <= 1.2x; round by round {per}); CPU of all processes {cpu:.2f}x; "
                    "same ranks --json every run: "
                    f"{'yes' if len(same) == 1 else 'NO'}"
                )


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        print(orjson.dumps(child(sys.argv[2], sys.argv[3])).decode())
    else:
        import argparse

        parser = argparse.ArgumentParser(prog="python -m bench.rankscale")
        parser.add_argument("--quick", action="store_true")
        run(parser.parse_args())
