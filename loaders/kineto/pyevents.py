"""A layout block's ``python_function`` events parsed apart from the rest, without the ``args`` struct.

``with_stack`` traces are mostly Python-function events (1.04M of 1.26M events of ``options_all``
tiled), and of one gaplens keeps its name, pid, tid, ts and dur: nothing of its args (``Python
id``, ``Ev Idx``) is in the schema. Yet under the schema every event fills the ~20 fields of the
``args`` struct, a null each: Arrow parsed 303k of them in 0.575 CPU s with the struct and 0.319 s
without it (``python -m bench.stages`` shows the whole load). So a layout block's events whose text
starts with the block's first ``python_function`` event's head (``{`` to its category) are cut out
and parsed under the schema without ``args``, the others under the whole schema, and the two
batches are classified as one, in the block's order (``cols.from_arrow``'s ``file_pos``), the Python
events' ``args`` all null: the trace is the one a single parse gives. Of a Python event's args the
reader would read only ``correlation`` and ``Input Dims``/``Input Strides`` (PyTorch writes ``Python
parent id``, ``Python id``, ``Python thread`` and ``Ev Idx``), so a block whose Python events hold
either key is parsed whole (the look costs ~1 ms of the ~4.5 ms a block saves).
``GAPLENS_ONE_PARSE=1`` parses every block whole.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from gaplens.loaders.columns import POOL

CATEGORY = b'"python_function"'
#: The keys of a Python event's args the reader would read (``cols.from_arrow``: the correlation of
#: every kept event; ``dims``: the shapes of a host event).
READ_KEYS = (b'"correlation"', b'"Input ')
_HEAD = re.compile(rb'\{\s*"ph"\s*:\s*"X"\s*,\s*"cat"\s*:\s*"python_function"')


@dataclass
class Split:
    """A block cut in two: its Python events and the others, each as text Arrow reads, and where each came from."""

    python: np.ndarray  # text of the Python events (whitespace between two)
    others: np.ndarray  # text of the other events
    others_ends: np.ndarray  # in ``others``, the position after each event but the last (``dims.find_dims``)
    python_rows: np.ndarray  # index of each Python event among the block's events
    other_rows: np.ndarray
    count: int

    def merge(self, python: pa.RecordBatch, others: pa.RecordBatch | None, schema: pa.Schema) -> pa.RecordBatch:
        """One batch under ``schema``: the other events, then the Python events with their args all null.

        Not in the block's order: ``file_pos`` says where each row was, and ``cols.from_arrow`` numbers
        names and lanes, and orders its rows, by it. (Putting the batch itself back in order with Arrow's
        ``take`` raised the peak of a 1.19M-event load from 187-191 to 220-235 B per event.)
        """
        n = python.num_rows
        args_type = schema.field("args").type
        nulls = [pa.nulls(n, f.type, memory_pool=POOL) for f in args_type]
        args = pa.StructArray.from_arrays(nulls, fields=list(args_type), memory_pool=POOL)
        columns = [python.column(f.name) if f.name != "args" else args for f in schema]
        mine = pa.RecordBatch.from_arrays(columns, schema=schema)
        if others is None or others.num_rows == 0:
            return mine
        # On the system allocator, as the parse: Arrow's own pool keeps what it frees (``columns.POOL``).
        both = pa.Table.from_batches([others, mine]).combine_chunks(memory_pool=POOL)
        return both.to_batches()[0]

    @property
    def file_pos(self) -> np.ndarray:
        """Each row of ``merge``'s batch: its event's index in the block."""
        return np.concatenate([self.other_rows, self.python_rows])


def named_ids(batch: pa.RecordBatch) -> bool:
    """Whether any event of ``batch`` has its pid or tid as a name (the twins ``pis``/``tis``)."""
    for twin in ("pis", "tis"):
        at = batch.schema.get_field_index(twin)
        if at >= 0 and batch.column(at).null_count < batch.num_rows:
            return True
    return False


def _runs(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first, last) event index of each run of consecutive indices in ``rows``."""
    cut = np.flatnonzero(np.diff(rows) != 1)
    return rows[np.r_[0, cut + 1]], rows[np.r_[cut, rows.size - 1]]


def _joined(data: memoryview, starts: np.ndarray, stops: np.ndarray, rows: np.ndarray) -> tuple[bytes, np.ndarray]:
    """The events ``rows`` as one text, a run of neighbours copied at once; and where each event ends in it."""
    first, last = _runs(rows)
    lo, hi = starts[first], stops[last]
    text = b"\n".join([data[a:b] for a, b in zip(lo.tolist(), hi.tolist(), strict=True)])
    # Each run moves by the bytes dropped before it (and gains one newline per run before it).
    shift = np.cumsum(hi - lo + 1) - (hi - lo + 1) - lo
    run_of = np.repeat(np.arange(first.size), last - first + 1)
    return text, stops[rows] + shift[run_of]


def _starts_with(text: np.ndarray, starts: np.ndarray, head: bytes) -> np.ndarray:
    """True where the bytes at ``starts`` are ``head``: eight bytes compared at once, through a view of
    the text as unaligned words (a byte-wide compare cost ~2 ms a block, this ~0.3)."""
    words = np.ndarray((max(text.size - 7, 0),), np.uint64, text.data, 0, (1,))
    width = -(-len(head) // 8) * 8
    ok = starts + width <= text.size
    at = np.where(ok, starts, 0)
    padded = head + bytes(width - len(head))
    for j in range(0, width, 8):
        want = int.from_bytes(padded[j : j + 8], "little")
        mask = (1 << (8 * min(8, len(head) - j))) - 1
        got = words[at + j] if mask == (1 << 64) - 1 else words[at + j] & np.uint64(mask)
        ok &= got == np.uint64(want)
    return ok


def event_bounds(text: np.ndarray, ends: np.ndarray, gap: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Where each event of a layout block starts and stops (``text[start:stop]`` is its ``{...}``), from the
    positions of its blanked separators' commas (``ends``) and the separator (``gap``)."""
    stops = np.append(ends - gap.index(b","), text.size)
    return np.insert(stops[:-1] + len(gap), 0, 0), stops


def split(data: bytearray | np.ndarray, text: np.ndarray, ends: np.ndarray, gap: bytes) -> Split | None:
    """Cut a layout block (``text``: its bytes with the separators' commas blanked, ``ends`` where) in two;
    None when it holds no Python event, their head is not ``{"ph": "X", "cat": "python_function"``, or
    their text holds a key of ``READ_KEYS``."""
    if not isinstance(data, bytearray):
        return None  # a block cut by structure (NDJSON): not the writer's layout
    at = data.find(CATEGORY)
    if at < 0 or text.size == 0 or text[0] != ord("{"):
        return None
    starts, stops = event_bounds(text, ends, gap)
    k = int(np.searchsorted(starts, at, side="right")) - 1
    head = bytes(data[starts[k] : at + len(CATEGORY)])
    if not _HEAD.fullmatch(head):
        return None  # not ``{"ph": "X", "cat": "python_function"``: a layout this cut does not know
    is_python = _starts_with(text, starts, head)
    python_rows = np.flatnonzero(is_python)
    other_rows = np.flatnonzero(~is_python)
    if python_rows.size == 0:
        return None
    view = text.data
    python, _ = _joined(view, starts, stops, python_rows)
    if any(key in python for key in READ_KEYS):
        return None
    if other_rows.size:
        others, other_stops = _joined(view, starts, stops, other_rows)
    else:
        others, other_stops = b"", np.empty(0, np.int64)
    return Split(
        np.frombuffer(python, np.uint8),
        np.frombuffer(others, np.uint8),
        other_stops[:-1],
        python_rows,
        other_rows,
        int(starts.size),
    )
