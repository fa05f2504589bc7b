"""Pacing rows read a phase's compute ops by binary search: the same ops a full scan finds."""

from __future__ import annotations

import numpy as np
import pytest

from gaplens.analysis.busy import compute_mask
from gaplens.analysis.pacing import pacing
from gaplens.analysis.phases import phases
from gaplens.loaders import load
from tests.conftest import BUNDLED, ROOT

TRACES = [
    BUNDLED / "decode_eager.json.gz",  # one stream, thousands of ops per phase
    ROOT / "tests" / "data" / "round3" / "dependency.json.gz",  # two streams
    ROOT / "tests" / "data" / "nsys_ddp_straggler.sqlite.gz",  # two GPUs, phases per process
]


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_each_phase_counts_the_ops_a_full_scan_finds(path):
    trace = load(path)
    found = phases(trace)
    assert found
    compute = np.flatnonzero(compute_mask(trace))
    dev = trace.device_of_event()[compute]
    for p, row in zip(found, pacing(trace, found), strict=True):
        device = trace.lanes[p.lane].device if p.lane >= 0 else None
        ops = compute if device is None else compute[dev == device]
        starts = trace.start_ns[ops]
        expected = int(((starts >= p.start_ns) & (starts < p.end_ns)).sum())
        assert row["ops"] == expected, p.name
