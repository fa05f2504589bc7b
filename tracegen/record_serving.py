#!/usr/bin/env python3
"""Record a toy LLM server: idle time before and between requests, one trace for the whole run.

    python3 tracegen/record_serving.py --out DIR --name serving            # Kineto, every option off
    python3 tracegen/record_serving.py --out DIR --name options_all --all-options --requests 3
    python3 tracegen/record_serving.py --out DIR --name nsys_serving --no-torch-profiler   # under nsys

The process starts, builds the model without warming it up (the first request pays for lazy
CUDA module loading and cuBLAS initialisation: a first-call GEMM that is host work, not launch
overhead), waits ``--first-wait-ms`` for the first request (nothing is asked of the GPU), then
serves ``--requests`` requests with random idle gaps between them. A request is the range
``request N`` holding ``tokenize`` (pure Python), ``prefill``, ``decode`` (``decode_step i``, each
ending in ``.item()`` per row: host-side sampling) and ``detokenize``. The profiler runs over the
whole process lifetime (no schedule), so the idle stretches are in the trace. ``--all-options``
turns on record_shapes, with_stack, profile_memory, with_flops and with_modules: the trace every
loader must read on its fast path.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from recording import Decoder, Timer, both, write_outputs


def tokenize(rng: random.Random, n: int) -> list[int]:
    """Pure-Python string work standing in for a tokenizer (no CUDA calls)."""
    words = ["".join(rng.choice("abcdefghij") for _ in range(rng.randint(2, 8))) for _ in range(n)]
    vocab: dict[str, int] = {}
    return [vocab.setdefault(w, (hash(w) ^ len(vocab)) % 32000) for w in " ".join(words).split()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--requests", type=int, default=6)
    ap.add_argument("--first-wait-ms", type=float, default=400)
    ap.add_argument("--gap-ms", type=float, nargs=2, default=(60, 250), help="idle between requests: min max")
    ap.add_argument("--prompt", type=int, default=256)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--all-options", action="store_true")
    ap.add_argument("--no-torch-profiler", action="store_true")
    args = ap.parse_args()

    rng = random.Random(0)
    torch.manual_seed(0)
    dev = torch.device("cuda")
    dtype = torch.bfloat16
    trace_json = os.path.join(args.out, args.name + ".json")
    os.makedirs(args.out, exist_ok=True)
    prof = None
    if not args.no_torch_profiler:
        opts = {}
        if args.all_options:
            opts = dict(record_shapes=True, with_stack=True, profile_memory=True, with_flops=True, with_modules=True)
        prof = torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA], **opts
        )
        prof.start()
    model = Decoder().to(dev, dtype=dtype).eval()
    torch.cuda.synchronize()
    arrivals = []
    requests = []
    time.sleep(args.first_wait_ms / 1000)  # waiting for the first request: nothing asked
    with torch.inference_mode():
        for r in range(args.requests):
            if r:
                gap = rng.uniform(*args.gap_ms)
                time.sleep(gap / 1000)
            arrivals.append(time.time_ns())
            timer = Timer()
            b, p = args.batch, args.prompt
            with both(timer, f"request {r}"):
                with both(timer, "tokenize"):
                    ids = tokenize(rng, 4 * p * b)
                    prompt = torch.tensor((ids * 2)[: b * p], dtype=torch.long).view(b, p).to(dev)
                with both(timer, "prefill"):
                    cache = model.new_cache(b, p + args.steps + 1, dtype)
                    nxt = model(prompt, cache, 0).argmax(-1)
                out = []
                with both(timer, "decode"):
                    pos = p
                    for i in range(args.steps):
                        with both(timer, f"decode_step {i}"):
                            row = [int(nxt[k].item()) for k in range(b)]
                            out.append(row)
                            tok = torch.tensor(row, dtype=torch.long, device=dev).view(b, 1)
                            nxt = model(tok, cache, pos).argmax(-1)
                            pos += 1
                with both(timer, "detokenize"):
                    text = [" ".join(f"<{t}>" for t in col) for col in zip(*out, strict=False)]
            requests.append({"request": r, "spans": timer.results(), "chars": sum(map(len, text))})
    torch.cuda.synchronize()
    if prof is not None:
        prof.stop()
        prof.export_chrome_trace(trace_json)
    meta = {
        "argv": sys.argv[1:],
        "params": {k: v for k, v in vars(args).items()},
        "model": "pre-norm decoder, 8 layers, dim 1024, 16 heads, vocab 32000, bf16, no warm-up",
        "arrivals_unix_ns": arrivals,
        "timing_note": "gpu_ms: CUDA events on the current stream at each span's start and end; the "
        "first request includes lazy CUDA module loading and cuBLAS initialisation.",
        "requests": requests,
    }
    write_outputs(args.out, args.name, None if prof is None else trace_json, meta)


if __name__ == "__main__":
    main()
