"""Every sentence gaplens says about a reading, in one place: step titles, questions, smells, levers.

The viewer's panel, the report, ``smells`` and ``compare`` print from here, so one question gets
one wording everywhere. Levers depend on the workload actually seen (``analysis.workload.kind``):
an LLM server, a training loop and an MPI code are fixed by different hands.
"""

from __future__ import annotations

#: What "most" and "mostly" mean in every verdict gaplens prints: more than half (of a span's time, of its
#: blank time, of a set of ops). It is the word's meaning, not a tuned threshold: "mostly waiting" said of a
#: device that computed 55% of the time would be false. So one name serves every reading that says
#: "mostly", "most ops" or "X-bound": step 3's busy verdict and "mostly copying", pacing's cpu-bound,
#: comm-bound and copy-bound, ``regions.bound_by``'s "mostly waiting", the experiment's copy-bound step and the
#: clock check's "most ops break the rule". Where a reading says "at least half" or "more than half" is the
#: same boundary, left to each comparison.
MOSTLY = 0.5
#: Compute share of the asked time from which step 3 says "mostly dense" rather than "partly fed": from
#: there the host's side (blank time, whatever its cause) is at most a fifth of the time, so a host-side fix
#: wins back at most 20% and the kernels become a lever of the same size. A judgement, not a measurement;
#: the experiment's choice of the kernels as *the* lever waits for more (``KERNEL_BOUND_PCT``, 90%).
DENSE_SHARE = 0.8

#: The six steps of the reading protocol (DESIGN.md), numbered 1..6.
STEP_TITLES = {
    1: "Name the workload",
    2: "Mark the phases",
    3: "Zoom out: dense or waiting?",
    4: "Zoom in: the largest blank region on the critical path",
    5: "Explain the blank region",
    6: "Propose one experiment",
}
QUESTIONS = {
    1: "Complete what the trace cannot know: model, batch, prompt length, output length.",
    2: "Which ranges are prefill, decode, postprocess, transfer, tokenize? Mark or rename any that are missing.",
    3: "Is the GPU mostly dense or mostly waiting? Which phase matters most?",
    4: "What is on the CPU side during this blank region?",
    5: "In your words: why did the device wait here?",
    6: "Write the one experiment that would win back the most time per step (not only this blank region).",
}

SMELLS = ("picket_fence", "host_island", "copy_on_path", "sync_cliff")
SMELL_NAMES = {
    "picket_fence": "launch picket fence",
    "host_island": "host island",
    "copy_on_path": "copy on the critical path",
    "sync_cliff": "sync cliff",
}
#: The smell a gap's cause points at.
CAUSE_SMELL = {"sync": "sync_cliff", "copy": "copy_on_path", "launch": "picket_fence", "host": "host_island"}
CAUSE_WORDS = {
    "dependency": "the next GPU op was already queued: the device waited on a dependency (an event or stream "
    "wait, another stream's work, a graph edge), not on the host",
    "sync": "the host was blocked in a synchronising call, or ran work a synchronising call had kept it from "
    "doing while the device still had work (its run-ahead was lost)",
    "alloc": "the host was inside memory-management calls (cudaMalloc, cudaFree, pinned-buffer allocations)",
    "copy": "copies ran (or the host sat in copy calls) while the device computed nothing",
    "launch": "the host was busy issuing launch calls",
    # Host time is by definition outside every CUDA call (calls are the other causes); "no CUDA calls" would be
    # false of a region that also holds some (DESIGN.md: a sentence is true of the region it names).
    "host": "the host ran CPU work outside CUDA calls",
    "comm": "the device only communicated: it waited for a peer or the network",
    "profiler": "the profiler's own work (an artefact of tracing)",
    "idle": "nothing was asked of the device (GPU idle)",
    "unknown": "the trace lacks the host side",
}

WORKLOADS = ("serving", "training", "hpc", "generic")

#: Levers per smell, per workload (DESIGN.md § Smells), the most direct first.
LEVERS: dict[str, dict[str, str]] = {
    "picket_fence": {
        "serving": "capture the decode step in a CUDA graph (torch.compile mode='reduce-overhead', or your "
        "server's graph mode) or fuse the small kernels; batch more requests per step",
        "training": "fuse the small kernels (torch.compile, foreach/fused optimizers) or grow the per-launch work "
        "(larger micro-batches, fewer Python-loop iterations)",
        "hpc": "fuse the small kernels or launch fewer, larger ones (CUDA graphs for the time-step loop)",
        "generic": "fuse kernels or batch more work per launch: torch.compile, CUDA graphs, larger batches, "
        "fewer Python-loop iterations",
    },
    "host_island": {
        "serving": "move the CPU work off the request path: tokenise ahead or in another process, cache "
        "tokenisation, stop per-token logging, sample on the device",
        "training": "feed the GPU ahead of time: more DataLoader workers, pin_memory and prefetch, move CPU "
        "augmentation off the step, keep Python bookkeeping out of the loop",
        "hpc": "overlap the host computation with GPU work (streams, asynchronous launches) or move it to the GPU",
        "generic": "move the CPU work off the critical path: preprocess ahead, parallelise it, or run it while the "
        "GPU works",
    },
    "copy_on_path": {
        "serving": "keep tensors on the device between steps; remove the accidental .cpu(), .item() or NumPy "
        "conversion; copy from pinned memory with non_blocking=True",
        "training": "copy batches from pinned memory with non_blocking=True on a side stream and prefetch the "
        "next batch; keep metrics on the device until the end of the step",
        "hpc": "keep data resident on the device; use pinned buffers and cudaMemcpyAsync overlapped with compute",
        "generic": "keep tensors on the device, copy from pinned memory with non_blocking=True and overlap it, "
        "remove an accidental .cpu(), .item() or NumPy conversion",
    },
    "sync_cliff": {
        "serving": "remove the hidden synchronisation: sample on the device, read tokens back once per step "
        "(or less), don't print or branch on CUDA tensors",
        "training": "remove the hidden synchronisation: log loss.item() every N steps, not every step; avoid "
        "nonzero/masked indexing and printing CUDA tensors in the loop",
        "hpc": "replace device-wide synchronisation with stream or event dependencies; check convergence less often",
        "generic": "remove the hidden synchronisation (.item(), printing CUDA tensors, host-side sampling); time "
        "with CUDA events instead of synchronising",
    },
}
#: What to try when the device waits in communication.
COMM_LEVER = (
    "find who arrives late: compare the ranks (gaplens ranks RANK_TRACES…); if no rank straggles, overlap "
    "the collective with compute (DDP bucket sizes, FSDP prefetch) or shrink what it moves"
)
#: What to try when the device is dense: the kernels themselves are the lever.
KERNEL_LEVER = (
    "the device is busy and paces the work: look at the top kernels against the hardware floor (FLOP/s and "
    "bytes/s they reach vs the peak), the next lever is in the kernels, not on the host"
)
#: What to try when the blank region is a warm-up step's one-off cost.
WARMUP_LEVER = (
    "it is a one-off warm-up cost (lazy module loading, cuBLAS/cuDNN autotuning): profile after warm-up "
    "(torch.profiler schedule wait/warmup, nsys --capture-range), or pay it up front (CUDA_MODULE_LOADING=EAGER, "
    "a warm-up request of every shape); then read a steady step"
)
NO_GPU = (
    "the trace holds no GPU activity: nothing ran on a device. Capture the device side too: torch.profiler "
    "with ProfilerActivity.CUDA, or nsys --trace=cuda,nvtx,osrt"
)
COMPARE_HINT = "then record a new trace and run: gaplens compare BEFORE AFTER"


def lever(smell: str, workload: str = "generic") -> str:
    """The lever for a smell in this kind of workload."""
    by_kind = LEVERS[smell]
    return by_kind.get(workload, by_kind["generic"])


def busy_verdict(pct: float) -> str:
    """Plain words for a compute busy share: what the user should take from step 3."""
    if pct < 100 * MOSTLY:
        return f"mostly waiting: {pct:.0f}% busy"
    if pct < 100 * DENSE_SHARE:
        return f"partly fed: {pct:.0f}% busy"
    return f"mostly dense: {pct:.0f}% busy"
