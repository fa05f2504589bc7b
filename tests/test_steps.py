"""The one step (``analysis.steps``) and phases timed as CUDA events time them (issue 19 items 1, 5).

Expectations come from the recordings' CUDA-event timings (``.meta.json``), from the raw JSON
(``ProfilerStep#`` host spans read straight from the file) and from hand-built traces.
"""

from __future__ import annotations

import ast
import gzip
import json
import statistics
from pathlib import Path

import pytest

from gaplens.analysis.job.ranks import read_ranks
from gaplens.analysis.job.reading import read_job
from gaplens.analysis.phases import PYTORCH_MARKERS, is_library_range, is_pytorch_marker, phases
from gaplens.analysis.step_names import numbered
from gaplens.analysis.steps import MIN_MEMBERS, WARMUP_FACTOR, common_step, steps, warmup_of
from gaplens.analysis.summary import summary
from gaplens.loaders import load
from gaplens.loaders.model import Kind, LaneKind
from tests.conftest import loaded, meta, public
from tests.handbuilt import Builder

DATA = Path(__file__).parent / "data"
ROUND3 = DATA / "round3"
DDP = ("ddp_even", "ddp_straggler", "ddp_allreduce_straggler")


def _raw_profiler_steps_ms(path: Path) -> list[float]:
    """``ProfilerStep#N`` host spans straight from the Kineto JSON, ms."""
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    return [e["dur"] / 1e3 for e in events if e.get("ph") == "X" and e["name"].startswith("ProfilerStep#")]


def _meta(path: Path) -> dict:
    return json.loads(path.read_text())


def _listed(value):
    """round3 meta files keep some lists as Python literals."""
    return ast.literal_eval(value) if isinstance(value, str) else value


# ---- names -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("step 3", ("step", 3)),
        ("decode_step 12", ("decode_step", 12)),
        ("iteration 4", ("iteration", 4)),
        ("train_step 7", ("train_step", 7)),
        ("train_step_7", ("train_step", 7)),
        ("step#3", ("step", 3)),
        ("ProfilerStep#12", ("ProfilerStep", 12)),
        ("iteration 2 (profiled)", ("iteration (profiled)", 2)),
        ("compile2", None),  # not step 2 of compile: the count must be separated from the name
        ("layer3", None),
        ("1F1B", None),
        ("all2all_data", None),
        ("gemm_bf16_8192", ("gemm_bf16", 8192)),  # numbered, but one size repeated is no family (below)
    ],
)
def test_a_count_is_separated_from_the_name(name, want):
    assert numbered(name) == want


def _phases_trace(names_and_spans: list[tuple[str, int, int]]):
    b = Builder()
    for name, s, e in names_and_spans:
        b.phase(s, e, name)
    return b.trace()


def _seq(fmt: str, n: int, start: int = 0, width: int = 1_000_000, t0: int = 1_000) -> list[tuple[str, int, int]]:
    return [(fmt.format(start + k), t0 + k * width, t0 + (k + 1) * width - 1000) for k in range(n)]


def test_compile2_is_not_a_step_family():
    # nvFuser-style names: compile1..compile5 are five names, not five steps.
    st = steps(_phases_trace(_seq("compile{}", 5)))
    assert not st and st.to_json() is None


def test_a_family_needs_three_members():
    assert MIN_MEMBERS == 3
    assert not steps(_phases_trace(_seq("step {}", 2)))
    st = steps(_phases_trace(_seq("step {}", 3)))
    assert (st.label, st.count) == ("step", 3)


def test_counts_must_be_consecutive_and_change():
    gappy = [("step 1", 1_000, 2_000), ("step 2", 3_000, 4_000), ("step 5", 5_000, 6_000)]
    assert not steps(_phases_trace(gappy))
    same = [("gemm_bf16_8192", 1_000 + k * 2_000, 2_000 + k * 2_000) for k in range(6)]
    assert not steps(_phases_trace(same))
    # A counter that restarts (decode_step 0..2 for each of two requests) is one family of six.
    restart = _seq("decode_step {}", 3) + _seq("decode_step {}", 3, t0=10_000_000)
    st = steps(_phases_trace(restart))
    assert (st.label, st.count) == ("decode_step", 6)


def test_the_outermost_family_is_the_step():
    outer = _seq("iteration {}", 4, width=10_000_000)
    inner = [(f"train_step {k}", s + 100, e - 100) for k, (_, s, e) in enumerate(outer)]
    inner += [
        (f"micro {j}", s + 200 + j * 1_000_000, s + 900_000 + j * 1_000_000) for _, s, _ in outer for j in range(5)
    ]
    st = steps(_phases_trace(outer + inner))
    assert st.label == "iteration" and st.count == 4


def _layers(t0: int, n: int = 4, width: int = 100_000) -> list[tuple[str, int, int]]:
    return _seq("layers.{}", n, width=width, t0=t0)


def test_a_family_inside_the_step_is_not_the_step_whatever_its_depth():
    """Per-layer ranges run inside each decode step and also where no step range is open:

        prefill          [layers.0 .. layers.3]                   depth 0 / 1
        decode_step 0..4          [layers.0 .. layers.3] each     depth 0 / 1
        (warm-up)                                    [layers.0 .. layers.3]  depth 0

    By depth alone the layers (28 members, depth 0 like the steps) would outrank the 5 steps; they sit
    inside the steps, so the steps are the step."""
    spans = [("prefill", 1_000, 1_000_000), *_layers(2_000)]
    for k in range(5):
        s = 2_000_000 + k * 1_000_000
        spans += [(f"decode_step {k}", s, s + 900_000), *_layers(s + 1_000)]
    spans += _layers(8_000_000)  # a forward outside every range: top level
    trace = _phases_trace(spans)
    depths = {p.name: p.depth for p in phases(trace)}
    assert depths["decode_step 0"] == 0 and min(p.depth for p in phases(trace) if p.name.startswith("layers")) == 0
    st = steps(trace)
    assert (st.label, st.count) == ("decode_step", 5)
    # Without the steps, the layers are a family like any other: the step.
    alone = steps(_phases_trace([s for s in spans if not s[0].startswith("decode_step")]))
    assert (alone.label, alone.count) == ("layers", 28)


def test_without_a_family_the_profiler_step_is_the_step():
    marks = [(f"ProfilerStep#{k}", 1_000 + k * 1_000_000, (k + 1) * 1_000_000) for k in range(4)]
    st = steps(_phases_trace([*marks, ("step 1", 2_000, 3_000), ("step 2", 1_002_000, 1_003_000)]))
    assert (st.label, st.source, st.count) == ("ProfilerStep", "profiler", 4)


def test_warmup_is_the_first_step_and_any_twice_the_median():
    assert WARMUP_FACTOR == 2.0
    assert warmup_of([500, 10, 11, 10, 12]) == (0,)
    assert warmup_of([10, 10, 11, 25, 10]) == (0, 3)
    assert warmup_of([10, 50]) == ()  # too few to set any apart
    spans = [("step 0", 0, 300_000_000), *_seq("step {}", 5, start=1, width=10_000_000, t0=300_001_000)]
    st = steps(_phases_trace(spans))
    assert st.warmup == ["step 0"] and st.count == 6
    # The 300 ms first step is named and set apart: the median is the steady steps' ~10 ms.
    assert st.median_ns == pytest.approx(10_000_000, rel=0.01)
    assert st.to_json() == {"label": "step", "count": 6, "median_ns": st.median_ns, "warmup": ["step 0"]}


def test_common_step_of_ranks():
    assert common_step(["train_step", "train_step"], [40_000_000, 41_000_000]).median_ns == 40_500_000
    job = common_step(["train_step", "", "train_step"], [40_000_000, 0, 40_000_000])
    assert (job.label, job.ranks) == ("train_step", 2)
    assert not common_step(["", ""], [0, 0])


# ---- PyTorch's own markers ---------------------------------------------------------------------

#: Real names from public traces (HTA's test traces, Kineto's resnet50 sample) and the recordings.
REAL_MARKERS = [
    "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
    "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
    "Optimizer.step#SGD.step",
    "Optimizer.step#Shampoo.step",
    "Optimizer.step#AdamW.step",
    "Optimizer.zero_grad#SGD.zero_grad",
    "DistributedDataParallel.forward",
    "autograd::engine::evaluate_function: AddmmBackward0",
    "## forward ##",
    "## all2all_data:kjt splits ##",
    "## KJTListSplitsAwaitable wait() ##",
    "ProfilerStep#551",
]
USER_RANGES = ["train_step 3", "data_wait", "forward", "backward", "[param|pytorch.model.alex_net|0|0|0]", "saxpy"]


@pytest.mark.parametrize("name", REAL_MARKERS)
def test_pytorch_markers_are_never_phases(name):
    assert is_pytorch_marker(name) and is_library_range(name)


@pytest.mark.parametrize("name", USER_RANGES)
def test_user_ranges_are_phases(name):
    assert not is_library_range(name) and not is_pytorch_marker(name)


def test_every_listed_marker_has_a_real_example():
    import re

    for pattern in PYTORCH_MARKERS:
        if pattern.startswith(("PyTorch Profiler", "Torch-Compiled", "CompiledFunction", "TorchDynamo")):
            continue  # profiler/compiler regions, not in these traces
        assert any(re.fullmatch(pattern, n) for n in REAL_MARKERS), pattern


def test_dataloader_marker_recording_has_no_phases_and_steps_on_profiler_steps():
    path = ROUND3 / "dataloader_marker.json.gz"
    trace = load(path)
    assert phases(trace) == []  # only PyTorch's own markers: rows, not phases
    st = steps(trace)
    truth = _meta(ROUND3 / "dataloader_marker.meta.json")["summary"]
    assert (st.label, st.count) == ("ProfilerStep", len(truth["profiled_steps"]))
    assert st.median_ns / 1e6 == pytest.approx(truth["step_gpu_ms_median"], rel=0.05)


def test_resnet50_dataloader_markers_are_not_phases():
    trace = load(public("kineto/resnet50_2021_06.pt.trace.json.gz"))
    assert not [p for p in phases(trace) if is_pytorch_marker(p.name)]
    st = steps(trace)  # ProfilerStep# is an operator row in this 2021 trace
    raw = _raw_profiler_steps_ms(public("kineto/resnet50_2021_06.pt.trace.json.gz"))
    assert (st.label, st.count) == ("ProfilerStep", len(raw))
    assert st.median_ns / 1e6 == pytest.approx(statistics.median(raw[1:]), rel=0.05)


# ---- phases as CUDA events time them ---------------------------------------------------------


def test_a_range_the_host_spends_waiting_has_its_full_length():
    b = Builder()
    b.phase(1_000, 100_000, "step 1")
    b.phase(1_000, 50_000, "data_wait")  # a sleep: no CUDA call at all
    b.launch(60_000, 62_000, 63_000, 90_000)
    b.phase(55_000, 99_000, "forward")
    found = {p.name: p for p in phases(b.trace())}
    wait, fwd, step = found["data_wait"], found["forward"], found["step 1"]
    assert (wait.start_ns, wait.end_ns) == (1_000, 50_000) and wait.device is None
    # forward's events: at 55 us (nothing queued) and at 99 us (the kernel ended at 90 us).
    assert (fwd.start_ns, fwd.end_ns) == (55_000, 99_000) and fwd.device == 0
    assert step.start_ns <= wait.start_ns and step.end_ns >= fwd.end_ns


def test_a_range_starts_where_its_event_fires_not_at_its_first_launch():
    b = Builder()
    b.launch(1_000, 2_000, 3_000, 40_000)  # earlier work still running when the range opens
    b.phase(10_000, 20_000, "backward")
    b.launch(15_000, 16_000, 40_000, 60_000)  # autograd's first launch lags the range start
    (p,) = [q for q in phases(b.trace()) if q.name == "backward"]
    assert (p.start_ns, p.end_ns) == (40_000, 60_000)  # M(10 us) = 40 us; M(20 us) = 60 us


@pytest.mark.parametrize("name", DDP)
@pytest.mark.parametrize("rank", [0, 1])
def test_ddp_phases_match_cuda_events(name, rank):
    truth: dict[str, list[float]] = {}
    for it in _meta(DATA / f"{name}_rank{rank}.meta.json")["iterations"]:
        if it["tag"] == "profiled":
            for s in it["spans"]:
                truth.setdefault(s["name"].split(" ")[0], []).append(s["gpu_ms"])
    got: dict[str, list[float]] = {}
    for p in phases(load(DATA / f"{name}_rank{rank}.json.gz")):
        got.setdefault(p.name.split(" ")[0], []).append(p.dur_ns / 1e6)
    for fam, ms in truth.items():
        want, have = statistics.median(ms), statistics.median(got[fam])
        # The recorder's events sit a few tens of us inside each range (record_function's entry).
        assert have == pytest.approx(want, rel=0.03, abs=0.15), fam
    assert statistics.median(got["backward"]) == pytest.approx(statistics.median(truth["backward"]), rel=0.03)


def test_nested_steps_recording_phases_match_cuda_events_and_parents_hold_children():
    trace = load(ROUND3 / "nested_steps.json.gz")
    m = _meta(ROUND3 / "nested_steps.meta.json")
    truth = _listed(m["summary"])["span_gpu_ms_median"]
    got: dict[str, list[float]] = {}
    found = phases(trace)
    for p in found:
        got.setdefault(p.name.split(" ")[0], []).append(p.dur_ns / 1e6)
    for fam, want in truth.items():
        assert statistics.median(got[fam]) == pytest.approx(want, rel=0.03, abs=0.15), fam
    assert statistics.median(got["backward"]) == pytest.approx(truth["backward"], rel=0.03)
    _parents_hold_children(found)
    st = steps(trace)
    assert (st.label, st.count) == ("train_step", len(_listed(m["summary"])["profiled_steps"]))
    assert st.median_ns / 1e6 == pytest.approx(_listed(m["summary"])["step_gpu_ms_median"], rel=0.05)


def _parents_hold_children(found) -> int:
    pairs = 0
    for c in found:
        for p in found:
            if p is c or p.pid != c.pid or p.depth >= c.depth or p.lane != c.lane:
                continue
            if p.host_start_ns <= c.host_start_ns and c.host_end_ns <= p.host_end_ns:
                pairs += 1
                assert p.start_ns <= c.start_ns and c.end_ns <= p.end_ns, (p.name, c.name)
                assert p.dur_ns >= c.dur_ns
    return pairs


@pytest.mark.parametrize(
    "name", [f"{n}_rank{r}.json.gz" for n in DDP for r in (0, 1)] + ["nsys_ddp_straggler.sqlite.gz"]
)
def test_parent_is_never_shorter_than_its_child(name):
    assert _parents_hold_children(phases(load(DATA / name))) >= 12  # 4 steps x at least 3 children


def test_phases_of_different_processes_never_nest():
    found = phases(load(DATA / "nsys_ddp_straggler.sqlite.gz"))
    pids = {p.pid for p in found}
    assert len(pids) == 2
    for pid in pids:
        mine = [p for p in found if p.pid == pid]
        assert min(p.depth for p in mine) == 0  # each process's outermost range is its own top level


def test_a_process_without_cuda_calls_has_no_gpu_span():
    b = Builder()
    b.launch(1_000, 2_000, 3_000, 50_000)
    b.cols.add((LaneKind.ANNOTATIONS, 200, 200), 1_000, 60_000, "request 1", Kind.ANNOTATION)
    found = {p.pid: p for p in phases(b.trace())}
    front = found[200]
    assert front.device is None and front.lane == -1
    assert (front.start_ns, front.end_ns) == (front.host_start_ns, front.host_end_ns) == (1_000, 60_000)


# ---- the step on real traces --------------------------------------------------------------------


@pytest.mark.parametrize("name", DDP)
def test_ddp_ranks_step_is_their_profiler_step(name):
    readings = []
    for rank in (0, 1):
        path = DATA / f"{name}_rank{rank}.json.gz"
        raw = statistics.median(_raw_profiler_steps_ms(path))
        trace = load(path)
        st = steps(trace)
        assert st.label == "train_step" and st.count == 4 and st.warmup == ["train_step 4"]
        assert st.median_ns / 1e6 == pytest.approx(raw, rel=0.05)
        s = summary(trace, top=1)["step"]
        assert s == st.to_json()
        readings += read_ranks(trace, rank)
    job = read_job(readings)
    raws = [statistics.median(_raw_profiler_steps_ms(DATA / f"{name}_rank{r}.json.gz")) for r in (0, 1)]
    assert job.step_ns / 1e6 == pytest.approx(statistics.median(raws), rel=0.05)
    for s in (job.straggler, job.candidate):
        if s is not None:
            assert s.wait_imposed_per_step_ns <= job.step_ns  # a share of a step is <= 100%


def test_nsys_job_sets_the_warmup_step_apart():
    trace = load(DATA / "nsys_ddp_straggler.sqlite.gz")
    s = summary(trace, top=1)
    by_pid = s["step_by_process"]
    assert len(by_pid) == 2
    for rank in (0, 1):
        its = _meta(DATA / f"nsys_ddp_straggler_rank{rank}.meta.json")["iterations"]
        step_ms = [sp["gpu_ms"] for it in its for sp in it["spans"] if sp["name"].startswith("train_step")]
        assert step_ms[0] > WARMUP_FACTOR * statistics.median(step_ms[1:])  # the 572 ms first step
    for st in by_pid.values():
        assert st["warmup"] == ["train_step 0"] and st["count"] == 8
        assert st["median_ns"] / 1e6 == pytest.approx(statistics.median(step_ms[1:]), rel=0.05)
    job = read_job(read_ranks(trace))
    strag = job.straggler
    assert strag is not None and strag.rank == 1
    assert strag.wait_imposed_per_step_ns <= job.step_ns
    # What the straggler did per step before arriving, against its data_wait range (CUDA events):
    # the 572 ms warm-up step is not in it.
    its = _meta(DATA / "nsys_ddp_straggler_rank1.meta.json")["iterations"]
    wait = statistics.median(sp["gpu_ms"] for it in its for sp in it["spans"] if sp["name"] == "data_wait")
    assert strag.detail["phase"] == "data_wait"
    assert strag.detail["own_ns"] / 1e6 == pytest.approx(wait, rel=0.1)


def test_decode_sample_step_matches_cuda_events():
    trace = loaded("decode_eager.json.gz")
    truth = meta("decode_eager.meta.json")
    st = steps(trace)
    assert (st.label, st.count) == ("decode_step", truth["decode"]["decode_steps"])
    assert st.median_ns / 1e6 == pytest.approx(truth["summary"]["decode_step_gpu_ms_median"], rel=0.03)


def test_the_step_of_a_trace_is_the_gpu_launching_process():
    """A front end (no CUDA calls) with ``request N`` and a worker with ``decode_step N``: each process has
    its steps; the trace's step is the worker's, the process that launches the GPU work."""
    b = Builder()
    front = (LaneKind.ANNOTATIONS, 200, 200)
    for k in range(3):
        b.cols.add(front, k * 10_000_000, k * 10_000_000 + 9_000_000, f"request {k}", Kind.ANNOTATION)
        t = k * 10_000_000 + 1_000_000
        b.phase(t, t + 5_000_000, f"decode_step {k}")
        b.launch(t + 1_000, t + 2_000, t + 3_000, t + 4_000_000)
    trace = b.trace()
    st = steps(trace)
    assert (st.label, st.pid, st.count) == ("decode_step", 100, 3)
    assert steps(trace, 200).label == "request"
    assert summary(trace, top=1)["step_by_process"].keys() == {"100", "200"}
