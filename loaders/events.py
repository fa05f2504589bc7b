"""Row-wise accumulation of events into lanes, for loaders that see one event at a time."""

from __future__ import annotations

import numpy as np

from gaplens.loaders.build import build_trace
from gaplens.loaders.kinds import LaneKind
from gaplens.loaders.meta import Lane, Meta
from gaplens.loaders.trace import Trace

LANE_LABELS = {
    LaneKind.CPU_OPS: "CPU ops",
    LaneKind.ANNOTATIONS: "annotations",
    LaneKind.CUDA_API: "CUDA API",
    LaneKind.OSRT: "OS runtime",
    LaneKind.STREAM: "stream",
    LaneKind.GPU_ANNOTATIONS: "annotations",
    LaneKind.GPU_SYNC: "sync",
    LaneKind.OVERHEAD: "overhead",
}
# Within a thread: annotations (phases) on top, then ops, then the API calls they make.
LANE_ORDER = {
    LaneKind.ANNOTATIONS: 0,
    LaneKind.CPU_OPS: 1,
    LaneKind.CUDA_API: 2,
    LaneKind.OSRT: 3,
    LaneKind.OVERHEAD: 4,
    LaneKind.GPU_ANNOTATIONS: 0,
    LaneKind.STREAM: 1,
    LaneKind.GPU_SYNC: 2,
}


def make_lane(lane_id: int, key: tuple[LaneKind, int, int]) -> Lane:
    """A lane from its key: (kind, pid, tid) for host lanes, (kind, device, stream) for GPU."""
    kind, a, b = key
    label = LANE_LABELS[kind]
    if kind == LaneKind.STREAM:
        return Lane(lane_id, kind, f"stream {b}", device=a, stream=b, sort_key=(1, a, b, 1))
    if kind == LaneKind.GPU_ANNOTATIONS:
        return Lane(lane_id, kind, f"{label} (stream {b})", device=a, stream=b, sort_key=(1, a, b, 0))
    if kind == LaneKind.GPU_SYNC:
        return Lane(lane_id, kind, label, device=a, sort_key=(1, a, 1 << 40, 2))
    return Lane(lane_id, kind, label, pid=a, tid=b, sort_key=(0, a, b, LANE_ORDER[kind]))


def ordered_lanes(keys: list[tuple[LaneKind, int, int]]) -> tuple[list[Lane], np.ndarray]:
    """Lanes for keys in first-seen order, sorted for display; ``remap[i]`` is key i's lane id."""
    provisional = [make_lane(i, k) for i, k in enumerate(keys)]
    order = sorted(range(len(keys)), key=lambda i: provisional[i].sort_key)
    remap = np.empty(len(keys), dtype=np.int32)
    remap[order] = np.arange(len(keys), dtype=np.int32)
    return [make_lane(new_id, keys[old]) for new_id, old in enumerate(order)], remap


class EventColumns:
    """Append events as Python scalars; ``finish`` turns them into one sorted Trace."""

    def __init__(self) -> None:
        self.lane_ids: dict[tuple, int] = {}
        self.name_ids: dict[str, int] = {}
        self.detail_ids: dict[str, int] = {"": 0}
        self.lane: list[int] = []
        self.start: list[int] = []
        self.end: list[int] = []
        self.name: list[int] = []
        self.kind: list[int] = []
        self.corr: list[int] = []
        self.nbytes: list[int] = []
        self.detail: list[int] = []

    def add(
        self,
        lane_key: tuple,
        start: int,
        end: int,
        name: str,
        kind: int,
        corr: int = -1,
        nbytes: int = 0,
        detail: str = "",
    ) -> None:
        lane = self.lane_ids.setdefault(lane_key, len(self.lane_ids))
        self.lane.append(lane)
        self.start.append(start)
        self.end.append(end)
        self.name.append(self.name_ids.setdefault(name, len(self.name_ids)))
        self.kind.append(int(kind))
        self.corr.append(corr)
        self.nbytes.append(nbytes)
        self.detail.append(self.detail_ids.setdefault(detail, len(self.detail_ids)))

    def finish(self, meta: Meta, corr_scope: np.ndarray | None) -> Trace:
        lanes, remap = ordered_lanes(list(self.lane_ids))
        lane = remap[np.asarray(self.lane, dtype=np.int64)] if self.lane else np.empty(0, np.int32)
        return build_trace(
            meta,
            lanes,
            list(self.name_ids),
            list(self.detail_ids),
            lane,
            np.asarray(self.start, dtype=np.int64),
            np.asarray(self.end, dtype=np.int64),
            np.asarray(self.name, dtype=np.int32),
            np.asarray(self.kind, dtype=np.int8),
            np.asarray(self.corr, dtype=np.int64),
            np.asarray(self.nbytes, dtype=np.int64),
            np.asarray(self.detail, dtype=np.int32),
            corr_scope=corr_scope,
        )
