"""nsys inputs beyond the happy path: bad files, CPU-only and edited exports, the gzip cache, .nsys-rep."""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import sqlite3

import numpy as np
import pytest

from bench.nsys_synth import make_export
from gaplens.loaders import load
from gaplens.loaders.model import Kind, LaneKind, TraceError
from gaplens.loaders.nsys.files import export_command
from gaplens.tui.cli import main
from tests.conftest import SAMPLES, missing_shared, public, requires_shared

pytestmark = requires_shared

SMELLS = SAMPLES / "nsys_smells.sqlite.gz"


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GAPLENS_CACHE_DIR", str(tmp_path / "cache"))


def _exit_2_one_line(path, capsys, *expect: str) -> str:
    capsys.readouterr()
    assert main(["summary", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gaplens: "), err
    for text in expect:
        assert text in err, err
    return err


def test_sqlite_that_is_not_nsys(tmp_path, capsys):
    db = tmp_path / "other.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE t (a INTEGER)")
    con.commit()
    con.close()
    _exit_2_one_line(db, capsys, "not an Nsight Systems export")


def test_corrupt_and_truncated_files(tmp_path, smells_copy, capsys):
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"SQLite format 3\x00" + os.urandom(8192))
    _exit_2_one_line(bad, capsys, "bad.sqlite")
    truncated = tmp_path / "truncated.sqlite"
    truncated.write_bytes(smells_copy.read_bytes()[: 64 * 1024])
    _exit_2_one_line(truncated, capsys, "truncated.sqlite")
    gz = tmp_path / "cut.sqlite.gz"
    gz.write_bytes(SMELLS.read_bytes()[:50_000])
    _exit_2_one_line(gz, capsys, "truncated")


def test_unreadable_paths(tmp_path, capsys):
    folder = tmp_path / "dir.sqlite"
    folder.mkdir()
    _exit_2_one_line(folder, capsys, "directory")
    _exit_2_one_line(tmp_path / "missing.sqlite", capsys, "no such file")


def test_locked_database(smells_copy, capsys, monkeypatch):
    import gaplens.loaders.nsys.files as files

    monkeypatch.setattr(files, "BUSY_TIMEOUT_S", 0.05)
    writer = sqlite3.connect(smells_copy)
    writer.execute("BEGIN EXCLUSIVE")
    try:
        _exit_2_one_line(smells_copy, capsys, "locked")
    finally:
        writer.rollback()
        writer.close()


def test_nsys_rep_without_nsys_names_the_export_command(tmp_path, capsys, monkeypatch):
    rep = tmp_path / "run 1.nsys-rep"
    rep.write_bytes(b"not really a report")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    err = _exit_2_one_line(rep, capsys, "nsys export --type sqlite -o")
    assert export_command(str(rep)) in err
    assert "'" in export_command(str(rep))  # the space in the name is quoted for the shell


def test_nsys_rep_with_a_fake_nsys_exports_into_the_cache(tmp_path, monkeypatch):
    """A stand-in `nsys` that copies a real export proves the command line and the cache."""
    if not SMELLS.exists():
        missing_shared("shared/samples/nsys_smells.sqlite.gz")
    plain = tmp_path / "plain.sqlite"
    with gzip.open(SMELLS) as fin, open(plain, "wb") as fout:
        shutil.copyfileobj(fin, fout)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nsys"
    fake.write_text(f'#!/bin/sh\n# args: export --type sqlite --force-overwrite true -o OUT REP\ncp "{plain}" "$7"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    rep = tmp_path / "capture.nsys-rep"
    rep.write_bytes(b"report")
    trace = load(rep)
    assert int((trace.kind == int(Kind.KERNEL)).sum()) == 2508
    assert len(list((tmp_path / "cache").glob("capture-*.sqlite"))) == 1


def test_gzip_is_unpacked_once_into_the_cache(tmp_path):
    src = tmp_path / "copy.sqlite.gz"
    shutil.copyfile(SMELLS, src)
    before = hashlib.sha256(src.read_bytes()).hexdigest()
    first = load(src)
    cached = list((tmp_path / "cache").glob("copy-*.sqlite"))
    assert len(cached) == 1
    stamp = cached[0].stat().st_mtime_ns
    second = load(src)
    assert cached[0].stat().st_mtime_ns == stamp  # reused, not rewritten
    assert len(first) == len(second)
    assert hashlib.sha256(src.read_bytes()).hexdigest() == before
    # A changed source (new mtime) gets a fresh copy and the stale one is dropped.
    os.utime(src, ns=(stamp + 10**9, stamp + 10**9))
    load(src)
    assert len(list((tmp_path / "cache").glob("copy-*.sqlite"))) == 1
    assert not list((tmp_path / "cache").glob("*.tmp"))


def test_plain_export_is_never_modified(smells_copy):
    before = hashlib.sha256(smells_copy.read_bytes()).hexdigest()
    stamp = smells_copy.stat().st_mtime_ns
    load(smells_copy)
    assert hashlib.sha256(smells_copy.read_bytes()).hexdigest() == before
    assert smells_copy.stat().st_mtime_ns == stamp
    # No journal, WAL or shm file was created beside it.
    assert {p.name for p in smells_copy.parent.iterdir()} <= {"edit.sqlite", "cache"}


def test_cpu_only_export_loads_and_says_so(smells_copy, capsys):
    con = sqlite3.connect(smells_copy)
    for (table,) in con.execute("SELECT name FROM sqlite_master WHERE name LIKE 'CUPTI_ACTIVITY_KIND_%'").fetchall():
        con.execute(f"DROP TABLE {table}")
    con.commit()
    con.close()
    trace = load(smells_copy)
    assert {"gpu", "cuda_api"} <= set(trace.meta.lacks)
    assert any("CPU-only" in w for w in trace.meta.warnings)
    assert int((trace.kind == int(Kind.ANNOTATION)).sum()) == 21
    assert not trace.meta.devices
    assert main(["summary", str(smells_copy)]) == 0
    assert "CPU-only" in capsys.readouterr().err


def test_nvtx_marks_domains_open_and_cross_thread_ranges(smells_copy):
    con = sqlite3.connect(smells_copy)
    (tid,) = con.execute("SELECT globalTid FROM NVTX_EVENTS LIMIT 1").fetchone()
    (sid,) = con.execute("SELECT max(id) + 1 FROM StringIds").fetchone()
    con.execute("INSERT INTO StringIds VALUES (?, 'registered name')", (sid,))
    rows = [
        (-5, None, 75, "MyLib", tid, None, None, 7),
        (-1000, -10, 59, "before the session", tid, None, None, 0),
        (5_000_000_000, 5_000_000_100, 59, "in a domain", tid, None, None, 7),
        (5_000_000_200, 5_000_000_300, 59, None, tid, None, sid, 0),
        (5_000_000_400, None, 34, "a mark", tid, None, None, 0),
        (5_000_000_500, None, 59, "never closed", tid, None, None, 0),
        (5_000_000_600, 5_000_000_900, 60, "handoff", tid, tid + 1, None, 0),
    ]
    con.executemany(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, endGlobalTid, textId, domainId)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    con.commit()
    con.close()
    trace = load(smells_copy)
    origin = trace.meta.origin_ns
    assert origin == -1000  # negative timestamps are kept, not clamped

    def find(name: str) -> int:
        hits = [i for i in range(len(trace)) if trace.names[int(trace.name_id[i])] == name]
        assert len(hits) == 1, name
        return hits[0]

    assert trace.kind[find("MyLib:in a domain")] == int(Kind.ANNOTATION)
    assert trace.kind[find("registered name")] == int(Kind.ANNOTATION)
    mark = find("a mark")
    assert trace.kind[mark] == int(Kind.MARK) and trace.start_ns[mark] == trace.end_ns[mark]
    open_ = find("never closed")
    assert trace.end_ns[open_] == int(trace.end_ns.max())
    assert "open until the end" in trace.details[int(trace.detail_id[open_])]
    handoff = find("handoff")
    assert "ending on thread" in trace.details[int(trace.detail_id[handoff])]
    assert trace.lanes[int(trace.lane[handoff])].kind == LaneKind.ANNOTATIONS
    assert any("no end" in w for w in trace.meta.warnings)


def test_correlation_ids_join_per_process(tmp_path):
    """Two processes reuse correlation ids 1..N; each kernel must link to its own process's launch."""
    path = tmp_path / "two.sqlite"
    info = make_export(path, kernels=4000, processes=2, nvtx_every=500)
    trace = load(path)
    k = np.flatnonzero(trace.kind == int(Kind.KERNEL))
    assert k.size == info["kernels"]
    assert np.all(trace.launch[k] >= 0)
    launch_pid = np.array([trace.lanes[int(trace.lane[i])].pid for i in trace.launch[k]])
    stream = np.array([trace.lanes[int(trace.lane[i])].stream for i in k])
    assert set(np.unique(launch_pid[stream == 7]).tolist()) == {info["pids"][0]}
    assert set(np.unique(launch_pid[stream == 13]).tolist()) == {info["pids"][1]}
    assert set(trace.meta.processes) == set(info["pids"])


def test_synthetic_export_has_the_real_schema(tmp_path, smells_copy):
    path = tmp_path / "s.sqlite"
    make_export(path, kernels=10)

    def cols(db, table):
        con = sqlite3.connect(db)
        try:
            return [r[1] for r in con.execute(f"PRAGMA table_info({table})")]
        finally:
            con.close()

    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "StringIds"):
        assert cols(path, table) == cols(smells_copy, table)


def test_trace_error_type_for_library_callers(tmp_path):
    with pytest.raises(TraceError):
        load(tmp_path / "nothing.sqlite")


def test_graph_level_trace_draws_one_box_per_launch(smells_copy):
    """`--cuda-graph-trace=graph` rows become GRAPH boxes on their stream, linked to the launch call."""
    con = sqlite3.connect(smells_copy)
    con.execute(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start INTEGER NOT NULL, end INTEGER NOT NULL,"
        " deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL,"
        " correlationId INTEGER, globalPid INTEGER, graphId INTEGER NOT NULL, graphExecId INTEGER)"
    )
    gtid, corr, end = con.execute(
        'SELECT globalTid, correlationId, "end" FROM CUPTI_ACTIVITY_KIND_RUNTIME'
        " WHERE correlationId NOT IN (SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL)"
        " AND correlationId NOT IN (SELECT correlationId FROM CUPTI_ACTIVITY_KIND_MEMCPY) ORDER BY start DESC LIMIT 1"
    ).fetchone()
    (kernel_corr,) = con.execute("SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1").fetchone()
    gpid = gtid & ~0xFFFFFF
    con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE VALUES (?, ?, 0, 1, NULL, 99, ?, ?, 5, 1)",
        [(end + 1000, end + 51000, corr, gpid), (end + 60000, end + 70000, kernel_corr, gpid)],
    )
    con.commit()
    con.close()
    trace = load(smells_copy)
    graphs = np.flatnonzero(trace.kind == int(Kind.GRAPH))
    # The second row duplicates traced nodes (its correlation id has kernels) and is dropped.
    assert graphs.size == 1
    g = int(graphs[0])
    assert trace.end_ns[g] - trace.start_ns[g] == 50_000
    assert trace.names[int(trace.name_id[g])] == "CUDA graph 5"
    assert trace.lanes[int(trace.lane[g])].stream == 99
    assert trace.corr[trace.launch[g]] == corr


def test_filtered_export_and_unsigned_stream_priority(smells_copy):
    con = sqlite3.connect(smells_copy)
    con.execute("UPDATE META_DATA_EXPORT SET value = '1s/2s' WHERE name = 'EXPORT_PARAM_TIMES_TO_EXPORT'")
    con.execute("UPDATE TARGET_INFO_CUDA_STREAM SET priority = 4294967291")
    con.commit()
    con.close()
    trace = load(smells_copy)
    assert any("filtered export" in w for w in trace.meta.warnings)
    assert {s["priority"] for s in trace.meta.extra["streams"]} == {-5}
    assert trace.meta.extra["time_base"] == "session_start"
    assert trace.meta.extra["utc_epoch_ns"] == 1795947171926890507


def test_builtin_enums_for_exports_without_enum_tables():
    trace = load(public("pipit/saxpy_mpi_nsys2022.2.sqlite"))
    names = {trace.names[int(i)] for i in np.unique(trace.name_id[trace.mask((Kind.MEMCPY_HTOD, Kind.MEMCPY_DTOH))])}
    assert names == {"Memcpy HtoD (Pageable -> Device)", "Memcpy DtoH (Device -> Pageable)"}


def test_progress_is_reported_in_order(smells_copy):
    seen: list[tuple[str, float]] = []
    load(smells_copy, lambda label, frac: seen.append((label, frac)))
    fracs = [f for _, f in seen]
    assert fracs == sorted(fracs) and fracs[-1] == 1.0
    assert any(label.startswith("reading kernels") for label, _ in seen)


def test_permission_denied(smells_copy, capsys):
    smells_copy.chmod(0)
    try:
        if os.access(smells_copy, os.R_OK):
            pytest.skip("running as root: permission bits do not stop reads (directory and lock cases cover it)")
        _exit_2_one_line(smells_copy, capsys, "permission denied")
    finally:
        smells_copy.chmod(0o644)
