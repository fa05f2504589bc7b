"""GPU busy time: the union of kernel/memcpy/memset intervals over all streams of a device.

Never a per-stream sum: two overlapping streams are busy once, not twice.

    stream 7   ████    ██████
    stream 13    ██████          ██
    busy       ██████████████    ██    <- union

Busy splits into three classes (DESIGN.md § Three classes of GPU work): communication
(``analysis.comm``), copies (memcpy and memset, ``COPY_KINDS``) and compute (every other kernel,
CUDA-graph boxes included). ``busy_share`` is the one place that turns these into the numbers every
screen and command prints; ``analysis.regions.bound_by`` says which class a stretch of time was spent in.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gaplens.analysis.comm import comm_mask
from gaplens.analysis.memo import per_trace
from gaplens.analysis.spans import BusySpans
from gaplens.loaders.model import GPU_WORK_KINDS, MEMCPY_KINDS, Kind, Trace

#: GPU work that moves or fills memory: the copy class.
COPY_KINDS = (*MEMCPY_KINDS, Kind.MEMSET)


def gpu_work(trace: Trace, device: int | None = None) -> np.ndarray:
    """Indices of events that make a device busy (all devices when ``device`` is None)."""
    mask = trace.mask(GPU_WORK_KINDS)
    if device is not None:
        mask &= trace.device_of_event() == device
    return np.flatnonzero(mask)


def device_busy(trace: Trace, device: int) -> BusySpans:
    idx = gpu_work(trace, device)
    return BusySpans(trace.start_ns[idx], trace.end_ns[idx])


def gpu_window(trace: Trace, device: int | None = None) -> tuple[int, int]:
    """First to last GPU activity: the default analysis window (whole trace if no GPU work)."""
    idx = gpu_work(trace, device)
    if idx.size == 0:
        if len(trace) == 0:
            return 0, 0
        return int(trace.start_ns.min()), int(trace.end_ns.max())
    return int(trace.start_ns[idx].min()), int(trace.end_ns[idx].max())


@dataclass(frozen=True)
class Split:
    """One device's busy time as unions: all GPU work, and each of the three classes."""

    busy: BusySpans
    compute: BusySpans
    comm: BusySpans
    copy: BusySpans
    compute_or_comm: BusySpans  # for exposed communication: comm not overlapped by compute


def copy_mask(trace: Trace) -> np.ndarray:
    """Per event: True for copies and memsets (the copy class)."""
    return trace.mask(COPY_KINDS)


def compute_mask(trace: Trace) -> np.ndarray:
    """Per event: True for compute, GPU work that is neither communication nor a copy."""
    return trace.mask(GPU_WORK_KINDS) & ~comm_mask(trace) & ~copy_mask(trace)


@per_trace
def device_splits(trace: Trace) -> dict[int, Split]:
    """Split per device (cached while the trace lives)."""
    comm = comm_mask(trace)
    copies = copy_mask(trace)
    dev = trace.device_of_event()
    work = trace.mask(GPU_WORK_KINDS)
    out = {}
    for d in trace.meta.devices:
        on = work & (dev == d.id)
        c = on & comm
        y = on & copies & ~comm
        k = on & ~comm & ~copies
        kc = k | c
        out[d.id] = Split(
            BusySpans(trace.start_ns[on], trace.end_ns[on]),
            BusySpans(trace.start_ns[k], trace.end_ns[k]),
            BusySpans(trace.start_ns[c], trace.end_ns[c]),
            BusySpans(trace.start_ns[y], trace.end_ns[y]),
            BusySpans(trace.start_ns[kc], trace.end_ns[kc]),
        )
    return out


def compute_busy(trace: Trace, device: int) -> BusySpans:
    """Compute-only busy spans of one device: what verdicts about density and pacing use."""
    split = device_splits(trace).get(device)
    return split.compute if split is not None else BusySpans(np.empty(0, np.int64), np.empty(0, np.int64))


def span_busy_ns(trace: Trace, t0: int, t1: int, devices: list[int] | None = None, part: str = "compute") -> int:
    """Time one class of GPU work ran in [t0, t1), summed over ``devices`` (every device when None).

    ``part`` is a field of ``Split``: ``compute`` (what verdicts about density and pacing read),
    ``comm``, ``copy`` or ``busy`` (all GPU work). A span read on two devices counts each device's
    time, so its share is over ``(t1 - t0) * len(devices)``. The one sum behind every phase's,
    step's and marked range's share (the walkthrough, compare, pacing, the experiment).
    """
    splits = device_splits(trace)
    ids = [d.id for d in trace.meta.devices] if devices is None else devices
    return sum(getattr(splits[d], part).busy_in(t0, t1) for d in ids if d in splits)


@dataclass(frozen=True)
class DeviceShare:
    """What one device did over its window: busy, compute, communication, exposed communication, copies."""

    id: int
    name: str
    window_ns: tuple[int, int]
    busy_ns: int
    compute_ns: int
    comm_ns: int
    exposed_comm_ns: int
    copy_ns: int = 0

    @property
    def span_ns(self) -> int:
        return self.window_ns[1] - self.window_ns[0]

    @property
    def busy_pct(self) -> float:
        return pct(self.busy_ns, self.span_ns)

    @property
    def compute_pct(self) -> float:
        return pct(self.compute_ns, self.span_ns)


@dataclass(frozen=True)
class BusyShare:
    """THE busy reading: per device, and summed over devices (DESIGN.md § GPU busy).

    ``profiler_ns`` is the time the profiler itself took (its overhead rows) inside the GPU window.
    """

    devices: list[DeviceShare]
    window_ns: tuple[int, int]
    profiler_ns: int

    @property
    def busy_ns(self) -> int:
        return sum(d.busy_ns for d in self.devices)

    @property
    def compute_ns(self) -> int:
        return sum(d.compute_ns for d in self.devices)

    @property
    def comm_ns(self) -> int:
        return sum(d.comm_ns for d in self.devices)

    @property
    def exposed_comm_ns(self) -> int:
        return sum(d.exposed_comm_ns for d in self.devices)

    @property
    def copy_ns(self) -> int:
        return sum(d.copy_ns for d in self.devices)

    @property
    def device_ns(self) -> int:
        """The summed device windows: the denominator of every overall share."""
        return sum(d.span_ns for d in self.devices)

    @property
    def busy_pct(self) -> float:
        return pct(self.busy_ns, self.device_ns)

    @property
    def compute_pct(self) -> float:
        return pct(self.compute_ns, self.device_ns)

    @property
    def exposed_comm_pct(self) -> float:
        return pct(self.exposed_comm_ns, self.device_ns)

    @property
    def profiler_pct(self) -> float:
        return pct(self.profiler_ns, self.window_ns[1] - self.window_ns[0])

    def to_json(self) -> dict:
        """The ``gpu`` object of the JSON contract."""
        return {
            "busy_ns": self.busy_ns,
            "busy_pct": self.busy_pct,
            "compute_ns": self.compute_ns,
            "compute_pct": self.compute_pct,
            "comm_ns": self.comm_ns,
            "exposed_comm_ns": self.exposed_comm_ns,
            "copy_ns": self.copy_ns,
            "profiler_ns": self.profiler_ns,
            "profiler_pct": self.profiler_pct,
        }


def pct(part: int, whole: int) -> float:
    """Unrounded percentage: text output rounds once, when it prints."""
    return 100.0 * part / whole if whole > 0 else 0.0


@per_trace
def busy_share(trace: Trace) -> BusyShare:
    """Busy, compute, communication, exposed communication and copies per device over each device's window."""
    splits = device_splits(trace)
    devices = []
    for d in trace.meta.devices:
        sp = splits[d.id]
        w0, w1 = gpu_window(trace, d.id)
        busy = sp.busy.busy_in(w0, w1)
        compute = sp.compute.busy_in(w0, w1)
        exposed = sp.compute_or_comm.busy_in(w0, w1) - compute
        devices.append(
            DeviceShare(
                d.id, d.name, (w0, w1), busy, compute, sp.comm.busy_in(w0, w1), exposed, sp.copy.busy_in(w0, w1)
            )
        )
    w0, w1 = gpu_window(trace)
    return BusyShare(devices, (w0, w1), profiler_time(trace, w0, w1))


def profiler_time(trace: Trace, t0: int, t1: int) -> int:
    """Time inside [t0, t1) covered by the profiler's own overhead rows (buffer flushes and the like)."""
    spans = overhead_spans(trace)
    return spans.busy_in(t0, t1)


@per_trace
def overhead_spans(trace: Trace) -> BusySpans:
    """The union of the profiler's overhead rows (Kineto ``overhead``, nsys ``PROFILER_OVERHEAD``)."""
    m = trace.kind == int(Kind.OVERHEAD)
    return BusySpans(trace.start_ns[m], trace.end_ns[m])


_COPY_DIRECTION = {
    int(Kind.MEMCPY_HTOD): "HtoD",
    int(Kind.MEMCPY_DTOH): "DtoH",
    int(Kind.MEMCPY_DTOD): "DtoD",
    int(Kind.MEMCPY_PEER): "peer",
    int(Kind.MEMCPY_OTHER): "copy",
    int(Kind.MEMSET): "memset",
}


def copy_label(trace: Trace, i: int) -> str:
    """Direction and memory kind of copy ``i``: ``HtoD pageable``, ``DtoH pinned``, ``DtoD``, ``peer``, ``memset``.

    The memory kind comes from the name both loaders give copies (``Memcpy HtoD (Pageable -> Device)``);
    where the trace does not say (``Host -> Device`` on ROCm), only the direction is named.
    """
    base = _COPY_DIRECTION.get(int(trace.kind[i]), "copy")
    if base not in ("HtoD", "DtoH"):
        return base
    name = trace.name(i).lower()
    for kind in ("pageable", "pinned", "managed"):
        if kind in name:
            return f"{base} {kind}"
    return base


def is_host_copy(label: str) -> bool:
    """True when a copy label crosses the host link (HtoD/DtoH), not device-local or peer traffic."""
    return label.startswith(("HtoD", "DtoH"))


def copy_breakdown(trace: Trace, t0: int, t1: int, device: int | None = None) -> dict[str, int]:
    """Copy time inside [t0, t1) by direction and memory kind (per-event time, clipped; largest first)."""
    m = copy_mask(trace) & (trace.start_ns < t1) & (trace.end_ns > t0)
    if device is not None:
        m &= trace.device_of_event() == device
    idx = np.flatnonzero(m)
    out: dict[str, int] = {}
    dur = np.minimum(trace.end_ns[idx], t1) - np.maximum(trace.start_ns[idx], t0)
    for i, d in zip(idx.tolist(), dur.tolist(), strict=True):
        label = copy_label(trace, i)
        out[label] = out.get(label, 0) + int(d)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))
