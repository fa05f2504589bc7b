"""A job's per-rank tasks past one process: Dask batches of ranks, a Dask worker's heap, pool and Dask alike."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

from gaplens.analysis.job.run import BATCH_BYTES, BATCH_FILES, TASKS_PER_THREAD, batches
from gaplens.loaders.job import JobFile
from gaplens.tui.cli import main

needs_dask = pytest.mark.skipif(
    importlib.util.find_spec("distributed") is None, reason="dask.distributed not installed"
)


def _files(tmp_path, sizes: list[int]) -> list[JobFile]:
    out = []
    for k, size in enumerate(sizes):
        path = tmp_path / f"rank{k}.json.gz"
        with open(path, "wb") as fh:
            fh.truncate(size)  # sparse: only the size is read
        out.append(JobFile(str(path), "kineto", ""))
    return out


def _check(runs: list[tuple[int, int]], sizes: list[int], threads: int) -> None:
    """Every file once, in order; no run over ``BATCH_FILES``, nor over ``BATCH_BYTES`` unless one file is; the
    last ``TASKS_PER_THREAD`` x ``threads`` files one task each."""
    assert [k for a, b in runs for k in range(a, b)] == list(range(len(sizes)))
    assert all(b - a <= BATCH_FILES for a, b in runs)
    assert all(b - a == 1 or sum(sizes[a:b]) <= BATCH_BYTES for a, b in runs)
    tail = min(len(sizes), TASKS_PER_THREAD * threads)
    assert runs[-tail:] == [(k, k + 1) for k in range(len(sizes) - tail, len(sizes))]


def test_batches_cover_every_file_once_and_shrink_to_single_files_at_the_end(tmp_path):
    """1,000 small ranks on 2 threads: full batches of ``BATCH_FILES`` first, then fewer files a task, the last 8
    one each. A file larger than ``BATCH_BYTES`` goes alone, and 5 MB files go one or so a task."""
    sizes = [180_000] * 1000
    runs = batches(_files(tmp_path, sizes), threads=2)
    _check(runs, sizes, 2)
    assert runs[0] == (0, BATCH_FILES) and len(runs) < 1000 // 8
    sizes = [100_000] * 10 + [BATCH_BYTES + 1] + [100_000] * 50 + [5 << 20] * 4 + [100_000] * 35
    runs = batches(_files(tmp_path, sizes), threads=1)
    _check(runs, sizes, 1)
    assert (10, 11) in runs and runs[0] == (0, 10)  # the big file alone; the batch before it stops short of it
    assert batches(_files(tmp_path, [1000] * 3), threads=8) == [(0, 1), (1, 2), (2, 3)]
    assert batches([], threads=2) == []


def test_a_dask_workers_pinned_heap_is_unpinned_while_ranks_are_read():
    """A Dask nanny starts workers with ``MALLOC_TRIM_THRESHOLD_`` set, which freezes glibc's mmap threshold:
    each 1 MB array is mapped and its pages faulted in again. Inside ``_unpinned_heap`` they are reused."""
    script = textwrap.dedent(
        """
        import resource, numpy as np
        from gaplens.analysis.job.run import _unpinned_heap

        def faults():
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            for _ in range(40):
                a = np.ones(1 << 17)  # 1 MB
                del a
            return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

        pinned = faults()
        with _unpinned_heap():
            inside = faults()
        print(pinned, inside, faults())
        """
    )
    env = {**os.environ, "MALLOC_TRIM_THRESHOLD_": "65536"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    pinned, inside, after = map(int, out.stdout.split())
    assert pinned >= 40 * 200  # 256 pages a MB, every time
    assert inside < pinned / 10
    assert after >= 40 * 200  # the worker's own setting is back


@needs_dask
@pytest.mark.slow
def test_pool_and_dask_read_the_same_synthetic_job(tmp_path, capsys):
    """12 synthetic ranks (``bench.rankscale``: the real DDP rank under 12 ranks, hosts of 8 seconds apart, the
    real straggling rank planted at 5): the process pool and a Dask LocalCluster (batches of ranks) print the
    same ``ranks --json``, and both name the planted rank."""
    from bench.rankscale import synthesise

    synthesise(tmp_path, 12, 5)
    rc, pool, _ = main(["ranks", str(tmp_path), "--json", "--workers", "2"]), *capsys.readouterr()
    assert rc == 0
    rc, dask, _ = main(["ranks", str(tmp_path), "--json", "--dask", "local:2"]), *capsys.readouterr()
    assert rc == 0
    doc = json.loads(pool)
    assert json.loads(dask) == doc
    assert doc["straggler"]["rank"] == 5 and doc["straggler"]["cause"] == "host"
    assert len(doc["ranks"]) == 12 and doc["clock_offsets_ns"]["8"] != 0  # the second host's clock was aligned


def _fail_second(paths: list[str], start: int, use_cache: bool = True):
    """A Dask task that dies on the batch of the second file, as a worker out of memory would."""
    if start == 1:
        raise MemoryError("worker out of memory")
    from gaplens.analysis.job.run import rank_task

    return [rank_task(p, start + k, use_cache) for k, p in enumerate(paths)]


@needs_dask
def test_a_failed_dask_task_loses_its_files_not_the_job(monkeypatch):
    """The task of rank 1's file fails on the cluster: one warning line names the file and why; rank 0 is read."""
    from dask.distributed import LocalCluster

    import gaplens.analysis.job.run as jobrun
    from tests.test_ranks import pair

    monkeypatch.setattr(jobrun, "rank_batch", _fail_second)  # in-process workers look the task up here
    said: list[str] = []
    with LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, protocol="tcp", dashboard_address=None
    ) as cluster:
        job = jobrun.open_job(pair("ddp_straggler"), dask=cluster.scheduler_address, warn=said.append)
    assert [r.rank for r in job.rows] == [0]
    failed = [line for line in said if "rank1" in line]
    assert failed == [
        f"{pair('ddp_straggler')[1]}: the Dask task reading it failed (MemoryError: worker out of memory)"
    ]
