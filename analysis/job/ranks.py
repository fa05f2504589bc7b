"""Per-rank readings of a job: the small table each rank hands the cross-rank step.

A rank is one process that runs GPU work, on its GPU: a Kineto file per rank holds one, an nsys
report can hold several (one per process, told apart by the GPU it runs on). ``read_ranks``
turns a loaded trace into one ``RankReading`` per rank: busy share, compute / communication /
exposed communication (``analysis.busy.busy_share``), step (``analysis.steps``, per process), the
collective table (``analysis.job.collectives``) and a coarse activity profile for the job overview.
Everything in it is small (ranks × collectives), never events: this is what a worker process or
a Dask task sends back to the coordinator.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gaplens.analysis.busy import busy_share, device_splits, gpu_window
from gaplens.analysis.comm import comm_mask
from gaplens.analysis.gaps import CAUSES, gap_columns
from gaplens.analysis.job.collectives import CollectiveTable, collective_table
from gaplens.analysis.phases import Phase, phases
from gaplens.analysis.steps import steps
from gaplens.loaders.model import GPU_WORK_KINDS, Trace

#: Samples of the cumulative compute / comm time over a rank's window, for the overview's bars.
PROFILE_SAMPLES = 512


@dataclass
class Profile:
    """Cumulative compute and communication time at ``PROFILE_SAMPLES`` instants, evenly from ``t0_ns`` to
    ``t1_ns`` (absolute): coverage of any column.

    The instants are implied and the sums kept as float32 (exact to a part in 10**7 of the rank's busy
    time, far below a column of the bars): 4 KB a rank instead of 12, which at 10,000 ranks is 80 MB
    less in the coordinator.
    """

    t0_ns: int
    t1_ns: int
    compute_ns: np.ndarray  # float32, cumulative
    comm_ns: np.ndarray

    @property
    def t_ns(self) -> np.ndarray:
        """The sampling instants (int64)."""
        return np.linspace(self.t0_ns, self.t1_ns, self.compute_ns.size).astype(np.int64)

    def shares(self, edges_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(compute, comm) share of each column between consecutive ``edges_ns``."""
        edges = np.asarray(edges_ns, np.float64)
        width = np.maximum(np.diff(edges), 1.0)
        if self.compute_ns.size < 2:
            z = np.zeros(width.size)
            return z, z
        t = np.linspace(float(self.t0_ns), float(self.t1_ns), self.compute_ns.size)
        c = np.interp(edges, t, self.compute_ns.astype(np.float64))
        m = np.interp(edges, t, self.comm_ns.astype(np.float64))
        return np.clip(np.diff(c) / width, 0, 1), np.clip(np.diff(m) / width, 0, 1)


@dataclass
class RankReading:
    """What one rank contributes to a job; times are absolute ns on the rank's own clock."""

    source: str  # the file it came from
    file_index: int  # position of that file in the job
    format: str  # "kineto" | "nsys"
    clock: str  # ranks with the same clock key share a clock by construction (one nsys report)
    declared_rank: int | None  # distributedInfo's rank (Kineto), else None
    world_size: int | None
    pid: int | None
    device: int
    origin_ns: int
    window_ns: tuple[int, int]
    busy_ns: int
    busy_pct: float
    compute_ns: int
    comm_ns: int
    exposed_comm_ns: int
    step_ns: int  # median of the steady steps (``analysis.steps``), 0 without steps
    steps: int  # steps, warm-up included
    step_spans_ns: list[tuple[int, int]]  # the steps as CUDA events time them, absolute
    collectives: CollectiveTable
    profile: Profile
    warnings: list[str] = field(default_factory=list)
    step_label: str = ""  # the step's family ("train_step", "ProfilerStep"); "" without steps
    step_warmup: list[int] = field(default_factory=list)  # indices of warm-up steps, set apart from per-step means

    @property
    def name(self) -> str:
        where = f"pid {self.pid}, GPU {self.device}" if self.format == "nsys" else f"GPU {self.device}"
        return f"{self.source} ({where})"


def rank_processes(trace: Trace) -> list[tuple[int | None, int]]:
    """(pid, device) of each process that runs GPU work, by device; one per file for Kineto.

    A process's device is the one that ran most of the work it launched. Without launch links
    (no CUDA API rows) each device is one rank.
    """
    work = np.flatnonzero(trace.mask(GPU_WORK_KINDS))
    dev = trace.device_of_event()[work] if work.size else np.empty(0, np.int64)
    if work.size == 0:
        return []
    launch = trace.launch[work]
    lane_pid = np.asarray([ln.pid for ln in trace.lanes], np.int64)
    linked = launch >= 0
    if trace.meta.source_format != "nsys" or not linked.any():
        if trace.meta.source_format != "nsys":
            return [(_main_pid(trace, work, lane_pid), _main_device(trace, dev))]
        return [(None, int(d)) for d in np.unique(dev).tolist()]
    pids = lane_pid[trace.lane[launch[linked]]]
    devs = dev[linked]
    out = []
    for pid in np.unique(pids).tolist():
        d, counts = np.unique(devs[pids == pid], return_counts=True)
        out.append((int(pid), int(d[np.argmax(counts)])))
    return sorted(out, key=lambda pd: (pd[1], pd[0]))


def _main_device(trace: Trace, dev: np.ndarray) -> int:
    """The device a Kineto rank runs on: the one with most communication, else most GPU work."""
    comm_dev = trace.device_of_event()[comm_mask(trace)]
    pool = comm_dev if comm_dev.size else dev
    d, counts = np.unique(pool, return_counts=True)
    return int(d[np.argmax(counts)])


def _main_pid(trace: Trace, work: np.ndarray, lane_pid: np.ndarray) -> int | None:
    launch = trace.launch[work]
    linked = launch[launch >= 0]
    if linked.size:
        p, counts = np.unique(lane_pid[trace.lane[linked]], return_counts=True)
        return int(p[np.argmax(counts)])
    pids = [p for p in trace.meta.processes if p >= 0]
    return pids[0] if len(pids) == 1 else None


def declared_rank(trace: Trace) -> tuple[int | None, int | None]:
    """(rank, world size) from Kineto's ``distributedInfo``; (None, None) when absent."""
    info = trace.meta.extra.get("distributedInfo")
    if not isinstance(info, dict):
        return None, None
    return _int_or_none(info.get("rank")), _int_or_none(info.get("world_size"))


def _int_or_none(value) -> int | None:
    """An int from a JSON int or numeric string (Kineto's on-demand path quotes numbers)."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    text = str(value).strip()
    return int(text) if text.lstrip("-").isdigit() else None


def phases_of(trace: Trace, pid: int | None) -> list[Phase]:
    """The phases of one process (all of them when the trace is one process)."""
    found = phases(trace)
    return found if pid is None else [p for p in found if p.pid == pid]


def read_ranks(trace: Trace, file_index: int = 0) -> list[RankReading]:
    """One reading per rank held by the trace (usually one; several for a multi-process nsys report)."""
    procs = rank_processes(trace)
    many = len(procs) > 1
    rank, world = declared_rank(trace) if not many else (None, None)
    share = busy_share(trace)
    by_dev = {d.id: d for d in share.devices}
    out = []
    for pid, device in procs:
        d = by_dev.get(device)
        if d is None:
            continue
        found = phases_of(trace, pid if many else None)
        st = steps(trace, pid) if many else steps(trace)
        gaps = _gap_reading(trace, device)
        table = collective_table(trace, device, found, st, gaps)
        origin = trace.meta.origin_ns
        w0, w1 = gpu_window(trace, device)
        out.append(
            RankReading(
                source=trace.meta.path,
                file_index=file_index,
                format=trace.meta.source_format,
                clock=trace.meta.path if many else "",
                declared_rank=rank,
                world_size=world,
                pid=pid,
                device=device,
                origin_ns=origin,
                window_ns=(w0 + origin, w1 + origin),
                busy_ns=d.busy_ns,
                busy_pct=d.busy_pct,
                compute_ns=d.compute_ns,
                comm_ns=d.comm_ns,
                exposed_comm_ns=d.exposed_comm_ns,
                step_ns=st.step_ns if st.family else 0,
                steps=len(st.spans) if st.family else 0,
                step_spans_ns=[(a + origin, b + origin) for a, b in st.spans] if st.family else [],
                collectives=table,
                profile=_profile(trace, device, w0, w1),
                warnings=list(trace.meta.warnings),
                step_label=st.label,
                step_warmup=list(st.warmup_idx),
            )
        )
    return out


def _gap_reading(trace: Trace, device: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """(start, end, cause index, cause names) of the device's blank regions: the rank's own gap reading."""
    cols = gap_columns(trace)  # every device, computed once per trace (the viewer's reading too)
    on = cols.device == device
    return cols.start_ns[on], cols.end_ns[on], np.asarray(cols.cause, np.int64)[on], list(CAUSES)


def _profile(trace: Trace, device: int, w0: int, w1: int) -> Profile:
    split = device_splits(trace).get(device)
    origin = trace.meta.origin_ns
    if split is None or w1 <= w0:
        e = np.empty(0, np.float32)
        return Profile(w0 + origin, w1 + origin, e, e)
    t = np.linspace(w0, w1, PROFILE_SAMPLES).astype(np.int64)
    return Profile(
        int(t[0]) + origin,
        int(t[-1]) + origin,
        split.compute.busy_before(t).astype(np.float32),
        split.comm.busy_before(t).astype(np.float32),
    )
