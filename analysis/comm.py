"""Communication: which GPU ops are collectives or point-to-point transfers between ranks.

A rank inside an all-reduce waiting for its peer keeps its device "busy" running a kernel that
spins; counting that as compute sold waiting as work. So GPU work splits in three classes
(DESIGN.md § Three classes of GPU work): communication (here), copies (``analysis.busy``) and
compute (every other kernel).

    stream 7    ██fwd██ ██bwd██          ██opt██
    nccl          ▒▒▒▒▒▒▒▒ ▒▒▒ all-reduce ▒▒▒▒▒
    compute     ███████████████          ███████
    comm          ▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒
    exposed                      ▒▒▒▒▒▒▒▒▒        <- comm not overlapped by compute

A kernel is communication when

1. its name belongs to one of the families of ``COMM_FAMILIES`` (the one documented table), or
2. the trace says so: Kineto's ``Collective name`` argument kept in the event's details, or the
   kernel was launched inside a collective range of the library (``nccl:all_reduce`` CPU ops of
   c10d, NCCL's own NVTX ranges such as ``ncclAllReduce``).

Only kernels: copies and memsets issued by a collective (``record_param_comms`` flattening a
bucket) are copies, not communication.
"""

from __future__ import annotations

import re

import numpy as np

from gaplens.analysis.memo import per_trace
from gaplens.analysis.spans import BusySpans
from gaplens.loaders.model import Kind, LaneKind, Trace

#: The families of collective and point-to-point kernels: (family, pattern, where the names come from).
#: Patterns are searched in the demangled kernel name (``void ns::kernel<...>(args)``), case-insensitively.
COMM_FAMILIES: tuple[tuple[str, str, str], ...] = (
    # ncclDevKernel_AllReduce_Sum_f32_RING_LL, ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t, ncclDevKernel_Generic:
    # NVIDIA/nccl src/device/generate.py; RCCL (ROCm/rccl) keeps the same names.
    ("NCCL/RCCL", r"^(?:void\s+)?(?:nccl|rccl)\w*", "NVIDIA/nccl src/device/generate.py, ROCm/rccl"),
    # mscclKernel_Sum_float_LL128: microsoft/msccl (also inside RCCL).
    ("MSCCL", r"^(?:void\s+)?msccl\w*Kernel", "microsoft/msccl src/collectives/device/msccl_kernel.h"),
    # nvshmemi_*/nvshmem_* device collectives and their stream wrappers (nvshmemx_*_on_stream kernels).
    ("NVSHMEM", r"^(?:void\s+)?nvshmemi?x?_\w*", "NVIDIA NVSHMEM src/include/non_abi/device/coll"),
    # deep_ep::internode::dispatch<...>, deep_ep::intranode::combine, deep_ep::internode_ll::dispatch,
    # notify_dispatch, cached_notify_dispatch/combine, barrier: deepseek-ai/DeepEP csrc/kernels/*.cu;
    # DeepSeek's released profiles spell the namespace dpsk::ep. get_dispatch_layout is local compute.
    (
        "DeepEP",
        r"\b(?:deep_ep|dpsk::ep)::(?:\w+::)*(?:dispatch|combine|notify_dispatch|notify_combine|cached_notify"
        r"\w*|barrier|clean_low_latency_buffer)\b",
        "deepseek-ai/DeepEP csrc/kernels/internode.cu, intranode.cu, internode_ll.cu",
    ),
    # vllm::cross_device_reduce_1stage<T, n>, cross_device_reduce_2stage, sglang's/aiter's copies
    # (cross_device_reduce_1stage_naive, cross_device_reduce_sum2_1stage): csrc/custom_all_reduce.cuh.
    ("custom all-reduce (vLLM/sglang)", r"\bcross_device_reduce\w*", "vllm-project/vllm csrc/custom_all_reduce.cuh"),
    # c10d::symmetric_memory::one_shot_all_reduce_kernel, two_shot_all_reduce_kernel, multimem_all_reduce_kernel,
    # multimem_one_shot_all_reduce_kernel, multimem_all_gather_kernel: torch/csrc/distributed/c10d/symm_mem/
    # CUDASymmetricMemoryOps.cu; the Triton twins in torch/distributed/_symmetric_memory.
    (
        "symmetric memory (torch c10d)",
        r"\b(?:multimem_|one_shot_|two_shot_)\w*(?:all_reduce|all_gather|reduce_scatter|reduce)\w*"
        r"|\bc10d::symmetric_memory::\w*(?:all_reduce|all_gather|reduce_scatter|barrier|signal)\w*",
        "pytorch/pytorch torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemoryOps.cu",
    ),
    # tensorrt_llm::kernels::oneShotAllReduceKernel, twoShotAllReduceKernel, allreduce_fusion_kernel_oneshot_lamport.
    (
        "custom all-reduce (TensorRT-LLM)",
        r"\b(?:oneShotAllReduce|twoShotAllReduce|allreduce_fusion_kernel|lamport\w*AllReduce|moeAllReduce)\w*",
        "NVIDIA/TensorRT-LLM cpp/tensorrt_llm/kernels/customAllReduceKernels.cu",
    ),
    # userbuffers_fp16_sum_inplace_gpu_rr_rs and friends: Transformer Engine's comm/GEMM overlap.
    ("userbuffers (Transformer Engine)", r"\buserbuffers_\w+", "NVIDIA/TransformerEngine common/comm_gemm_overlap"),
    # Generic spellings of hand-written collectives.
    ("generic collective", r"\b(?:all_reduce_kernel|allgather_kernel|reduce_scatter_kernel)\w*", "hand-written"),
)
COMM_NAME = re.compile("|".join(f"(?:{p})" for _, p, _ in COMM_FAMILIES), re.IGNORECASE)
_FAMILY = [(name, re.compile(p, re.IGNORECASE)) for name, p, _ in COMM_FAMILIES]
_COLLECTIVE_DETAIL = re.compile(r"Collective name", re.IGNORECASE)
#: A host range of the communication library itself: c10d's ``nccl:all_reduce`` CPU ops, NCCL's NVTX
#: ranges (``ncclAllReduce``, ``ncclGroupEnd``). Kernels launched inside one are collectives.
COMM_RANGE = re.compile(
    r"^(?:nccl|rccl):\w+|^(?:nccl|rccl)(?:AllReduce|AllGather|ReduceScatter|Reduce|Broadcast|Send|Recv|AllToAll"
    r"|GroupEnd)\b"
)


def is_comm_name(name: str) -> bool:
    """True for a kernel name of one of the communication families."""
    return COMM_NAME.search(name) is not None


def comm_family(name: str) -> str | None:
    """The family of ``COMM_FAMILIES`` a kernel name belongs to (None: not communication by name)."""
    for family, pat in _FAMILY:
        if pat.search(name):
            return family
    return None


@per_trace
def comm_mask(trace: Trace) -> np.ndarray:
    """Per event: True for GPU communication ops (cached while the trace lives; do not modify)."""
    out = np.zeros(len(trace), dtype=bool)
    kernels = trace.kind == int(Kind.KERNEL)
    if not kernels.any():
        return out
    ids = np.unique(trace.name_id[kernels])
    by_name = np.zeros(len(trace.names), dtype=bool)
    by_name[ids] = [is_comm_name(trace.names[int(i)]) for i in ids.tolist()]
    by_detail = np.zeros(max(len(trace.details), 1), dtype=bool)
    used = np.unique(trace.detail_id[kernels])
    by_detail[used] = [bool(_COLLECTIVE_DETAIL.search(trace.details[int(i)])) for i in used.tolist()]
    out[kernels] = by_name[trace.name_id[kernels]] | by_detail[trace.detail_id[kernels]]
    out |= _under_comm_ranges(trace, kernels & ~out)
    return out


def _under_comm_ranges(trace: Trace, cand: np.ndarray) -> np.ndarray:
    """Kernels among ``cand`` whose launch call started inside a communication range of its own thread."""
    out = np.zeros(len(trace), dtype=bool)
    hosts = np.flatnonzero(np.isin(trace.kind, (int(Kind.CPU_OP), int(Kind.ANNOTATION))))
    if hosts.size == 0 or not cand.any():
        return out
    # A table over the names the host events use: np.unique(return_inverse=True) sorted all of them
    # (75 ms for the 659k CPU ops of decode_eager x1.04M).
    ids = trace.name_id[hosts]
    is_range = np.zeros(len(trace.names), dtype=bool)
    is_range[ids] = True
    used = np.flatnonzero(is_range)
    is_range[used] = [bool(COMM_RANGE.search(trace.names[i])) for i in used.tolist()]
    ranges = hosts[is_range[ids]]
    k = np.flatnonzero(cand & (trace.launch >= 0))
    if ranges.size == 0 or k.size == 0:
        return out
    thread = _thread_codes(trace)
    a = trace.launch[k]
    a_thread, a_t = thread[trace.lane[a]], trace.start_ns[a]
    r_thread = thread[trace.lane[ranges]]
    for t in np.unique(r_thread).tolist():
        rs = ranges[r_thread == t]
        # Ranges of one thread nest or follow each other: the union is enough.
        spans = BusySpans(trace.start_ns[rs], trace.end_ns[rs])
        mine = a_thread == t
        pos = np.searchsorted(spans.start, a_t[mine], "right") - 1
        inside = (pos >= 0) & (a_t[mine] < spans.end[np.maximum(pos, 0)])
        out[k[mine][inside]] = True
    return out


def _thread_codes(trace: Trace) -> np.ndarray:
    """Per lane, a code of its (pid, tid) for host lanes (-1 for device lanes)."""
    codes: dict[tuple[int, int], int] = {}
    out = np.full(len(trace.lanes), -1, np.int64)
    for ln in trace.lanes:
        if ln.kind in (LaneKind.CPU_OPS, LaneKind.CUDA_API, LaneKind.ANNOTATIONS):
            out[ln.id] = codes.setdefault((ln.pid, ln.tid), len(codes))
    return out
