#!/usr/bin/env python3
"""Held-out ``with_stack`` recordings for the Kineto reader: traces whose Python events it was not built on.

``python3 tracegen/record_stacks.py --out DIR [--steps N]`` writes three traces, each with ``with_stack=True`` (the
Python-function events ``loaders/kineto/pyevents.py`` parses apart) and a few MB of JSON, so that most of
their blocks are cut at the writer's separator:

* ``stack_mlp``: a 2-layer MLP training step, ``record_shapes`` off;
* ``stack_lm_mem``: a small transformer LM step with ``record_shapes`` and ``profile_memory`` (memory
  instant events between the Python ones);
* ``stack_loader``: a DataLoader with two worker processes and a pin-memory thread feeding a conv net
  (Python events on several threads, some of them waiting).

Used to check that the split reads what a single parse reads (``/tmp``-style comparison in the stop's
note), never to tune anything.
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil

import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile

#: Without a GPU (a CPU-only torch) the same workloads run on the CPU: host-side traces, Python events and all.
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ACTIVITIES = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if DEVICE == "cuda" else [])


def _sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def _mlp():
    model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).to(DEVICE)
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randn(256, 1024, device=DEVICE)

    def step():
        opt.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        opt.step()

    return step


def _lm():
    layer = nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True)
    model = nn.Sequential(nn.Embedding(8000, 512), nn.TransformerEncoder(layer, 4), nn.Linear(512, 8000)).to(DEVICE)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    tokens = torch.randint(0, 8000, (8, 256), device=DEVICE)

    def step():
        opt.zero_grad(set_to_none=True)
        logits = model(tokens)
        nn.functional.cross_entropy(logits.view(-1, 8000), tokens.view(-1)).backward()
        opt.step()

    return step


class _Images(torch.utils.data.Dataset):
    def __len__(self):
        return 10_000

    def __getitem__(self, i):
        return torch.randn(3, 64, 64), i % 10


def _loader():
    model = nn.Sequential(nn.Conv2d(3, 32, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
    model = model.to(DEVICE)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.utils.data.DataLoader(_Images(), batch_size=64, num_workers=2, pin_memory=DEVICE == "cuda")
    batches = iter(data)

    def step():
        x, y = next(batches)
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(x.to(DEVICE, non_blocking=True)), y.to(DEVICE)).backward()
        opt.step()

    return step


CASES = {
    "stack_mlp": (_mlp, {}),
    "stack_lm_mem": (_lm, {"record_shapes": True, "profile_memory": True}),
    "stack_loader": (_loader, {}),
}


def record(name: str, out: str, steps: int = 12) -> None:
    make, options = CASES[name]
    step = make()
    for _ in range(3):
        step()
    _sync()
    with profile(activities=ACTIVITIES, with_stack=True, **options) as prof:
        for _ in range(steps):
            step()
            prof.step()
        _sync()
    plain = os.path.join(out, f"{name}.json")
    prof.export_chrome_trace(plain)
    with open(plain, "rb") as src, gzip.open(plain + ".gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    os.remove(plain)
    print(name, os.path.getsize(plain + ".gz"), "bytes gzipped")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    parser.add_argument("--case", default=",".join(CASES))
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for name in args.case.split(","):
        record(name, args.out, args.steps)


if __name__ == "__main__":
    main()
