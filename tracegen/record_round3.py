#!/usr/bin/env python3
"""Round-3 recordings: traces other parts of gaplens are checked on but were not designed on.

``python3 tracegen/record_round3.py --case NAME --out DIR [--small]`` writes ``DIR/<name>.json.gz``
(torch.profiler, CPU + CUDA, a wait/warmup/active schedule, one ``ProfilerStep#N`` per loop
iteration) and ``DIR/<name>.meta.json`` with the workload's parameters, the environment and the
ground truth: CUDA-event pairs per step, per range and per op instance, host ``perf_counter`` spans.
Cases (``--case list`` prints them):

* hardware floor (issue 20), ``record_shapes`` + ``with_flops``: ``floor_calib`` (ops of known shapes,
  each instance in its own range named after the op, analytic FLOPs and bytes in the meta),
  ``train_shapes`` (a small transformer training step), ``decode_shapes`` (eager LLM-style decode).
* what-if pairs (issue 21), each ``<pair>_fault`` and ``<pair>_fixed``: ``island`` (4 ms pure-Python
  host work per step), ``loader`` (DataLoader with a slow ``__getitem__``, 0 vs 4 workers), ``copy``
  (pageable synchronous copy vs pinned, non-blocking, prefetched on a side stream), ``graphs``
  (eager decode vs the same step captured in a CUDA graph).
* readings (issue 19): ``copy_bound``, ``dependency`` (cross-stream event waits, device copies only),
  ``dataloader_marker`` (no user ranges: PyTorch's own markers only), ``nested_steps``.

Runs on the GPU machine's Python (PyTorch 2.11 there). ``--small`` shrinks every size so the logic can
be checked on a CPU-only PyTorch (no CUDA events, streams or graphs there: host times stand in).
Nothing here imports gaplens.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, record_function

CUDA = torch.cuda.is_available()
DEV = torch.device("cuda" if CUDA else "cpu")
SMALL = False  # set by --small: every size shrinks so a CPU run finishes in seconds
SPIN_CYCLES = 200_000  # ~0.1 ms at ~2 GHz: a spin kernel ahead of each calibration instance keeps the
# stream busy while the host launches it, so the start event fires right before the op (no launch lag)


def sz(big: int, small: int) -> int:
    return small if SMALL else big


# --------------------------------------------------------------------------------------------------
# timing: CUDA events (host clocks stand in on CPU) and the profiler loop
# --------------------------------------------------------------------------------------------------
class Mark:
    """A point in a stream's order: a CUDA event, or a host clock reading without CUDA."""

    def __init__(self, stream=None) -> None:
        self.perf_ns = time.perf_counter_ns()
        self.unix_ns = time.time_ns()
        self.ev = None
        if CUDA:
            self.ev = torch.cuda.Event(enable_timing=True)
            self.ev.record(stream)

    def ms_to(self, later: Mark) -> float:
        if self.ev is not None and later.ev is not None:
            return float(self.ev.elapsed_time(later.ev))
        return (later.perf_ns - self.perf_ns) / 1e6


def sync() -> None:
    if CUDA:
        torch.cuda.synchronize()


def new_stream():
    return torch.cuda.Stream() if CUDA else None


def on(stream):
    return torch.cuda.stream(stream) if (CUDA and stream is not None) else contextlib.nullcontext()


def spin() -> None:
    if CUDA:
        torch.cuda._sleep(SPIN_CYCLES)


def busy_wait(seconds: float) -> None:
    """Pure-Python host work: no CUDA calls, no sleep (the thread stays on the CPU)."""
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1


class Recording:
    """One profiled loop: ``for it in rec.iterations(): ...`` gives one ``ProfilerStep#it`` per iteration.

    Step boundaries are marked (CUDA event on the current stream + host clocks) right before
    ``prof.start()`` and before each ``prof.step()``, so step i's ground truth is boundary i -> i+1:
    ``host_ms`` is what ``ProfilerStep#i`` spans on the host, ``gpu_ms`` the time the current stream
    took between the two boundary events.
    """

    def __init__(
        self,
        name: str,
        out: str,
        *,
        wait: int = 1,
        warmup: int = 2,
        active: int = 6,
        shapes: bool = False,
        flops: bool = False,
        stack: bool = False,
    ) -> None:
        self.name, self.out = name, out
        self.wait, self.warmup, self.active = wait, warmup, active
        self.raw = os.path.join(out, name + ".json")
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if CUDA else [])
        self.options = {
            "activities": ["CPU", "CUDA"] if CUDA else ["CPU"],
            "record_shapes": shapes,
            "with_flops": flops,
            "with_stack": stack,
            "schedule": {"wait": wait, "warmup": warmup, "active": active, "repeat": 1},
        }
        self.prof = torch.profiler.profile(
            activities=acts,
            schedule=torch.profiler.schedule(wait=wait, warmup=warmup, active=active, repeat=1),
            on_trace_ready=lambda p: p.export_chrome_trace(self.raw),
            record_shapes=shapes,
            with_flops=flops,
            with_stack=stack,
        )
        self.bounds: list[Mark] = []
        self.span_rows: list[tuple] = []
        self.it = 0
        self.extra_steps: dict[int, dict] = {}

    def tag(self, it: int) -> str:
        if it < self.wait:
            return "wait"
        return "warmup" if it < self.wait + self.warmup else "profiled"

    def iterations(self) -> Iterator[int]:
        n = self.wait + self.warmup + self.active
        self.bounds.append(Mark())
        self.prof.start()
        for it in range(n):
            self.it = it
            yield it
            self.bounds.append(Mark())
            self.prof.step()
        self.prof.stop()

    @contextlib.contextmanager
    def span(self, name: str, stream=None, rf: bool = True, **info):
        """A ``record_function`` range (unless rf=False) timed by CUDA events on ``stream`` and host clocks."""
        ctx = record_function(name) if rf else contextlib.nullcontext()
        with ctx:
            a = Mark(stream)
            try:
                yield
            finally:
                b = Mark(stream)
                self.span_rows.append((name, self.it, a, b, info))

    def note_step(self, **info) -> None:
        """Extra per-step facts (e.g. host time inside a DataLoader fetch)."""
        self.extra_steps.setdefault(self.it, {}).update(info)

    def steps(self) -> list[dict]:
        sync()
        rows = []
        for i in range(len(self.bounds) - 1):
            a, b = self.bounds[i], self.bounds[i + 1]
            rows.append(
                {
                    "iteration": i,
                    "profiler_step": f"ProfilerStep#{i}",
                    "tag": self.tag(i),
                    "host_ms": (b.perf_ns - a.perf_ns) / 1e6,
                    "gpu_ms": a.ms_to(b),
                    "host_start_unix_ns": a.unix_ns,
                    "host_start_perf_ns": a.perf_ns,
                    **self.extra_steps.get(i, {}),
                }
            )
        return rows

    def spans(self) -> list[dict]:
        sync()
        return [
            {
                "name": n,
                "iteration": it,
                "tag": self.tag(it),
                "gpu_ms": a.ms_to(b),
                "host_ms": (b.perf_ns - a.perf_ns) / 1e6,
                "host_start_unix_ns": a.unix_ns,
                "host_start_perf_ns": a.perf_ns,
                **info,
            }
            for n, it, a, b, info in self.span_rows
        ]

    def save(self, meta: dict) -> None:
        steps, spans = self.steps(), self.spans()
        prof_steps = [s for s in steps if s["tag"] == "profiled"]
        fam: dict[str, list[float]] = {}
        for s in spans:
            if s["tag"] == "profiled":
                fam.setdefault(family(s["name"]), []).append(s["gpu_ms"])
        summary = {
            "profiled_steps": [s["profiler_step"] for s in prof_steps],
            "step_host_ms_median": med([s["host_ms"] for s in prof_steps]),
            "step_gpu_ms_median": med([s["gpu_ms"] for s in prof_steps]),
            "span_gpu_ms_median": {k: med(v) for k, v in fam.items()},
            "span_count_profiled": {k: len(v) for k, v in fam.items()},
        }
        full = {
            "name": self.name,
            "env": env_info(),
            "profiler": self.options,
            **meta,
            "timing_note": TIMING_NOTE,
            "summary": summary,
            "steps": steps,
            "spans": spans,
        }
        os.makedirs(self.out, exist_ok=True)
        gz = os.path.join(self.out, self.name + ".json.gz")
        if os.path.exists(self.raw):
            with open(self.raw, "rb") as src, gzip.open(gz, "wb", compresslevel=9) as dst:
                shutil.copyfileobj(src, dst)
            os.remove(self.raw)
        else:
            print("WARNING: no trace exported for", self.name, file=sys.stderr)
        with open(os.path.join(self.out, self.name + ".meta.json"), "w") as fh:
            json.dump(full, fh, indent=1)
        size = os.path.getsize(gz) if os.path.exists(gz) else 0
        print(f"{self.name}: {size / 1e6:.2f} MB; summary {json.dumps(summary)}")


TIMING_NOTE = (
    "steps[i]: iteration i = ProfilerStep#i; host_ms = perf_counter between the marks taken right before "
    "prof.start()/prof.step() (what the ProfilerStep#i range spans on the host, within microseconds); gpu_ms = "
    "CUDA events recorded on the current (default) stream at those marks. spans: record_function ranges timed "
    "by a CUDA event pair on the stream named in 'stream' (default stream when absent) recorded at the range's "
    "start and end on the host thread that opened it, plus perf_counter host_ms. tag: wait (not in the trace), "
    "warmup (not in the trace), profiled (in the trace)."
)


def family(name: str) -> str:
    head, _, tail = name.rpartition(" ")
    return head if head and tail.isdigit() else name


def med(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def env_info() -> dict:
    info: dict = {
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if CUDA else None,
        "python": platform.python_version(),
        "gpus": torch.cuda.device_count(),
    }
    if CUDA:
        props = torch.cuda.get_device_properties(0)
        dp = {}
        for k in dir(props):
            if k.startswith("_"):
                continue
            v = getattr(props, k, None)
            if isinstance(v, (bool, int, float, str)):
                dp[k] = v
        info["gpu_name"] = props.name
        info["device_properties"] = dp
        q = (
            "name,driver_version,clocks.max.sm,clocks.max.mem,clocks.sm,clocks.mem,power.limit,memory.total,"
            "pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current"
        )
        with contextlib.suppress(OSError, subprocess.SubprocessError, IndexError):
            out = (
                subprocess.run(
                    ["nvidia-smi", f"--query-gpu={q}", "--format=csv,nounits"],
                    capture_output=True,
                    text=True,
                    timeout=20,
                )
                .stdout.strip()
                .splitlines()
            )
            info["nvidia_smi"] = dict(
                zip([h.strip() for h in out[0].split(",")], [v.strip() for v in out[1].split(",")], strict=False)
            )
    return info


# --------------------------------------------------------------------------------------------------
# A. hardware floor
# --------------------------------------------------------------------------------------------------
BF, F32 = torch.bfloat16, torch.float32
ES = {torch.bfloat16: 2, torch.float16: 2, torch.float32: 4, torch.int64: 8, torch.int32: 4}


def nbytes(*ts: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in ts)


def floor_calib(a: argparse.Namespace) -> None:
    """Ops of known shapes, each instance in its own range named after the op."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    rec = Recording("floor_calib", a.out, wait=1, warmup=1, active=3, shapes=True, flops=True)
    reps = 2
    ops: list[dict] = []  # name, op, shapes, dtype, flops, bytes, fn (run in the range), pre (before it)
    g = torch.Generator(device=DEV).manual_seed(0)

    def rn(*shape, dtype=BF, grad=False):
        t = torch.randn(*shape, device=DEV, dtype=F32, generator=g).to(dtype)
        return t.requires_grad_(grad)

    def add(name, op, shapes, dtype, flops, nbytes_, fn, pre=None, note=None):
        ops.append(
            {
                "name": name,
                "op": op,
                "shapes": shapes,
                "dtype": dtype,
                "flops": flops,
                "bytes": nbytes_,
                "fn": fn,
                "pre": pre,
                "note": note,
            }
        )

    # GEMMs: FLOPs 2*M*N*K (batched: times the batch); bytes: each input read once + output written once
    n = sz(8192, 256)
    A, B = rn(n, n), rn(n, n)
    add(
        f"gemm_bf16_{n}",
        "aten::mm",
        {"A": [n, n], "B": [n, n]},
        "bf16",
        2 * n**3,
        3 * n * n * 2,
        lambda: torch.mm(A, B),
    )
    k, nn_ = sz(8192, 256), sz(28672, 512)
    x1, W1 = rn(1, k), rn(k, nn_)
    add(
        f"gemv_bf16_1x{k}x{nn_}",
        "aten::mm",
        {"A": [1, k], "B": [k, nn_]},
        "bf16",
        2 * 1 * nn_ * k,
        nbytes(x1, W1) + nn_ * 2,
        lambda: torch.mm(x1, W1),
    )
    m = sz(4096, 128)
    Af, Bf = rn(m, m, dtype=F32), rn(m, m, dtype=F32)
    add(
        f"gemm_fp32_{m}",
        "aten::mm",
        {"A": [m, m], "B": [m, m]},
        "fp32 (TF32 off)",
        2 * m**3,
        3 * m * m * 4,
        lambda: torch.mm(Af, Bf),
    )
    M, K, N = sz(4096, 128), sz(4096, 128), sz(8192, 256)
    bias, Am, Bm = rn(N), rn(M, K), rn(K, N)
    add(
        f"addmm_bf16_{M}x{K}x{N}",
        "aten::addmm",
        {"bias": [N], "A": [M, K], "B": [K, N]},
        "bf16",
        2 * M * N * K,
        nbytes(bias, Am, Bm) + M * N * 2,
        lambda: torch.addmm(bias, Am, Bm),
        note="FLOPs count the product only (2*M*N*K), not the M*N bias adds",
    )
    bs, sq, din, dout = sz(8, 2), sz(1024, 64), sz(4096, 128), sz(11008, 256)
    xl, Wl, bl = rn(bs, sq, din), rn(dout, din), rn(dout)
    add(
        f"linear_bf16_{bs * sq}x{din}x{dout}",
        "aten::linear",
        {"input": [bs, sq, din], "weight": [dout, din], "bias": [dout]},
        "bf16",
        2 * bs * sq * din * dout,
        nbytes(xl, Wl, bl) + bs * sq * dout * 2,
        lambda: F.linear(xl, Wl, bl),
        note="M = batch*seq; FLOPs 2*M*N*K, bias adds not counted",
    )
    Bb, Mb, Kb, Nb = sz(32, 4), sz(2048, 64), 128, sz(2048, 64)
    ab, bb = rn(Bb, Mb, Kb), rn(Bb, Kb, Nb)
    add(
        f"bmm_bf16_{Bb}x{Mb}x{Kb}x{Nb}",
        "aten::bmm",
        {"A": [Bb, Mb, Kb], "B": [Bb, Kb, Nb]},
        "bf16",
        2 * Bb * Mb * Nb * Kb,
        nbytes(ab, bb) + Bb * Mb * Nb * 2,
        lambda: torch.bmm(ab, bb),
    )
    Bb2, Mb2, Kb2, Nb2 = sz(32, 4), sz(1024, 64), sz(512, 64), sz(1024, 64)
    cb, ab2, bb2 = rn(Bb2, Mb2, Nb2), rn(Bb2, Mb2, Kb2), rn(Bb2, Kb2, Nb2)
    add(
        f"baddbmm_bf16_{Bb2}x{Mb2}x{Kb2}x{Nb2}",
        "aten::baddbmm",
        {"input": [Bb2, Mb2, Nb2], "A": [Bb2, Mb2, Kb2], "B": [Bb2, Kb2, Nb2]},
        "bf16",
        2 * Bb2 * Mb2 * Nb2 * Kb2,
        nbytes(cb, ab2, bb2) + Bb2 * Mb2 * Nb2 * 2,
        lambda: torch.baddbmm(cb, ab2, bb2),
        note="beta=1, alpha=1; FLOPs count the product only",
    )
    if CUDA:
        try:
            f8 = torch.float8_e4m3fn
            n8 = sz(8192, 256)
            a8 = rn(n8, n8).to(f8)
            b8 = rn(n8, n8).to(f8).t()  # column-major second operand, as _scaled_mm requires
            one = torch.tensor(1.0, device=DEV)
            torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=BF)
            add(
                f"scaled_mm_fp8_e4m3_{n8}",
                "aten::_scaled_mm",
                {"A": [n8, n8], "B": [n8, n8]},
                "fp8 e4m3 in, bf16 out",
                2 * n8**3,
                2 * n8 * n8 * 1 + n8 * n8 * 2,
                lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=BF),
                note="per-tensor scales (1.0); B column-major; bytes: fp8 inputs (1 B) + bf16 output",
            )
        except Exception as exc:  # recorded in the meta, the rest goes on
            print("scaled_mm skipped:", repr(exc))
            rec_note = repr(exc)
            ops.append({"name": "scaled_mm_fp8_e4m3", "skipped": rec_note})
    # memory-bound ops: bytes only (FLOPs of elementwise add = one per element, given for reference)
    ne = sz(2**28, 2**16)
    ea, eb = rn(ne), rn(ne)
    add(
        "add_bf16_2e28" if not SMALL else "add_bf16_small",
        "aten::add",
        {"a": [ne], "b": [ne]},
        "bf16",
        ne,
        3 * ne * 2,
        lambda: ea + eb,
        note="FLOPs: one add per element",
    )
    sr, sc = sz(8192, 64), sz(32768, 1024)
    xs = rn(sr, sc)
    add(
        f"softmax_bf16_{sr}x{sc}",
        "aten::_softmax",
        {"x": [sr, sc], "dim": -1},
        "bf16",
        None,
        2 * sr * sc * 2,
        lambda: torch.softmax(xs, -1),
        note="bytes: input read once + output written once; FLOPs not counted",
    )
    lr, lc = sz(16384, 64), sz(8192, 1024)
    xln, wln, bln = rn(lr, lc), rn(lc), rn(lc)
    add(
        f"layer_norm_bf16_{lr}x{lc}",
        "aten::layer_norm",
        {"x": [lr, lc], "weight": [lc], "bias": [lc]},
        "bf16",
        None,
        2 * lr * lc * 2 + 2 * lc * 2,
        lambda: F.layer_norm(xln, (lc,), wln, bln),
        note="bytes: input + weight + bias read once, output written once; FLOPs not counted",
    )
    vocab, edim, eb_, es = sz(128256, 1000), sz(4096, 256), sz(8, 2), sz(4096, 64)
    table = rn(vocab, edim)
    idx = torch.randint(0, vocab, (eb_, es), device=DEV, generator=g)
    add(
        f"embedding_bf16_{vocab}x{edim}",
        "aten::embedding",
        {"weight": [vocab, edim], "indices": [eb_, es]},
        "bf16 table, int64 indices",
        None,
        idx.numel() * 8 + 2 * idx.numel() * edim * 2,
        lambda: F.embedding(idx, table),
        note="bytes: indices + the gathered rows read + output written (not the whole table)",
    )
    # attention: forward FLOPs 4*B*H*Sq*Sk*D (QK^T and PV), causal half; backward 2.5x forward
    # (5 GEMMs incl. the recomputed QK^T; 2x without recompute given as flops_no_recompute)
    Ba, H, S, D = sz(4, 1), sz(32, 2), sz(2048, 128), 128
    q, kk, v = rn(Ba, H, S, D), rn(Ba, H, S, D), rn(Ba, H, S, D)
    qg, kg, vg = rn(Ba, H, S, D, grad=True), rn(Ba, H, S, D, grad=True), rn(Ba, H, S, D, grad=True)
    dout_ = rn(Ba, H, S, D)
    att_shape = {"q": [Ba, H, S, D], "k": [Ba, H, S, D], "v": [Ba, H, S, D]}
    att_bytes = 4 * Ba * H * S * D * 2
    held: dict = {}
    for causal in (True, False):
        cname = "causal" if causal else "noncausal"
        fl = 4 * Ba * H * S * S * D // (2 if causal else 1)
        add(
            f"sdpa_fwd_bf16_{cname}",
            "aten::scaled_dot_product_attention",
            {**att_shape, "is_causal": causal},
            "bf16",
            fl,
            att_bytes,
            lambda c=causal: torch.no_grad()(F.scaled_dot_product_attention)(q, kk, v, is_causal=c),
            note="no_grad forward; bytes q,k,v read + o written",
        )

        def fwd_train(c=causal, key=cname):
            held[key] = F.scaled_dot_product_attention(qg, kg, vg, is_causal=c)

        def bwd_train(key=cname):
            held.pop(key).backward(dout_)

        def clear():
            qg.grad = kg.grad = vg.grad = None

        add(
            f"sdpa_fwd_train_bf16_{cname}",
            "aten::scaled_dot_product_attention",
            {**att_shape, "is_causal": causal, "requires_grad": True},
            "bf16",
            fl,
            att_bytes,
            fwd_train,
            note="forward with grad (saves what backward needs); followed by the backward instance",
        )
        ops[-1]["flops_note"] = "same FLOPs as the no_grad forward"
        add(
            f"sdpa_bwd_bf16_{cname}",
            "autograd backward of scaled_dot_product_attention",
            {**att_shape, "is_causal": causal},
            "bf16",
            int(2.5 * fl),
            8 * Ba * H * S * D * 2,
            bwd_train,
            pre=None,
            note="FLOPs 2.5x forward (5 GEMMs incl. recomputed QK^T); bytes q,k,v,o,dO read + dq,dk,dv written",
        )
        ops[-1]["flops_no_recompute"] = 2 * fl
        ops[-1]["post"] = clear
    # convolution: forward 2*N*K*C*R*S*P*Q; backward (dgrad + wgrad) twice that
    Nc, C, Hc, Kc, R = sz(32, 2), sz(256, 16), sz(56, 8), sz(256, 16), 3
    xc, wc = rn(Nc, C, Hc, Hc), rn(Kc, C, R, R)
    xcg, wcg = rn(Nc, C, Hc, Hc, grad=True), rn(Kc, C, R, R, grad=True)
    gy = rn(Nc, Kc, Hc, Hc)
    cfl = 2 * Nc * Kc * C * R * R * Hc * Hc
    cshape = {"input": [Nc, C, Hc, Hc], "weight": [Kc, C, R, R], "padding": 1, "stride": 1, "output": [Nc, Kc, Hc, Hc]}
    cbytes = nbytes(xc, wc) + Nc * Kc * Hc * Hc * 2
    add(
        f"conv2d_fwd_bf16_n{Nc}c{C}h{Hc}k{Kc}r{R}",
        "aten::conv2d",
        cshape,
        "bf16",
        cfl,
        cbytes,
        lambda: torch.no_grad()(F.conv2d)(xc, wc, padding=1),
        note="no_grad forward",
    )

    def cfwd():
        held["conv"] = F.conv2d(xcg, wcg, padding=1)

    def cbwd():
        held.pop("conv").backward(gy)

    def cclear():
        xcg.grad = wcg.grad = None

    add(
        f"conv2d_fwd_train_bf16_n{Nc}c{C}h{Hc}k{Kc}r{R}",
        "aten::conv2d",
        {**cshape, "requires_grad": True},
        "bf16",
        cfl,
        cbytes,
        cfwd,
    )
    add(
        f"conv2d_bwd_bf16_n{Nc}c{C}h{Hc}k{Kc}r{R}",
        "autograd backward of conv2d (dgrad + wgrad)",
        cshape,
        "bf16",
        2 * cfl,
        2 * cbytes,
        cbwd,
        note="FLOPs: dgrad + wgrad, each equal to the forward; bytes: x, w, dy read + dx, dw written",
    )
    ops[-1]["post"] = cclear
    # host -> device copies of 512 MiB
    cb_ = sz(512 * 2**20, 2**20)
    hpage = torch.empty(cb_, dtype=torch.uint8).fill_(1)
    hpin = torch.empty(cb_, dtype=torch.uint8, pin_memory=CUDA).fill_(1)
    dst = torch.empty(cb_, dtype=torch.uint8, device=DEV)
    add(
        "memcpy_h2d_pageable_512MiB",
        "aten::copy_ (HtoD, pageable)",
        {"bytes": cb_},
        "uint8",
        None,
        cb_,
        lambda: dst.copy_(hpage),
        note="dst.copy_(pageable host tensor): synchronous for the host",
    )
    add(
        "memcpy_h2d_pinned_512MiB",
        "aten::copy_ (HtoD, pinned)",
        {"bytes": cb_},
        "uint8",
        None,
        cb_,
        lambda: dst.copy_(hpin, non_blocking=True),
        note="dst.copy_(pinned host tensor, non_blocking=True)",
    )

    live = [o for o in ops if "fn" in o]
    # warm every op once (cuBLAS/cuDNN handles, autotuning, lazy module loads) before the profiler starts
    for o in live:
        o["fn"]()
        if o.get("post"):
            o["post"]()
    sync()
    for _it in rec.iterations():
        for _ in range(reps):  # rep-major: a training forward is always followed by its backward
            for o in live:
                spin()
                with rec.span(o["name"]):
                    o["fn"]()
                if o.get("post"):
                    o["post"]()
        sync()
    spans = rec.spans()
    table = []
    for o in ops:
        if "fn" not in o:
            table.append(o)
            continue
        inst = [s for s in spans if s["name"] == o["name"]]
        prof_ms = [s["gpu_ms"] for s in inst if s["tag"] == "profiled"]
        m = med(prof_ms)
        row = {k: v for k, v in o.items() if k not in ("fn", "pre", "post")}
        row.update(
            instances_profiled=len(prof_ms),
            gpu_ms_profiled=prof_ms,
            gpu_ms_median=m,
            achieved_tflops=(o["flops"] / (m * 1e-3) / 1e12) if (m and o["flops"]) else None,
            achieved_gb_per_s=(o["bytes"] / (m * 1e-3) / 1e9) if m else None,
        )
        table.append(row)
    rec.save(
        {
            "case": "floor_calib",
            "issue": 20,
            "description": "Ops of known shapes, each instance in its own record_function range named after "
            "the op; a ~0.1 ms torch.cuda._sleep spin kernel (outside any range) precedes each instance so its "
            "launch is queued and the CUDA-event time is device time. TF32 off (fp32 GEMM is true fp32).",
            "params": {"reps_per_step": reps, "spin_cycles": SPIN_CYCLES, "small": SMALL},
            "conventions": {
                "gemm_flops": "2*M*N*K (times batch for bmm/baddbmm)",
                "attention_fwd_flops": "4*B*H*Sq*Sk*D, causal half",
                "attention_bwd_flops": "2.5x forward (incl. recompute); flops_no_recompute = 2x",
                "conv_fwd_flops": "2*N*K*C*R*S*P*Q; backward (dgrad+wgrad) 2x",
                "bytes": "each input read once + output written once (embedding: gathered rows)",
            },
            "ops": table,
        }
    )


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.up, self.down = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(o)
        return x + self.down(F.gelu(self.up(self.n2(x))))


class LM(nn.Module):
    def __init__(self, vocab: int, dim: int, layers: int, heads: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab, bias=False)

    def forward(self, tok: torch.Tensor) -> torch.Tensor:
        x = self.emb(tok)
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x))


def train_shapes(a: argparse.Namespace) -> None:
    cfg = {
        "vocab": sz(32000, 512),
        "dim": sz(1024, 64),
        "layers": sz(4, 2),
        "heads": sz(16, 4),
        "batch": sz(8, 2),
        "seq": sz(512, 32),
    }
    torch.manual_seed(0)
    model = LM(cfg["vocab"], cfg["dim"], cfg["layers"], cfg["heads"]).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    tok = torch.randint(0, cfg["vocab"], (cfg["batch"], cfg["seq"] + 1), device=DEV)
    x, y = tok[:, :-1], tok[:, 1:]
    rec = Recording("train_shapes", a.out, active=6, shapes=True, flops=True)

    def one(r: Recording | None) -> None:
        ctx = r.span if r else (lambda *_a, **_k: contextlib.nullcontext())
        with ctx("forward"), torch.autocast(DEV.type, dtype=BF):
            loss = F.cross_entropy(model(x).float().flatten(0, 1), y.flatten())
        with ctx("backward"):
            loss.backward()
        with ctx("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)

    for _ in range(2):
        one(None)
    sync()
    for it in rec.iterations():
        with rec.span(f"train_step {it}"):
            one(rec)
    params = sum(p.numel() for p in model.parameters())
    rec.save(
        {
            "case": "train_shapes",
            "issue": 20,
            "description": "Pre-norm causal transformer LM (plain torch, random weights), bf16 autocast, "
            "fp32 master weights, AdamW(foreach). Each train_step N holds forward (incl. cross-entropy), "
            "backward (autograd thread), optimizer (step + zero_grad). No host sync inside the loop.",
            "params": {**cfg, "parameters": params, "model_flops_per_step_6ND": 6 * params * cfg["batch"] * cfg["seq"]},
        }
    )


# --------------------------------------------------------------------------------------------------
# small decoders for decode cases
# --------------------------------------------------------------------------------------------------
class StaticDecoder(nn.Module):
    """Pre-norm decoder with a static KV cache: every shape fixed, positions and masks in device tensors,
    so one decode step can be captured in a CUDA graph (and the same code runs eagerly)."""

    def __init__(self, vocab: int, dim: int, layers: int, heads: int, batch: int, max_seq: int) -> None:
        super().__init__()
        self.dim, self.heads, self.hd = dim, heads, dim // heads
        self.emb = nn.Embedding(vocab, dim)
        self.n1 = nn.ModuleList(nn.LayerNorm(dim) for _ in range(layers))
        self.n2 = nn.ModuleList(nn.LayerNorm(dim) for _ in range(layers))
        self.qkv = nn.ModuleList(nn.Linear(dim, 3 * dim, bias=False) for _ in range(layers))
        self.o = nn.ModuleList(nn.Linear(dim, dim, bias=False) for _ in range(layers))
        self.up = nn.ModuleList(nn.Linear(dim, 4 * dim, bias=False) for _ in range(layers))
        self.down = nn.ModuleList(nn.Linear(4 * dim, dim, bias=False) for _ in range(layers))
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab, bias=False)
        shape = (layers, batch, heads, max_seq, self.hd)
        self.register_buffer("ck", torch.zeros(shape), persistent=False)
        self.register_buffer("cv", torch.zeros(shape), persistent=False)

    def forward(self, tok: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b = tok.shape[0]
        x = self.emb(tok)  # [b, 1, d]
        for i in range(len(self.qkv)):
            q, k, v = self.qkv[i](self.n1[i](x)).view(b, 1, 3, self.heads, self.hd).permute(2, 0, 3, 1, 4)
            self.ck[i].index_copy_(2, pos, k)
            self.cv[i].index_copy_(2, pos, v)
            o = F.scaled_dot_product_attention(q, self.ck[i], self.cv[i], attn_mask=mask)
            x = x + self.o[i](o.transpose(1, 2).reshape(b, 1, self.dim))
            x = x + self.down[i](F.gelu(self.up[i](self.n2[i](x))))
        return self.head(self.norm(x[:, -1])).argmax(-1, keepdim=True)


def decode_setup(cfg: dict) -> tuple:
    torch.manual_seed(0)
    m = StaticDecoder(cfg["vocab"], cfg["dim"], cfg["layers"], cfg["heads"], cfg["batch"], cfg["max_seq"])
    m = m.to(DEV, BF).eval()
    tok = torch.randint(0, cfg["vocab"], (cfg["batch"], 1), device=DEV)
    pos = torch.zeros(1, dtype=torch.long, device=DEV)
    mask = torch.zeros(1, 1, 1, cfg["max_seq"], dtype=torch.bool, device=DEV)
    return m, tok, pos, mask


def decode_advance(tok, pos, mask, nxt) -> None:
    """Device-side bookkeeping for the next step (no host copies): feed the token, move the position."""
    tok.copy_(nxt)
    pos.add_(1)
    mask.index_fill_(-1, pos, True)


def decode_shapes(a: argparse.Namespace) -> None:
    cfg = {
        "vocab": sz(32000, 256),
        "dim": sz(2048, 64),
        "layers": sz(8, 2),
        "heads": sz(16, 4),
        "batch": sz(8, 2),
        "max_seq": sz(512, 32),
        "prefilled": sz(384, 8),
    }
    m, tok, pos, mask = decode_setup(cfg)
    with torch.no_grad():
        mask[..., : cfg["prefilled"] + 1] = True
        pos.fill_(cfg["prefilled"])
        for _ in range(3):
            m(tok, pos, mask)
        sync()
        rec = Recording("decode_shapes", a.out, active=8, shapes=True, flops=True)
        for it in rec.iterations():
            with rec.span(f"decode_step {it}"):
                nxt = m(tok, pos, mask)
                decode_advance(tok, pos, mask, nxt)
    rec.save(
        {
            "case": "decode_shapes",
            "issue": 20,
            "description": "Eager LLM-style decode, one token per sequence per step over a static KV cache "
            "(SDPA with a boolean mask over max_seq), bf16 weights: GEMMs with M=batch (GEMV-like), memory-bound. "
            "No host sync in the loop.",
            "params": cfg,
        }
    )


# --------------------------------------------------------------------------------------------------
# B. what-if pairs
# --------------------------------------------------------------------------------------------------
def gemm_chain(n: int, count: int) -> Callable[[torch.Tensor], torch.Tensor]:
    w = torch.randn(n, n, device=DEV, dtype=BF) / math.sqrt(n)

    def run(x: torch.Tensor) -> torch.Tensor:
        for _ in range(count):
            x = torch.tanh(x @ w)
        return x

    return run


def calibrate_chain(n: int, target_ms: float) -> int:
    """How many bf16 n x n GEMM+tanh links take ``target_ms`` on this device (measured with events)."""
    if not CUDA:
        return 4
    run1 = gemm_chain(n, 10)
    x = torch.randn(n, n, device=DEV, dtype=BF)
    for _ in range(3):
        run1(x)
    a = Mark()
    for _ in range(5):
        run1(x)
    b = Mark()
    sync()
    per = a.ms_to(b) / 50
    return max(1, round(target_ms / per))


def island(a: argparse.Namespace, fault: bool) -> None:
    n = sz(4096, 128)
    links = calibrate_chain(n, 5.0)
    chain = gemm_chain(n, links)
    x = torch.randn(n, n, device=DEV, dtype=BF)
    island_ms = 4.0
    chain(x).float().mean().item()
    rec = Recording("island_fault" if fault else "island_fixed", a.out, active=8)
    for it in rec.iterations():
        with rec.span(f"train_step {it}"):
            y = chain(x)
            loss = y.float().mean().item()  # the step's end: the host waits for the device (logging)
            if fault:
                t0 = time.perf_counter_ns()
                busy_wait(island_ms / 1e3)  # pure-Python host work, no CUDA calls, no range
                rec.note_step(island_host_ms=(time.perf_counter_ns() - t0) / 1e6)
    rec.save(
        {
            "case": rec.name,
            "issue": 21,
            "pair": "island",
            "role": "fault" if fault else "fixed",
            "description": "Each train_step: a chain of bf16 GEMM+tanh (~5 ms GPU), then .item() (host waits for "
            "the device)"
            + (
                ", then ~4 ms of pure-Python busy loop (no CUDA calls, no user range) before the next "
                "step's launches: the GPU idles ~4 ms per step."
                if fault
                else "; nothing after it (the fix)."
            ),
            "params": {"n": n, "links": links, "island_ms": island_ms if fault else 0.0},
            "loss": loss,
        }
    )


class SlowDataset(torch.utils.data.Dataset):
    """Each sample costs ``cpu_ms`` of pure-Python work in ``__getitem__``."""

    def __init__(self, n: int, rows: int, dim: int, cpu_ms: float) -> None:
        self.n, self.rows, self.dim, self.cpu_ms = n, rows, dim, cpu_ms

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        busy_wait(self.cpu_ms / 1e3)
        g = torch.Generator().manual_seed(i)
        return torch.randn(self.rows, self.dim, generator=g), i % 10


def _worker_init(_: int) -> None:
    torch.set_num_threads(1)


def mlp(dim: int, hidden: int, depth: int) -> nn.Module:
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim)]
    return nn.Sequential(*layers, nn.Linear(dim, 10))


def loader(a: argparse.Namespace, fault: bool) -> None:
    # batches stay small (4 MiB) so worker -> main shared memory is never the limit
    cfg = {
        "samples": 4096,
        "batch": sz(32, 4),
        "rows": sz(32, 4),
        "dim": sz(1024, 32),
        "cpu_ms_per_sample": 0.2,
        "hidden": sz(8192, 64),
        "depth": sz(8, 1),
        "num_workers": 0 if fault else 4,
    }
    ds = SlowDataset(cfg["samples"], cfg["rows"], cfg["dim"], cfg["cpu_ms_per_sample"])
    kw: dict = {"batch_size": cfg["batch"], "shuffle": False, "num_workers": cfg["num_workers"], "pin_memory": CUDA}
    if not fault:
        kw.update(persistent_workers=True, prefetch_factor=2, worker_init_fn=_worker_init)
    dl = torch.utils.data.DataLoader(ds, **kw)
    torch.manual_seed(0)
    model = mlp(cfg["dim"], cfg["hidden"], cfg["depth"]).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    it_ = iter(dl)

    def train(xb, yb) -> float:
        xb = xb.to(DEV, non_blocking=True).flatten(0, 1)
        yb = yb.to(DEV, non_blocking=True).repeat_interleave(cfg["rows"])
        with torch.autocast(DEV.type, dtype=BF):
            loss = F.cross_entropy(model(xb).float(), yb)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()  # logging: the host waits for the step's end

    for _ in range(4):  # workers started, kernels warm
        train(*next(it_))
    sync()
    rec = Recording("loader_fault" if fault else "loader_fixed", a.out, active=8)
    loss = 0.0
    for it in rec.iterations():
        with rec.span(f"train_step {it}"):
            t0 = time.perf_counter_ns()
            xb, yb = next(it_)
            rec.note_step(fetch_host_ms=(time.perf_counter_ns() - t0) / 1e6)
            loss = train(xb, yb)
    rec.save(
        {
            "case": rec.name,
            "issue": 21,
            "pair": "loader",
            "role": "fault" if fault else "fixed",
            "description": "An MLP fed by a torch DataLoader whose __getitem__ burns ~0.2 ms of pure Python per "
            "sample (32 per batch, ~6.4 ms per batch). "
            + (
                "num_workers=0: the main thread builds every batch between steps; the GPU idles meanwhile."
                if fault
                else "num_workers=4, persistent, prefetch_factor=2: batches are ready when asked."
            )
            + " Each step ends with loss.item(). steps[i].fetch_host_ms = host time inside next(iterator).",
            "params": cfg,
            "loss": loss,
        }
    )
    del it_


def copy_pair(a: argparse.Namespace, fault: bool) -> None:
    rows, cols = sz(4096, 64), sz(6144, 64)
    mib = rows * cols * 4 / 2**20
    links = calibrate_chain(cols, 5.0 * cols / rows) if CUDA else 2  # calibrated on cols x cols: scale to rows
    w = torch.randn(cols, cols, device=DEV, dtype=BF) / math.sqrt(cols)
    hosts = [torch.randn(rows, cols) for _ in range(2)]
    if not fault and CUDA:
        hosts = [h.pin_memory() for h in hosts]
    bufs = [torch.empty(rows, cols, device=DEV) for _ in range(2)]
    side = new_stream()
    ready = [torch.cuda.Event() if CUDA else None for _ in range(2)]

    def compute(x: torch.Tensor) -> float:
        y = x.to(BF)
        for _ in range(links):
            y = torch.tanh(y @ w)
        return float(y.float().mean().item())

    def prefetch(i: int) -> None:
        with on(side):
            if CUDA:
                side.wait_stream(torch.cuda.current_stream())  # the buffer's last reader is done
            bufs[i % 2].copy_(hosts[i % 2], non_blocking=True)
            if CUDA:
                ready[i % 2].record(side)

    def step_fault(i: int) -> float:
        x = hosts[i % 2].to(DEV)  # pageable, synchronous
        return compute(x)

    def step_fixed(i: int) -> float:
        if CUDA:
            torch.cuda.current_stream().wait_event(ready[i % 2])
        prefetch(i + 1)
        return compute(bufs[i % 2])

    prefetch(0)
    for i in range(2):
        (step_fault if fault else step_fixed)(i)
    sync()
    rec = Recording("copy_fault" if fault else "copy_fixed", a.out, active=8)
    base = 2
    for it in rec.iterations():
        with rec.span(f"train_step {it}"):
            loss = (step_fault if fault else step_fixed)(base + it)
    rec.save(
        {
            "case": rec.name,
            "issue": 21,
            "pair": "copy",
            "role": "fault" if fault else "fixed",
            "description": f"Each train_step moves a {mib:.0f} MiB fp32 batch to the GPU, then a ~5 ms bf16 GEMM "
            "chain on it, ending with .item(). "
            + (
                "Fault: host tensor pageable, tensor.to('cuda') synchronous on the compute stream."
                if fault
                else "Fixed: pinned host tensors, copy_(non_blocking=True) of the NEXT step's batch on "
                "a side stream (prefetch) while this step computes; compute stream waits on the copy's event."
            ),
            "params": {
                "batch_mib": mib,
                "rows": rows,
                "cols": cols,
                "links": links,
                "pinned": not fault,
                "prefetch_side_stream": not fault,
            },
            "loss": loss,
        }
    )


def graphs(a: argparse.Namespace, fault: bool) -> None:
    cfg = {
        "vocab": sz(32000, 256),
        "dim": sz(512, 64),
        "layers": sz(12, 2),
        "heads": sz(8, 4),
        "batch": 4,
        "max_seq": sz(256, 32),
        "prefilled": sz(64, 4),
    }
    m, tok, pos, mask = decode_setup(cfg)
    use_graph = (not fault) and CUDA
    with torch.no_grad():
        mask[..., : cfg["prefilled"] + 1] = True
        pos.fill_(cfg["prefilled"])
        out = torch.zeros_like(tok)
        if use_graph:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    out.copy_(m(tok, pos, mask))
            torch.cuda.current_stream().wait_stream(s)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out.copy_(m(tok, pos, mask))

            def fwd() -> None:
                graph.replay()
        else:

            def fwd() -> None:
                out.copy_(m(tok, pos, mask))

        for _ in range(3):
            fwd()
        sync()
        pos.fill_(cfg["prefilled"])
        rec = Recording("graphs_fault" if fault else "graphs_fixed", a.out, active=8)
        toks = []
        for it in rec.iterations():
            with rec.span(f"decode_step {it}"):
                fwd()
                toks.append(int(out[0, 0].item()))  # the sampled token reaches the host (stop check)
                decode_advance(tok, pos, mask, out)
    rec.save(
        {
            "case": rec.name,
            "issue": 21,
            "pair": "graphs",
            "role": "fault" if fault else "fixed",
            "description": "Decode step of a small bf16 decoder with a static KV cache (many tiny kernels). "
            + (
                "Eager: every kernel launched from Python (launch-bound)."
                if fault
                else "The same step captured once in a torch.cuda.CUDAGraph and replayed (one cudaGraphLaunch)."
            )
            + " Each decode_step ends with .item() of the sampled token, then device-side bookkeeping "
            "(token copy, position +1, mask update: 3 small kernels outside the graph).",
            "params": {**cfg, "cuda_graph": use_graph},
            "tokens": toks,
        }
    )


# --------------------------------------------------------------------------------------------------
# C. readings
# --------------------------------------------------------------------------------------------------
def copy_bound(a: argparse.Namespace) -> None:
    """~84% of each step in a pageable HtoD copy, the rest compute; sizes calibrated on the device."""
    n = sz(4096, 128)
    target_copy_ms, target_compute_ms = 84.0, 16.0
    probe = torch.empty(sz(256 * 2**20, 2**20), dtype=torch.uint8).fill_(1)
    d = torch.empty_like(probe, device=DEV)
    d.copy_(probe)
    a0 = Mark()
    d.copy_(probe)
    b0 = Mark()
    sync()
    gbps = probe.numel() / (a0.ms_to(b0) * 1e-3) / 1e9
    nbytes_ = int(min(4 * 2**30, max(4 * n * n, gbps * 1e9 * target_copy_ms / 1e3))) if CUDA else 4 * n * n
    nbytes_ = max(4 * n * n, nbytes_ - nbytes_ % 2**20)
    host = torch.empty(nbytes_ // 4, dtype=torch.float32).fill_(0.5)
    dev = torch.empty(nbytes_ // 4, dtype=torch.float32, device=DEV)
    del probe, d
    links = calibrate_chain(n, target_compute_ms)
    chain = gemm_chain(n, links)
    x = torch.randn(n, n, device=DEV, dtype=BF)
    chain(x)
    rec = Recording("copy_bound", a.out, active=6)
    for it in rec.iterations():
        with rec.span(f"train_step {it}"):
            with rec.span("copy_in"):
                dev.copy_(host)  # pageable: the host blocks; the copy queues behind the last step's compute
            with rec.span("compute"):
                y = chain(x + dev[: n * n].view(n, n).to(BF))
    y.float().sum().item()
    rec.save(
        {
            "case": "copy_bound",
            "issue": 19,
            "description": "Each train_step: a pageable host->device copy sized to take ~84 ms (copy_in), then "
            "~16 ms of bf16 GEMM chain (compute). No other copies, no sync besides the pageable copy itself.",
            "params": {
                "copy_bytes": nbytes_,
                "copy_mib": nbytes_ / 2**20,
                "probe_pageable_gb_per_s": gbps,
                "n": n,
                "links": links,
                "target_copy_ms": target_copy_ms,
                "target_compute_ms": target_compute_ms,
            },
        }
    )


def dependency(a: argparse.Namespace) -> None:
    """Stream B's kernels are launched early but wait on an event recorded on stream A."""
    n = sz(4096, 128)
    links_a = calibrate_chain(n, 4.0)
    links_b = max(1, links_a // 2)
    chain_a, chain_b = gemm_chain(n, links_a), gemm_chain(n, links_b)
    A = torch.cuda.current_stream() if CUDA else None
    B = new_stream()
    xa = torch.randn(n, n, device=DEV, dtype=BF)
    big = torch.randn(sz(64 * 2**20, 2**12), device=DEV)  # 256 MiB fp32
    big_dst = torch.empty_like(big)
    xb_dst = torch.empty_like(xa)
    ev_a = torch.cuda.Event() if CUDA else None
    for _ in range(2):
        chain_a(xa), chain_b(xa)
    sync()
    rec = Recording("dependency", a.out, active=6)
    for it in rec.iterations():
        with rec.span(f"train_step {it}"):
            with rec.span("a_chain1", stream=A):
                ya = chain_a(xa)  # stream A (default stream): ~4 ms
            if CUDA:
                ev_a.record(A)
            with on(B):
                if CUDA:
                    B.wait_event(ev_a)  # B's work below is launched now but waits for A's chain
                with rec.span("b_after_wait", stream=B):
                    xb_dst.copy_(ya)  # device-to-device copy
                    big_dst.copy_(big)  # 256 MiB device-to-device copy
                    yb = chain_b(xb_dst)
            if CUDA:
                A.wait_stream(B)  # A's next chain needs B's result: A waits on B
            with rec.span("a_chain2", stream=A):
                chain_a(ya + yb)
            if CUDA:
                done = torch.cuda.Event()
                done.record(A)
                done.synchronize()  # host waits for the step (no .item(): no host copy)
    rec.save(
        {
            "case": "dependency",
            "issue": 19,
            "description": "Per train_step, all launched within ~1 ms of host time: stream A (default stream) runs "
            "a_chain1 (bf16 GEMM chain ~4 ms) and records event E; stream B waits on E (cudaStreamWaitEvent) then "
            "runs two device-to-device copies (32 MiB, 256 MiB) and a GEMM chain ~2 ms; stream A waits on B "
            "(wait_stream) then runs a_chain2 (~4 ms). B's blank time before its work and A's blank time while B "
            "runs are the DEVICE waiting on a dependency (work already queued), not the host. The step ends with "
            "event.synchronize() (cudaEventSynchronize); no host<->device copies at all. spans on stream B are timed "
            "by events recorded on B after the wait.",
            "params": {"n": n, "links_a": links_a, "links_b": links_b, "d2d_bytes": [nbytes(xa), nbytes(big)]},
        }
    )


def dataloader_marker(a: argparse.Namespace) -> None:
    cfg = {
        "samples": 4096,
        "batch": sz(64, 4),
        "dim": sz(2048, 32),
        "cpu_ms_per_sample": 0.02,
        "hidden": sz(4096, 64),
        "depth": sz(4, 1),
        "num_workers": 2,
    }
    ds = SlowDataset(cfg["samples"], 1, cfg["dim"], cfg["cpu_ms_per_sample"])
    dl = torch.utils.data.DataLoader(
        ds, batch_size=cfg["batch"], num_workers=cfg["num_workers"], pin_memory=CUDA, worker_init_fn=_worker_init
    )
    torch.manual_seed(0)
    model = mlp(cfg["dim"], cfg["hidden"], cfg["depth"]).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rec = Recording("dataloader_marker", a.out, active=6)
    steps = rec.iterations()
    n_iter = rec.wait + rec.warmup + rec.active
    next(steps)
    loss = None
    for i, (xb, yb) in enumerate(dl):
        xb = xb.to(DEV, non_blocking=True).flatten(1)
        yb = yb.to(DEV, non_blocking=True)
        with torch.autocast(DEV.type, dtype=BF):
            loss = F.cross_entropy(model(xb).float(), yb)
        loss.backward()
        opt.step()
        opt.zero_grad()
        if i + 1 == n_iter:
            for _ in steps:  # closes the last step and stops the profiler
                pass
            break
        next(steps)
    rec.save(
        {
            "case": "dataloader_marker",
            "issue": 19,
            "description": "Training loop `for x, y in DataLoader(num_workers=2, pin_memory=True)` with NO user "
            "ranges: only PyTorch's own markers (enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__, "
            "Optimizer.step#AdamW.step, Optimizer.zero_grad#AdamW.zero_grad) and ProfilerStep#N. No host sync in "
            "the loop (the first fetch includes starting the workers: ProfilerStep#0 is not profiled).",
            "params": cfg,
            "loss": float(loss.item()) if loss is not None else None,
        }
    )


def nested_steps(a: argparse.Namespace) -> None:
    cfg = {"batch": sz(4096, 32), "dim": sz(2048, 32), "hidden": sz(8192, 64), "depth": sz(4, 1), "data_wait_ms": 10.0}
    torch.manual_seed(0)
    model = mlp(cfg["dim"], cfg["hidden"], cfg["depth"]).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    x = torch.randn(cfg["batch"], cfg["dim"], device=DEV)
    y = torch.randint(0, 10, (cfg["batch"],), device=DEV)

    def one(r: Recording | None) -> None:
        ctx = r.span if r else (lambda *_a, **_k: contextlib.nullcontext())
        with ctx("data_wait"):
            time.sleep(cfg["data_wait_ms"] / 1e3)  # host waits for data; no GPU work
        with ctx("forward"), torch.autocast(DEV.type, dtype=BF):
            loss = F.cross_entropy(model(x).float(), y)
        with ctx("backward"):
            loss.backward()  # kernels launched from autograd's own thread
        with ctx("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)

    one(None)
    sync()
    rec = Recording("nested_steps", a.out, active=6)
    for it in rec.iterations():
        with rec.span(f"train_step {it}"):
            one(rec)
    rec.save(
        {
            "case": "nested_steps",
            "issue": 19,
            "description": "train_step N contains data_wait (host time.sleep 10 ms, no GPU work), forward, "
            "backward (autograd thread launches), optimizer. No sync in the loop: when data_wait starts, the GPU is "
            "still running the previous step's backlog, so data_wait's start event fires late and its CUDA-event "
            "span is shorter than its host span (~7 vs ~10 ms); the parent train_step's CUDA-event span always "
            "covers its children.",
            "params": cfg,
        }
    )


CASES: dict[str, Callable[[argparse.Namespace], None]] = {
    "floor_calib": floor_calib,
    "train_shapes": train_shapes,
    "decode_shapes": decode_shapes,
    "island_fault": lambda a: island(a, True),
    "island_fixed": lambda a: island(a, False),
    "loader_fault": lambda a: loader(a, True),
    "loader_fixed": lambda a: loader(a, False),
    "copy_fault": lambda a: copy_pair(a, True),
    "copy_fixed": lambda a: copy_pair(a, False),
    "graphs_fault": lambda a: graphs(a, True),
    "graphs_fixed": lambda a: graphs(a, False),
    "copy_bound": copy_bound,
    "dependency": dependency,
    "dataloader_marker": dataloader_marker,
    "nested_steps": nested_steps,
}


def main() -> None:
    global SMALL
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", required=True, help="a case name, 'all', or 'list'")
    ap.add_argument("--out", default="out_round3")
    ap.add_argument("--small", action="store_true", help="tiny sizes (CPU logic check)")
    a = ap.parse_args()
    SMALL = a.small
    if a.case == "list":
        print("\n".join(CASES))
        return
    os.makedirs(a.out, exist_ok=True)
    names = list(CASES) if a.case == "all" else a.case.split(",")
    failed = []
    for name in names:
        t0 = time.perf_counter()
        try:
            CASES[name](a)
        except Exception as exc:  # one case's failure must not lose the others
            import traceback

            traceback.print_exc()
            failed.append((name, repr(exc)))
        print(f"== {name} took {time.perf_counter() - t0:.1f} s")
    if failed:
        print("FAILED:", failed)
        sys.exit(1)


if __name__ == "__main__":
    main()
