#!/usr/bin/env python3
"""Does allocation churn slow the host code *around* the allocation calls? (a probe, no trace written)

Round 4's ``alloc_fault`` ran every op's host side about twice as slow as its fixed twin (``aten::view`` self
time 4 µs against 1.5 µs; launch calls 11.7 µs against 6.9 µs), beyond the cudaMalloc/cudaFree calls
themselves, so ``whatif --remove alloc`` (which takes only the calls off) over-predicted the step (+70%).
This probe times pure host work (tensor views and a kernel launch, no allocation) in blocks, with and
without a device cudaMalloc+cudaFree pair between blocks, in the process it runs in; run it once with
``PYTORCH_NO_CUDA_MEMORY_CACHING=1`` and once without. Prints one JSON line per setting.
"""

from __future__ import annotations

import json
import os
import statistics
import time

import torch

REPS = 2000  # blocks per setting
VIEWS = 20  # tensor views per block: pure host work, no CUDA call
BYTES = 4 << 20  # one 4 MiB device allocation between blocks (churn on)


def run(churn: bool, launch: bool) -> dict:
    dev = torch.device("cuda")
    x = torch.ones(1024, device=dev)
    block_ns: list[int] = []
    launch_ns: list[int] = []
    for _ in range(REPS):
        if churn:
            t = torch.empty(BYTES, dtype=torch.uint8, device=dev)  # cudaMalloc without the cache
            del t  # cudaFree without the cache (it waits for the device)
        t0 = time.perf_counter_ns()
        for _ in range(VIEWS):
            x.view(32, 32).t()
        t1 = time.perf_counter_ns()
        block_ns.append(t1 - t0)
        if launch:
            t2 = time.perf_counter_ns()
            x.mul_(1.0)  # one kernel launch into an existing tensor: no allocation
            launch_ns.append(time.perf_counter_ns() - t2)
    torch.cuda.synchronize()
    return {
        "no_cuda_memory_caching": os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING"),
        "churn": churn,
        "views_block_us_median": statistics.median(block_ns) / 1e3,
        "in_place_op_us_median": statistics.median(launch_ns) / 1e3 if launch_ns else None,
    }


def main() -> None:
    torch.ones(1, device="cuda")
    for churn in (False, True, False, True):
        print(json.dumps(run(churn, launch=True)), flush=True)


if __name__ == "__main__":
    main()
