"""Tiny hand-built traces for the readings: one host thread, streams on GPU 0, times in ns from 0."""

from __future__ import annotations

from gaplens.loaders.events import EventColumns
from gaplens.loaders.model import Device, Kind, LaneKind, Meta, Trace
from gaplens.loaders.syncs import sync_detail

PID = TID = 100
API = (LaneKind.CUDA_API, PID, TID)
OPS = (LaneKind.CPU_OPS, PID, TID)
ANN = (LaneKind.ANNOTATIONS, PID, TID)
SYNC_LANE = (LaneKind.GPU_SYNC, 0, -1)


def stream(n: int = 7, device: int = 0) -> tuple:
    return (LaneKind.STREAM, device, n)


class Builder:
    """Add calls and the GPU work they launch; ``trace()`` builds the Trace."""

    def __init__(self) -> None:
        self.cols = EventColumns()
        self.corr = 0
        # Pin the origin at 0 so test times are the trace's times.
        self.cols.add(OPS, 0, 0, "origin", Kind.CPU_OP)

    def call(self, start: int, end: int, name: str = "cudaLaunchKernel") -> int:
        self.corr += 1
        self.cols.add(API, start, end, name, Kind.CUDA_API, self.corr)
        return self.corr

    def op(self, corr: int, start: int, end: int, s: int = 7, kind: Kind = Kind.KERNEL, name: str = "k", nbytes=0):
        self.cols.add(stream(s), start, end, name, kind, corr, nbytes)

    def launch(self, c0: int, c1: int, k0: int, k1: int, s: int = 7, name: str = "k") -> int:
        corr = self.call(c0, c1)
        self.op(corr, k0, k1, s, name=name)
        return corr

    def cpu(self, start: int, end: int, name: str = "aten::op") -> None:
        self.cols.add(OPS, start, end, name, Kind.CPU_OP)

    def phase(self, start: int, end: int, name: str) -> None:
        self.cols.add(ANN, start, end, name, Kind.ANNOTATION)

    def wait_event(self, start: int, end: int, on_stream: int, stream: int = -1, record_corr: int = -1) -> int:
        """A ``cudaStreamWaitEvent`` and its sync row; ``stream`` (the waiting one) unknown by default."""
        corr = self.call(start, end, "cudaStreamWaitEvent")
        detail = sync_detail("Stream Wait Event", stream, on_stream, record_corr)
        self.cols.add(SYNC_LANE, start, end, "Stream Wait Event", Kind.SYNC, corr, 0, detail)
        return corr

    def trace(self) -> Trace:
        return self.cols.finish(Meta("kineto", path="handbuilt", devices=[Device(0, "test GPU")]), None)
