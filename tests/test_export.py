"""`gaplens export`: a Chrome-trace JSON that Perfetto opens and gaplens reads back (with its own tracks as lanes),
and CSV / Parquet tables of events and gaps."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from gaplens.analysis.gaps import gap_columns
from gaplens.analysis.phases import phases
from gaplens.analysis.smells import smells
from gaplens.analysis.summary import summary
from gaplens.loaders import load
from gaplens.loaders.model import Kind
from gaplens.tui.cli import main
from tests.conftest import loaded, sample

#: Phases Perfetto's JSON importer reads: complete slices, instants, metadata, flow start/end.
PHASES = {"X", "i", "M", "s", "f"}
METADATA = {"process_name": "name", "thread_name": "name", "process_sort_index": "sort_index"}


@pytest.fixture(scope="module", params=["smells.json.gz", "nsys_smells.sqlite.gz"])
def exported(request, tmp_path_factory) -> tuple[str, Path]:
    out = tmp_path_factory.mktemp("export") / "trace.json"
    assert main(["export", str(sample(request.param)), "--perfetto", str(out)]) == 0
    return request.param, out


def test_the_file_has_the_chrome_trace_structure_perfetto_reads(exported):
    name, out = exported
    doc = json.loads(out.read_bytes())
    events = doc["traceEvents"]
    assert isinstance(events, list) and events
    trace = loaded(name)
    assert doc["baseTimeNanoseconds"] == trace.meta.origin_ns and doc["displayTimeUnit"] == "ns"
    for ev in events:
        assert ev["ph"] in PHASES and isinstance(ev["name"], str)
        assert isinstance(ev["pid"], int) and isinstance(ev["tid"], int)
        if ev["ph"] == "M":
            assert ev["name"] in METADATA and METADATA[ev["name"]] in ev["args"]
        elif ev["ph"] == "X":
            assert isinstance(ev["cat"], str) and ev["ts"] >= 0 and ev["dur"] >= 0
        else:
            assert isinstance(ev["ts"], float | int)
    # ts/dur are µs with ns decimals: the first kernel lands on its own nanosecond.
    k = int(np.flatnonzero(trace.kind == int(Kind.KERNEL))[0])
    match = [e for e in events if e["ph"] == "X" and e["cat"] == "kernel" and e["name"] == trace.name(k)]
    assert any(round(e["ts"] * 1000) == trace.start_ns[k] for e in match)
    named = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    slices = {(e["pid"], e["tid"]) for e in events if e["ph"] == "X"}
    gaplens_pid = next(e["pid"] for e in events if e["ph"] == "M" and e["args"].get("name") == "gaplens")
    assert {s for s in slices if s[0] == gaplens_pid} <= named  # every gaplens track has a name


def test_it_loads_back_with_the_gaplens_tracks_as_lanes_and_the_same_readings(exported):
    name, out = exported
    before, after = loaded(name), load(out, use_cache=False)
    pid = next(p for p, n in after.meta.processes.items() if n == "gaplens")
    tracks = {n: tid for (p, tid), n in after.meta.threads.items() if p == pid}
    assert {"blank regions GPU 0", "phases (GPU span)", "critical path"} <= set(tracks)
    assert {f"smells: {f.kind}" for f in smells(before)} <= set(tracks)

    def count(track: str) -> int:
        lanes = [ln.id for ln in after.lanes if ln.pid == pid and ln.tid == tracks[track]]
        return int(np.isin(after.lane, lanes).sum())

    assert count("blank regions GPU 0") == len(gap_columns(before))
    assert count("phases (GPU span)") == len(phases(before))
    a, b = summary(before), summary(after)
    for key in ("origin_ns", "window_ns", "kernels", "memcpy", "memset", "gpu", "top_kernels", "top_cuda_api"):
        assert a[key] == b[key], key
    assert [p["name"] for p in a["phases"]] == [p["name"] for p in b["phases"]]
    gb, ga = gap_columns(before), gap_columns(after)
    assert ga.start_ns.tolist() == gb.start_ns.tolist() and ga.cause.tolist() == gb.cause.tolist()
    assert ga.on_path.tolist() == gb.on_path.tolist()


def test_gzip_output_opens_too(tmp_path):
    out = tmp_path / "t.json.gz"
    assert main(["export", str(sample("smells.json.gz")), "--perfetto", str(out)]) == 0
    assert "traceEvents" in json.loads(gzip.decompress(out.read_bytes()))
    assert len(load(out, use_cache=False)) > len(loaded("smells.json.gz"))


def test_csv_and_parquet_tables(tmp_path):
    trace = loaded("smells.json.gz")
    assert (
        main(["export", str(sample("smells.json.gz")), "--csv", str(tmp_path / "c"), "--parquet", str(tmp_path / "p")])
        == 0
    )
    n_gaps = len(gap_columns(trace))
    for events, gaps in (
        (pq.read_table(tmp_path / "p" / "events.parquet"), pq.read_table(tmp_path / "p" / "gaps.parquet")),
        (pcsv.read_csv(tmp_path / "c" / "events.csv"), pcsv.read_csv(tmp_path / "c" / "gaps.csv")),
    ):
        assert events.num_rows == len(trace) and gaps.num_rows == n_gaps
        assert events.column("start_ns").to_pylist() == trace.start_ns.tolist()
        assert str(events.column("name")[0]) == trace.name(0)
        assert gaps.column("dur_ns").to_pylist() == sorted(gaps.column("dur_ns").to_pylist(), reverse=True)


def test_export_needs_an_output_and_a_writable_place(tmp_path, capsys):
    src = str(sample("smells.json.gz"))
    assert main(["export", src]) == 2
    assert "--perfetto" in capsys.readouterr().err
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert main(["export", src, "--csv", str(blocked / "sub")]) == 2
    assert "cannot create" in capsys.readouterr().err
    assert not list(tmp_path.glob(".*.tmp"))  # nothing half-written left behind
