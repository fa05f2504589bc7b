"""Held-out pairs for the allocation and run-ahead readings (tests/data/round5, recorded on an H200; README there).

Written after the what-if model and never used to build it: other kinds of the two faults issue 32 names.
Each fault trace is read as a user would (the experiment's lever, the quoted change's prediction) and held
against the fixed twin's CUDA-event step (meta.json). Misses are marked with their numbers (issue 32's
target: within 25%); the lever's counts are checked against the runtime calls counted in the exported trace.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gaplens.analysis.lever_changes import quote
from gaplens.analysis.protocol.experiment import experiment
from gaplens.loaders import load

DATA = Path(__file__).resolve().parent / "data" / "round5"
TARGET = 0.25  # issue 32: the prediction from the fault within 25% of the twin


def _meta(name: str) -> dict:
    return json.loads((DATA / f"{name}.meta.json").read_text())["summary"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "pair",
    [
        "allocinfer",  # device-heavy forward, allocator off -> on: the frees cost the run-ahead
        pytest.param(
            "allocconv",
            marks=pytest.mark.xfail(
                strict=True,
                reason="predicted 12.4 ms against 8.53 ms fixed (+45%): a host-bound CNN step whose other host "
                "ops ran slower with the allocator off (pure host ops 2.76 vs 2.34 µs median, launches 9.6 vs "
                "7.1 µs; README); --remove alloc keeps the host's own work at the trace's speed",
            ),
        ),
        pytest.param(
            "emptycache",
            marks=pytest.mark.xfail(
                strict=True,
                reason="predicted 22.7 ms against 17.63 ms fixed (+29%): host-bound, the host ops 1.55 vs "
                "1.26 µs median beside the frees (README)",
            ),
        ),
    ],
)
def test_remove_alloc_predicts_the_fixed_twin(pair: str) -> None:
    fault = load(str(DATA / f"{pair}_fault.json.gz"))
    ex = experiment(fault)
    assert ex.group == "alloc"
    q = quote(fault, ex.group)
    assert q.command == "--remove alloc" and q.predicted_ns is not None
    truth = _meta(f"{pair}_fixed")["step_gpu_ms_median"]
    assert abs(q.predicted_ns / 1e6 / truth - 1) <= TARGET, (q.predicted_ns / 1e6, truth)


def _per_step(lever: str, name: str) -> float:
    """The ``NAME ×N`` count the lever gives for one call or op."""
    return float(lever.split(f"{name} ×", 1)[1].split(" ")[0].rstrip(",;"))


@pytest.mark.slow
def test_the_lever_names_the_ops_that_allocate() -> None:
    """allocinfer: each of the 16 layers allocates its Linear's output (addmm) and its GELU's (meta: 32
    cudaMalloc per step); the lever names both ops, 16 each per step, and the calls per step."""
    ex = experiment(load(str(DATA / "allocinfer_fault.json.gz")))
    facts = _meta("allocinfer_fault")["trace_per_step_median"]
    layers = json.loads((DATA / "allocinfer_fault.meta.json").read_text())["params"]["layers"]
    assert "PYTORCH_NO_CUDA_MEMORY_CACHING" in ex.lever
    assert _per_step(ex.lever, "cudaMalloc") == pytest.approx(facts["cudaMalloc"], rel=0.02)
    assert "allocated in aten::addmm" in ex.lever
    assert _per_step(ex.lever, "aten::addmm") == pytest.approx(layers)
    assert _per_step(ex.lever, "aten::gelu") == pytest.approx(layers)


@pytest.mark.slow
def test_a_cache_emptied_every_step_gets_its_own_lever() -> None:
    """emptycache: torch.cuda.empty_cache() ends every step, so all its cudaFree calls (41 per step, meta)
    come back to back outside any op; the allocator is on (41 allocations beside 403 launches), so the lever
    is to stop emptying the cache, not to turn the allocator on."""
    ex = experiment(load(str(DATA / "emptycache_fault.json.gz")))
    facts = _meta("emptycache_fault")["trace_per_step_median"]
    assert ex.group == "alloc"
    assert ex.lever.startswith("stop emptying the allocator's cache inside the loop")
    assert "PYTORCH_NO_CUDA_MEMORY_CACHING" not in ex.lever
    assert _per_step(ex.lever, "cudaFree") == pytest.approx(facts["cudaFree"], rel=0.02)


@pytest.mark.slow
def test_code_that_frees_where_tensors_die_is_not_an_emptied_cache() -> None:
    """The allocator-off faults free one tensor at a time between launches inside ops as well as outside:
    released_in_a_burst must not fire on them (nor on a trace with no frees)."""
    from gaplens.analysis.alloc_sites import released_in_a_burst

    assert not released_in_a_burst(load(str(DATA / "allocinfer_fault.json.gz")))
    assert not released_in_a_burst(load(str(DATA / "allocconv_fault.json.gz")))
    assert not released_in_a_burst(load(str(DATA / "emptycache_fixed.json.gz")))
    assert released_in_a_burst(load(str(DATA / "emptycache_fault.json.gz")))


@pytest.mark.slow
def test_a_guard_per_block_on_a_host_bound_forward_is_read_as_launch_bound() -> None:
    """nancheck: 13 syncs per step (meta) on a forward whose device is idle most of the step (1.07 ms of
    kernels in 12.9 ms): each sync returns at once, the host was never ahead, so the sync share stays small
    and step 6 proposes the graph capture, syncs out first, rather than promising a run-ahead gain."""
    fault = load(str(DATA / "nancheck_fault.json.gz"))
    ex = experiment(fault)
    facts = _meta("nancheck_fault")["trace_per_step_median"]
    assert facts["syncs"] == 13 and facts["kernel_us"] < 0.1 * _meta("nancheck_fault")["step_gpu_ms_median"] * 1e3
    assert ex.group == "launch"
    assert "take the synchronisations out" in ex.lever
    assert quote(fault, ex.group).command == "--remove sync --graph step"


@pytest.mark.slow
@pytest.mark.parametrize(
    "folder, pair",
    [("round5", "allocconv"), ("round5", "emptycache"), ("round4", "alloc")],
)
def test_where_the_allocation_prediction_misses_it_is_the_bound_it_says(folder: str, pair: str) -> None:
    """The host-bound allocation faults (allocator off; a cache emptied every step) miss the 25% target because
    the fixed process ran its other host work faster (README). Step 6 says its figure is a bound, and it is
    one: the fixed twin's CUDA-event step is at or below it, and the fault's own step above it."""
    from gaplens.analysis.lever_changes import ALLOCATOR_OFF_NOTE

    base = DATA.parent / folder
    fault = load(str(base / f"{pair}_fault.json.gz"))
    ex = experiment(fault)
    q = quote(fault, ex.group)
    assert ex.group == "alloc" and q.command == "--remove alloc" and q.predicted_ns is not None
    assert ALLOCATOR_OFF_NOTE in q.lines()
    fixed = json.loads((base / f"{pair}_fixed.meta.json").read_text())["summary"]["step_gpu_ms_median"]
    faulted = json.loads((base / f"{pair}_fault.meta.json").read_text())["summary"]["step_gpu_ms_median"]
    assert fixed <= q.predicted_ns / 1e6 < faulted


@pytest.mark.slow
@pytest.mark.parametrize("folder, pair", [("round5", "allocinfer"), ("round4", "pinalloc")])
def test_the_bound_is_said_only_where_memory_churns_on_the_device(folder: str, pair: str) -> None:
    """allocinfer's allocator is off (the note is said, and the prediction holds within 1%: its device work is
    long); pinalloc allocates pinned host buffers with the device allocator on: no note."""
    from gaplens.analysis.lever_changes import ALLOCATOR_OFF_NOTE

    fault = load(str(DATA.parent / folder / f"{pair}_fault.json.gz"))
    q = quote(fault, experiment(fault).group)
    assert (ALLOCATOR_OFF_NOTE in q.lines()) == (pair == "allocinfer")


def test_the_allocation_levers_time_is_the_steady_steps_own() -> None:
    """allocinfer_fault: cudaMalloc + cudaFree take 9.449 ms in the warm-up step 3 and 9.255-9.347 ms in the
    steady steps 4-8 (raw events, summed per ProfilerStep). The lever's time is the steady steps' mean (9.30
    ms), not the trace's total scaled by the steady count (9.33 ms: the warm-up's calls leaked in)."""
    import gzip

    from gaplens.analysis.protocol.experiment import steady as steady_time
    from gaplens.analysis.steps import steps as steps_of
    from gaplens.analysis.units import fmt_ns

    def steady_words(trace) -> str:
        return steady_time(trace, steps_of(trace)).words

    events = json.loads(gzip.decompress((DATA / "allocinfer_fault.json.gz").read_bytes()))["traceEvents"]
    steps = {
        e["name"]: (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        for e in events
        if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
    }
    calls = [e for e in events if e.get("cat") == "cuda_runtime" and e["name"] in ("cudaMalloc", "cudaFree")]
    per = [sum(float(c["dur"]) for c in calls if a <= float(c["ts"]) < b) for a, b in steps.values()]
    kept = [t for name, t in zip(steps, per, strict=True) if name != "ProfilerStep#3"]
    trace = load(str(DATA / "allocinfer_fault.json.gz"))
    assert "warm-up step 3 set apart" in steady_words(trace)  # the steps the readings call steady: 4-8
    ex = experiment(trace)
    assert f"cudaFree ×32, cudaMalloc ×32 per step ({fmt_ns(int(1000 * sum(kept) / len(kept)))})" in ex.lever
