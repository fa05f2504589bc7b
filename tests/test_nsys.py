"""The nsys loader against real exports: totals equal direct SQL and the `nsys stats` CSVs beside them."""

from __future__ import annotations

import collections
import csv
import gzip
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from gaplens.loaders.model import MEMCPY_KINDS, Kind, LaneKind
from gaplens.loaders.nsys.parts import api_display_name
from tests.conftest import PUBLIC, SAMPLES, loaded, requires_shared, shared_file

pytestmark = requires_shared

H200 = ["nsys_decode_eager", "nsys_decode_graphs", "nsys_smells", "nsys_train_step"]
EDGE = "edge/nsys2022_decode_eager_no_kernels"
PIPIT = sorted(p.name for p in (PUBLIC / "pipit").glob("*.sqlite")) or ["missing"]
ALL = [f"{n}.sqlite.gz" for n in (*H200, EDGE)] + [f"../public-samples/pipit/{p}" for p in PIPIT]


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """Plain SQLite copies for direct SQL, unpacked here with gzip (independent of the loader)."""
    folder = tmp_path_factory.mktemp("nsys-plain")
    cache: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in cache:
            src = shared_file(f"samples/{name}")
            dst = folder / Path(name).name.replace(".gz", "")
            if name.endswith(".gz"):
                with gzip.open(src) as fin, open(dst, "wb") as fout:
                    shutil.copyfileobj(fin, fout)
            else:
                shutil.copyfile(src, dst)
            cache[name] = dst
        return cache[name]

    return get


def _sql(path: Path, query: str):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(query).fetchone()
    finally:
        con.close()


def _tables(path: Path) -> set[str]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        con.close()


def _totals(trace, kinds) -> tuple[int, int]:
    m = trace.mask(kinds)
    return int(m.sum()), int((trace.end_ns[m] - trace.start_ns[m]).sum())


@pytest.mark.parametrize("name", ALL)
def test_every_export_loads(name):
    trace = loaded(name)
    assert trace.meta.source_format == "nsys"
    assert len(trace) > 0
    assert trace.meta.source_version.startswith("nsys 20")
    # Rows are sorted by start and the running max is consistent.
    for row in range(trace.row_lane.size):
        sl = trace.row_slice(row)
        assert np.all(np.diff(trace.start_ns[sl]) >= 0)
    # Only processes that own events are named (system-wide captures list thousands).
    assert 1 <= len(trace.meta.processes) <= 4
    assert all("_v" not in trace.names[int(i)] for i in np.unique(trace.name_id[trace.kind == int(Kind.CUDA_API)]))


@pytest.mark.parametrize("name", ALL)
def test_gpu_totals_equal_direct_sql(name, plain):
    trace = loaded(name)
    db = plain(name)
    tables = _tables(db)
    spec = [
        ("CUPTI_ACTIVITY_KIND_KERNEL", (Kind.KERNEL,)),
        ("CUPTI_ACTIVITY_KIND_MEMCPY", MEMCPY_KINDS),
        ("CUPTI_ACTIVITY_KIND_MEMSET", (Kind.MEMSET,)),
        ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", (Kind.SYNC,)),
    ]
    for table, kinds in spec:
        want = _sql(db, f'SELECT count(*), ifnull(sum("end" - start), 0) FROM {table}') if table in tables else (0, 0)
        assert _totals(trace, kinds) == tuple(want), table
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables:
        (nbytes,) = _sql(db, "SELECT ifnull(sum(bytes), 0) FROM CUPTI_ACTIVITY_KIND_MEMCPY")
        assert int(trace.bytes[trace.mask(MEMCPY_KINDS)].sum()) == nbytes
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        want = _sql(db, 'SELECT count(*), sum("end" - start) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE eventClass != 67')
        assert _totals(trace, (Kind.CUDA_API,)) == tuple(want)
    if "OSRT_API" in tables:
        want = _sql(db, 'SELECT count(*), ifnull(sum("end" - start), 0) FROM OSRT_API')
        assert _totals(trace, (Kind.OSRT,)) == tuple(want)
    # Devices: only GPUs with events, named from TARGET_INFO_GPU.
    used = {ln.device for ln in trace.lanes if ln.is_gpu}
    assert {d.id for d in trace.meta.devices} == used
    for d in trace.meta.devices:
        assert d.name == _sql(db, f"SELECT name FROM TARGET_INFO_GPU WHERE id = {d.id}")[0]


def test_known_counts_from_readme():
    trace = loaded("nsys_decode_eager.sqlite.gz")
    assert _totals(trace, (Kind.KERNEL,))[0] == 34_080
    assert int(trace.mask(MEMCPY_KINDS).sum()) == 435
    assert int((trace.kind == int(Kind.SYNC)).sum()) == 579
    assert abs(_totals(trace, (Kind.KERNEL,))[1] / 1e6 - 80.10) < 0.01
    # The pageable 128 MiB copies of smells are Host-to-Device with their memory kinds.
    smells = loaded("nsys_smells.sqlite.gz")
    htod = np.flatnonzero(smells.kind == int(Kind.MEMCPY_HTOD))
    assert htod.size == 3 and set(smells.bytes[htod].tolist()) == {134_217_728}
    assert {smells.names[int(smells.name_id[i])] for i in htod} == {"Memcpy HtoD (Pageable -> Device)"}


def _csv(path: Path, key: str, count: str, fold=lambda s: s) -> dict[str, list[int]]:
    out: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            k = fold(row[key])
            out[k][0] += int(row[count])
            out[k][1] += int(row["Total Time (ns)"])
    return dict(out)


def _by(trace, kind: Kind, label) -> dict[str, list[int]]:
    idx = np.flatnonzero(trace.kind == int(kind))
    out: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    dur = (trace.end_ns[idx] - trace.start_ns[idx]).tolist()
    for i, d in zip(idx.tolist(), dur, strict=True):
        k = label(i)
        out[k][0] += 1
        out[k][1] += d
    return dict(out)


@pytest.mark.parametrize("name", H200)
def test_per_name_totals_equal_nsys_stats(name):
    trace = loaded(f"{name}.sqlite.gz")
    ref = SAMPLES / f"{name}.reference"
    # cuda_api_sum strips only 4-digit suffixes; fold both sides through our display name.
    api = _by(trace, Kind.CUDA_API, lambda i: trace.names[int(trace.name_id[i])])
    assert api == _csv(ref / "stats_cuda_api_sum.csv", "Name", "Num Calls", api_display_name)
    # cuda_gpu_kern_sum groups by demangled name, which our details carry after the launch geometry.
    kern = _by(trace, Kind.KERNEL, lambda i: trace.details[int(trace.detail_id[i])].split("  ·  ", 1)[1])
    assert kern == _csv(ref / "stats_cuda_gpu_kern_sum.csv", "Name", "Instances")
    # nvtx_sum prefixes ranges of the default domain with ":".
    ranges = _by(trace, Kind.ANNOTATION, lambda i: trace.names[int(trace.name_id[i])])
    assert ranges == _csv(ref / "stats_nvtx_sum.csv", "Range", "Instances", lambda s: s.removeprefix(":"))


def test_every_gpu_op_finds_its_launch_in_its_process():
    for name in H200:
        trace = loaded(f"{name}.sqlite.gz")
        gpu = np.flatnonzero(trace.mask((Kind.KERNEL, *MEMCPY_KINDS, Kind.MEMSET, Kind.SYNC)))
        assert np.all(trace.launch[gpu] >= 0), name
        src = trace.launch[gpu]
        assert np.all(trace.kind[src] == int(Kind.CUDA_API))
        assert np.all(trace.corr[src] == trace.corr[gpu])


def test_graph_node_kernels_link_to_their_graph_launch():
    trace = loaded("nsys_decode_graphs.sqlite.gz")
    launches = [
        i
        for i in np.flatnonzero(trace.kind == int(Kind.CUDA_API)).tolist()
        if trace.names[int(trace.name_id[i])] == "cudaGraphLaunch"
    ]
    assert launches
    fanout = [int((trace.kind[trace.launched_by(i)] == int(Kind.KERNEL)).sum()) for i in launches]
    assert max(fanout) == 580
    assert sum(fanout) == 37_120  # every kernel with a graphNodeId


def test_sync_rows_are_named_from_the_blocking_call():
    trace = loaded("nsys_decode_eager.sqlite.gz")
    sync = np.flatnonzero(trace.kind == int(Kind.SYNC))
    names = collections.Counter(trace.names[int(trace.name_id[i])] for i in sync)
    calls = collections.Counter(trace.names[int(trace.name_id[trace.launch[i]])] for i in sync)
    assert names["Stream sync"] == calls["cudaStreamSynchronize"] > 0
    assert all(trace.lanes[int(trace.lane[i])].kind == LaneKind.GPU_SYNC for i in sync)


def test_edge_2022_export_loads_and_says_what_is_missing():
    trace = loaded(f"{EDGE}.sqlite.gz")
    assert "gpu" in trace.meta.lacks
    assert any("CUPTI_ACTIVITY_KIND_KERNEL" in w for w in trace.meta.warnings)
    assert _totals(trace, (Kind.KERNEL,)) == (0, 0)
    assert int((trace.kind == int(Kind.CUDA_API)).sum()) == 2
    assert int((trace.kind == int(Kind.OSRT)).sum()) == 6_674
    ranges = _by(trace, Kind.ANNOTATION, lambda i: trace.names[int(trace.name_id[i])])
    ref = SAMPLES / f"{EDGE}.reference"
    assert ranges == _csv(ref / "nvtxsum.csv", "Range", "Instances")


def test_pipit_2022_backtrace_duplicates_and_domains():
    trace = loaded("../public-samples/pipit/saxpy_mpi_nsys2022.2.sqlite")
    # 95 runtime rows of which 38 are eventClass-67 backtrace copies.
    assert int((trace.kind == int(Kind.CUDA_API)).sum()) == 57
    names = {trace.names[int(i)] for i in np.unique(trace.name_id[trace.kind == int(Kind.ANNOTATION)])}
    assert "MPI:MPI_Init" in names  # non-default domain resolved from its create row
    assert "saxpy" in names  # registered string (textId)
    assert trace.meta.threads.get((1230493, 1230493)) == "MPI Rank 0"
