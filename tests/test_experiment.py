"""Step 6's experiment: the lever of the cause group holding most on-path blank time, fitted to the trace.

Expectations come from how the hand-built traces are built and from raw events of public traces
(graph launches counted in the JSON itself), never from the readings' own output.
"""

from __future__ import annotations

import gzip
import json

import pytest

from gaplens.analysis.levers import CopyKind, fitted_lever, launches, tokenises
from gaplens.analysis.protocol import experiment as ex
from gaplens.analysis.protocol.walk import Walkthrough
from gaplens.analysis.smells import smells
from gaplens.analysis.words import COMM_LEVER, LEVERS, WARMUP_LEVER
from gaplens.analysis.workload import kind
from gaplens.loaders import load
from gaplens.loaders.model import Kind
from tests.conftest import ROOT, public, shared_file
from tests.handbuilt import Builder

US = 1_000
MS = 1_000_000
#: The serving picket-fence lever's advice to capture in a graph: never for a trace that replays graphs.
CAPTURE = "capture the decode step in a CUDA graph"


def fenced_steps(launch_name: str = "cudaLaunchKernel", island_ns: int = 2 * MS) -> Builder:
    """Six ``step N`` ranges, each 200 back-to-back 20 µs launches of 2 µs kernels (18 µs launch-bound
    gaps), and one 2 ms host pause in step 3 (6 ms against 4 ms steps: not warm-up): launches hold
    5 steady steps × 199 × 18 µs = 17.9 ms of blank time, the pause 2 ms, the largest single region."""
    b = Builder()
    t = 1 * MS
    for s in range(6):
        start = t
        for k in range(200):
            corr = b.call(t, t + 20 * US, launch_name)
            b.op(corr, t + 20 * US, t + 22 * US, name=f"k{k}")
            t += 20 * US
            if s == 3 and k == 100:
                b.cpu(t + 2 * US, t + island_ns, "python_bookkeeping")  # CPU work, no CUDA call
                t += island_ns
        t += 30 * US
        b.phase(start, t, f"step {s}")
        t += 10 * US
    return b


def test_the_experiment_goes_to_the_largest_group_not_to_the_gap():
    walk = Walkthrough(fenced_steps().trace())
    g = walk.gap
    assert g is not None and g.cause == "host" and g.dur_ns >= 1.9 * MS  # THE gap: the 2 ms pause
    exp = walk.proposal
    assert exp.group == "launch"
    # 5 steady steps (step 0 is warm-up) × 199 gaps of 18 µs, against the 2 ms pause.
    assert 17.0 * MS < exp.blank_ns < 18.5 * MS and exp.share > 0.8
    assert exp.because.startswith("launch-bound: ") and "5 steady step" in exp.because
    s6 = walk.step(6)
    assert s6.facts[1] == f"lever: {exp.lever}" and "CUDA graph" in exp.lever  # no graph launch in the trace
    assert any(f.startswith("the largest blank region (steps 4 and 5: ") for f in s6.facts)
    assert walk.step(4).view.highlight_ns == (g.start_ns, g.end_ns)  # steps 4 and 5 keep THE gap


def test_a_graph_replaying_trace_is_not_told_to_capture_graphs():
    trace = fenced_steps("cudaGraphLaunch").trace()
    assert launches(trace).graphs == 1200 and launches(trace).kernels == 0
    lever = ex.experiment(trace).lever
    assert lever.startswith("the trace already replays CUDA graphs (1,200 graph launches")
    for f in smells(trace):
        assert "torch.compile, CUDA graphs" not in f.lever and CAPTURE not in f.lever


def _raw_graph_launches(path) -> int:
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    return sum(1 for e in events if e.get("name") in ("cudaGraphLaunch", "hipGraphLaunch"))


@pytest.mark.parametrize("rel", ["public-samples/hta/cuda_graph_launches.json.gz", "samples/decode_graphs.json.gz"])
def test_real_graph_traces_get_no_graph_capture_advice(rel):
    path = shared_file(rel)
    trace = load(path)
    raw = _raw_graph_launches(path)
    assert raw > 0 and launches(trace).graphs == raw
    lever, _why = Walkthrough(trace).experiment()
    assert CAPTURE not in lever and "CUDA graphs, larger batches" not in lever
    assert all(CAPTURE not in f.lever for f in smells(trace))


def test_cuda_graph_launches_training_rank_waits_in_communication():
    """HTA's graph trace: NCCL kernels hold most of its on-path blank time (not the 26 ms gap alone)."""
    trace = load(public("hta/cuda_graph_launches.json.gz"))
    exp = ex.experiment(trace)
    assert exp.lever == COMM_LEVER and exp.group == "comm"


@pytest.mark.parametrize(
    ("name", "key", "says", "never"),
    [
        ("Memcpy HtoD (Pageable -> Device)", "pageable", "pinned memory", "already pinned"),
        ("Memcpy HtoD (Pinned -> Device)", "pinned", "already pinned", "pin_memory()"),
        ("Memcpy DtoH (Device -> Pinned)", "dtoh_pinned", "already land in pinned", "pin_memory()"),
        ("Memcpy DtoD (Device -> Device)", "device", "stay on the device", "pinned"),
    ],
)
def test_copy_lever_names_direction_and_memory_kind(name, key, says, never):
    b = Builder()
    kinds = {"HtoD": Kind.MEMCPY_HTOD, "DtoH": Kind.MEMCPY_DTOH, "DtoD": Kind.MEMCPY_DTOD}
    corr = b.call(0, 50 * US, "cudaMemcpyAsync")
    b.op(corr, 10 * US, 40 * US, kind=kinds[name.split()[1]], name=name, nbytes=1 << 20)
    trace = b.trace()
    lever = fitted_lever(trace, "copy_on_path", "generic")
    src, dst = name.split("(")[1].rstrip(")").split(" -> ")
    assert lever.startswith(f"{name.split()[1]} ({src} → {dst}) copies: ")
    assert says in lever and never not in lever
    assert CopyKind(name.split()[1], src, dst, 1, 1).lever_key == key


def test_tokenisation_advice_needs_tokenise_ranges():
    b = fenced_steps()
    b.phase(0, 10 * US, "prefill")  # a serving word: the workload reads as serving
    trace = b.trace()
    assert kind(trace) == "serving" and not tokenises(trace)
    assert "tokenis" not in fitted_lever(trace, "host_island", "serving")
    b2 = fenced_steps()
    b2.phase(0, 10 * US, "tokenize")
    assert "tokenis" in fitted_lever(b2.trace(), "host_island", "serving")


def test_nvfuser_test_names_are_not_serving():
    """Substrings ('infer', 'serv', 'sampl') made an nvFuser pytest run read as LLM serving."""
    b = fenced_steps()
    for k, name in enumerate(
        [
            "FusionExecutorCache::runFusionWithInputs",
            "inferOutputShapeAndContiguousStrides",
            "preserveStrides",
            "sample_inputs_elementwise",
            "test_pointwise[float32]",
        ]
    ):
        b.phase(k * 10, k * 10 + 5, name)
    assert kind(b.trace()) == "generic"


def test_a_first_call_module_load_is_warm_up_not_a_fence():
    """One 6 ms first launch of a kernel (the runtime loading its module) is set apart."""
    b = Builder()
    b.launch(0, 5 * US, 5 * US, 100 * US, name="k_setup")  # GPU work before it: the window has begun
    t = 100 * US
    for k in range(40):
        call = 6 * MS if k == 0 else 5 * US
        corr = b.call(t, t + call)
        b.op(corr, t + call, t + call + 200 * US, name=f"k{k % 4}")
        t += call + 200 * US + 30 * US  # 30 µs of Python between launches: host
    trace = b.trace()
    exp = ex.experiment(trace)
    assert "one-off first-call launch (6 ms, module load) set apart" in exp.because
    assert exp.group != "launch"
    # The smells say so too: a warm-up host island with the warm-up lever, not a fence to fuse.
    found = smells(trace)
    assert not [f for f in found if f.kind == "picket_fence"]
    warm = [f for f in found if f.numbers.get("warmup")]
    assert len(warm) == 1 and warm[0].dur_ns >= 6 * MS and warm[0].lever == WARMUP_LEVER
    assert "first launch of k0 ran 6 ms (module load)" in warm[0].summary


# ---- sensitivity: the thresholds that decide a verdict, on traces they were not tuned on -----------------


@pytest.mark.parametrize("factor", [0.5, 1.0, 1.5])
def test_device_paced_share_does_not_flip_resnet(monkeypatch, factor):
    """resnet50 (Kineto's 2021 sample): host work holds ~89% of on-path blank time (the DataLoader collating
    each batch: 62 of each 64.7 ms region in the raw events; it read "sync" while the whole ``__next__`` op
    counted as the synchronising op), which fills far more than 5% of its steps; halving or raising the
    device-paced share by half keeps the verdict."""
    trace = load(public("kineto/resnet50_2021_06.pt.trace.json.gz"))
    monkeypatch.setattr(ex, "DEVICE_PACED_BLANK_SHARE", ex.DEVICE_PACED_BLANK_SHARE * factor)
    assert ex.experiment.__wrapped__(trace).group == "host"


@pytest.mark.parametrize(("pct", "group"), [(45.0, "device"), (90.0, "device"), (99.5, "device")])
def test_kernel_bound_pct_on_ns_resolution(monkeypatch, pct, group):
    """HTA's ns_resolution rank computes 98% of its steps with 1.2% on-path blank: device-paced by either
    rule (compute share or the blank-share floor), so the verdict holds across the threshold's range."""
    trace = load(public("hta/ns_resolution.pt.trace.json.gz"))
    monkeypatch.setattr(ex, "KERNEL_BOUND_PCT", pct)
    assert ex.experiment.__wrapped__(trace).group == group


@pytest.mark.parametrize(("share", "device_paced"), [(0.0005, False), (0.05, True), (0.075, True)])
def test_device_paced_share_decides_ns_resolution(monkeypatch, share, device_paced):
    """Documented flip: with KERNEL_BOUND_PCT out of the way, ns_resolution's 1.2% on-path blank time is below
    the 5% share (±50%) and reads device-paced; a share 100× smaller makes its small host gaps the lever."""
    trace = load(public("hta/ns_resolution.pt.trace.json.gz"))
    monkeypatch.setattr(ex, "KERNEL_BOUND_PCT", 101.0)
    monkeypatch.setattr(ex, "DEVICE_PACED_BLANK_SHARE", share)
    assert (ex.experiment.__wrapped__(trace).group == "device") is device_paced


@pytest.mark.parametrize(
    ("min_ns", "set_apart"), [(500_000, True), (1_000_000, True), (1_500_000, True), (7 * MS, False)]
)
def test_first_call_threshold_on_mi250(monkeypatch, min_ns, set_apart):
    """HTA's MI250 trace opens with a 6.5 ms first ``hipLaunchKernel`` (module load); ±50% of the 1 ms threshold
    still sets it apart, a threshold above the call's own length does not."""
    path = public("hta/mi250_rocm.json.gz")
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    longest = max(e.get("dur", 0) for e in events if e.get("name") == "hipLaunchKernel")
    assert 6_000 < longest < 7_000  # µs, from the raw events
    trace = load(path)
    import gaplens.analysis.calls as calls

    monkeypatch.setattr(calls, "FIRST_CALL_MIN_NS", min_ns)  # the one first-call rule, read by causes and here
    got = ex.experiment.__wrapped__(trace)
    assert ("first-call launch" in got.because) is set_apart
    if set_apart:
        assert got.group != "launch"


def test_copy_bound_share_on_a_copy_bound_step(monkeypatch):
    """Steps that spend 80% of their time in a pageable HtoD copy and little in compute: copy-bound at the
    0.5 share and at ±50% of it (0.25, 0.75); the lever names the copy's direction and memory kind."""
    b = Builder()
    t = 0
    for s in range(5):
        start = t
        corr = b.call(t, t + 8 * MS, "cudaMemcpyAsync")
        b.op(
            corr,
            t + 10 * US,
            t + 8 * MS,
            kind=Kind.MEMCPY_HTOD,
            name="Memcpy HtoD (Pageable -> Device)",
            nbytes=1 << 28,
        )
        c2 = b.call(t + 8 * MS, t + 8 * MS + 5 * US)
        b.op(c2, t + 8 * MS + 5 * US, t + 10 * MS, name="gemm")
        t += 10 * MS
        b.phase(start, t, f"step {s}")
        t += 10 * US
    trace = b.trace()
    for factor in (0.5, 1.0, 1.5):
        monkeypatch.setattr(ex, "COPY_BOUND_SHARE", 0.5 * factor)
        got = ex.experiment.__wrapped__(trace)
        assert got.group == "copy" and got.because.startswith("copy-bound: ")
        assert got.lever.startswith("HtoD (Pageable → Device) copies: ") and "pinned memory" in got.lever
    # Above the 80% the steps spend copying the copy-alone rule no longer fires; the copy still holds all the
    # on-path blank time of the steps, so it stays the group, now by that share.
    monkeypatch.setattr(ex, "COPY_BOUND_SHARE", 0.9)
    got = ex.experiment.__wrapped__(trace)
    assert got.group == "copy" and got.because.startswith("copies: 100% of ")


def test_levers_of_serving_smells_still_follow_the_workload():
    """The bundled eager decode loop (no graph launch) reads as serving: its picket fences and the experiment
    name serving's lever, capturing the decode step in a CUDA graph, not training's or the generic one."""
    assert LEVERS["picket_fence"]["serving"].startswith(CAPTURE)
    trace = load(shared_file("samples/decode_eager.json.gz"))
    assert kind(trace) == "serving" and launches(trace).graphs == 0
    fences = [f for f in smells(trace) if f.kind == "picket_fence"]
    assert fences and all(f.lever.startswith(CAPTURE) for f in fences)
    exp = ex.experiment(trace)
    assert exp.group == "launch" and exp.lever.startswith(CAPTURE)


# ---- round-3 recordings (tests/data/round3: never designed on) ------------------------------------------

ROUND3 = ROOT / "tests" / "data" / "round3"


def _raw(name: str) -> list[dict]:
    with gzip.open(ROUND3 / name, "rt") as fh:
        return json.load(fh)["traceEvents"]


def test_copy_bound_recording_gets_the_pageable_copy_lever():
    """copy_bound: CUDA events time copy_in at 84.6 of a 101.4 ms step (meta.json): copy-bound, HtoD pageable."""
    meta = json.loads((ROUND3 / "copy_bound.meta.json").read_text())["summary"]
    assert meta["span_gpu_ms_median"]["copy_in"] > COPY_SHARE_OF_STEP * meta["step_gpu_ms_median"]
    trace = load(ROUND3 / "copy_bound.json.gz")
    exp = ex.experiment(trace)
    assert exp.group == "copy" and exp.because.startswith("copy-bound: ")
    # Step 3 says what filled the busy time: copies, not compute.
    assert any(f.startswith("copy-bound: ") and "HtoD pageable" in f for f in Walkthrough(trace).step(3).facts)
    assert exp.lever.startswith("HtoD (Pageable → Device) copies: ") and "pin_memory" in exp.lever


#: copy_bound's copy share of its step, well above ``COPY_BOUND_SHARE`` (0.5) so the verdict is not marginal.
COPY_SHARE_OF_STEP = 0.75


def test_pinned_copies_are_not_told_to_pin():
    """copy_fixed copies from pinned memory (the writer's names say so): no pinned-memory advice anywhere."""
    raw = _raw("copy_fixed.json.gz")
    htod = [e["name"] for e in raw if e.get("cat") == "gpu_memcpy" and "HtoD" in e.get("name", "")]
    assert htod and all("Pinned" in n for n in htod)
    trace = load(ROUND3 / "copy_fixed.json.gz")
    assert "pin_memory" not in Walkthrough(trace).experiment()[0]
    for f in smells(trace):
        if f.kind == "copy_on_path":
            assert "pin_memory" not in f.lever and "already pinned" in f.lever


@pytest.mark.parametrize(("name", "graphed"), [("graphs_fault.json.gz", False), ("graphs_fixed.json.gz", True)])
def test_graph_advice_follows_the_graph_launches_in_the_file(name, graphed):
    raw = sum(1 for e in _raw(name) if e.get("name") == "cudaGraphLaunch")
    assert (raw > 0) is graphed
    trace = load(ROUND3 / name)
    assert launches(trace).graphs == raw
    lever = ex.experiment(trace).lever
    assert (CAPTURE in lever) is not graphed


def test_hpc_copy_lever_speaks_cuda_not_pytorch():
    trace = load(public("pipit/cloverleaf_nsys2024.5.sqlite"))
    assert kind(trace) == "hpc"
    lever = fitted_lever(trace, "copy_on_path", "hpc")
    assert "cudaMallocHost" in lever and "pin_memory" not in lever and "DataLoader" not in lever


def test_a_device_neither_busy_nor_waiting_on_the_host_is_not_called_busy():
    """HTA's event_sync_multi_stream: streams wait on each other's events; the host is not what the device waits
    for, and the device is not busy either: the lever points at the GPU side, never at "the device is busy"."""
    trace = load(public("hta/event_sync_multi_stream.json.gz"))
    exp = ex.experiment(trace)
    assert exp.group == "device" and exp.lever == ex.GPU_SIDE_LEVER
    assert exp.because.startswith("the host is not what the device waits for")
