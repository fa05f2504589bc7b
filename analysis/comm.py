"""Communication: which GPU ops are collectives or point-to-point transfers between ranks.

A rank inside an all-reduce waiting for its peer keeps its device "busy" running an NCCL kernel
that spins; counting that as compute sold waiting as work. So GPU work splits in two classes:

    stream 7    ██fwd██ ██bwd██          ██opt██
    nccl          ▒▒▒▒▒▒▒▒ ▒▒▒ all-reduce ▒▒▒▒▒
    compute     ███████████████          ███████
    comm          ▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒
    exposed                      ▒▒▒▒▒▒▒▒▒        <- comm not overlapped by compute

The class comes from the kernel's name (NCCL/RCCL ``nccl*Kernel_*``, NVSHMEM, the custom
all-reduce kernels of torch symmetric memory and vLLM) or from Kineto's ``Collective name``
argument kept in the event's details. Both loaders name NCCL kernels the same way.
"""

from __future__ import annotations

import re

import numpy as np

from gaplens.analysis.memo import per_trace
from gaplens.loaders.model import Kind, Trace

#: Kernel names of collective and point-to-point communication libraries.
COMM_NAME = re.compile(
    r"^(?:void\s+)?(?:nccl|rccl|nvshmem)\w*"  # ncclDevKernel_AllReduce_…, ncclKernel_SendRecv_…
    r"|\b(?:cross_device_reduce|one_shot_all_reduce|two_shot_all_reduce|multimem_all_reduce"
    r"|multimem_all_gather|all_reduce_kernel|allgather_kernel|reduce_scatter_kernel)\w*",
    re.IGNORECASE,
)
_COLLECTIVE_DETAIL = re.compile(r"Collective name", re.IGNORECASE)


def is_comm_name(name: str) -> bool:
    return COMM_NAME.search(name) is not None


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
    return out
