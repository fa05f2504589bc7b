"""What a trace holds besides its event columns: its lanes, its devices, and the facts of its source."""

from __future__ import annotations

from dataclasses import dataclass, field

from gaplens.loaders.kinds import GPU_LANE_KINDS, LaneKind


@dataclass(frozen=True)
class Lane:
    """One row group the user sees; its events may stack into depth sub-rows."""

    id: int
    kind: LaneKind
    name: str
    pid: int = -1  # host process (CPU lanes); -1 for device lanes
    tid: int = -1  # host thread (CPU lanes)
    device: int = -1  # GPU index (device lanes)
    stream: int = -1  # stream id (stream lanes)
    sort_key: tuple = ()

    @property
    def is_gpu(self) -> bool:
        return self.kind in GPU_LANE_KINDS


@dataclass
class Device:
    id: int
    name: str = ""
    properties: dict = field(default_factory=dict)


#: Each format's name as the viewer's header says it (``Meta.source_format`` -> words).
FORMAT_NAMES = {
    "kineto": "Kineto",
    "nsys": "Nsight Systems",
    "xplane": "XSpace (JAX/XLA)",
    "jax-trace-json": "JAX trace JSON",
    "rocprof": "rocprofv3",
}


@dataclass
class Meta:
    """What the trace is and what it lacks, so readings can say "collect a better trace"."""

    source_format: str  # "kineto" | "nsys"
    source_version: str = ""
    path: str = ""
    origin_ns: int = 0  # absolute clock value of relative time 0
    devices: list[Device] = field(default_factory=list)
    processes: dict[int, str] = field(default_factory=dict)
    threads: dict[tuple[int, int], str] = field(default_factory=dict)
    lacks: list[str] = field(default_factory=list)  # e.g. "cpu", "cuda_api", "gpu"
    warnings: list[str] = field(default_factory=list)
    extra: dict = field(default_factory=dict)  # format-specific facts (versions, env)
