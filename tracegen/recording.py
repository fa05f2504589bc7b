"""Shared pieces of the recording scripts: named phases, CUDA-event timers, a small decoder, metadata.

Runs on the GPU machine's own Python (PyTorch 2.11 there); nothing here imports gaplens.
Phases are named twice, as in ../shared/tracegen/workloads.py: an NVTX range (seen by nsys) and a
``record_function`` range (seen by Kineto), with identical names.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import platform
import shutil
import socket
import subprocess
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


@contextlib.contextmanager
def phase(name: str):
    """An NVTX range and a record_function range with the same name."""
    with torch.profiler.record_function(name):
        torch.cuda.nvtx.range_push(name)
        try:
            yield
        finally:
            torch.cuda.nvtx.range_pop()


class Timer:
    """CUDA-event spans on the current stream (what gaplens's phase GPU span must reproduce),
    plus host wall time and the host clock at the start, to place each span in the trace."""

    def __init__(self) -> None:
        self.spans: list[tuple] = []

    @contextlib.contextmanager
    def span(self, name: str):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        h0, wall0 = time.perf_counter_ns(), time.time_ns()
        try:
            yield
        finally:
            h1 = time.perf_counter_ns()
            end.record()
            self.spans.append((name, start, end, h0, h1, wall0))

    def results(self) -> list[dict]:
        torch.cuda.synchronize()
        return [
            {"name": n, "gpu_ms": s.elapsed_time(e), "host_ms": (h1 - h0) / 1e6, "host_start_unix_ns": w0}
            for n, s, e, h0, h1, w0 in self.spans
        ]


@contextlib.contextmanager
def both(timer: Timer, name: str):
    """A named phase timed with CUDA events."""
    with phase(name), timer.span(name):
        yield


class Decoder(nn.Module):
    """A small pre-norm transformer decoder (plain torch, random weights), enough kernels per step
    to look like LLM decode: per layer attention projections, SDPA over a growing KV cache, an MLP."""

    def __init__(self, vocab: int = 32000, dim: int = 1024, layers: int = 8, heads: int = 16) -> None:
        super().__init__()
        self.dim, self.heads = dim, heads
        self.embed = nn.Embedding(vocab, dim)
        self.qkv = nn.ModuleList(nn.Linear(dim, 3 * dim, bias=False) for _ in range(layers))
        self.out = nn.ModuleList(nn.Linear(dim, dim, bias=False) for _ in range(layers))
        self.up = nn.ModuleList(nn.Linear(dim, 4 * dim, bias=False) for _ in range(layers))
        self.down = nn.ModuleList(nn.Linear(4 * dim, dim, bias=False) for _ in range(layers))
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(2 * layers))
        self.head = nn.Linear(dim, vocab, bias=True)  # 2-D input + bias: aten::addmm

    def forward(self, tokens: torch.Tensor, cache: list, pos: int) -> torch.Tensor:
        b, t = tokens.shape
        x = self.embed(tokens)
        hd = self.dim // self.heads
        for i in range(len(self.qkv)):
            h = self.norms[2 * i](x)
            q, k, v = self.qkv[i](h).view(b, t, 3, self.heads, hd).unbind(2)
            q, k, v = (z.transpose(1, 2) for z in (q, k, v))
            ck, cv = cache[i]
            ck[:, :, pos : pos + t] = k
            cv[:, :, pos : pos + t] = v
            o = F.scaled_dot_product_attention(q, ck[:, :, : pos + t], cv[:, :, : pos + t], is_causal=t > 1)
            x = x + self.out[i](o.transpose(1, 2).reshape(b, t, self.dim))
            x = x + self.down[i](F.gelu(self.up[i](self.norms[2 * i + 1](x))))
        return self.head(x[:, -1, :])

    def new_cache(self, batch: int, max_seq: int, dtype: torch.dtype) -> list:
        hd = self.dim // self.heads
        shape = (batch, self.heads, max_seq, hd)
        dev = self.embed.weight.device
        return [
            (torch.zeros(shape, device=dev, dtype=dtype), torch.zeros(shape, device=dev, dtype=dtype)) for _ in self.qkv
        ]


def env_info() -> dict:
    info = {
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "python": platform.python_version(),
        "hostname": socket.gethostname(),
        "gpus": torch.cuda.device_count(),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(
            gpu_name=props.name, gpu_sm_count=props.multi_processor_count, gpu_cc=f"{props.major}.{props.minor}"
        )
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            info["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
            ).stdout.split()[0]
    return info


def write_outputs(out: str, name: str, trace_json: str | None, meta: dict) -> None:
    """Gzip the exported trace (removing the plain JSON) and write ``<name>.meta.json`` beside it."""
    os.makedirs(out, exist_ok=True)
    if trace_json is not None and os.path.exists(trace_json):
        with open(trace_json, "rb") as src, gzip.open(os.path.join(out, name + ".json.gz"), "wb", 6) as dst:
            shutil.copyfileobj(src, dst)
        os.remove(trace_json)
    meta = {"name": name, "env": env_info(), **meta}
    with open(os.path.join(out, name + ".meta.json"), "w") as fh:
        json.dump(meta, fh, indent=1)
