#!/usr/bin/env python3
"""Round-5 recordings: held-out fault/fix pairs for the allocation and run-ahead what-if changes.

``python3 tracegen/record_round5.py --case NAME --out DIR [--small]`` writes ``DIR/<name>.json.gz`` and
``DIR/<name>.meta.json`` in round 4's layout (``record_round4.py``'s ``Rec4``: profiled steps with
CUDA-event step times, 20 unprofiled steps after the profiler stopped, per-step runtime-call counts).

These pairs were written after the what-if model of ``--remove alloc`` / ``--remove sync`` and are not used
to design it: they are other kinds of the same two faults, to see whether the prediction generalises.

* ``allocinfer``: the caching allocator off (``PYTORCH_NO_CUDA_MEMORY_CACHING=1``) on a device-heavy
  inference forward (16 bf16 Linear(4096, 4096)+GELU on 8192 rows): the frees synchronise, so the host cannot
  run ahead of ~0.4 ms layers; fixed: the allocator on.
* ``allocconv``: the caching allocator off on a small CNN training step (conv + batch norm + ReLU, SGD); fixed:
  on.
* ``emptycache``: ``torch.cuda.empty_cache()`` at the end of every training step of a transformer LM (the
  allocator gives its blocks back and asks the driver again the next step); fixed: no ``empty_cache``.
* ``nancheck``: a NaN guard after every block of a transformer inference forward
  (``if not torch.isfinite(h).all(): raise``: a read-back per block); fixed: no guard (the kernels of the
  check go too: ~2 tiny kernels per block).

``*_fault`` of ``allocinfer``/``allocconv`` needs ``PYTORCH_NO_CUDA_MEMORY_CACHING=1`` before CUDA starts:
this file sets it when such a case is named on the command line.
"""

from __future__ import annotations

import os
import sys

if any(t in ("allocinfer_fault", "allocconv_fault") for arg in sys.argv[1:] for t in arg.split(",")):
    os.environ.setdefault("PYTORCH_NO_CUDA_MEMORY_CACHING", "1")  # must precede CUDA's start

import argparse
from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import record_round4 as r4
from record_round3 import BF, CUDA, DEV, LM, Block, sync
from record_round4 import Plain, Rec4, base_meta, name_of

SMALL = False


def sz(big: int, small: int) -> int:
    return small if SMALL else big


def _no_cache_check(fault: bool) -> str | None:
    flag = os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING")
    if fault and CUDA and flag != "1":
        raise RuntimeError("this fault needs PYTORCH_NO_CUDA_MEMORY_CACHING=1 before CUDA starts")
    return flag


def allocinfer(a: argparse.Namespace, fault: bool) -> None:
    cfg = {"layers": sz(16, 2), "dim": sz(4096, 64), "rows": sz(8192, 16)}
    flag = _no_cache_check(fault)
    torch.manual_seed(0)
    layers = nn.ModuleList(nn.Linear(cfg["dim"], cfg["dim"]) for _ in range(cfg["layers"])).to(DEV, BF)
    x = torch.randn(cfg["rows"], cfg["dim"], device=DEV, dtype=BF)

    def step(it: int, r) -> None:
        with torch.no_grad():
            y = x
            for lin in layers:
                y = F.gelu(lin(y))
            r.note(checksum_dtype=str(y.dtype))

    for _ in range(3):
        step(-1, Plain())
    sync()
    rec = Rec4(name_of("allocinfer", fault), a.out)
    rec.run(step, "step {}")
    rec.save4(
        base_meta(
            rec,
            "allocinfer",
            fault,
            f"Inference forward (no_grad) of {cfg['layers']} bf16 Linear({cfg['dim']},{cfg['dim']})+GELU layers on "
            f"[{cfg['rows']},{cfg['dim']}] (~0.4 ms of GEMM per layer), no sync in the step. "
            + (
                "Fault: the CUDA caching allocator OFF (PYTORCH_NO_CUDA_MEMORY_CACHING=1): each layer's outputs are "
                "a cudaMalloc and the dropped activations a cudaFree, which waits for the device."
                if fault
                else "Fixed: the caching allocator on (default)."
            ),
            {**cfg, "PYTORCH_NO_CUDA_MEMORY_CACHING": flag, "caching_allocator": not fault},
        )
    )


class ConvNet(nn.Module):
    def __init__(self, width: int, blocks: int) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, padding=1)
        self.body = nn.Sequential(
            *[
                nn.Sequential(nn.Conv2d(width, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
                for _ in range(blocks)
            ]
        )
        self.head = nn.Linear(width, 100)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.stem(x)).mean((2, 3)))


def allocconv(a: argparse.Namespace, fault: bool) -> None:
    cfg = {"width": sz(128, 8), "blocks": sz(8, 1), "batch": sz(64, 2), "hw": sz(56, 8)}
    flag = _no_cache_check(fault)
    torch.manual_seed(0)
    model = ConvNet(cfg["width"], cfg["blocks"]).to(DEV).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    img = torch.randn(cfg["batch"], 3, cfg["hw"], cfg["hw"], device=DEV).to(memory_format=torch.channels_last)
    lab = torch.randint(0, 100, (cfg["batch"],), device=DEV)

    def step(it: int, r) -> None:
        with torch.autocast(DEV.type, dtype=BF):
            loss = F.cross_entropy(model(img).float(), lab)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step(-1, Plain())
    sync()
    rec = Rec4(name_of("allocconv", fault), a.out)
    rec.run(step, "train_step {}")
    rec.save4(
        base_meta(
            rec,
            "allocconv",
            fault,
            f"Training step of a small CNN ({cfg['blocks']} conv3x3({cfg['width']})+BatchNorm+ReLU blocks, "
            f"channels_last, bf16 autocast, SGD momentum) on {cfg['batch']}x3x{cfg['hw']}x{cfg['hw']}, "
            "no sync in the loop. "
            + (
                "Fault: the CUDA caching allocator OFF (PYTORCH_NO_CUDA_MEMORY_CACHING=1)."
                if fault
                else "Fixed: the caching allocator on (default)."
            ),
            {**cfg, "PYTORCH_NO_CUDA_MEMORY_CACHING": flag, "caching_allocator": not fault},
        )
    )


def emptycache(a: argparse.Namespace, fault: bool) -> None:
    cfg = {"vocab": sz(8192, 256), "dim": sz(768, 64), "layers": sz(6, 1), "heads": 12 if not SMALL else 4}
    cfg |= {"batch": sz(8, 2), "seq": sz(512, 16)}
    torch.manual_seed(0)
    model = LM(cfg["vocab"], cfg["dim"], cfg["layers"], cfg["heads"]).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    tok = torch.randint(0, cfg["vocab"], (cfg["batch"], cfg["seq"] + 1), device=DEV)

    def step(it: int, r) -> None:
        with torch.autocast(DEV.type, dtype=BF):
            logits = model(tok[:, :-1])
        loss = F.cross_entropy(logits.float().flatten(0, 1), tok[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del logits, loss
        if fault and CUDA:
            torch.cuda.empty_cache()

    for _ in range(3):
        step(-1, Plain())
    sync()
    rec = Rec4(name_of("emptycache", fault), a.out)
    rec.run(step, "train_step {}")
    rec.save4(
        base_meta(
            rec,
            "emptycache",
            fault,
            f"Training step of a causal transformer LM ({cfg['layers']} blocks, dim {cfg['dim']}, bf16 autocast, "
            f"AdamW foreach) on {cfg['batch']}x{cfg['seq']} tokens, no sync in the loop. "
            + (
                "Fault: torch.cuda.empty_cache() at the end of every step (the cached blocks go back to the "
                "driver and are cudaMalloc'd again next step)."
                if fault
                else "Fixed: no empty_cache()."
            ),
            {**cfg, "empty_cache_per_step": fault},
        )
    )


def nancheck(a: argparse.Namespace, fault: bool) -> None:
    cfg = {"dim": sz(1024, 64), "layers": sz(12, 2), "heads": sz(16, 4), "batch": sz(4, 1), "seq": sz(256, 16)}
    torch.manual_seed(0)
    blocks = nn.ModuleList(Block(cfg["dim"], cfg["heads"]) for _ in range(cfg["layers"])).to(DEV, BF)
    x = torch.randn(cfg["batch"], cfg["seq"], cfg["dim"], device=DEV, dtype=BF)
    checks = [0]

    def step(it: int, r) -> None:
        n = 0
        with torch.no_grad():
            h = x
            for b in blocks:
                h = b(h)
                if fault:
                    n += 1
                    if not torch.isfinite(h).all():  # a read-back: the host waits for the block
                        raise FloatingPointError("non-finite activations")
            sync()  # one sync at the end of the step (both)
        checks[0] = n
        r.note(checks_in_step=n)

    for _ in range(3):
        step(-1, Plain())
    rec = Rec4(name_of("nancheck", fault), a.out)
    rec.run(step, "step {}")
    rec.save4(
        base_meta(
            rec,
            "nancheck",
            fault,
            f"Inference forward (no_grad) of {cfg['layers']} bf16 transformer blocks (dim {cfg['dim']}) on "
            f"{cfg['batch']}x{cfg['seq']} tokens; torch.cuda.synchronize() at the end of each step (both). "
            + (
                "Fault: a NaN guard after every block, `if not torch.isfinite(h).all(): raise` (a read-back per "
                "block: the host waits for the device each time)."
                if fault
                else "Fixed: no guard (its ~2 small kernels per block go too)."
            ),
            {**cfg, "nan_guard_per_block": fault},
        ),
        facts=["checks_in_step"],
    )


CASES: dict[str, Callable[[argparse.Namespace], None]] = {}
PAIRS = {"allocinfer": allocinfer, "allocconv": allocconv, "emptycache": emptycache, "nancheck": nancheck}
for _pair, _fn in PAIRS.items():
    CASES[f"{_pair}_fault"] = (lambda f: lambda a: f(a, True))(_fn)
    CASES[f"{_pair}_fixed"] = (lambda f: lambda a: f(a, False))(_fn)


def _set_small(small: bool) -> None:
    global SMALL
    SMALL = small


def main() -> None:
    r4.main(CASES, __doc__, _set_small)


if __name__ == "__main__":
    main()
