"""Hostile inputs that must end, bounded: deep nesting, huge integers, SQLite views, blank bombs (issue 22 item 4).

Each trace is built by hand here; expectations come from what the file holds (two events,
a kernel and its launch), never from the loader's own output.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from gaplens.loaders import load
from gaplens.loaders.validate import JSON_DEPTH_LIMIT, TooDeep, json_depth, loose_json
from gaplens.tui.cli import main

KERNEL = {
    "ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": 5,
    "args": {"correlation": 1, "device": 0, "stream": 7, "grid": [1, 1, 1]},
}  # fmt: skip
LAUNCH = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 90, "dur": 5,
          "args": {"correlation": 1}}  # fmt: skip
EVENTS = json.dumps([KERNEL, LAUNCH])[1:-1]


def _deep(n: int) -> str:
    return "[" * n + "]" * n


def _run(capsys, *argv: str) -> tuple[int, str, list[str]]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "internal error" not in err
    return rc, out, [line for line in err.splitlines() if line.strip()]


# ---- deep nesting -------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [1_100, 10_000])
def test_deep_key_after_the_events_is_a_warning(tmp_path, capsys, depth):
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents":[' + EVENTS + '],"schemaVersion":1,"x":' + _deep(depth) + "}")
    rc, _, err = _run(capsys, "summary", str(path))
    assert rc == 0
    assert len(err) == 1 and f"nested deeper than {JSON_DEPTH_LIMIT} levels after traceEvents" in err[0]
    assert len(load(str(path))) == 2


@pytest.mark.parametrize("depth", [1_100, 10_000])
def test_deep_key_before_the_events_keeps_the_events(tmp_path, capsys, depth):
    path = tmp_path / "t.json"
    path.write_text('{"x":' + _deep(depth) + ',"traceEvents":[' + EVENTS + "]}")
    rc, _, err = _run(capsys, "summary", str(path))
    assert rc == 0
    assert len(err) == 1 and "before traceEvents: the trace's top-level keys are ignored" in err[0]
    assert len(load(str(path))) == 2


def test_loose_json_refuses_depth_without_recursing():
    assert json_depth(b'{"a": "[[[[", "b": [[1], {"c": []}]}') == 4  # brackets in strings do not count
    assert loose_json(b"[NaN, " + _deep(JSON_DEPTH_LIMIT - 1).encode() + b"]") == [None, _nested(JSON_DEPTH_LIMIT - 1)]
    with pytest.raises(TooDeep):
        loose_json(b"[NaN, " + _deep(20_000).encode() + b"]")  # NaN: orjson refuses, the fallback must not recurse
    with pytest.raises(ValueError):
        loose_json(_deep(100_000).encode())


def _nested(n: int) -> list:
    out: list = []
    for _ in range(n - 1):
        out = [out]
    return out


def test_deep_input_dims_are_named_not_printed(tmp_path, capsys):
    op = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 80, "dur": 5}
    text = json.dumps(op)[:-1] + ', "args": {"Input Dims": ' + "[" * 600 + "1.5" + "]" * 600 + "}}"
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents":[' + EVENTS + "," + text + "]}")
    rc, _, _ = _run(capsys, "summary", str(path))
    assert rc == 0
    trace = load(str(path))
    assert "Input Dims [nested deeper than 32 levels]" in trace.details


def test_deep_notes_file_is_ignored_with_one_warning(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GAPLENS_STATE_DIR", str(tmp_path / "state"))
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents":[' + EVENTS + "]}")
    notes = tmp_path / "t.json.gaplens.json"
    deep_key = '"x": ' + _deep(10_000) + ', "notes": []'
    deep_text = '"notes": [{"id": 1, "start_ns": 0, "text": ' + _deep(1000) + "}]"
    for body in (deep_key, deep_text):
        notes.write_text('{"schema": "gaplens-notes", "version": 1, ' + body + "}")
        rc, _, err = _run(capsys, "report", str(path))
        assert rc == 0
        assert any(re.search(r"ignoring notes file", line) for line in err), err


# ---- numbers of any length ----------------------------------------------------------------


def test_a_401_digit_kernel_arg_is_printed_exactly(tmp_path, capsys):
    big = "9" * 401
    kernel = json.dumps({**KERNEL, "args": {**KERNEL["args"], "registers per thread": 0}})
    kernel = kernel.replace('"registers per thread": 0', f'"registers per thread": {big}')
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents":[' + kernel + "," + json.dumps(LAUNCH) + "]}")
    rc, _, _ = _run(capsys, "summary", str(path))
    assert rc == 0
    trace = load(str(path))
    assert any(f"regs {big}" in d for d in trace.details)


# ---- nsys: tables must be tables, queries end -------------------------------------------


def _view_export(tmp_path) -> str:
    """A valid small export whose CUPTI_ACTIVITY_KIND_RUNTIME is a recursive view: rows without end."""
    import sqlite3

    from bench.seeds import write_nsys

    path = write_nsys(tmp_path / "view.sqlite", kernels=5)
    con = sqlite3.connect(path)
    cols = [r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_RUNTIME)")]
    con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME")
    first = ", ".join(f"1 AS {c}" for c in cols)
    step = ", ".join(f"{c} + 1" for c in cols)
    con.execute(
        f"CREATE VIEW CUPTI_ACTIVITY_KIND_RUNTIME AS WITH RECURSIVE r({', '.join(cols)}) AS "
        f"(SELECT {first} UNION ALL SELECT {step} FROM r) SELECT * FROM r"
    )
    con.commit()
    con.close()
    return str(path)


def test_a_view_in_place_of_a_table_is_refused(tmp_path, capsys):
    path = _view_export(tmp_path)
    rc, _, err = _run(capsys, "summary", path)
    assert rc == 2
    assert len(err) == 1 and "CUPTI_ACTIVITY_KIND_RUNTIME is a view, not a table: refused" in err[0]


def test_a_query_that_never_ends_is_stopped(tmp_path, monkeypatch):
    import sqlite3
    import time

    from gaplens.loaders.nsys import files as nsys_files

    path = _view_export(tmp_path)
    monkeypatch.setattr(nsys_files, "QUERY_DEADLINE_S", 0.5)
    con = nsys_files.connect(nsys_files.sqlite_uri(path, immutable=False))
    began = time.monotonic()
    with pytest.raises(sqlite3.OperationalError, match="interrupted"):
        con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()
    assert time.monotonic() - began < 5


# ---- blank bombs: constant memory -------------------------------------------------------


def _gzip_bomb(path, head: str, blanks: int, tail: str, blank: bytes = b" ") -> None:
    import zlib

    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = blank * (1 << 20)
    out = [c.compress(head.encode())] + [c.compress(block) for _ in range(blanks >> 20)]
    path.write_bytes(b"".join([*out, c.compress(tail.encode()), c.flush()]))


@pytest.mark.parametrize(
    "head, tail",
    [
        ('{"traceEvents":[' + json.dumps(KERNEL) + ",", json.dumps(LAUNCH) + "]}"),  # between events
        ('{"schemaVersion": 1,', '"traceEvents":[' + EVENTS + "]}"),  # before the events
        ('{"traceEvents":[' + EVENTS + "],", '"schemaVersion": 1}'),  # after them
    ],
)
def test_a_gzip_blank_bomb_is_read_in_pieces(tmp_path, capsys, head, tail):
    from gaplens.loaders import files
    from gaplens.loaders.kineto.jsonblocks import SQUEEZE, EventBlocks

    path = tmp_path / "bomb.json.gz"
    _gzip_bomb(path, head, 32 << 20, tail, blank=b" \n")
    source = files.Source(str(path))
    biggest = 0

    def chunks():
        nonlocal biggest
        for chunk in source.chunks():
            biggest = max(biggest, len(chunk))
            yield chunk

    blocks = EventBlocks(chunks(), 1 << 20)
    held = sum(len(p.data) for p in blocks)
    assert biggest <= files.MAX_INFLATE
    assert held < 4 * SQUEEZE  # the two events and a few kept blanks, not 32 MB
    assert blocks.structural_events + len(blocks._handed) >= 1 and blocks.warnings == []
    rc, _, err = _run(capsys, "summary", str(path))
    assert rc == 0 and err == []
    assert len(load(str(path))) == 2


def test_blanks_inside_a_string_are_the_trace_s_text(tmp_path):
    name = "x" + " " * (3 * (1 << 16)) + "y"
    op = {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": 80, "dur": 5}
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents":[' + EVENTS + "," + json.dumps(op) + "]}")
    assert name in load(str(path)).names


def test_damage_after_a_squeezed_run_is_placed_in_the_file(tmp_path, capsys):
    head = '{"traceEvents":[' + json.dumps(KERNEL) + ","
    text = head + " " * (1 << 20) + json.dumps(LAUNCH) + ", nonsense"
    path = tmp_path / "t.json"
    path.write_text(text)
    rc, _, err = _run(capsys, "summary", str(path))
    assert rc == 0 and len(err) == 1
    at = text.index(", nonsense")
    assert f"before byte {at}" in err[0], (at, err[0])


# ---- ranges clamped to the trace's limit ------------------------------------------------


def _ranges_trace(path, n: int, days: int) -> None:
    """``n`` launches, kernels and user ranges; each range lasts ``days`` (past 26: clamped, and all nest)."""
    events = []
    for i in range(n):
        t = 1000 + 10 * i
        events.append({**LAUNCH, "ts": t, "dur": 2, "args": {"correlation": i}})
        events.append(
            {
                **KERNEL,
                "name": f"k{i % 7}",
                "ts": t + 3 + (i % 3),
                "dur": 4,
                "args": {**KERNEL["args"], "correlation": i},
            }
        )
        dur = days * 86_400_000_000 if days else 8
        events.append({"ph": "X", "cat": "user_annotation", "name": f"r{i}", "pid": 1, "tid": 1, "ts": t, "dur": dur})
    path.write_text(json.dumps({"traceEvents": events}))


def test_lane_window_is_every_row_s_window(tmp_path):
    path = tmp_path / "t.json"
    _ranges_trace(path, 300, 40)
    trace = load(str(path))
    assert int(trace.depth.max()) > 200  # the clamped ranges nest
    for lane in trace.lanes:
        for t0, t1 in ((1000, 1000), (1500, 1600), (2990, 4000), (0, 10**16)):
            rows = [trace.window(r, t0, t1) for r in trace.rows_of(lane.id)]
            want = np.sort(np.concatenate(rows)) if rows else np.empty(0)
            assert np.array_equal(np.sort(trace.lane_window(lane.id, t0, t1)), want)


def test_clamped_ranges_cost_a_gap_what_normal_ones_do(tmp_path, capsys, monkeypatch):
    from gaplens.loaders.model import Trace
    from gaplens.loaders.trace import ROWS_ONE_BY_ONE

    calls = 0
    window = Trace.window

    def counted(self, *args):
        nonlocal calls
        calls += 1
        return window(self, *args)

    monkeypatch.setattr(Trace, "window", counted)
    path = tmp_path / "t.json"
    _ranges_trace(path, 2000, 40)
    rc, _, err = _run(capsys, "gaps", "--top", "20", str(path))
    assert rc == 0 and "26-day limit clamped" in err[0]
    # Before: every row of the thread was searched for every gap (2,000 rows x 20 gaps).
    assert calls <= 20 * 4 * ROWS_ONE_BY_ONE


# ---- ranks --dask: addresses checked, every wait bounded ---------------------------------

needs_dask = pytest.mark.skipif(
    __import__("importlib").util.find_spec("distributed") is None, reason="dask.distributed not installed"
)
RANKS = ["tests/data/ddp_even_rank0.json.gz", "tests/data/ddp_even_rank1.json.gz"]


@pytest.mark.parametrize("address", ["local:0", "local:-1", "local:two", "http://host:80", "tcp://host:99999", "h"])
def test_a_wrong_dask_address_is_one_line(capsys, address):
    rc, out, err = _run(capsys, "ranks", *RANKS, "--dask", address)
    assert rc == 2 and out == "" and len(err) == 1 and "--dask" in err[0]


def test_dask_targets():
    from gaplens.analysis.job.run import dask_target

    assert dask_target("local:3") == (3, "")
    assert dask_target("10.0.0.7:8786") == (0, "tcp://10.0.0.7:8786")
    assert dask_target("tls://sched.example:8786") == (0, "tls://sched.example:8786")


def test_negative_workers_is_one_line(capsys):
    rc, _, err = _run(capsys, "ranks", *RANKS, "--workers", "-1")
    assert rc == 2 and len(err) == 1 and "--workers" in err[0]


@needs_dask
def test_a_port_that_answers_http_is_not_a_scheduler(monkeypatch):
    import http.server
    import threading

    from gaplens.analysis.job import run as jobrun
    from gaplens.loaders.model import TraceError

    monkeypatch.setattr(jobrun, "CONNECT_TIMEOUT_S", 1.0)
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(TraceError, match="no Dask scheduler answered"):
            jobrun.open_job(RANKS, dask=f"tcp://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()


@needs_dask
def test_a_scheduler_without_workers_is_one_line(monkeypatch):
    from dask.distributed import LocalCluster

    from gaplens.analysis.job import run as jobrun
    from gaplens.loaders.model import TraceError

    monkeypatch.setattr(jobrun, "WORKERS_TIMEOUT_S", 1.0)
    with (
        LocalCluster(
            n_workers=0, processes=False, protocol="tcp://", host="127.0.0.1", dashboard_address=":0"
        ) as cluster,
        pytest.raises(TraceError, match="has no workers"),
    ):
        jobrun.open_job(RANKS, dask=cluster.scheduler_address)


@needs_dask
def test_local_workers_are_capped_by_the_cores(monkeypatch):
    import dask.distributed

    from gaplens.analysis.job import run as jobrun
    from gaplens.loaders.model import TraceError

    asked = []

    def cluster(**kwargs):
        asked.append(kwargs["n_workers"])
        raise OSError("not started in this test")

    monkeypatch.setattr(dask.distributed, "LocalCluster", cluster)
    monkeypatch.setattr(jobrun, "cores", lambda: 2)
    said: list[str] = []
    with pytest.raises(TraceError, match="cannot reach"):
        jobrun.open_job(RANKS, dask="local:12", warn=said.append)
    assert asked == [2] and said == ["--dask local:12: 2 cores here, so 2 workers"]


def test_squeeze_knows_strings_across_chunks():
    """Blank runs inside a string that spans chunks (with escapes at the cuts) are kept; those outside go."""
    from gaplens.loaders.kineto.jsonblocks import SQUEEZE, Squeeze

    pad = b" " * (2 * SQUEEZE)
    full = b'{"a": "x' + pad + b'\\"' + pad + b"\\\\" + b'\\"' + pad + b'y", "b": 1,' + pad + pad + b'"c": 2}'
    first = full.index(b"\\") + 1  # between a backslash and the quote it escapes
    second = full.index(b"\\\\") + 2  # after an escaped backslash, before an escaped quote
    third = full.index(b'"c"') - SQUEEZE  # inside the run outside the string
    chunks = [full[:first], full[first:second], full[second:third], full[third:]]
    squeeze, kept = Squeeze(), []
    for chunk in chunks:
        kept.append(squeeze.chunk(kept, chunk, sum(map(len, kept))))
    text = b"".join(kept)
    assert json.loads(text) == json.loads(full)  # the string's blanks all there
    assert len(text) < len(full) - 3 * SQUEEZE  # the run outside it cut
    assert squeeze.original(len(text) - 1) == len(full) - 1


@needs_dask
def test_no_first_result_in_time_is_one_line(monkeypatch):
    from dask.distributed import LocalCluster

    from gaplens.analysis.job import run as jobrun
    from gaplens.loaders.model import TraceError

    monkeypatch.setattr(jobrun, "FIRST_RESULT_TIMEOUT_S", 0.001)
    with (
        LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=False,
            protocol="tcp://",
            host="127.0.0.1",
            dashboard_address=":0",
        ) as cluster,
        pytest.raises(TraceError, match="no rank came back"),
    ):
        jobrun.open_job(RANKS, dask=cluster.scheduler_address)
