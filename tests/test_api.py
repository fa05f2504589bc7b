"""The Python API (``import gaplens``): DataFrames whose values are the Trace's and the readings' own."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import gaplens
from gaplens.analysis.gaps import analyse_gaps, gap_json, largest
from gaplens.analysis.phases import phases
from gaplens.analysis.smells import smells
from gaplens.analysis.summary import summary
from gaplens.loaders.model import Kind, LaneKind
from tests.conftest import ROOT, loaded, sample


@pytest.mark.parametrize("module", ["gaplens", "gaplens.loaders", "gaplens.api"])
def test_importing_loads_neither_pandas_nor_the_viewer(module):
    code = (
        f"import sys, {module}\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('pandas', 'textual', 'rich'))\n"
        "print(bad); sys.exit(1 if bad else 0)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_load_and_a_short_repr():
    t = gaplens.load(sample("decode_eager.json.gz"))
    text = repr(t)
    assert text.startswith("<Trace kineto 'decode_eager.json.gz': 103,742 events")
    assert "NVIDIA H200" in text and len(text) < 200 and "array" not in text


@pytest.mark.parametrize("name", ["smells.json.gz", "nsys_smells.sqlite.gz"])
def test_events_are_the_trace_columns_with_names_decoded(name):
    t = loaded(name)
    df = t.events()
    assert len(df) == len(t)
    assert (df["start_ns"].to_numpy() == t.start_ns).all() and (df["end_ns"].to_numpy() == t.end_ns).all()
    assert (df["dur_ns"].to_numpy() == t.end_ns - t.start_ns).all()
    k = int(np.flatnonzero(t.kind == int(Kind.KERNEL))[0])
    row = df.iloc[k]
    assert row["name"] == t.name(k) and row["kind"] == "kernel"
    assert (row["start_ns"], row["end_ns"]) == (t.start_ns[k], t.end_ns[k])
    lane = t.lanes[int(t.lane[k])]
    assert (row["device"], row["stream"], row["lane_kind"], row["pid"]) == (lane.device, lane.stream, "stream", -1)
    assert row["launch"] == t.launch[k] and df.iloc[int(t.launch[k])]["kind"] == "cuda_api"
    c = int(np.flatnonzero(t.kind == int(Kind.CUDA_API))[0])
    host = t.lanes[int(t.lane[c])]
    assert (df.iloc[c]["pid"], df.iloc[c]["tid"], df.iloc[c]["device"]) == (host.pid, host.tid, -1)
    assert df.iloc[c]["process"] == t.meta.processes.get(host.pid, "")
    assert df.iloc[c]["lane_kind"] == LaneKind.CUDA_API.name.lower()
    assert (df["name"].astype(str).to_numpy() == np.asarray(t.names, dtype=object)[t.name_id]).all()
    assert df.attrs["origin_ns"] == t.meta.origin_ns


def test_to_arrow_keeps_the_origin_and_every_row():
    t = loaded("smells.json.gz")
    table = t.to_arrow()
    assert table.num_rows == len(t)
    assert int(table.schema.metadata[b"origin_ns"]) == t.meta.origin_ns
    assert table.column("start_ns").to_numpy().tolist() == t.start_ns.tolist()
    assert table.column("name").type.value_type == "string"


def test_gaps_are_the_gaps_reading_largest_first():
    t = loaded("smells.json.gz")
    df = gaplens.gaps(t)
    expected = [gap_json(g) for g in largest(analyse_gaps(t, evidence_top=100))]
    assert len(df) == len(expected)
    for row, want in zip(df.head(20).to_dict("records"), expected[:20], strict=True):
        assert (row["device"], row["start_ns"], row["end_ns"], row["dur_ns"]) == (
            want["device"],
            want["start_ns"],
            want["end_ns"],
            want["dur_ns"],
        )
        assert row["on_critical_path"] == want["on_critical_path"] and row["cause"] == want["cause"]
        assert row["evidence"] == want["evidence"]
        for cls, share in want["shares"].items():
            if cls != "unknown":
                assert row[f"share_{cls}"] == pytest.approx(share)
    assert df["dur_ns"].is_monotonic_decreasing


def test_smells_and_phases_are_the_readings():
    t = loaded("smells.json.gz")
    found = smells(t)
    df = gaplens.smells(t)
    assert df["kind"].tolist() == [f.kind for f in found]
    assert df["start_ns"].tolist() == [f.start_ns for f in found]
    assert df["lever"].tolist() == [f.lever for f in found]
    ph = gaplens.phases(t)
    assert ph["name"].tolist() == [p.name for p in phases(t)]
    assert ph["dur_ns"].tolist() == [p.dur_ns for p in phases(t)]
    by_name = {p["name"]: p["busy_pct"] for p in summary(t)["phases"]}
    assert ph.iloc[0]["busy_pct"] == pytest.approx(by_name[ph.iloc[0]["name"]])


def test_kernel_api_and_range_tables_add_up_to_the_summary():
    t = loaded("decode_eager.json.gz")
    s = gaplens.summary(t)
    k = gaplens.kernels_summary(t)
    assert int(k["total_ns"].sum()) == s["kernels"]["total_ns"] and int(k["count"].sum()) == s["kernels"]["count"]
    assert k.head(10)["name"].tolist() == [r["name"] for r in s["top_kernels"]]
    assert gaplens.api_summary(t).head(10)["total_ns"].tolist() == [r["total_ns"] for r in s["top_cuda_api"]]
    assert gaplens.ranges_summary(t).head(10)["count"].tolist() == [r["count"] for r in s["top_ranges"]]
    assert k["pct"].sum() == pytest.approx(100.0)
