"""Columnar pieces of an nsys trace (one per table) and the interned names and details they point into."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from gaplens.loaders import columns
from gaplens.loaders.events import ordered_lanes
from gaplens.loaders.kinds import LaneKind
from gaplens.loaders.meta import Lane
from gaplens.loaders.nsys.sql import Reader, Schema
from gaplens.loaders.validate import Repairs

_VERSION_SUFFIX = re.compile(r"(_v\d+)+$")
TID_MASK = 0xFFFFFF


def api_display_name(name: str) -> str:
    """``cudaLaunchKernel_v7000`` → ``cudaLaunchKernel`` (also ``..._v2_v12000``)."""
    return _VERSION_SUFFIX.sub("", name) or name


def split_tid(global_tid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(pid, tid) from serialized globalTid values (FORMATS.md 2.2)."""
    g = np.asarray(global_tid, dtype=np.int64)
    return (g >> 24) & TID_MASK, g & TID_MASK


def process_scope(global_tid: np.ndarray) -> np.ndarray:
    """VM + process bits of a globalTid (== globalPid): the scope in which correlation ids are unique."""
    return np.asarray(global_tid, dtype=np.int64) & ~np.int64(TID_MASK)


def factorize(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes, distinct values in first-seen order), without pandas on the load path."""
    return columns.factorize(np.asarray(values, dtype=np.int64))


def first_index(codes: np.ndarray, count: int) -> np.ndarray:
    """Index of the first row of each code."""
    first = np.empty(count, np.int64)
    first[codes[::-1]] = np.arange(codes.size - 1, -1, -1)
    return first


class Interner:
    """Strings to dense ids; vectorised mapping of StringIds ids through a lookup array."""

    def __init__(self, first: str | None = None) -> None:
        self.ids: dict[str, int] = {}
        if first is not None:
            self.add(first)

    def add(self, text: str) -> int:
        return self.ids.setdefault(text, len(self.ids))

    def values(self) -> list[str]:
        return list(self.ids)

    def map_ids(self, raw: np.ndarray, lookup, fallback: str = "?") -> np.ndarray:
        """Map a column of file string ids (or codes) through ``lookup(code) -> str`` once per distinct code."""
        raw = np.asarray(raw, dtype=np.int64)
        if raw.size == 0:
            return np.empty(0, np.int32)
        inverse, codes = factorize(raw)
        return self.lut(codes, lookup, fallback)[inverse]

    def lut(self, codes: np.ndarray, lookup, fallback: str = "?") -> np.ndarray:
        """The id of ``lookup(code)`` for each distinct code (``map_ids`` for a column factorized once)."""
        return np.fromiter(
            (self.add(lookup(int(c)) or fallback) for c in codes.tolist()), dtype=np.int32, count=codes.size
        )


@dataclass
class Part:
    """Events of one source table, still keyed by raw lane keys and absolute times."""

    lane_kind: np.ndarray  # LaneKind per event (int8)
    lane_a: np.ndarray  # pid or device
    lane_b: np.ndarray  # tid, stream, or -1
    start: np.ndarray
    end: np.ndarray
    name: np.ndarray  # into the names interner
    kind: np.ndarray  # Kind
    corr: np.ndarray
    scope: np.ndarray  # process bits: correlation ids are unique only within a process
    nbytes: np.ndarray
    detail: np.ndarray  # into the details interner

    @classmethod
    def make(
        cls,
        lane_kind: LaneKind,
        a,
        b,
        start,
        end,
        name,
        kind,
        corr=None,
        scope=None,
        nbytes=None,
        detail=None,
    ) -> Part:
        n = int(np.asarray(start).size)

        def col(x, fill, dtype):
            # A value for every row is a read-only view of one element until the Parts are joined.
            arr = np.asarray(fill if x is None else x, dtype=dtype)
            return np.broadcast_to(arr, (n,)) if arr.ndim == 0 else arr

        return cls(
            lane_kind=col(int(lane_kind), 0, np.int8),
            lane_a=col(a, -1, np.int64),
            lane_b=col(b, -1, np.int64),
            start=col(start, 0, np.int64),
            end=col(end, 0, np.int64),
            name=col(name, 0, np.int32),
            kind=col(kind, 0, np.int8),
            corr=col(corr, -1, np.int64),
            scope=col(scope, 0, np.int64),
            nbytes=col(nbytes, 0, np.int64),
            detail=col(detail, 0, np.int32),
        )

    def __len__(self) -> int:
        return int(self.start.size)

    def take(self, keep: np.ndarray) -> Part:
        """The rows where ``keep`` is True."""
        return Part(**{f: getattr(self, f)[keep] for f in Part.__dataclass_fields__})


class LaneKeys:
    """Raw lane keys of many Parts (kind, pid or device, tid or stream in one int64), numbered as first seen."""

    def __init__(self) -> None:
        self.ids: dict[int, int] = {}

    def codes(self, part: Part) -> np.ndarray:
        """Each row's raw lane number (int32); the part's lane columns are used up."""
        if not len(part):
            return np.empty(0, np.int32)
        key = np.add(part.lane_b, 1, dtype=np.int64)
        a = np.add(part.lane_a, 1, dtype=np.int64)
        a <<= 33
        key |= a
        del a
        key |= np.int64(int(part.lane_kind[0])) << 57  # one lane kind per Part
        part.lane_a = part.lane_b = np.broadcast_to(np.int64(-1), (len(part),))
        inverse, uniq = factorize(key)
        del key
        lut = np.fromiter((self.ids.setdefault(k, len(self.ids)) for k in uniq.tolist()), np.int32, uniq.size)
        return lut[inverse]

    def lanes(self, lane: np.ndarray) -> tuple[list[Lane], np.ndarray]:
        """Lanes of the raw numbers in ``lane`` in display order, and each row's lane id."""
        n = lane.size
        first = np.full(len(self.ids), n, np.int64)
        first[lane[::-1]] = np.arange(n - 1, -1, -1)
        used = np.flatnonzero(first < n)
        used = used[np.argsort(first[used], kind="stable")]  # first seen first, as the rows run
        keys = list(self.ids)
        raw = [
            (LaneKind(k >> 57), ((k >> 33) & 0xFFFFFF) - 1, (k & ((1 << 33) - 1)) - 1)
            for k in (keys[i] for i in used.tolist())
        ]
        lanes, remap = ordered_lanes(raw)
        to_lane = np.zeros(len(keys), np.int32)
        to_lane[used] = remap
        return lanes, to_lane[lane]


@dataclass
class Context:
    """What every table reader needs: the reader, the probed schema, strings and the interners."""

    reader: Reader
    schema: Schema
    strings: dict[int, str]
    names: Interner
    details: Interner
    warnings: list[str]
    repairs: Repairs = field(default_factory=Repairs)

    def string(self, sid: int) -> str:
        return self.strings.get(sid, "")
