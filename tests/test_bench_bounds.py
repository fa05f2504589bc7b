"""``bench.bounds``: the load a preview without the Python stacks would make, timed by ``bench viewer``.

The bound means something only while it is that load: every other event kept as the whole load
keeps it, no Python event of a cut block, and the blocks still cut at the writer's separator (a
first try let Arrow refuse the empty Python text, the framer rewound, and the "bound" timed a
slower whole parse).
"""

from __future__ import annotations

import numpy as np

from gaplens.loaders.kineto import pyevents, reader
from gaplens.loaders.kineto.reader import LoadStats, load_kineto
from gaplens.loaders.model import GPU_WORK_KINDS, Kind
from tests.test_kineto_pyevents import _tiled


def _events(trace, keep) -> list[tuple]:
    idx = np.flatnonzero(keep)
    return sorted(
        zip(
            trace.start_ns[idx].tolist(),
            trace.end_ns[idx].tolist(),
            trace.kind[idx].tolist(),
            [trace.names[i] for i in trace.name_id[idx].tolist()],
            strict=True,
        )
    )


def test_the_bound_loads_every_other_event_and_no_python_one(tmp_path, monkeypatch):
    from bench.bounds import drop_python_events

    path = _tiled(tmp_path)
    monkeypatch.setattr(reader, "BLOCK_SIZE", 256 << 10)
    whole = load_kineto(str(path))
    monkeypatch.setattr(pyevents, "split", pyevents.split)  # put back after the test
    monkeypatch.setattr(reader, "_batch", reader._batch)
    drop_python_events()
    stats = LoadStats()
    bound = load_kineto(str(path), stats=stats)
    assert stats.split_blocks > 0 and stats.rewinds == 0 and stats.slow_events == 0
    python = whole.kind == int(Kind.PYTHON)
    assert python.sum() > 0
    left = bound.kind == int(Kind.PYTHON)
    # Only the blocks the split could not cut (the first chunk's, cut by structure) keep theirs.
    assert left.sum() < python.sum() / 4
    assert _events(bound, ~left) == _events(whole, ~python)


def test_the_gpu_bound_loads_every_gpu_event_and_few_others(tmp_path, monkeypatch):
    from bench.bounds import keep_gpu_events

    path = _tiled(tmp_path)
    monkeypatch.setattr(reader, "BLOCK_SIZE", 256 << 10)
    whole = load_kineto(str(path))
    monkeypatch.setattr(reader, "arrow_input", reader.arrow_input)  # put back after the test
    keep_gpu_events()
    stats = LoadStats()
    bound = load_kineto(str(path), stats=stats)
    assert stats.layout_blocks > 0 and stats.rewinds == 0 and stats.slow_events == 0
    gpu = np.isin(whole.kind, [int(k) for k in GPU_WORK_KINDS])
    assert gpu.sum() > 0
    assert _events(bound, np.isin(bound.kind, [int(k) for k in GPU_WORK_KINDS])) == _events(whole, gpu)
    # What is left besides: the blocks cut by structure, and a block's first event where it kept none.
    assert len(bound) - gpu.sum() < (len(whole) - gpu.sum()) / 4
