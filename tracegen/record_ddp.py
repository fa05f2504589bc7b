#!/usr/bin/env python3
"""Record 2-GPU DDP training: one Kineto trace per rank, or NVTX ranges only (for nsys).

    torchrun --nproc_per_node=2 tracegen/record_ddp.py --out DIR --name ddp_even
    torchrun --nproc_per_node=2 tracegen/record_ddp.py --out DIR --name ddp_straggler --straggler-ms 20

Each step (``train_step N``) runs five phases, named as NVTX and record_function ranges:
``data_wait`` (a pure host sleep standing in for the data loader; the straggler rank sleeps
``--straggler-ms`` longer), ``forward`` (bf16 autocast MLP), ``exchange`` (a DLRM-style
``all_to_all_single`` followed by ``.item()``: a tiny DtoH copy behind a collective), ``backward``
(autograd launches from its own thread; DDP all-reduces gradient buckets on NCCL's stream) and
``optimizer``. ``--no-exchange`` drops the all_to_all, so waiting for a late peer happens inside the
backward all-reduce instead. Every phase is timed with CUDA events on the compute stream;
``<name>_rank<R>.meta.json`` holds them per iteration, tagged ``profiled`` for those in the trace.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from recording import Timer, both, phase, write_outputs


class Net(nn.Module):
    def __init__(self, dim: int, depth: int, classes: int = 1000) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(dim, dim) for _ in range(depth))
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(depth))
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for lin, norm in zip(self.layers, self.norms, strict=False):
            x = x + F.gelu(lin(norm(x)))
        return self.head(x)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--straggler-ms", type=float, default=0.0, help="extra host sleep before forward, each step")
    ap.add_argument("--straggler-rank", type=int, default=1)
    ap.add_argument("--no-exchange", action="store_true")
    ap.add_argument("--no-torch-profiler", action="store_true")
    ap.add_argument("--dim", type=int, default=4096)
    ap.add_argument("--depth", type=int, default=6)
    ap.add_argument("--batch", type=int, default=8192)
    ap.add_argument("--wait", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--active", type=int, default=4)
    args = ap.parse_args()

    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    torch.manual_seed(0)
    model = DDP(Net(args.dim, args.depth).to(dev), device_ids=[local])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    x = torch.randn(args.batch, args.dim, device=dev)
    y = torch.randint(0, 1000, (args.batch,), device=dev)
    sent = torch.randn(world * 4096, 64, device=dev)
    received = torch.empty_like(sent)
    straggling = args.straggler_ms > 0 and rank == args.straggler_rank

    n_iters = args.wait + args.warmup + args.active
    trace_json = os.path.join(args.out, f"{args.name}_rank{rank}.json")
    os.makedirs(args.out, exist_ok=True)
    prof = None
    if not args.no_torch_profiler:
        prof = torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
            schedule=torch.profiler.schedule(wait=args.wait, warmup=args.warmup, active=args.active, repeat=1),
            on_trace_ready=lambda p: p.export_chrome_trace(trace_json),
        )
        prof.start()
    iterations = []
    for it in range(n_iters):
        timer = Timer()
        tag = "profiled" if it >= args.wait + args.warmup else "warmup"
        with both(timer, f"train_step {it}"):
            with both(timer, "data_wait"):
                time.sleep(0.002 + (args.straggler_ms / 1000 if straggling else 0.0))
            with both(timer, "forward"), torch.autocast("cuda", dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x).float(), y)
            if not args.no_exchange:
                with both(timer, "exchange"):
                    dist.all_to_all_single(received, sent)
                    valid = int((received[:, 0] > 0).sum().item())
            with both(timer, "backward"):
                loss.backward()
            with both(timer, "optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=True)
        iterations.append({"iteration": it, "tag": tag, "spans": timer.results()})
        if prof is not None:
            prof.step()
    if prof is not None:
        prof.stop()
    with phase("teardown"):
        dist.barrier()
    dist.destroy_process_group()
    meta = {
        "rank": rank,
        "world_size": world,
        "argv": sys.argv[1:],
        "params": vars(args),
        "straggling": straggling,
        "model": f"MLP {args.depth}x Linear({args.dim},{args.dim}) + LayerNorm + GELU, head 1000; bf16 autocast",
        "exchange": None if args.no_exchange else "all_to_all_single of 4096x64 fp32 per peer, then .item()",
        "last_valid": None if args.no_exchange else valid,
        "timing_note": "gpu_ms: CUDA events recorded on the compute stream at the phase's start and end.",
        "iterations": iterations,
    }
    name = f"{args.name}_rank{rank}"
    write_outputs(args.out, name, None if prof is None else trace_json, meta)


if __name__ == "__main__":
    main()
