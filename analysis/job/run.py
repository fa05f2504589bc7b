"""Reading a job past one process: per-rank tasks on a local process pool or a Dask cluster.

    coordinator                        workers (processes, or Dask workers on other machines)
    job_files(paths)  ── path ──▶      load (Arrow lane cache) → read_ranks → RankReading
    read_job(readings) ◀── small ──    (busy, steps, collective table, coarse profile)

On the pool each file is a task; on Dask a task is a batch of files (``batches``: a few MB of
traces), as each Dask task costs a scheduler round trip that a small rank's reading would pay again.

Each rank's work (parse, cache, per-rank readings, its collective table) is independent, and
a task sends back only its ``RankReading``s (ranks × collectives), never a Trace, so the
coordinator's memory does not grow with events. Dask is optional: imported only for
``--dask`` (``local:N`` starts a LocalCluster of N worker processes; anything else is the
address of a running scheduler whose workers can read the same paths).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import multiprocessing
import os
import re
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field

from gaplens.analysis.job.ranks import RankReading, read_ranks
from gaplens.analysis.job.reading import JobReading, read_job
from gaplens.loaders import load
from gaplens.loaders.files import file_size
from gaplens.loaders.job import JobFile, job_files
from gaplens.loaders.model import TraceError
from gaplens.loaders.text import shorten

#: (ranks done, ranks in all) after each finished task.
Progress = Callable[[int, int], None]


@dataclass
class TaskResult:
    """What one file gave: its ranks, or the one line saying why it gave none."""

    index: int
    path: str
    readings: list[RankReading] = field(default_factory=list)
    error: str = ""
    cpu_s: float = 0.0  # CPU time the task took in its worker (all of the worker's threads)
    wall_s: float = 0.0  # its wall time there: over ``cpu_s``, the time its worker waited for a core


def rank_task(path: str, index: int, use_cache: bool = True, one_core: bool = False) -> TaskResult:
    """Load one file (through the Arrow cache) and read its ranks; never raises.

    ``one_core``: in a pool of one worker per core, Arrow's own thread pool would make each
    worker compete for every core; one thread each keeps N workers on N cores.
    """
    if one_core:
        import pyarrow

        pyarrow.set_cpu_count(1)
    cpu, wall = time.process_time(), time.perf_counter()
    try:
        trace = load(path, use_cache=use_cache)
        readings = read_ranks(trace, index)
        if not readings:
            return TaskResult(index, path, error=f"{path}: no GPU work, so no rank")
        return TaskResult(index, path, readings, cpu_s=time.process_time() - cpu, wall_s=time.perf_counter() - wall)
    except TraceError as exc:
        text = str(exc)
        return TaskResult(index, path, error=text if path in text else f"{path}: {text}")
    except Exception as exc:  # one bad rank must not take the job down
        return TaskResult(index, path, error=f"{path}: internal error: {type(exc).__name__}: {exc}")


#: glibc's mallopt parameters, and where its own adjustment takes the thresholds (malloc.c:
#: DEFAULT_MMAP_THRESHOLD_MAX, and twice that for trimming) and its default mmap threshold.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_DYNAMIC_MMAP_THRESHOLD, _DYNAMIC_TRIM_THRESHOLD = 32 << 20, 64 << 20
_DEFAULT_MMAP_THRESHOLD = 128 << 10
_heap_lock = threading.Lock()
_heap_holders = 0


@functools.lru_cache(maxsize=1)
def _mallopt():
    """glibc's (mallopt, malloc_trim), or None on other C libraries."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        opt, trim = libc.mallopt, libc.malloc_trim
        opt.argtypes, trim.argtypes = [ctypes.c_int, ctypes.c_int], [ctypes.c_size_t]
        return opt, trim
    except (OSError, AttributeError):
        return None


@contextlib.contextmanager
def _unpinned_heap() -> Iterator[None]:
    """Inside: glibc's thresholds where its own adjustment would take them, in a worker that pinned them.

    A Dask nanny starts its workers with ``MALLOC_TRIM_THRESHOLD_`` set (64 KB, to hand memory
    back between tasks); any explicit setting freezes glibc's mmap threshold at 128 KB, so every
    array over 128 KB a rank's reading makes is mapped, faulted in and unmapped again: 118-139 ms of
    CPU per small synthetic rank against 86-104 ms unpinned, in the same runs (``bench rankscale``'s
    ranks, 2-core box). While tasks run here, the thresholds
    are glibc's dynamic maxima; on the way out of the last task, the worker's own come back and
    the free memory is returned.
    """
    global _heap_holders
    pinned = os.environ.get("MALLOC_TRIM_THRESHOLD_", "")
    fns = _mallopt() if pinned.isdigit() else None
    if fns is None:
        yield
        return
    with _heap_lock:
        if _heap_holders == 0:
            fns[0](_M_MMAP_THRESHOLD, _DYNAMIC_MMAP_THRESHOLD)
            fns[0](_M_TRIM_THRESHOLD, _DYNAMIC_TRIM_THRESHOLD)
        _heap_holders += 1
    try:
        yield
    finally:
        with _heap_lock:
            _heap_holders -= 1
            if _heap_holders == 0:
                fns[0](_M_MMAP_THRESHOLD, _DEFAULT_MMAP_THRESHOLD)
                fns[0](_M_TRIM_THRESHOLD, int(pinned))
                fns[1](0)


def rank_batch(paths: list[str], start: int, use_cache: bool = True) -> list[TaskResult]:
    """A Dask task: several files' ``rank_task``s (indices from ``start``), one round trip for all of them."""
    with _unpinned_heap():
        return [rank_task(p, start + k, use_cache, True) for k, p in enumerate(paths)]


def batches(files: list[JobFile], threads: int) -> list[tuple[int, int]]:
    """[start, stop) runs of files, each one Dask task, in order, shrinking as the job ends.

    Each run takes the files left over ``TASKS_PER_THREAD`` x ``threads`` (guided self-scheduling), at
    most ``BATCH_FILES`` and about ``BATCH_BYTES`` of traces: big batches while many files are left,
    then smaller, the last ``TASKS_PER_THREAD`` x ``threads`` files one task each, so the workers finish
    together instead of one idling through another's last batch.
    """
    sizes = [file_size(f.path) for f in files]  # 0 when unreadable: its task says why
    share = max(threads * TASKS_PER_THREAD, 1)
    out: list[tuple[int, int]] = []
    start = 0
    while start < len(sizes):
        cap = max(1, min(BATCH_FILES, (len(sizes) - start) // share))
        stop, held = start + 1, sizes[start]
        while stop < len(sizes) and stop - start < cap and held + sizes[stop] <= BATCH_BYTES:
            held += sizes[stop]
            stop += 1
        out.append((start, stop))
        start = stop
    return out


def _pool_context():
    """Workers start from a clean interpreter (never a fork of a process running threads, such as the viewer)."""
    methods = multiprocessing.get_all_start_methods()
    if "forkserver" in methods:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["gaplens.analysis.job.run"])
        return ctx
    return multiprocessing.get_context("spawn")


def run_local(files: list[JobFile], workers: int | None = None) -> Iterator[TaskResult]:
    """Tasks on a local process pool (``workers`` processes; 0: in this process, one after another)."""
    todo = [(f.path, i) for i, f in enumerate(files)]
    if workers == 0 or len(todo) <= 1:
        for path, i in todo:
            yield rank_task(path, i)
        return
    n = min(workers or cores(), cores(), len(todo))  # more processes than cores only compete
    with ProcessPoolExecutor(max_workers=n, mp_context=_pool_context()) as pool:
        futures = {pool.submit(rank_task, path, i, True, True): (path, i) for path, i in todo}
        for fut in as_completed(futures):
            try:
                yield fut.result()
            except Exception as exc:  # a worker died (out of memory, killed): its ranks are lost, not the job
                path, i = futures[fut]
                yield TaskResult(i, path, error=f"{path}: the worker reading it died ({type(exc).__name__})")


#: Trace bytes (as stored) one Dask task reads at most, unless one file is larger. Small ranks go in batches: each
#: task is a round trip through the scheduler (~3 ms of the client's CPU per task with a LocalCluster, whose
#: scheduler runs in it), paid per rank otherwise: 30 s of a 2-core box's CPU at 10,000 ranks.
BATCH_BYTES = 8 << 20
#: Files one Dask task reads at most: 32 small ranks (180 KB, ~0.1 s of a core each) are ~3 s of work.
BATCH_FILES = 32
#: Tasks per worker thread at least, where there are files enough: the last tasks finish together.
TASKS_PER_THREAD = 4
#: The LocalCluster that ``--dask local:N`` starts for one job. Dask's sampling profiler walks each worker's
#: stacks every 10 ms (a third of a small task's time here); its event-loop health tick (20 ms), system monitor
#: (0.5 s) and the nanny's memory checks (0.1 s) kept an idle cluster of 2 workers at 8% of a core (the client's
#: process, where the scheduler and nannies run, at 4%): 53 s of the client's CPU in a 10,000-rank job of 15
#: minutes. At these intervals the same idle cluster takes 1.6%.
LOCAL_CLUSTER_CONFIG = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "5s",
    "distributed.worker.memory.monitor-interval": "1s",
}
#: Seconds to open a TCP connection to a scheduler and hear its first bytes (a Dask scheduler speaks first).
CONNECT_TIMEOUT_S = 10.0
#: Seconds to wait for a cluster's first worker: a scheduler with none would wait forever.
WORKERS_TIMEOUT_S = 30.0
#: Seconds to wait for the first rank's result: one rank of the largest traces loads in well under a minute.
FIRST_RESULT_TIMEOUT_S = 300.0
#: Largest first message a scheduler's handshake can be (its 8-byte length prefix): an HTTP server's
#: "HTTP/1.0 ..." read as that length asks for exabytes.
_HANDSHAKE_LIMIT = 1 << 20
_ADDRESS = re.compile(r"(?:(tcp|tls)://)?([A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\]):(\d{1,5})")


def cores() -> int:
    """Cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def dask_target(address: str) -> tuple[int, str]:
    """``(workers, "")`` for ``local`` / ``local:N``, ``(0, "scheme://host:port")`` for a scheduler;
    anything else is a one-line TraceError."""
    if address == "local" or address.startswith("local:"):
        text = address.partition(":")[2]
        if not text:
            return cores(), ""
        if not text.isdigit() or int(text) < 1:
            raise TraceError(f"--dask {shorten(address, 40)}: local:N needs a whole number of workers, N >= 1")
        return int(text), ""
    m = _ADDRESS.fullmatch(address)
    if m is None or not 1 <= int(m.group(3)) <= 65535:
        raise TraceError(f"--dask {shorten(address, 60)}: not a scheduler address (tcp://host:port) or local:N")
    return 0, address if m.group(1) else f"tcp://{address}"


def _probe(address: str) -> None:
    """Refuse an address where nothing listens, or something that is not a Dask scheduler (an HTTP server
    answers nothing first, or a length no handshake has), before Dask's client waits on it."""
    scheme, _, rest = address.partition("://")
    if scheme != "tcp":
        return  # TLS: Dask's own connect timeout is all there is
    host, _, port = rest.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S) as sock:
            sock.settimeout(CONNECT_TIMEOUT_S)
            head = b""
            while len(head) < 8:
                got = sock.recv(8 - len(head))
                if not got:
                    break
                head += got
    except TimeoutError:
        raise TraceError(f"no Dask scheduler answered at {address} within {CONNECT_TIMEOUT_S:.0f} s") from None
    except OSError as exc:
        raise TraceError(f"cannot reach the Dask scheduler at {address}: {exc.strerror or exc}") from None
    if len(head) < 8 or not 0 < struct.unpack("<Q", head)[0] <= _HANDSHAKE_LIMIT:
        raise TraceError(f"{address} does not answer as a Dask scheduler")


def run_dask(files: list[JobFile], address: str, warn: Callable[[str], None] | None = None) -> Iterator[TaskResult]:
    """Tasks on a Dask cluster: ``local:N`` starts one here (N capped by the cores), anything else is a
    scheduler address. Every way of not getting results ends in a one-line TraceError, in bounded time."""
    n, remote = dask_target(address)
    try:
        import dask
        from dask.distributed import Client, LocalCluster
        from dask.distributed import as_completed as dask_completed
        from dask.distributed import wait as dask_wait
    except ImportError:
        raise TraceError("--dask needs dask.distributed: pip install 'gaplens[dask]'") from None
    cluster = None
    if not remote and n > cores():
        if warn is not None:
            warn(f"--dask {address}: {cores()} cores here, so {cores()} workers")
        n = cores()
    if remote:
        _probe(remote)
    try:
        if not remote:
            with dask.config.set(LOCAL_CLUSTER_CONFIG):
                cluster = LocalCluster(
                    n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=50
                )
                client = Client(cluster)
        else:
            client = Client(remote, timeout=f"{CONNECT_TIMEOUT_S:.0f}s")
    except Exception as exc:  # OSError, TimeoutError, and what a wrong peer makes Dask raise (MemoryError...)
        if cluster is not None:
            cluster.close()
        raise TraceError(f"cannot reach the Dask scheduler at {address}: {shorten(exc, 120)}") from None
    try:
        try:
            client.wait_for_workers(1, timeout=WORKERS_TIMEOUT_S)
        except (TimeoutError, OSError) as exc:
            raise TraceError(
                f"the Dask scheduler at {address} has no workers (waited {WORKERS_TIMEOUT_S:.0f} s)"
            ) from exc
        paths = [f.path for f in files]
        threads = n or sum(client.nthreads().values())
        runs = batches(files, threads)
        futures = client.map(rank_batch, [paths[a:b] for a, b in runs], [a for a, _ in runs], pure=False)
        run_of = {fut.key: run for fut, run in zip(futures, runs, strict=True)}
        try:
            dask_wait(futures, timeout=FIRST_RESULT_TIMEOUT_S, return_when="FIRST_COMPLETED")
        except TimeoutError:
            raise TraceError(
                f"no rank came back from the Dask cluster at {address} in {FIRST_RESULT_TIMEOUT_S:.0f} s"
            ) from None
        # Results come back in batches as they finish, not one round trip per future; each future is let go
        # once read, so the workers free its result then, not all of them at the end.
        done = dask_completed(futures, with_results=True, raise_errors=False)
        del futures
        for fut, result in done:
            key = fut.key
            del fut
            if isinstance(result, list):
                yield from result
                continue
            a, b = run_of[key]
            # A task that failed: its worker died or was killed, or the cluster runs another gaplens (the scheduler
            # cannot unpickle the task). Its ranks are lost, not the job.
            err = result[1] if isinstance(result, tuple) and len(result) > 1 else None
            why = f"{type(err).__name__}: {shorten(' '.join(str(err).split()), 140)}" if err is not None else "error"
            for k in range(a, b):
                yield TaskResult(k, paths[k], error=f"{paths[k]}: the Dask task reading it failed ({why})")
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def open_job(
    paths: list[str],
    workers: int | None = None,
    dask: str | None = None,
    progress: Progress | None = None,
    warn: Callable[[str], None] | None = None,
) -> JobReading:
    """Read a job: per-rank tasks where asked, then the cross-rank step here.

    Every note (a file that gives no rank, named; how ranks were numbered; a clock that could not
    be aligned) goes to ``warn`` as one line and stays in ``job.notes``; only a job with no usable
    rank raises (TraceError).
    """
    if workers is not None and workers < 0:
        raise TraceError(f"--workers {workers}: needs a number of processes >= 0")
    if dask:
        dask_target(dask)  # a wrong address is said before any file is read
    files = job_files(paths)
    usable = [f for f in files if f.format is not None]
    position = [k for k, f in enumerate(files) if f.format is not None]  # usable index -> file position
    problems = {k: f.problem for k, f in enumerate(files) if f.format is None}
    results: Iterable[TaskResult] = run_dask(usable, dask, warn) if dask else run_local(usable, workers)
    readings: list[RankReading] = []
    cpu_s = 0.0
    for done, res in enumerate(results, 1):
        cpu_s += res.cpu_s
        if res.error:
            problems[position[res.index]] = res.error
        readings += res.readings
        if progress is not None:
            progress(done, len(usable))
    notes = [problems[k] for k in sorted(problems)]
    notes += [f"{r.source}: {w}" for r in sorted(readings, key=lambda r: r.file_index) for w in r.warnings]
    if not readings:
        if warn is not None:
            for note in notes:
                warn(note)
        raise TraceError(f"no usable rank in {', '.join(paths)}")
    # Tasks finish in any order; files keep the order they were given in.
    readings.sort(key=lambda r: (r.file_index, r.device, r.pid or 0))
    for r in readings:
        r.source = usable[r.file_index].path
    job = read_job(readings, notes)
    job.task_cpu_s = cpu_s
    if warn is not None:
        for note in job.notes:
            warn(note)
    return job
