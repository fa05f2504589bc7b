#!/usr/bin/env python3
"""Record the two real traces the shared samples lack, on a CUDA machine.

* ``gpu_only.json.gz``: torch.profiler with CUDA activities only (no CPU side at all).
  A host pause separates two bursts of small kernels, so the trace has a clear blank
  region that it cannot explain: readings must say "unknown" and what to capture.
* ``shapes_stack.json.gz``: CPU + CUDA with ``record_shapes`` and ``with_stack``
  (python_function rows overlapping cpu_ops), bf16 matmuls, and a pinned copy on a side
  stream overlapping compute on the default stream.

Each trace gets ``<name>.meta.json`` with CUDA-event timings per phase (``gpu_ms``),
like ../shared/tracegen/workloads.py. Usage: ``python3 tracegen/record_extra.py OUTDIR``.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile, record_function


def timed(spans: list, name: str):
    """Context manager: a record_function range plus CUDA events on the current stream."""

    class _Span:
        def __enter__(self):
            self.rf = record_function(name)
            self.rf.__enter__()
            self.t0 = time.perf_counter()
            self.a = torch.cuda.Event(enable_timing=True)
            self.b = torch.cuda.Event(enable_timing=True)
            self.a.record()

        def __exit__(self, *exc):
            self.b.record()
            self.rf.__exit__(*exc)
            self.b.synchronize()
            spans.append(
                {
                    "name": name,
                    "gpu_ms": self.a.elapsed_time(self.b),
                    "host_ms": (time.perf_counter() - self.t0) * 1e3,
                }
            )

    return _Span()


def gpu_only(out: str) -> None:
    x = torch.randn(4096, device="cuda")
    for _ in range(20):  # warm up kernels and the allocator
        x = x * 1.0001 + 0.0001
    torch.cuda.synchronize()
    spans: list = []
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        with timed(spans, "burst_a"):
            for _ in range(200):
                x = x * 1.0001 + 0.0001
        with timed(spans, "host_pause"):
            time.sleep(0.02)  # 20 ms of host work the trace cannot see
        with timed(spans, "burst_b"):
            for _ in range(200):
                x = x * 1.0001 + 0.0001
        torch.cuda.synchronize()
    save(prof, out, "gpu_only", spans, {"activities": ["CUDA"], "kernels_expected": 800})


def shapes_stack(out: str) -> None:
    w1 = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    w2 = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    host = torch.randn(64, 2048, dtype=torch.bfloat16).pin_memory()
    side = torch.cuda.Stream()

    def mlp(a: torch.Tensor) -> torch.Tensor:
        return torch.relu(a @ w1) @ w2

    a = torch.randn(64, 2048, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        mlp(a)
    torch.cuda.synchronize()
    spans: list = []
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True, with_stack=True) as prof:
        for step in range(3):
            with timed(spans, f"step {step}"):
                with torch.cuda.stream(side):
                    nxt = host.to("cuda", non_blocking=True)
                for _ in range(8):
                    a = mlp(a) * 1e-3
                torch.cuda.current_stream().wait_stream(side)
                a = a + nxt
        torch.cuda.synchronize()
    save(prof, out, "shapes_stack", spans, {"record_shapes": True, "with_stack": True, "dtype": "bfloat16"})


def save(prof, out: str, name: str, spans: list, params: dict) -> None:
    raw = os.path.join(out, f"{name}.json")
    prof.export_chrome_trace(raw)
    with open(raw, "rb") as src, gzip.open(raw + ".gz", "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    os.unlink(raw)
    meta = {
        "name": name,
        "params": params,
        "env": {
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "gpu": torch.cuda.get_device_name(0),
        },
        "timing_note": "gpu_ms: CUDA events on the current stream around each span; host_ms: perf_counter.",
        "iterations": [{"iteration": 0, "tag": "profiled", "spans": spans}],
    }
    with open(os.path.join(out, f"{name}.meta.json"), "w") as fh:
        json.dump(meta, fh, indent=1)
    print(name, os.path.getsize(raw + ".gz"), "bytes", spans)


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(target, exist_ok=True)
    gpu_only(target)
    shapes_stack(target)
