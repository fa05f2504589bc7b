"""What of a Kineto event is read, and what it is: categories, the args and their twins, Arrow's schema.

Fields whose JSON type varies between events are read through *twins*: the framer
renames a string value of ``stream`` to ``streas`` (same length, see ``twin``), so
the schema holds one type per key and nothing is refused. Kernel details are the
writer's args in one line (``kernel_detail``), the same on the Arrow and per-event paths.
"""

from __future__ import annotations

import re
from decimal import Decimal

import pyarrow as pa

from gaplens.loaders.model import Kind, LaneKind
from gaplens.loaders.validate import as_int

# cat (lower case) -> (event kind, lane kind). Memcpy direction comes from the name.
CATEGORIES: dict[str, tuple[Kind, LaneKind]] = {
    "cpu_op": (Kind.CPU_OP, LaneKind.CPU_OPS),
    "operator": (Kind.CPU_OP, LaneKind.CPU_OPS),
    "python_function": (Kind.PYTHON, LaneKind.CPU_OPS),
    "user_annotation": (Kind.ANNOTATION, LaneKind.ANNOTATIONS),
    "user": (Kind.ANNOTATION, LaneKind.ANNOTATIONS),
    "cuda_runtime": (Kind.CUDA_API, LaneKind.CUDA_API),
    "cuda_driver": (Kind.CUDA_API, LaneKind.CUDA_API),
    "runtime": (Kind.CUDA_API, LaneKind.CUDA_API),
    "privateuse1_runtime": (Kind.CUDA_API, LaneKind.CUDA_API),
    "privateuse1_driver": (Kind.CUDA_API, LaneKind.CUDA_API),
    "xpu_runtime": (Kind.CUDA_API, LaneKind.CUDA_API),
    "xpu_driver": (Kind.CUDA_API, LaneKind.CUDA_API),
    "mtia_runtime": (Kind.CUDA_API, LaneKind.CUDA_API),
    "kernel": (Kind.KERNEL, LaneKind.STREAM),
    "gpu_memcpy": (Kind.MEMCPY_OTHER, LaneKind.STREAM),
    "memcpy": (Kind.MEMCPY_OTHER, LaneKind.STREAM),
    "gpu_memset": (Kind.MEMSET, LaneKind.STREAM),
    "memset": (Kind.MEMSET, LaneKind.STREAM),
    "gpu_user_annotation": (Kind.GPU_ANNOTATION, LaneKind.GPU_ANNOTATIONS),
    "cuda_profiler_range": (Kind.GPU_ANNOTATION, LaneKind.GPU_ANNOTATIONS),
    "cuda_sync": (Kind.SYNC, LaneKind.GPU_SYNC),
    "xpu_sync": (Kind.SYNC, LaneKind.GPU_SYNC),
    "overhead": (Kind.OVERHEAD, LaneKind.OVERHEAD),
}
IGNORED = {"trace", "cpu_instant_event", "external_correlation"}
GPU_LANES = (LaneKind.STREAM, LaneKind.GPU_ANNOTATIONS, LaneKind.GPU_SYNC)
COPY_KINDS = (Kind.MEMCPY_HTOD, Kind.MEMCPY_DTOH, Kind.MEMCPY_DTOD, Kind.MEMCPY_PEER, Kind.MEMCPY_OTHER, Kind.MEMSET)
KERNEL_ARGS = (
    ("grid", "grid"),
    ("block", "block"),
    ("registers per thread", "regs"),
    ("shared memory", "smem"),
    ("est. achieved occupancy %", "occupancy %"),
    # Collective kernels (issue 12): what a job matches across ranks, kept under the writer's own
    # keys so ``analysis.job.collectives.collective_args`` reads them back from the detail string.
    *((key, key) for key in ("Collective name", "Process Group Name", "In msg nelems", "Out msg nelems", "Group size")),
)
# cuda_sync args that name streams and the event record: the waiting stream first (FORMATS.md 1.7).
SYNC_INTS = ("stream", "wait_on_stream", "wait_on_cuda_event_record_corr_id")
INT_ARGS = ("correlation", "bytes", "device", "stream", "registers per thread", "shared memory", *SYNC_INTS[1:])
# Collective kernels' args (issue 12), see KERNEL_ARGS: what a job matches across ranks.
COLL_INTS = ("In msg nelems", "Out msg nelems", "Group size")
COLL_STRS = ("Collective name", "Process Group Name")
LIST_ARGS = ("grid", "block")
FLOAT_ARGS = ("est. achieved occupancy %", "flops")  # flops: ``with_flops``, on CPU ops (``opdetail``)
# A recorded op's string-list args (``record_shapes``), kept in its detail for the floor (``opdetail``).
OP_STR_LISTS = ("Input type", "Concrete Inputs")
_S, _I = pa.string(), pa.int64()


def twin(key: str) -> str:
    """The key a string value of ``key`` is moved to: same length, last letter changed (pid -> pis)."""
    return key[:-1] + ("z" if key.endswith("s") else "s")


#: Keys whose values may be numbers in one event and strings in another, by their path in the event.
TWIN_KEYS = ("pid", "tid", *INT_ARGS, *LIST_ARGS, *FLOAT_ARGS)


def schema(scale: int = 3, twins: frozenset[str] = frozenset()) -> pa.Schema:
    """What Arrow reads of an event: ``ts``/``dur`` as decimals of ``scale`` digits (exact for any
    number text), and a string field for the twin of each key in ``twins`` (every field costs
    parse time on every event, so twins are asked for once seen)."""
    time = pa.decimal128(38, scale)
    args = [
        *[(k, _I) for k in INT_ARGS],
        *[(k, pa.list_(_I)) for k in LIST_ARGS],
        *[(k, pa.float64()) for k in FLOAT_ARGS],
        ("cuda_sync_kind", _S),
        ("name", _S),
        *[(k, _I) for k in COLL_INTS],
        *[(k, _S) for k in COLL_STRS],
        *[(k, pa.list_(_S)) for k in OP_STR_LISTS],
        *[(twin(k), _S) for k in (*INT_ARGS, *LIST_ARGS, *FLOAT_ARGS) if k in twins],
    ]
    top = [("ph", _S), ("cat", _S), ("name", _S), ("pid", _I), ("tid", _I)]
    top += [(twin(k), _S) for k in ("pid", "tid") if k in twins]
    return pa.schema([*top, ("ts", time), ("dur", time), ("args", pa.struct(args))])


_DIGITS = re.compile(r"-?\d+")


def memcpy_kind(name: str) -> Kind:
    """Direction from the writer's name: ``Memcpy HtoD (Pageable -> Device)``."""
    if "HtoD" in name or "HostToDevice" in name:
        return Kind.MEMCPY_HTOD
    if "DtoH" in name or "DeviceToHost" in name:
        return Kind.MEMCPY_DTOH
    if "DtoD" in name or "DeviceToDevice" in name:
        return Kind.MEMCPY_DTOD
    if "PtoP" in name or "Peer" in name:
        return Kind.MEMCPY_PEER
    return Kind.MEMCPY_OTHER


def stream_of(tid) -> int:
    """Stream number from a tid: ``7`` or ``"stream 7"`` (0 when it is not an int64)."""
    if isinstance(tid, int):
        return as_int(tid, 0)
    m = _DIGITS.search(str(tid)[:200])
    return as_int(m.group(0), 0) if m else 0


def number_text(value) -> str:
    """A detail number: integral values without a fraction (``100``), others as Python prints floats."""
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        return str(value)
    if isinstance(value, int) or (isinstance(value, Decimal) and (not value.is_finite() or value.adjusted() > 300)):
        return str(value)  # exact at any length: float() overflows past ~1e308
    f = float(value)
    return str(int(f)) if f.is_integer() else repr(f)


def kernel_detail(values: dict) -> str:
    """``grid 1×1×1  block 128×1×1  regs 32  smem 0  occupancy % 12``: the kernel args present."""
    parts = []
    for key, label in KERNEL_ARGS:
        if key in values:
            value = values[key]
            if isinstance(value, list):
                value = "×".join(str(v) for v in value)
            parts.append(f"{label} {number_text(value)}")
    return "  ".join(parts)
