"""The readings on the real H200 samples: each planted smell is found where its named range puts it.

The nsys captures of the same workloads run the same assertions.
"""

from __future__ import annotations

import numpy as np
import pytest

from gaplens.analysis.gaps import analyse_gaps, gap_columns
from gaplens.analysis.memory import memory_rows
from gaplens.analysis.pacing import pacing
from gaplens.analysis.phases import phases
from gaplens.analysis.smells import smells
from gaplens.analysis.steps import steps
from tests.conftest import loaded

SMELLS = ["smells.json.gz", "nsys_smells.sqlite.gz"]
GRAPHS = ["decode_graphs.json.gz", "nsys_decode_graphs.sqlite.gz"]
EAGER = ["decode_eager.json.gz", "nsys_decode_eager.sqlite.gz"]


def profiled(trace) -> list[tuple[int, int]]:
    """GPU spans of the profiled iterations (an nsys capture also holds warm-up and start-up)."""
    spans = [(p.start_ns, p.end_ns) for p in phases(trace) if "(profiled)" in p.name]
    assert spans
    return spans


def in_profiled(trace, t0: int, t1: int) -> bool:
    return any(a <= t0 and t1 <= b for a, b in profiled(trace))


def named(trace, name: str):
    """Phases of this name inside the profiled iterations (the ones the ground truth measures)."""
    found = [p for p in phases(trace) if p.name == name and in_profiled(trace, p.start_ns, p.end_ns)]
    assert found, f"no phase {name}"
    return found


def findings_in_profiled(trace, findings):
    spans = profiled(trace)
    return [f for f in findings if any(overlap(f.start_ns, f.end_ns, a, b) > 0 for a, b in spans)]


def overlap(a0: int, a1: int, b0: int, b1: int) -> int:
    return max(0, min(a1, b1) - max(a0, b0))


@pytest.fixture(scope="module", params=SMELLS)
def smelly(request):
    tr = loaded(request.param)
    gaps = analyse_gaps(tr)
    return tr, gaps, smells(tr, gap_columns(tr))


def test_tokenize_is_the_largest_blank_region_on_the_path_caused_by_host(smelly):
    tr, _, findings = smelly
    toks = named(tr, "tokenize")
    for w in profiled(tr):
        cols = gap_columns(tr, window=w)  # the product's rule for THE gap: GapColumns.largest_on_path
        k = cols.largest_on_path()
        assert k >= 0
        hot = cols.gap(tr, k)
        assert hot.cause == "host"
        assert hot.shares["host"] > 0.9
        assert any(overlap(hot.start_ns, hot.end_ns, p.start_ns, p.end_ns) >= 0.9 * p.dur_ns for p in toks)
        assert "tokenize" in {tr.name(i) for i in hot.evidence}
    # Every step's tokenize is a host island, and the evidence names the phase.
    islands = [f for f in findings if f.kind == "host_island"]
    for p in toks:
        hit = [f for f in islands if overlap(f.start_ns, f.end_ns, p.start_ns, p.end_ns) >= 0.9 * p.dur_ns]
        assert hit, f"tokenize at {p.start_ns} has no host island"


def test_transfer_is_a_pageable_copy_on_the_path_every_step(smelly):
    tr, _, findings = smelly
    copies = [f for f in findings if f.kind == "copy_on_path"]
    for p in named(tr, "transfer"):
        hit = [f for f in copies if overlap(f.start_ns, f.end_ns, p.start_ns, p.end_ns) > 0.5 * p.dur_ns]
        assert hit, f"transfer at {p.start_ns} has no copy on the path"
        f = hit[0]
        assert f.numbers["bytes"] == 128 << 20 and f.numbers["direction"] == "HtoD"
        assert f.numbers["pageable"] and f.numbers["every_step"]
        assert f.numbers["bytes_per_step"] >= 128 << 20
        assert f.numbers["on_path_ns"] > 0.8 * (f.end_ns - f.start_ns)
    htod = {r["direction"]: r for r in memory_rows(tr)}["HtoD"]
    assert htod["every_step"] and htod["bytes_per_step"] >= 128 << 20


def test_log_loss_is_a_sync_cliff(smelly):
    tr, _, findings = smelly
    cliffs = [f for f in findings if f.kind == "sync_cliff"]
    for p in named(tr, "log_loss"):
        hit = [f for f in cliffs if p.start_ns <= f.start_ns < p.end_ns]
        assert hit, f"log_loss at {p.start_ns} has no sync cliff"
        assert any("Synchronize" in tr.name(i) for i in hit[0].evidence)
        assert hit[0].numbers["idle_after_ns"] > 0


def test_elementwise_loop_is_a_picket_fence(smelly):
    tr, _, findings = smelly
    fences = [f for f in findings if f.kind == "picket_fence"]
    for p in named(tr, "elementwise_loop"):
        hit = [f for f in fences if overlap(f.start_ns, f.end_ns, p.start_ns, p.end_ns) >= 0.8 * p.dur_ns]
        assert hit, f"elementwise_loop at {p.start_ns} is not a picket fence"
        assert hit[0].numbers["ops"] >= 400 and hit[0].numbers["busy_pct"] < 30


def test_dense_matmul_is_dense_device_paced_and_clean(smelly):
    tr, _, findings = smelly
    rows = {(r["name"], r["start_ns"]): r for r in pacing(tr)}
    for p in named(tr, "dense_matmul"):
        r = rows[(p.name, p.start_ns)]
        assert r["verdict"] == "device-paced" and r["busy_pct"] > 95
        # No finding belongs to dense_matmul or starts in it. (The span starts where an event at the range's
        # start would fire, so log_loss's sync cliff can end a fraction of a ms inside it: the device idles
        # until dense_matmul's first GEMM is launched. That cliff is log_loss's.)
        inside = [f for f in findings if f.family == "dense_matmul" or p.start_ns <= f.start_ns < p.end_ns]
        assert not inside, [f.kind for f in inside]


@pytest.mark.parametrize("name", GRAPHS)
def test_cuda_graph_decode_is_device_paced_without_picket_fence(name):
    tr = loaded(name)
    findings = findings_in_profiled(tr, smells(tr))
    assert not [f for f in findings if f.kind == "picket_fence"]
    decode = [
        r for r in pacing(tr) if r["name"] == "decode" and r["ops"] > 0 and in_profiled(tr, r["start_ns"], r["end_ns"])
    ]
    assert decode and all(r["verdict"] == "device-paced" for r in decode)
    assert all(r["busy_pct"] > 70 for r in decode)


@pytest.mark.parametrize("name", EAGER)
def test_eager_decode_is_launch_bound_with_a_sync_cliff_each_step(name):
    tr = loaded(name)
    findings = smells(tr)
    decode = [r for r in pacing(tr) if r["name"] == "decode" and r["ops"] > 0]
    assert decode and all(r["verdict"] == "cpu-bound" for r in decode)
    cliffs = [f for f in findings if f.kind == "sync_cliff"]
    fences = [f for f in findings if f.kind == "picket_fence"]
    decode_steps = [
        p for p in phases(tr) if p.name.startswith("decode_step ") and in_profiled(tr, p.start_ns, p.end_ns)
    ]
    assert len(decode_steps) == 32
    with_cliff = sum(any(p.start_ns <= f.start_ns < p.end_ns for f in cliffs) for p in decode_steps)
    with_fence = sum(
        any(overlap(f.start_ns, f.end_ns, p.start_ns, p.end_ns) > 0.5 * p.dur_ns for f in fences) for p in decode_steps
    )
    assert with_cliff >= 0.9 * len(decode_steps)
    assert with_fence >= 0.9 * len(decode_steps)
    # The decode step is the step; steady decode moves a few bytes per step across the bus.
    st = steps(tr)
    assert st.label == "decode_step"
    rows = {r["direction"]: r for r in memory_rows(tr, st)}
    assert rows["DtoH"]["every_step"] and rows["DtoH"]["bytes_per_step"] < 1024


@pytest.mark.parametrize(
    "name", ["smells.json.gz", "decode_eager.json.gz", "decode_graphs.json.gz", "train_step.json.gz"]
)
def test_gap_shares_and_on_path_time_are_consistent(name):
    tr = loaded(name)
    gaps = analyse_gaps(tr, evidence_top=5)
    assert gaps
    for g in gaps:
        assert sum(g.shares.values()) == pytest.approx(1.0, abs=2e-3)
        assert g.cause in g.shares
    starts = np.asarray([g.start_ns for g in gaps])
    assert np.all(np.diff(starts) > 0)
    with_evidence = [g for g in gaps if g.evidence]
    assert 0 < len(with_evidence) <= 5
    for g in with_evidence:
        assert all(0 <= i < len(tr) for i in g.evidence)
