#!/usr/bin/env python3
"""Round-4 recordings: fault/fix pairs the what-if predictions are tested against, plus one measurement.

``python3 tracegen/record_round4.py --case NAME --out DIR [--small]`` writes ``DIR/<name>.json.gz``
(torch.profiler, CPU + CUDA, ``schedule(wait=1, warmup=2, active=6)``, one ``ProfilerStep#N`` per loop
iteration, a user range ``train_step N`` / ``step N`` / ``decode_step N`` inside each) and
``DIR/<name>.meta.json`` (the round-3 layout: env, params, description, steps[] with host_ms / gpu_ms / tag,
spans[], summary) plus, new in round 4:

* ``steps[i].trace``: per profiled step, counted in the exported trace itself (before gzip): CUDA runtime /
  driver calls by name (count and total µs), syncs, kernels (count, summed µs), memcpys (count, bytes),
  each attributed to the ProfilerStep whose host window holds the launching call (correlation id);
* ``unprofiled_steps[]``: 20 more steps run after the profiler stopped, timed by the same CUDA-event marks,
  and ``summary.step_gpu_ms_unprofiled_median`` / ``step_host_ms_unprofiled_median`` beside the profiled
  medians (the profiler's own overhead);
* per-step facts the fault is about (``steps[i]`` / ``unprofiled_steps[i]`` keys named in ``facts``).

Cases (``--case list``): ``alloc``, ``pinalloc``, ``syncloop``, ``mlpgraph``, ``prefetch``, ``pageable``,
``postproc``, ``loader2``, ``itemlog`` (each ``<pair>_fault`` and ``<pair>_fixed``) and ``graphgap``.
``alloc_fault`` needs ``PYTORCH_NO_CUDA_MEMORY_CACHING=1`` before CUDA starts: this file sets it itself when
that case is named on the command line (device_round4.sh also sets it in that child's environment).

Reuses record_round3.py's helpers (same folder). Nothing here imports gaplens. ``--small`` shrinks every
size so the logic can be checked on a CPU-only PyTorch (no CUDA events, streams, graphs: host clocks stand in).
"""

from __future__ import annotations

import os
import sys

if "alloc_fault" in [t for arg in sys.argv[1:] for t in arg.split(",")]:
    os.environ.setdefault("PYTORCH_NO_CUDA_MEMORY_CACHING", "1")  # must precede CUDA's start

import argparse
import bisect
import contextlib
import json
import time
from collections import Counter, defaultdict
from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import record_round3 as r3
from record_round3 import (
    BF,
    CUDA,
    DEV,
    LM,
    Mark,
    Recording,
    SlowDataset,
    _worker_init,
    busy_wait,
    calibrate_chain,
    gemm_chain,
    med,
    mlp,
    new_stream,
    on,
    spin,
    sync,
)

SMALL = False
N_UNPROFILED = 20
SYNC_CALLS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize")
ALLOC_CALLS = (
    "cudaMalloc",
    "cudaFree",
    "cudaHostAlloc",
    "cudaFreeHost",
    "cudaMallocHost",
    "cudaHostRegister",
    "cudaHostUnregister",
    "cudaMallocAsync",
    "cudaFreeAsync",
)


def sz(big: int, small: int) -> int:
    return small if SMALL else big


# --------------------------------------------------------------------------------------------------
# the loop: profiled steps (round-3 Recording), then unprofiled ones; trace facts per step
# --------------------------------------------------------------------------------------------------
class Plain:
    """Stands in for the Recording during the unprofiled steps: no ranges, no events but the step marks."""

    def __init__(self) -> None:
        self.it = 0
        self.extra: dict[int, dict] = {}

    @contextlib.contextmanager
    def span(self, name: str, stream=None, rf: bool = True, **info):
        yield

    def note(self, **info) -> None:
        self.extra.setdefault(self.it, {}).update(info)


class Rec4(Recording):
    def note(self, **info) -> None:
        self.note_step(**info)

    def run(self, step: Callable[[int, object], None], range_fmt: str, n_unprofiled: int = N_UNPROFILED) -> None:
        """Profiled loop (one ProfilerStep and one ``range_fmt.format(it)`` range per iteration), then the
        unprofiled steps, timed by the same kind of marks."""
        for it in self.iterations():
            with self.span(range_fmt.format(it)):
                step(it, self)
        p = Plain()
        base = self.wait + self.warmup + self.active
        marks = [Mark()]
        for k in range(n_unprofiled):
            p.it = base + k
            step(base + k, p)
            marks.append(Mark())
        sync()
        self.unprof = [
            {
                "iteration": base + k,
                "host_ms": (marks[k + 1].perf_ns - marks[k].perf_ns) / 1e6,
                "gpu_ms": marks[k].ms_to(marks[k + 1]),
                **p.extra.get(base + k, {}),
            }
            for k in range(n_unprofiled)
        ]

    def save4(self, meta: dict, facts: list[str] | None = None) -> None:
        tf = trace_facts(self.raw) if os.path.exists(self.raw) else {}
        for n, f in tf.items():
            self.extra_steps.setdefault(n, {})["trace"] = f
        super().save(meta)
        path = os.path.join(self.out, self.name + ".meta.json")
        with open(path) as fh:
            full = json.load(fh)
        unprof = getattr(self, "unprof", [])
        s = full["summary"]
        s["step_gpu_ms_unprofiled_median"] = med([u["gpu_ms"] for u in unprof])
        s["step_host_ms_unprofiled_median"] = med([u["host_ms"] for u in unprof])
        s["unprofiled_steps"] = len(unprof)
        prof = [st for st in full["steps"] if st["tag"] == "profiled"]
        s["trace_per_step_median"] = trace_medians([st.get("trace", {}) for st in prof])
        for k in facts or []:
            vp = [st[k] for st in prof if isinstance(st.get(k), (int, float))]
            vu = [u[k] for u in unprof if isinstance(u.get(k), (int, float))]
            s[f"{k}_median"] = med(vp)
            if vu:
                s[f"{k}_unprofiled_median"] = med(vu)
        full["unprofiled_steps"] = unprof
        full["unprofiled_note"] = (
            f"{len(unprof)} steps run right after the profiler stopped (same process, same step function, no "
            "record_function ranges), each timed by CUDA events recorded on the default stream at the step "
            "boundaries (gpu_ms) and perf_counter (host_ms)."
        )
        full["trace_note"] = TRACE_NOTE
        with open(path, "w") as fh:
            json.dump(full, fh, indent=1)
        print(
            f"{self.name}: unprofiled gpu median {s['step_gpu_ms_unprofiled_median']}; per step "
            f"{json.dumps(s['trace_per_step_median'])[:900]}"
        )


TRACE_NOTE = (
    "steps[i].trace (profiled steps only) is counted in the exported Kineto JSON: runtime = events of category "
    "cuda_runtime/cuda_driver whose host start lies inside ProfilerStep#i (count and summed duration in µs per "
    "name); syncs = cudaDeviceSynchronize + cudaStreamSynchronize + cudaEventSynchronize calls; kernels / "
    "memcpy / memset = GPU events whose launching call (same correlation id) lies in the step; kernel_us = "
    "summed kernel durations; memcpy_bytes from the events' args.bytes."
)


def trace_facts(path: str) -> dict[int, dict]:
    with open(path) as fh:
        evs = json.load(fh).get("traceEvents", [])
    steps = sorted(
        (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)), int(e["name"].split("#")[1]))
        for e in evs
        if e.get("ph") == "X"
        and str(e.get("name", "")).startswith("ProfilerStep#")
        and not str(e.get("cat", "")).startswith("gpu")
    )
    starts = [s[0] for s in steps]

    def which(ts: float) -> int | None:
        i = bisect.bisect_right(starts, ts) - 1
        if i >= 0 and ts <= steps[i][1]:
            return steps[i][2]
        return None

    calls: dict[int, Counter] = defaultdict(Counter)
    call_us: dict[int, Counter] = defaultdict(Counter)
    corr: dict = {}
    for e in evs:
        if e.get("ph") != "X" or e.get("cat") not in ("cuda_runtime", "cuda_driver"):
            continue
        n = which(float(e["ts"]))
        if n is None:
            continue
        calls[n][e["name"]] += 1
        call_us[n][e["name"]] += float(e.get("dur", 0))
        c = (e.get("args") or {}).get("correlation")
        if c is not None:
            corr[c] = n
    gpu: dict[int, Counter] = defaultdict(Counter)
    for e in evs:
        cat = e.get("cat")
        if e.get("ph") != "X" or cat not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        n = corr.get((e.get("args") or {}).get("correlation"))
        if n is None:
            continue
        key = {"kernel": "kernels", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}[cat]
        gpu[n][key] += 1
        gpu[n][key + "_us"] += float(e.get("dur", 0))
        if cat == "gpu_memcpy":
            gpu[n]["memcpy_bytes"] += int((e.get("args") or {}).get("bytes", 0) or 0)
    out = {}
    for _, _, n in steps:
        c = calls.get(n, Counter())
        g = gpu.get(n, Counter())
        out[n] = {
            "runtime_calls": dict(c.most_common()),
            "runtime_us": {k: round(v, 1) for k, v in call_us.get(n, Counter()).most_common()},
            "syncs": sum(c[k] for k in SYNC_CALLS),
            "launches": c["cudaLaunchKernel"] + c["cudaLaunchKernelExC"] + c["cuLaunchKernel"] + c["cuLaunchKernelEx"],
            "graph_launches": c["cudaGraphLaunch"],
            "kernels": g["kernels"],
            "kernel_us": round(g["kernels_us"], 1),
            "memcpy": g["memcpy"],
            "memcpy_us": round(g["memcpy_us"], 1),
            "memcpy_bytes": g["memcpy_bytes"],
            "memset": g["memset"],
            **{k: c[k] for k in ALLOC_CALLS if c[k]},
            **{k + "_us": round(call_us[n][k], 1) for k in ALLOC_CALLS if c[k]},
        }
    return out


def trace_medians(rows: list[dict]) -> dict:
    keys = sorted({k for r in rows for k, v in r.items() if isinstance(v, (int, float))})
    return {k: med([r.get(k, 0) for r in rows]) for k in keys}


def base_meta(rec: Recording, pair: str | None, fault: bool | None, description: str, params: dict) -> dict:
    m = {"case": rec.name, "round": 4, "description": description, "params": params}
    if pair is not None:
        m.update(pair=pair, role="fault" if fault else "fixed")
    return m


def name_of(pair: str, fault: bool) -> str:
    return f"{pair}_{'fault' if fault else 'fixed'}"


def mem_stats() -> dict:
    if not CUDA:
        return {}
    try:
        s = torch.cuda.memory_stats()
    except Exception:
        return {}
    keys = (
        "allocation.all.allocated",
        "allocated_bytes.all.allocated",
        "num_device_alloc",
        "num_device_free",
        "segment.all.allocated",
    )
    return {k: int(s.get(k, 0)) for k in keys}


def host_stats() -> dict:
    if not CUDA or not hasattr(torch.cuda, "host_memory_stats"):
        return {}
    with contextlib.suppress(Exception):
        s = torch.cuda.host_memory_stats()
        return {
            k: s.get(k, 0) for k in ("num_host_alloc", "num_host_free", "host_alloc_time.total", "host_free_time.total")
        }
    return {}


def delta(a: dict, b: dict) -> dict:
    return {k: b[k] - a.get(k, 0) for k in b}


# --------------------------------------------------------------------------------------------------
# 1. alloc: caching allocator off vs on
# --------------------------------------------------------------------------------------------------
def alloc(a: argparse.Namespace, fault: bool) -> None:
    cfg = {
        "vocab": sz(8192, 256),
        "dim": sz(512, 64),
        "layers": sz(4, 1),
        "heads": 8,
        "batch": sz(8, 2),
        "seq": sz(256, 16),
    }
    env_flag = os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING")
    if fault and CUDA and env_flag != "1":
        raise RuntimeError("alloc_fault needs PYTORCH_NO_CUDA_MEMORY_CACHING=1 before CUDA starts")
    torch.manual_seed(0)
    model = LM(cfg["vocab"], cfg["dim"], cfg["layers"], cfg["heads"]).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    tok = torch.randint(0, cfg["vocab"], (cfg["batch"], cfg["seq"] + 1), device=DEV)

    def step(it: int, r) -> None:
        m0 = mem_stats()
        with torch.autocast(DEV.type, dtype=BF):
            logits = model(tok[:, :-1])
        loss = F.cross_entropy(logits.float().flatten(0, 1), tok[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        d = delta(m0, mem_stats())
        r.note(
            tensor_allocs=d.get("allocation.all.allocated"),
            tensor_alloc_bytes=d.get("allocated_bytes.all.allocated"),
            cudaMalloc_by_caching_allocator=d.get("num_device_alloc"),
            cudaFree_by_caching_allocator=d.get("num_device_free"),
        )

    for _ in range(3):
        step(-1, Plain())
    sync()
    rec = Rec4(name_of("alloc", fault), a.out)
    rec.run(step, "train_step {}")
    rec.save4(
        base_meta(
            rec,
            "alloc",
            fault,
            "Training step of a small pre-norm causal transformer LM (round-3 LM class; bf16 autocast, AdamW "
            "foreach, zero_grad(set_to_none=True)), no sync in the loop. "
            + (
                "Fault: PyTorch's CUDA caching allocator is OFF (PYTORCH_NO_CUDA_MEMORY_CACHING=1 in the process "
                "environment before CUDA started): every tensor allocation is a cudaMalloc and every free a "
                "cudaFree (which synchronizes the device). steps[i].trace.cudaMalloc / cudaFree count them per step "
                "(memory_stats stay 0: the uncached path keeps no statistics)."
                if fault
                else "Fixed: the caching allocator on (default): after warm-up no cudaMalloc/cudaFree at all. "
                "steps[i].tensor_allocs / tensor_alloc_bytes = the allocations the step asks the allocator for "
                "(memory_stats deltas): the same requests that are each a cudaMalloc in the fault."
            ),
            {
                **cfg,
                "params_count": sum(p.numel() for p in model.parameters()),
                "PYTORCH_NO_CUDA_MEMORY_CACHING": env_flag,
                "caching_allocator": not fault,
            },
        ),
        facts=["tensor_allocs", "tensor_alloc_bytes", "cudaMalloc_by_caching_allocator"],
    )


# --------------------------------------------------------------------------------------------------
# 2. pinalloc: a fresh pinned buffer per step vs one reused
# --------------------------------------------------------------------------------------------------
def pinalloc(a: argparse.Namespace, fault: bool) -> None:
    mib = sz(128, 1)
    numel = mib * 2**20 // 4
    n = sz(4096, 64)
    links = calibrate_chain(n, 3.0) if CUDA else 2
    chain = gemm_chain(n, links)
    dev = torch.empty(numel, device=DEV)
    has_empty = CUDA and hasattr(torch._C, "_host_emptyCache")
    kept = None if fault else torch.empty(numel, pin_memory=CUDA)

    def step(it: int, r) -> None:
        h0 = host_stats()
        t0 = time.perf_counter_ns()
        with r.span("pin_alloc"):
            if fault:
                if has_empty:
                    # PyTorch caches pinned blocks (CachingHostAllocator); hand the cache back so that this
                    # step's torch.empty(pin_memory=True) is a real cudaHostAlloc (and last step's a cudaFreeHost)
                    torch._C._host_emptyCache()
                buf = torch.empty(numel, pin_memory=CUDA)
            else:
                buf = kept
        t1 = time.perf_counter_ns()
        with r.span("fill"):
            buf.fill_(float(it % 7))
        with r.span("h2d"):
            dev.copy_(buf, non_blocking=True)
        with r.span("compute"):
            chain(dev[: n * n].view(n, n).to(BF))
            # the step ends with a device sync, not .item(): PyTorch 2.11's .item() stages through a (small)
            # pinned block of the same caching host allocator, which the fault's emptyCache would free each step
            sync()
        r.note(pin_alloc_host_ms=(t1 - t0) / 1e6, **{"host_" + k: v for k, v in delta(h0, host_stats()).items()})

    for _ in range(2):
        step(-1, Plain())
    sync()
    rec = Rec4(name_of("pinalloc", fault), a.out)
    rec.run(step, "train_step {}")
    rec.save4(
        base_meta(
            rec,
            "pinalloc",
            fault,
            f"Each train_step fills a {mib} MiB fp32 pinned host buffer (fill_), copies it HtoD "
            "(copy_(non_blocking=True), default stream), runs a ~3 ms bf16 GEMM chain on it and ends with "
            "torch.cuda.synchronize() (not .item(): in PyTorch 2.11 .item() stages through a small pinned block of "
            "the caching host allocator, which the fault's per-step emptyCache would free and re-allocate). "
            + (
                "Fault: the buffer is a fresh torch.empty(..., pin_memory=True) every step. PyTorch's caching host "
                "allocator would hand back last step's block, so the step first calls torch._C._host_emptyCache() "
                "(frees the cached block: cudaFreeHost) and the torch.empty is then a real cudaHostAlloc, as with "
                "an uncached pinned allocation (steps[i].trace.cudaHostAlloc / cudaFreeHost, host_num_host_alloc)."
                if fault
                else "Fixed: one pinned buffer allocated before the loop and reused every step."
            )
            + " Ranges inside train_step: pin_alloc, fill, h2d, compute.",
            {
                "buffer_mib": mib,
                "buffer_bytes": numel * 4,
                "n": n,
                "links": links,
                "fresh_pinned_per_step": fault,
                "host_emptyCache_per_step": bool(fault and has_empty),
            },
        ),
        facts=["pin_alloc_host_ms", "host_num_host_alloc", "host_num_host_free"],
    )


# --------------------------------------------------------------------------------------------------
# 3. syncloop: torch.cuda.synchronize() after every layer vs none
# --------------------------------------------------------------------------------------------------
def syncloop(a: argparse.Namespace, fault: bool) -> None:
    cfg = {"layers": sz(32, 4), "dim": sz(2048, 64), "batch": sz(4096, 8)}
    torch.manual_seed(0)
    layers = nn.ModuleList(nn.Linear(cfg["dim"], cfg["dim"]) for _ in range(cfg["layers"])).to(DEV, BF)
    x = torch.randn(cfg["batch"], cfg["dim"], device=DEV, dtype=BF)

    def step(it: int, r) -> None:
        times = []
        with torch.no_grad():
            y = x
            for lin in layers:
                t0 = time.perf_counter()
                y = F.gelu(lin(y))
                if fault:
                    sync()  # "timing code left in"
                    times.append(time.perf_counter() - t0)
            sync()  # one sync at the end of the step (both)
        r.note(syncs_in_step=(len(times) + 1) if CUDA else 0, layer_host_ms_sum=sum(times) * 1e3 if fault else None)

    for _ in range(3):
        step(-1, Plain())
    rec = Rec4(name_of("syncloop", fault), a.out)
    rec.run(step, "step {}")
    rec.save4(
        base_meta(
            rec,
            "syncloop",
            fault,
            f"Inference forward (no_grad) of {cfg['layers']} bf16 Linear({cfg['dim']},{cfg['dim']})+GELU layers on "
            f"a [{cfg['batch']},{cfg['dim']}] input (~tens of µs of GPU per layer, comparable to its launch "
            "time); torch.cuda.synchronize() at the end of every step. "
            + (
                "Fault: per-layer timing code left in: perf_counter + torch.cuda.synchronize() after EVERY layer "
                "(layers+1 syncs per step)."
                if fault
                else "Fixed: no per-layer sync (1 sync per step)."
            ),
            {**cfg, "sync_per_layer": fault},
        ),
        facts=["syncs_in_step", "layer_host_ms_sum"],
    )


# --------------------------------------------------------------------------------------------------
# 4. mlpgraph: eager small-MLP training step vs the whole step in one CUDA graph
# --------------------------------------------------------------------------------------------------
def mlpgraph(a: argparse.Namespace, fault: bool) -> None:
    cfg = {
        "linear_layers": 8,
        "dim": sz(512, 32),
        "batch": 64,
        "optimizer": "SGD(lr=1e-3, momentum=0.9, foreach=False)",
        "loss": "mse",
        "dtype": "fp32",
    }
    torch.manual_seed(0)
    mods: list[nn.Module] = []
    for i in range(cfg["linear_layers"]):
        mods.append(nn.Linear(cfg["dim"], cfg["dim"]))
        if i + 1 < cfg["linear_layers"]:
            mods.append(nn.GELU())
    model = nn.Sequential(*mods).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, foreach=False)
    xs = torch.randn(16, cfg["batch"], cfg["dim"], device=DEV)
    ys = torch.randn(16, cfg["batch"], cfg["dim"], device=DEV)
    sx, sy = torch.empty_like(xs[0]), torch.empty_like(ys[0])
    use_graph = (not fault) and CUDA

    def body() -> torch.Tensor:
        loss = F.mse_loss(model(sx), sy)
        loss.backward()
        opt.step()
        return loss

    if use_graph:  # whole-network capture, as in the torch.cuda.graph docs
        sx.copy_(xs[0])
        sy.copy_(ys[0])
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                opt.zero_grad(set_to_none=True)
                body()
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            static_loss = body()

    def step(it: int, r) -> None:
        sx.copy_(xs[it % 16])
        sy.copy_(ys[it % 16])
        if use_graph:
            graph.replay()
            loss = static_loss
        else:
            opt.zero_grad(set_to_none=True)
            loss = body()
        r.note(loss=float(loss.item()))  # logging the loss: the step ends when the device is done

    for _ in range(3):
        step(i, Plain())
    sync()
    rec = Rec4(name_of("mlpgraph", fault), a.out)
    rec.run(step, "train_step {}")
    rec.save4(
        base_meta(
            rec,
            "mlpgraph",
            fault,
            f"Training step of a small fp32 MLP ({cfg['linear_layers']} Linear({cfg['dim']},{cfg['dim']}) with GELU "
            f"between, batch {cfg['batch']}, MSE, {cfg['optimizer']}): ~100+ tiny kernels per step "
            "(steps[i].trace.kernels). Each step copies its batch into static input/target tensors (2 DtoD "
            "copies) and ends with loss.item(). "
            + (
                "Fault: eager (zero_grad(set_to_none) + forward + backward + optimizer.step launched from Python)."
                if fault
                else "Fixed: forward+backward+optimizer.step captured ONCE in a torch.cuda.CUDAGraph (warm-up on a "
                "side stream first, zero_grad(set_to_none) before capture, as the PyTorch docs show) and replayed each "
                "step (one cudaGraphLaunch)."
            ),
            {**cfg, "cuda_graph": use_graph},
        ),
    )


# --------------------------------------------------------------------------------------------------
# 5. prefetch: pinned HtoD on the compute stream vs prefetched on a side stream
# --------------------------------------------------------------------------------------------------
def prefetch(a: argparse.Namespace, fault: bool) -> None:
    n = sz(4096, 64)
    mats = 8
    nbytes = mats * n * n * 2  # 256 MiB bf16
    links = calibrate_chain(n, 11.0) if CUDA else 2
    chain = gemm_chain(n, links)
    hosts = [torch.empty(mats * n * n, dtype=BF, pin_memory=CUDA).fill_(0.01 * (k + 1)) for k in range(2)]
    bufs = [torch.empty(mats * n * n, dtype=BF, device=DEV) for _ in range(2)]
    side = new_stream()
    ready = [torch.cuda.Event() if CUDA else None for _ in range(2)]

    def compute(buf: torch.Tensor) -> float:
        y = chain(buf.view(mats, n, n).sum(0))  # consumes the whole batch
        return float(y.float().mean().item())

    def issue_prefetch(i: int, r) -> None:
        with on(side):
            if CUDA:
                side.wait_stream(torch.cuda.current_stream())  # the buffer's last reader is done
            with r.span("prefetch_next", stream=side):
                bufs[i % 2].copy_(hosts[i % 2], non_blocking=True)
            if CUDA:
                ready[i % 2].record(side)

    def step(it: int, r) -> None:
        i = it + 8  # keep it >= 0 in warm-up (it = -1)
        if fault:
            with r.span("h2d"):
                bufs[0].copy_(hosts[i % 2], non_blocking=True)  # on the compute stream, before the GEMMs
            with r.span("compute"):
                loss = compute(bufs[0])
        else:
            if CUDA:
                torch.cuda.current_stream().wait_event(ready[i % 2])
            issue_prefetch(i + 1, r)
            with r.span("compute"):
                loss = compute(bufs[i % 2])
        r.note(loss=loss)

    if not fault:
        issue_prefetch(7, Plain())  # the first step's batch (i = -1 + 8)
    for _ in range(1):
        step(-1, Plain())
    sync()
    rec = Rec4(name_of("prefetch", fault), a.out)  # the warm-up step issued the prefetch of i = 8 (it = 0)
    rec.run(step, "train_step {}")
    rec.save4(
        base_meta(
            rec,
            "prefetch",
            fault,
            f"Each train_step consumes a {nbytes / 2**20:.0f} MiB bf16 batch (pinned host memory -> GPU): "
            f"sum of its {mats} {n}x{n} slices, then a ~11 ms chain of {links} bf16 {n}^3 GEMM+tanh links, "
            "ending with .item(). "
            + (
                "Fault: the batch's copy_(non_blocking=True) is issued on the compute (default) stream right before "
                "the GEMMs: copy and compute serialize. Ranges: h2d, compute."
                if fault
                else "Fixed: the NEXT step's batch is copied on a side stream (double buffer; the side stream first "
                "waits for the compute stream, i.e. the buffer's last reader), the compute stream wait_event()s "
                "on the batch's copy before use: the copy overlaps the GEMMs. Ranges: prefetch_next (CUDA events "
                "on the side stream), compute."
            ),
            {
                "copy_bytes": nbytes,
                "copy_mib": nbytes / 2**20,
                "pinned": True,
                "n": n,
                "slices": mats,
                "links": links,
                "prefetch_side_stream": not fault,
            },
        ),
    )


# --------------------------------------------------------------------------------------------------
# 6. pageable: 512 MiB pageable HtoD vs pinned + non_blocking
# --------------------------------------------------------------------------------------------------
def pageable(a: argparse.Namespace, fault: bool) -> None:
    n = sz(4096, 64)
    mats = 8
    numel = mats * n * n  # fp32: 512 MiB
    links = calibrate_chain(n, 10.0) if CUDA else 2
    chain = gemm_chain(n, links)
    host = torch.empty(numel, pin_memory=CUDA and not fault).fill_(0.5)
    dev = torch.empty(numel, device=DEV)

    def step(it: int, r) -> None:
        with r.span("h2d"):
            if fault:
                dev.copy_(host)  # pageable: staged by the driver, the host blocks
            else:
                dev.copy_(host, non_blocking=True)
        with r.span("compute"):
            y = chain(dev.view(mats, n, n).sum(0).to(BF))
            r.note(loss=float(y.float().mean().item()))

    for _ in range(1):
        step(-1, Plain())
    sync()
    rec = Rec4(name_of("pageable", fault), a.out)
    rec.run(step, "train_step {}")
    rec.save4(
        base_meta(
            rec,
            "pageable",
            fault,
            f"Each train_step copies a {numel * 4 / 2**20:.0f} MiB fp32 host tensor to the GPU (h2d range), then "
            f"~10 ms of compute (sum of its {mats} {n}x{n} slices, {links} bf16 GEMM+tanh links), ending with "
            ".item(). "
            + (
                "Fault: the host tensor is pageable; dev.copy_(host) (synchronous, staged through the driver's "
                "pinned bounce buffers)."
                if fault
                else "Fixed: the host tensor is pinned (allocated once); dev.copy_(host, non_blocking=True) on the "
                "same (default) stream, no prefetch."
            ),
            {"copy_bytes": numel * 4, "copy_mib": numel * 4 / 2**20, "pinned": not fault, "n": n, "links": links},
        ),
    )


# --------------------------------------------------------------------------------------------------
# 7. postproc: torch.compile(reduce-overhead) forward + 3 ms pure-Python postprocess vs none
# --------------------------------------------------------------------------------------------------
def postproc(a: argparse.Namespace, fault: bool) -> None:
    cfg = {
        "batch": sz(8192, 16),
        "dim": sz(2048, 32),
        "hidden": sz(8192, 64),
        "depth": sz(4, 1),
        "classes": 10,
        "postproc_ms": 3.0,
    }
    torch.manual_seed(0)
    model = mlp(cfg["dim"], cfg["hidden"], cfg["depth"]).to(DEV, BF).eval()
    x = torch.randn(cfg["batch"], cfg["dim"], device=DEV, dtype=BF)

    def fwd(inp: torch.Tensor) -> torch.Tensor:
        return model(inp).argmax(-1)

    mode, err = "eager", None
    run_fwd: Callable[[], torch.Tensor] = lambda: fwd(x)  # noqa: E731
    if CUDA:
        t0 = time.perf_counter()
        try:
            cf = torch.compile(fwd, mode="reduce-overhead")
            mark = getattr(torch.compiler, "cudagraph_mark_step_begin", lambda: None)

            def run_compiled() -> torch.Tensor:
                mark()
                return cf(x)

            with torch.no_grad():
                for _ in range(5):
                    run_compiled().cpu()
            run_fwd, mode = run_compiled, "torch.compile(mode='reduce-overhead')"
        except Exception as exc:
            err = repr(exc)[:2000]
            print("torch.compile failed, falling back to a manual CUDA graph:", err, file=sys.stderr)
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.no_grad(), torch.cuda.stream(s):
                for _ in range(3):
                    fwd(x)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.no_grad(), torch.cuda.graph(g):
                static_out = fwd(x)

            def run_graph() -> torch.Tensor:
                g.replay()
                return static_out

            run_fwd, mode = run_graph, "manual torch.cuda.CUDAGraph (torch.compile failed)"
        compile_s = time.perf_counter() - t0
    else:
        compile_s = 0.0

    def step(it: int, r) -> None:
        with torch.no_grad(), r.span("forward"):
            pred = run_fwd().cpu()  # the predictions reach the host (DtoH + sync)
        if fault:
            t0 = time.perf_counter_ns()
            vals = pred.tolist()
            hist = [0] * cfg["classes"]
            for v in vals:  # pure-Python postprocessing: no CUDA calls, no range
                hist[v] += 1
            busy_wait(max(0.0, cfg["postproc_ms"] / 1e3 - (time.perf_counter_ns() - t0) / 1e9))
            r.note(postproc_host_ms=(time.perf_counter_ns() - t0) / 1e6)

    for _ in range(3):
        step(-1, Plain())
    sync()
    rec = Rec4(name_of("postproc", fault), a.out)
    rec.run(step, "step {}")
    rec.save4(
        base_meta(
            rec,
            "postproc",
            fault,
            f"Inference: a bf16 MLP ({cfg['depth']} blocks dim {cfg['dim']} hidden {cfg['hidden']}, batch "
            f"{cfg['batch']}) + argmax, run as {mode}; each step copies the predictions to the host (.cpu(), a "
            "sync) inside the 'forward' range. "
            + (
                f"Fault: then ~{cfg['postproc_ms']:.0f} ms of pure-Python postprocessing (tolist, a histogram, "
                "a busy loop; no CUDA calls, no range) before the next step's launch: the GPU idles meanwhile."
                if fault
                else "Fixed: the postprocessing removed."
            ),
            {**cfg, "mode": mode, "compile_error": err, "compile_and_warmup_s": compile_s, "postproc": fault},
        ),
        facts=["postproc_host_ms"] if fault else [],
    )


# --------------------------------------------------------------------------------------------------
# 8. loader2: CPU-heavy __getitem__, 2 vs 12 workers
# --------------------------------------------------------------------------------------------------
def loader2(a: argparse.Namespace, fault: bool) -> None:
    cfg = {
        "samples": 4096,
        "batch": sz(32, 4),
        "rows": sz(80, 4),
        "dim": sz(1024, 32),
        "cpu_ms_per_sample": 0.8,
        "hidden": sz(8192, 64),
        "depth": sz(3, 1),
        "num_workers": 2 if fault else sz(12, 3),
        "persistent_workers": True,
        "prefetch_factor": 2,
    }
    ds = SlowDataset(cfg["samples"], cfg["rows"], cfg["dim"], cfg["cpu_ms_per_sample"])
    dl = torch.utils.data.DataLoader(
        ds,
        batch_size=cfg["batch"],
        shuffle=False,
        num_workers=cfg["num_workers"],
        pin_memory=CUDA,
        persistent_workers=True,
        prefetch_factor=2,
        worker_init_fn=_worker_init,
    )
    torch.manual_seed(0)
    model = mlp(cfg["dim"], cfg["hidden"], cfg["depth"]).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    it_ = iter(dl)

    def step(it: int, r) -> None:
        t0 = time.perf_counter_ns()
        xb, yb = next(it_)
        fetch = (time.perf_counter_ns() - t0) / 1e6
        xb = xb.to(DEV, non_blocking=True).flatten(0, 1)
        yb = yb.to(DEV, non_blocking=True).repeat_interleave(cfg["rows"])
        with torch.autocast(DEV.type, dtype=BF):
            loss = F.cross_entropy(model(xb).float(), yb)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        r.note(fetch_wait_ms=fetch, loss=float(loss.item()))  # logging: the host waits for the step's end

    for _ in range(4):
        step(-1, Plain())
    sync()
    time.sleep(0.3)  # let the workers fill their prefetch queues (steady state)
    rec = Rec4(name_of("loader2", fault), a.out)
    rec.run(step, "train_step {}")
    rec.save4(
        base_meta(
            rec,
            "loader2",
            fault,
            f"An MLP training step ({cfg['depth']} blocks dim {cfg['dim']} hidden {cfg['hidden']}, "
            f"{cfg['batch'] * cfg['rows']} rows, bf16 autocast, AdamW) fed by a DataLoader whose __getitem__ burns "
            f"{cfg['cpu_ms_per_sample']} ms of pure Python per sample ({cfg['batch']} samples per batch, "
            f"~{cfg['batch'] * cfg['cpu_ms_per_sample']:.0f} ms of worker CPU per batch); persistent workers, "
            "prefetch_factor=2, pin_memory. Each step ends with loss.item(). "
            + (
                f"Fault: num_workers={cfg['num_workers']}: batches arrive slower than the GPU consumes them."
                if fault
                else f"Fixed: num_workers={cfg['num_workers']} (the machine has 16 cores)."
            )
            + " steps[i].fetch_wait_ms = host time inside next(iterator).",
            {**cfg, "cpu_count": os.cpu_count()},
        ),
        facts=["fetch_wait_ms"],
    )


# --------------------------------------------------------------------------------------------------
# 9. itemlog: loss.item() + 2 ms Python logging every step vs none
# --------------------------------------------------------------------------------------------------
def itemlog(a: argparse.Namespace, fault: bool, keep_log: bool = False, pair: str = "itemlog") -> None:
    """``keep_log``: the fixed twin keeps the 2 ms of logging and drops only the .item() (pair ``itemkeep``:
    the fix ``--remove sync`` models, where ``itemlog_fixed`` drops both)."""
    cfg = {"batch": sz(4096, 8), "dim": sz(1024, 32), "hidden": sz(8192, 64), "depth": sz(3, 1), "log_ms": 2.0}
    torch.manual_seed(0)
    model = mlp(cfg["dim"], cfg["hidden"], cfg["depth"]).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    x = torch.randn(cfg["batch"], cfg["dim"], device=DEV)
    y = torch.randint(0, 10, (cfg["batch"],), device=DEV)
    history: list[str] = []

    def step(it: int, r) -> None:
        with torch.autocast(DEV.type, dtype=BF):
            loss = F.cross_entropy(model(x).float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if fault or keep_log:
            lv = loss.item() if fault else float(it)  # the fault's .item() waits for the whole step
            t0 = time.perf_counter_ns()
            end = t0 + int(cfg["log_ms"] * 1e6)
            k = 0
            while time.perf_counter_ns() < end:  # pure-Python "logging": formatting, no CUDA calls
                line = f"step {it:6d} | loss {lv:.6f} | lr {1e-4:.2e} | k {k}"
                k += 1
            history.append(line)
            r.note(log_host_ms=(time.perf_counter_ns() - t0) / 1e6)

    for _ in range(3):
        step(-1, Plain())
    sync()
    rec = Rec4(name_of(pair, fault), a.out)
    rec.run(step, "train_step {}")
    rec.save4(
        base_meta(
            rec,
            pair,
            fault,
            f"MLP training step ({cfg['depth']} blocks dim {cfg['dim']} hidden {cfg['hidden']}, batch "
            f"{cfg['batch']}, bf16 autocast, AdamW foreach), GPU-bound. "
            + (
                f"Fault: every step calls loss.item() (the host waits for the step's end) then spends "
                f"~{cfg['log_ms']:.0f} ms in pure-Python logging (string formatting, no CUDA calls, no range): the "
                "GPU idles for the logging and the next step's launch."
                if fault
                else "Fixed: no .item() and the same ~2 ms of logging (of a host-side value): the host runs ahead."
                if keep_log
                else "Fixed: no .item(), no logging: the host runs ahead and the GPU steps back to back."
            ),
            {**cfg, "item_and_log": fault, "log_kept": keep_log},
        ),
        facts=["log_host_ms"] if fault or keep_log else [],
    )


# --------------------------------------------------------------------------------------------------
# 10. graphgap: node-to-node gap inside a CUDA graph of tiny kernels
# --------------------------------------------------------------------------------------------------
def graph_kernels(path: str) -> list[dict]:
    """Per cudaGraphLaunch in the trace: its kernels' count, summed duration, first start, last end."""
    with open(path) as fh:
        evs = json.load(fh).get("traceEvents", [])
    launches = {}
    for e in evs:
        if e.get("ph") == "X" and e.get("cat") == "cuda_runtime" and e.get("name") == "cudaGraphLaunch":
            launches[(e.get("args") or {}).get("correlation")] = float(e["ts"])
    ks: dict = defaultdict(list)
    for e in evs:
        if e.get("ph") == "X" and e.get("cat") == "kernel":
            c = (e.get("args") or {}).get("correlation")
            if c in launches:
                ks[c].append((float(e["ts"]), float(e.get("dur", 0))))
    rows = []
    for c, lst in sorted(ks.items(), key=lambda kv: launches[kv[0]]):
        lst.sort()
        span = lst[-1][0] + lst[-1][1] - lst[0][0]
        tot = sum(d for _, d in lst)
        gaps = [lst[i + 1][0] - (lst[i][0] + lst[i][1]) for i in range(len(lst) - 1)]
        rows.append(
            {
                "correlation": c,
                "kernels": len(lst),
                "kernel_sum_us": tot,
                "first_to_last_us": span,
                "launch_call_to_first_kernel_us": lst[0][0] - launches[c],
                "gap_median_us": med(gaps),
                "gap_mean_us": (span - tot) / max(1, len(lst) - 1),
                "kernel_median_us": med([d for _, d in lst]),
            }
        )
    return rows


def graphgap(a: argparse.Namespace) -> None:
    N = sz(200, 20)
    numel = 4096
    x = torch.ones(numel, device=DEV)

    def body() -> None:
        for _ in range(N // 2):
            x.mul_(0.999)
            x.add_(0.001)

    if not CUDA:
        replay = body
    else:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            body()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            body()
        replay = g.replay
    for _ in range(5):
        replay()
    sync()

    def timed(fn, reps: int) -> list[float]:
        out = []
        for _ in range(reps):
            spin()  # the stream is busy when the start event is recorded: the event fires right before fn's work
            m0 = Mark()
            fn()
            m1 = Mark()
            out.append((m0, m1))
        sync()
        return [m0.ms_to(m1) * 1e3 for m0, m1 in out]

    replay_us_unprof = timed(replay, 30)
    eager_us_unprof = timed(body, 10)

    def step(it: int, r) -> None:
        spin()
        with r.span("graph_replay"):
            replay()

    rec = Rec4("graphgap", a.out)
    rec.run(step, "step {}", n_unprofiled=10)
    gk = graph_kernels(rec.raw) if os.path.exists(rec.raw) else []
    prof_replay_us = [
        m0.ms_to(m1) * 1e3 for n, it, m0, m1, _ in rec.span_rows if n == "graph_replay" and rec.tag(it) == "profiled"
    ]
    ksum = med([g_["kernel_sum_us"] for g_ in gk if g_["kernels"] == N])
    rep_u = med(replay_us_unprof)
    rep_p = med(prof_replay_us)
    summary_extra = {
        "N_kernels": N,
        "graph_replay_us_unprofiled_median": rep_u,
        "graph_replay_us_profiled_median": rep_p,
        "eager_same_kernels_us_unprofiled_median": med(eager_us_unprof),
        "kernel_sum_us_profiled_median": ksum,
        "kernel_median_us_profiled": med([g_["kernel_median_us"] for g_ in gk]),
        "graph_node_gap_us": (rep_u - ksum) / (N - 1) if (rep_u is not None and ksum is not None) else None,
        "graph_node_gap_us_profiled_events": (rep_p - ksum) / (N - 1) if (rep_p and ksum) else None,
        "graph_node_gap_us_in_trace": med([g_["gap_mean_us"] for g_ in gk]),
        "graph_node_gap_us_in_trace_median_of_gaps": med([g_["gap_median_us"] for g_ in gk]),
    }
    rec.save4(
        base_meta(
            rec,
            None,
            None,
            f"Measurement, not a pair: a torch.cuda.CUDAGraph of N={N} tiny kernels (x.mul_(0.999); "
            f"x.add_(0.001) alternating on a {numel}-element fp32 tensor), replayed. Each profiled step: a "
            "~0.1 ms spin kernel (so the stream is busy and the next event fires right before the graph), then "
            "'graph_replay' range (CUDA events around g.replay()). Unprofiled: 30 replays timed the same way "
            "(graph_replay_us_unprofiled) and the same 200 kernels launched eagerly (eager_same_kernels_us). "
            "summary.graph_node_gap_us = (unprofiled event replay time median - profiled per-replay kernel-time "
            "sum median)/(N-1); graph_node_gap_us_profiled_events uses the profiled replays' events instead; "
            "graph_node_gap_us_in_trace = (last kernel end - first kernel start - kernel sum)/(N-1) inside the "
            "trace itself. The replay time includes the time from the start event to the first node (graph "
            "launch on the device).",
            {"N": N, "numel": numel, "dtype": "fp32"},
        ),
    )
    path = os.path.join(a.out, "graphgap.meta.json")
    with open(path) as fh:
        full = json.load(fh)
    full["summary"].update(summary_extra)
    full["graph_replays_in_trace"] = gk
    full["graph_replay_us_unprofiled"] = replay_us_unprof
    full["graph_replay_us_profiled"] = prof_replay_us
    full["eager_same_kernels_us_unprofiled"] = eager_us_unprof
    with open(path, "w") as fh:
        json.dump(full, fh, indent=1)
    print("graphgap:", json.dumps(summary_extra))


CASES: dict[str, Callable[[argparse.Namespace], None]] = {"graphgap": graphgap}
for _pair, _fn in [
    ("alloc", alloc),
    ("pinalloc", pinalloc),
    ("syncloop", syncloop),
    ("mlpgraph", mlpgraph),
    ("prefetch", prefetch),
    ("pageable", pageable),
    ("itemlog", itemlog),
    ("loader2", loader2),
    ("postproc", postproc),
]:
    CASES[f"{_pair}_fault"] = (lambda f: lambda a: f(a, True))(_fn)
    CASES[f"{_pair}_fixed"] = (lambda f: lambda a: f(a, False))(_fn)
CASES["itemkeep_fault"] = lambda a: itemlog(a, True, pair="itemkeep")
CASES["itemkeep_fixed"] = lambda a: itemlog(a, False, keep_log=True, pair="itemkeep")


def main(
    cases: dict[str, Callable[[argparse.Namespace], None]] | None = None,
    doc: str | None = None,
    on_small: Callable[[bool], None] | None = None,
) -> None:
    """Run the named cases, each guarded so one failure loses only itself (record_round5.py reuses this with
    its own ``cases``; ``on_small`` sets its own ``SMALL``)."""
    global SMALL
    cases = CASES if cases is None else cases
    ap = argparse.ArgumentParser(description=(doc or __doc__ or "").splitlines()[0])
    ap.add_argument("--case", required=True, help="a case name, comma-separated names, 'all', or 'list'")
    ap.add_argument("--out", default="out_round4")
    ap.add_argument("--small", action="store_true", help="tiny sizes (CPU logic check)")
    a = ap.parse_args()
    SMALL = a.small
    r3.SMALL = a.small
    if on_small is not None:
        on_small(a.small)
    if a.case == "list":
        print("\n".join(cases))
        return
    os.makedirs(a.out, exist_ok=True)
    names = list(cases) if a.case == "all" else a.case.split(",")
    failed = []
    for name in names:
        t0 = time.perf_counter()
        try:
            cases[name](a)
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
