"""What a design not built could gain, measured by taking work out of the real code path.

Each function patches the Kineto reader of this process so that a layout block (one cut at the
writer's separator) keeps fewer events, then loads as ever: the time of that load is the least a
preview drawn from those events alone would wait. The traces they give lack events, so they are for
timing only (``bench.viewer``'s ``GAPLENS_BENCH_VIEWER_BOUND``), never for a reading. Blocks cut by
structure (the first chunk of a file whose layout the framer learns, NDJSON) keep all their events.

- ``drop_python_events``: every ``python_function`` event cut out (as ``pyevents.split`` does) and
  never parsed: a preview drawn before the Python stacks.
- ``keep_gpu_events``: only the events of the device's streams (kernels, copies, memsets, GPU
  annotations) and those that are not duration events (metadata, flows): a frame of the GPU rows alone.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa

from gaplens.loaders.kineto import pyevents, reader

#: The categories of nearly all GPU work in PyTorch's traces (``fields.CATEGORIES``: they land on GPU lanes),
#: as written now and in 2020. The rarer ones (``cuda_sync``, ``cuda_profiler_range``, ``Memset``, other
#: writers' ``memcpy``) are left out: each costs a compare per event of every block, and fewer only make
#: the bound lower, which a bound may be.
GPU_CATEGORIES = (b'"kernel"', b'"gpu_memcpy"', b'"gpu_memset"', b'"gpu_user_annotation"', b'"Kernel"', b'"Memcpy"')


def _empty_or(parse: Callable) -> Callable:
    """``reader._batch`` that gives an empty batch for an empty text (Arrow refuses one: the framer would rewind)."""

    def batch(text, options):
        if text.size == 0:
            return pa.RecordBatch.from_pylist([], schema=options.explicit_schema)
        return parse(text, options)

    return batch


def drop_python_events() -> None:
    """From now on, in this process, a split block's Python events are never parsed nor kept."""
    split = pyevents.split

    def without_python(*args, **kwargs):
        found = split(*args, **kwargs)
        if found is not None:
            found.python = found.python[:0]
            found.python_rows = found.python_rows[:0]
        return found

    pyevents.split = without_python
    reader._batch = _empty_or(reader._batch)


def keep_gpu_events() -> None:
    """From now on, in this process, a layout block keeps only its GPU events and its events that are not
    ``"ph": "X"`` (and its first event, when it keeps nothing else: a parse needs one)."""
    framed = reader.arrow_input

    def gpu_only(piece, twins):
        text, ends = framed(piece, twins)
        head = bytes(text[: min(text.size, 64)])
        at, x = head.find(b'"cat": '), head.find(b'"ph": "X"')
        if piece.gap is None or at < 0 or x < 0:
            return text, ends
        starts, stops = pyevents.event_bounds(text, ends, piece.gap)
        keep = ~pyevents._starts_with(text, starts, head[: x + len(b'"ph": "X"')])
        for cat in GPU_CATEGORIES:
            keep |= pyevents._starts_with(text, starts, head[: at + len(b'"cat": ')] + cat)
        keep[0] |= not keep.any()
        rows = np.flatnonzero(keep)
        if rows.size == starts.size:
            return text, ends
        joined, row_stops = pyevents._joined(text.data, starts, stops, rows)
        return np.frombuffer(joined, np.uint8), row_stops[:-1]

    reader.arrow_input = gpu_only


#: ``bench.viewer``'s names for them, and what each is.
BOUNDS: dict[str, Callable[[], None]] = {"python": drop_python_events, "gpu": keep_gpu_events}
BOUNDS_SAID = {
    "python": "a cold open that never parsed a Python event",
    "gpu": "a cold open that parsed the GPU streams' events alone",
}
