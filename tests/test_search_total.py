"""The search total (header "/nccl N · T") counts each match once: GPU annotations mirror CPU ranges."""

from __future__ import annotations

import gzip
import json
import types
from pathlib import Path

from gaplens.loaders.model import Kind
from gaplens.tui.navigate import TimelineActions
from gaplens.tui.viewmodel import build_model
from tests.conftest import _cached

DATA = Path(__file__).parent / "data"


def test_nccl_search_total_leaves_gpu_annotations_out():
    name = "ddp_even_rank0.json.gz"
    trace = _cached(str(DATA / name))
    model = build_model(trace)
    host = types.SimpleNamespace(model=model, matches=model.search("nccl"))
    assert (trace.kind[host.matches] == int(Kind.GPU_ANNOTATION)).any(), "the trace mirrors nccl ranges on streams"
    # From the raw file: every X event whose name contains "nccl", except the gpu_user_annotation copies.
    with gzip.open(DATA / name, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    raw = [
        e
        for e in events
        if e.get("ph") == "X" and "nccl" in e["name"].lower() and e.get("cat") != "gpu_user_annotation"
    ]
    expected = sum(round(float(e["dur"]) * 1000) for e in raw)
    assert abs(TimelineActions.match_total_ns(host) - expected) <= 2 * len(raw)
