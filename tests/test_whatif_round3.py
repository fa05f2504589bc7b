"""What-if accuracy on the round-3 pairs: predict each fixed trace's step from the faulty one.

Ground truth: each fixed recording's own measurement, never the replay's: the step owner's median step
on the fixed trace (the same definition on both sides), and the median ``ProfilerStep#`` host span that
meta.json records by perf_counter around ``prof.step()``. The target (issue 21) is 15%.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gaplens.analysis.whatif import Change, parse_remove, parse_scale, range_times, whatif
from gaplens.loaders import load

DATA = Path(__file__).resolve().parent / "data" / "round3"
TARGET = 0.15


def _meta(name: str) -> dict:
    return json.loads((DATA / f"{name}.meta.json").read_text())


def _pinned_over_pageable() -> float:
    """F for pinned copies, from the bandwidths floor_calib measured (512 MiB HtoD, CUDA events)."""
    ops = {o["name"]: o["gpu_ms_median"] for o in _meta("floor_calib")["ops"]}
    return ops["memcpy_h2d_pinned_512MiB"] / ops["memcpy_h2d_pageable_512MiB"]


def _errors(pair: str, changes: list[Change]) -> tuple[float, float]:
    """(error of the step owner's median vs the fixed trace's, error of ProfilerStep# vs meta.json's truth)."""
    fault, fixed = load(str(DATA / f"{pair}_fault.json.gz")), load(str(DATA / f"{pair}_fixed.json.gz"))
    predicted = whatif(fault, changes)["steps"]["predicted_median_ns"]
    measured = whatif(fixed, [])["steps"]["measured_median_ns"]
    profiler = np.median([p for _, _, p in range_times(fault, changes, r"ProfilerStep#\d+")])
    truth = _meta(f"{pair}_fixed")["summary"]["step_host_ms_median"] * 1e6
    return predicted / measured - 1, float(profiler / truth - 1)


@pytest.mark.parametrize(
    ("pair", "changes"),
    [
        # a 4 ms pure-Python loop after each step's .item(): the sync cost the host its run-ahead (the loop
        # would have overlapped the GEMMs), so step 6's lever is the sync's; its fix and the loop's removal
        # give the same step
        ("island", ["sync"]),
        ("loader", ["host"]),  # DataLoader with 0 workers (16 ms of __getitem__ per step) -> 4 workers
    ],
)
def test_removing_the_cause_predicts_the_fixed_step(pair: str, changes: list[str]) -> None:
    own, profiler = _errors(pair, [parse_remove(c) for c in changes])
    assert abs(own) <= TARGET, f"{pair}: step owner's step off by {100 * own:+.1f}%"
    assert abs(profiler) <= TARGET, f"{pair}: ProfilerStep off by {100 * profiler:+.1f}%"


def test_graphing_the_step_predicts_the_graphed_step() -> None:
    """Eager decode, 186 launches per step -> the step captured in a CUDA graph (the .item() of the token stays
    outside): ``--graph step``, step 6's change for this lever; the target for a capture is 25%."""
    own, profiler = _errors("graphs", [Change("graph", "step")])
    assert abs(own) <= 0.25, f"graphs: step owner's step off by {100 * own:+.1f}%"
    assert abs(profiler) <= 0.30, f"graphs: ProfilerStep off by {100 * profiler:+.1f}%"


def test_copy_pair_pinned_and_prefetched() -> None:
    """Pageable synchronous 96 MiB copy -> pinned, non_blocking, prefetched on a side stream during compute.

    The prefetch takes the copy off the critical path: ``--remove copy`` (the call stops blocking) with
    ``--scale 'Memcpy HtoD*=0'`` predicts the fixed step. With F from bandwidth alone (pinned on the same
    stream, no prefetch) the replay predicts a pinned copy still in the step's path: more than the fixed
    step (which also hid that copy), less than the fault. It is no prediction of this experiment.
    """
    hidden = [parse_remove("copy"), parse_scale("Memcpy HtoD*=0")]
    own, profiler = _errors("copy", hidden)
    assert abs(own) <= TARGET and abs(profiler) <= TARGET, (own, profiler)
    f = _pinned_over_pageable()
    assert 0.09 < f < 0.13  # ~6.1 vs ~54.6 GB/s
    pinned = [parse_remove("copy"), parse_scale(f"Memcpy HtoD*={f}")]
    fault = load(str(DATA / "copy_fault.json.gz"))
    predicted = np.median([p for _, _, p in range_times(fault, pinned, r"ProfilerStep#\d+")]) / 1e6
    fixed, faulty = (_meta(f"copy_{k}")["summary"]["step_host_ms_median"] for k in ("fixed", "fault"))
    assert fixed < predicted < 0.5 * faulty


@pytest.mark.parametrize("name", ["island_fault", "loader_fault", "copy_fault", "graphs_fault", "dependency"])
def test_no_change_replays_every_step_exactly(name: str) -> None:
    """The replay of an unchanged graph is the trace itself: every slack kept, every edge honoured."""
    r = whatif(load(str(DATA / f"{name}.json.gz")), [])
    assert r["window_ns"]["predicted"] == r["window_ns"]["measured"]
    assert r["per_step"] and all(s["predicted_ns"] == s["measured_ns"] for s in r["per_step"])
    assert all(s["predicted_host_ns"] == s["measured_host_ns"] for s in r["per_step"])


def test_step_6_quotes_the_change_of_its_lever() -> None:
    """Each round-3 fault's step 6 quotes the change that models its lever, never another cause's."""
    from gaplens.analysis.lever_changes import quote
    from gaplens.analysis.protocol.experiment import experiment

    want = {"island": "--remove sync", "loader": "--remove host", "graphs": "--graph step", "copy": "--scale"}
    for pair, command in want.items():
        fault = load(str(DATA / f"{pair}_fault.json.gz"))
        ex = experiment(fault)
        assert quote(fault, ex.group).command.startswith(command), (pair, ex.group)
        assert any(f"gaplens whatif {command}" in line for line in ex.facts), (pair, ex.facts)
