"""Where allocation calls come from (analysis.alloc_sites), on hand-built traces whose answer is known by
construction: the op a user wrote around the framework's allocation primitive, and frees that come in one run
outside any op (a cache emptied) against frees where tensors die."""

from __future__ import annotations

import numpy as np

from gaplens.analysis.alloc_sites import allocating_ops, enclosing_ops, released_in_a_burst
from gaplens.analysis.calls import Call, api_class
from tests.handbuilt import Builder


def _alloc_calls(tr) -> np.ndarray:
    return np.flatnonzero(api_class(tr) == Call.ALLOC)


def test_the_op_around_the_allocation_primitive_is_named() -> None:
    """aten::addmm asks aten::empty for its output: the malloc is named for addmm; a bare torch.empty (no
    op around the primitive) keeps the primitive's name; a malloc outside every op has none."""
    b = Builder()
    b.cpu(100, 900, "aten::addmm")
    b.cpu(120, 400, "aten::empty")
    b.call(150, 350, "cudaMalloc")
    b.launch(500, 520, 600, 700)
    b.cpu(1_000, 1_400, "aten::empty")
    b.call(1_050, 1_300, "cudaMalloc")
    b.call(2_000, 2_100, "cudaMalloc")
    tr = b.trace()
    idx = _alloc_calls(tr)
    assert idx.size == 3
    held = [
        tr.names[int(tr.name_id[o])] if o >= 0 else None
        for o in enclosing_ops(tr, idx, frozenset({"aten::empty"})).tolist()
    ]
    assert held == ["aten::addmm", "aten::empty", None]
    assert allocating_ops(tr, idx) == [("aten::addmm", 1), ("aten::empty", 1)]


def test_frees_in_one_run_outside_ops_are_a_cache_emptied() -> None:
    """Four steps, each allocating 10 blocks inside ops and launching; the emptied variant frees all 10 in
    one run at the step's end outside any op, the other frees each block inside the op after its launch."""

    def build(emptied: bool):
        b = Builder()
        for n in range(4):
            s = n * 100_000
            b.phase(s, s + 100_000, f"step {n}")
            for k in range(10):
                t = s + 1_000 + k * 5_000
                b.cpu(t, t + 4_000, "aten::mm")
                b.call(t + 100, t + 600, "cudaMalloc")
                b.launch(t + 700, t + 800, t + 900, t + 3_000)
                if not emptied:
                    b.call(t + 3_000, t + 3_500, "cudaFree")
            if emptied:
                for k in range(10):
                    t = s + 60_000 + k * 600
                    b.call(t, t + 500, "cudaFree")
        return b.trace()

    assert released_in_a_burst(build(emptied=True))
    assert not released_in_a_burst(build(emptied=False))
