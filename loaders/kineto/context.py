"""What the blocks of one Kineto file share, and what each hands over: ``Context`` (names, details,
lanes, processes and threads, numbered as one thread reading the file in order would number them),
``Block`` (one block's kept events) and ``Columns`` (the file's events, block after block).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gaplens.loaders.columns import factorize
from gaplens.loaders.kineto.fields import GPU_LANES
from gaplens.loaders.model import LaneKind
from gaplens.loaders.validate import int_or_none


@dataclass
class Context:
    """State shared by the blocks of one file: dictionaries, names, counts."""

    names: dict[str, int] = field(default_factory=dict)
    details: dict[str, int] = field(default_factory=lambda: {"": 0})
    lanes: dict[tuple[int, int, int], int] = field(default_factory=dict)
    named_ids: dict[str, int] = field(default_factory=dict)
    processes: dict[int, str] = field(default_factory=dict)
    threads: dict[tuple[int, int], str] = field(default_factory=dict)
    unknown: dict[str, int] = field(default_factory=dict)
    kernel_texts: dict[tuple, str] = field(default_factory=dict)  # kernel details formatted, shared by a file's blocks
    bad_time: int = 0  # events kept with an unusable dur (set to 0)
    bad_start: int = 0  # events skipped: no usable ts
    malformed: int = 0

    def host_id(self, value) -> int:
        """Stable int for a pid/tid that may be an int, a numeric string or a name (or a number past int64)."""
        num = None if isinstance(value, bool) else int_or_none(value, floats=False)
        if num is not None:
            return num
        return self.named_ids.setdefault(str(value)[:200], -1000 - len(self.named_ids))

    def code(self, table: dict[Any, int], values: list) -> np.ndarray:
        return np.fromiter((table.setdefault(v, len(table)) for v in values), np.int32, len(values))

    def merge(self, local: Context, block: Block) -> Block:
        """Fold a Context that classified one block alone into this one; the block's ids become this one's.

        ``local`` registered names, details, lanes and named pids in the order a single
        Context would have met them in this block, so registering them here in that
        order, block after block, gives every id the value a single thread gives it.
        """
        named = {lid: self.host_id(name) for name, lid in local.named_ids.items()}

        def host(value: int) -> int:
            return named.get(value, value)

        lanes = [
            (kind, a, b) if LaneKind(kind) in GPU_LANES else (kind, host(a), host(b)) for kind, a, b in local.lanes
        ]
        block.lane = self.code(self.lanes, lanes)[block.lane]
        block.name_id = self.code(self.names, list(local.names))[block.name_id]
        block.detail_id = self.code(self.details, list(local.details))[block.detail_id]
        for pid, name in local.processes.items():
            self.processes.setdefault(host(pid), name)
        for (pid, tid), name in local.threads.items():
            self.threads.setdefault((host(pid), host(tid)), name)
        for cat, count in local.unknown.items():
            self.unknown[cat] = self.unknown.get(cat, 0) + count
        self.bad_time += local.bad_time
        self.bad_start += local.bad_start
        self.malformed += local.malformed
        return block


@dataclass
class Block:
    """Kept duration events of one block; ``start``/``dur`` are ns relative to the base."""

    lane: np.ndarray
    start: np.ndarray
    dur: np.ndarray
    name_id: np.ndarray
    kind: np.ndarray
    corr: np.ndarray
    nbytes: np.ndarray
    detail_id: np.ndarray

    @staticmethod
    def empty() -> Block:
        i64 = np.empty(0, np.int64)
        i32 = np.empty(0, np.int32)
        return Block(i32, i64, i64, i32, np.empty(0, np.int8), i64, i64, i32)


_BLOCK_COLUMNS = (
    ("lane", np.int32),
    ("start", np.int64),
    ("dur", np.int64),
    ("name_id", np.int32),
    ("kind", np.int8),
    ("corr", np.int64),
    ("nbytes", np.int64),
    ("detail_id", np.int32),
)


class Columns:
    """A file's kept events, block after block, in columns sized from an estimate of the whole file.

    Each block is copied in once and the build reads the filled part in place: no joins and,
    when the estimate holds, no final concatenation (at 1M events each of those copied ~45 MB
    on the merging thread). The capacity is twice what the events per byte of JSON so far
    predict for the file; pages past what is written are never touched, so they cost no
    memory. A file that holds more continues in a segment of its own, sized by a new
    estimate, and the segments are joined once, at the build.
    """

    def __init__(self) -> None:
        self.size = 0
        self._segments: list[tuple[dict[str, np.ndarray], int]] = []  # (columns, filled) but the last
        self._cols = {name: np.empty(0, dtype) for name, dtype in _BLOCK_COLUMNS}
        self._filled = 0

    def append(self, block: Block, json_read: int, json_total: int) -> None:
        """Add a block; ``json_read`` is the JSON consumed through it, ``json_total`` the file's, estimated."""
        n = int(block.start.size)
        if self._filled + n > self._cols["start"].size:
            predicted = int((self.size + n) / max(json_read, 1) * max(json_total, json_read) * 2)
            if self._filled:
                self._segments.append((self._cols, self._filled))
            capacity = max(n, predicted - self.size, 1 << 16)
            self._cols, self._filled = {name: np.empty(capacity, dtype) for name, dtype in _BLOCK_COLUMNS}, 0
        for name, _ in _BLOCK_COLUMNS:
            self._cols[name][self._filled : self._filled + n] = getattr(block, name)
        self._filled += n
        self.size += n

    def take(self, name: str) -> np.ndarray:
        """One column's events, dropped from here: a view of the filled part (writable: the build edits
        some in place), or the segments joined."""
        parts = [cols.pop(name)[:filled] for cols, filled in self._segments]
        parts.append(self._cols.pop(name)[: self._filled])
        return parts[0] if len(parts) == 1 else np.concatenate(parts)


def lane_codes(ctx: Context, lane_kind: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Lane ids (in order of first appearance over the file) for (kind, a, b) triples."""
    if lane_kind.size == 0:
        return np.empty(0, np.int32)
    ca, ua = factorize(np.asarray(a, np.int64))
    cb, ub = factorize(np.asarray(b, np.int64))
    key = (lane_kind.astype(np.int64) * len(ua) + ca) * len(ub) + cb
    codes, uniq = factorize(key)
    lut = np.empty(len(uniq), np.int32)
    for j, k in enumerate(uniq.tolist()):
        rest, ib = divmod(k, len(ub))
        kind, ia = divmod(rest, len(ua))
        lut[j] = ctx.lanes.setdefault((int(kind), int(ua[ia]), int(ub[ib])), len(ctx.lanes))
    return lut[codes]


def note_metadata(ctx: Context, name, value, pid, tid) -> None:
    """A process or thread name from an ``M`` event: the first one seen for its pid (and tid) is kept."""
    if not isinstance(value, str):
        return
    if name == "process_name":
        ctx.processes.setdefault(ctx.host_id(pid), value)
    elif name == "thread_name":
        ctx.threads.setdefault((ctx.host_id(pid), ctx.host_id(tid)), value)
