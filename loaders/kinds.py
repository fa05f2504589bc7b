"""What an event is (``Kind``) and what a lane holds (``LaneKind``), with the groups the readings use."""

from __future__ import annotations

from enum import IntEnum


class Kind(IntEnum):
    """What an event is; GPU kinds are the ones that make a device busy."""

    CPU_OP = 0
    PYTHON = 1
    ANNOTATION = 2  # user_annotation / NVTX range on a CPU thread
    CUDA_API = 3
    SYNC = 4  # GPU-side synchronisation record (cuda_sync, nsys SYNCHRONIZATION)
    KERNEL = 5
    MEMCPY_HTOD = 6
    MEMCPY_DTOH = 7
    MEMCPY_DTOD = 8
    MEMCPY_PEER = 9
    MEMCPY_OTHER = 10
    MEMSET = 11
    OSRT = 12
    GPU_ANNOTATION = 13  # gpu_user_annotation: an annotation projected on a stream
    OVERHEAD = 14
    MARK = 15  # instant (NVTX mark); start == end
    GRAPH = 16  # a whole CUDA-graph execution drawn as one box (nodes not traced)


#: Kinds that occupy the device: the union of these is "GPU busy".
GPU_WORK_KINDS = (
    Kind.KERNEL,
    Kind.MEMCPY_HTOD,
    Kind.MEMCPY_DTOH,
    Kind.MEMCPY_DTOD,
    Kind.MEMCPY_PEER,
    Kind.MEMCPY_OTHER,
    Kind.MEMSET,
    Kind.GRAPH,
)
MEMCPY_KINDS = (
    Kind.MEMCPY_HTOD,
    Kind.MEMCPY_DTOH,
    Kind.MEMCPY_DTOD,
    Kind.MEMCPY_PEER,
    Kind.MEMCPY_OTHER,
)
CPU_KINDS = (Kind.CPU_OP, Kind.PYTHON, Kind.ANNOTATION, Kind.CUDA_API, Kind.OSRT, Kind.OVERHEAD)


class LaneKind(IntEnum):
    """What a lane (one visible row group) holds."""

    CPU_OPS = 0  # cpu_op / python_function
    ANNOTATIONS = 1  # user annotations / NVTX ranges on a thread
    CUDA_API = 2
    OSRT = 3
    STREAM = 4  # one GPU stream: kernels, memcpy, memset
    GPU_ANNOTATIONS = 5  # gpu_user_annotation ranges drawn on a device
    GPU_SYNC = 6  # GPU-side sync records of a device
    OVERHEAD = 7


GPU_LANE_KINDS = (LaneKind.STREAM, LaneKind.GPU_ANNOTATIONS, LaneKind.GPU_SYNC)
