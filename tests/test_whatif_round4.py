"""Step 6's quote on round-4 fault/fix pairs (tests/data/round4, recorded on an H200; README there).

Each fault trace is read as a user would: the experiment picks its lever, the lever's change
(``analysis.lever_changes``) predicts the step, and the prediction is held against the fixed twin's own
step (the step owner's median on the fixed trace, the same definition on both sides) and against the
CUDA-event step time the recorder measured (meta.json). Targets (issue 29/32): 15%, 25% for a CUDA graph
capture. None of these pairs was used to build the model; misses are marked with their numbers.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gaplens.analysis.lever_changes import quote
from gaplens.analysis.protocol.experiment import experiment
from gaplens.analysis.whatif import whatif
from gaplens.loaders import load

DATA = Path(__file__).resolve().parent / "data" / "round4"
TARGET = 0.15
GRAPH_TARGET = 0.25


def _fixed_ms(pair: str) -> tuple[float, float]:
    """(the step owner's median on the fixed trace, the recorder's CUDA-event median) in ms."""
    fixed = whatif(load(str(DATA / f"{pair}_fixed.json.gz")), [])["steps"]["measured_median_ns"] / 1e6
    truth = json.loads((DATA / f"{pair}_fixed.meta.json").read_text())["summary"]["step_gpu_ms_median"]
    return fixed, truth


def _quoted(pair: str) -> tuple[str, str, float]:
    """(the experiment's group, the quoted change, its predicted step in ms) for the fault trace."""
    fault = load(str(DATA / f"{pair}_fault.json.gz"))
    ex = experiment(fault)
    q = quote(fault, ex.group)
    assert q.predicted_ns is not None, (pair, ex.group, q.why_not)
    return ex.group, q.command, q.predicted_ns / 1e6


@pytest.mark.slow
@pytest.mark.parametrize(
    ("pair", "group", "command", "target"),
    [
        ("pinalloc", "alloc", "--remove alloc", TARGET),  # a pinned buffer allocated every step -> reused
        ("loader2", "host", "--remove host", TARGET),  # DataLoader 2 -> 12 workers
        ("mlpgraph", "launch", "--graph step", GRAPH_TARGET),  # eager MLP training step -> one CUDA graph
        ("prefetch", "copy", "--remove copy", TARGET),  # pinned copy on the compute stream -> prefetched
        ("pageable", "copy", "--scale", TARGET),  # pageable 512 MiB copy -> pinned
        ("syncloop", "sync", "--remove sync", TARGET),  # a sync per layer -> none: the run-ahead it cost
        ("postproc", "host", "--remove host", TARGET),  # compiled forward + 3 ms postprocess -> removed
        pytest.param(
            "alloc",
            "alloc",
            "--remove alloc",
            TARGET,
            marks=pytest.mark.xfail(
                strict=True,
                reason="predicted 24.4 ms against 14.4 ms fixed (+70%): with the caching allocator off each op "
                "costs more host time than its cudaMalloc/cudaFree calls (15.2 + 12.7 ms of 52.8 per step); "
                "what-if takes only the calls off",
            ),
        ),
        pytest.param(
            "itemlog",
            "sync",
            "--remove sync",
            TARGET,
            marks=pytest.mark.xfail(
                strict=True,
                reason="the recorded fix removed the 2 ms of logging with the .item(); --remove sync keeps the "
                "host's own work (4.7 ms per step, above the device's 3.5): predicted 4.76 against 3.54 ms",
            ),
        ),
    ],
)
def test_step_6_quotes_the_fixed_step(pair: str, group: str, command: str, target: float) -> None:
    got_group, got_command, predicted = _quoted(pair)
    assert got_group == group
    assert got_command.startswith(command)
    fixed, truth = _fixed_ms(pair)
    assert abs(fixed / truth - 1) <= 0.1  # the step owner reads the fixed trace as its CUDA events did
    assert abs(predicted / fixed - 1) <= target, f"{pair}: {predicted:.2f} ms predicted, {fixed:.2f} ms fixed"


@pytest.mark.slow
def test_removing_the_sync_alone_predicts_its_twin() -> None:
    """itemkeep: the same .item() + 2 ms logging step, fixed by dropping the .item() only (the logging stays;
    recorded on another H200 host, both sides in one call). --remove sync models exactly that fix."""
    from gaplens.analysis.whatif import Change

    fault = load(str(DATA / "itemkeep_fault.json.gz"))
    predicted = whatif(fault, [Change("remove", "sync")])["steps"]["predicted_median_ns"] / 1e6
    fixed, truth = _fixed_ms("itemkeep")
    assert abs(fixed / truth - 1) <= 0.1
    assert abs(predicted / fixed - 1) <= TARGET, f"{predicted:.2f} ms predicted, {fixed:.2f} ms fixed"


@pytest.mark.slow
def test_allocation_churn_reads_as_alloc_with_its_calls_per_step() -> None:
    """371 cudaMalloc and 370 cudaFree per step (meta.json, from the trace) read as cause alloc, and the
    lever names the caching allocator and the calls per step."""
    fault = load(str(DATA / "alloc_fault.json.gz"))
    ex = experiment(fault)
    assert ex.group == "alloc" and ex.share > 0.5
    assert "PYTORCH_NO_CUDA_MEMORY_CACHING" in ex.lever
    meta = json.loads((DATA / "alloc_fault.meta.json").read_text())["summary"]["trace_per_step_median"]
    per_step = {name: float(part.split(" ×")[1].split(" ")[0].rstrip(",")) for name, part in _calls(ex.lever)}
    assert per_step["cudaMalloc"] == pytest.approx(meta["cudaMalloc"], rel=0.02)
    assert per_step["cudaFree"] == pytest.approx(meta["cudaFree"], rel=0.02)


@pytest.mark.slow
def test_a_sync_per_layer_reads_as_sync_with_the_loop_lever() -> None:
    """33 device synchronisations per step (meta.json) each cost the launches after them their run-ahead:
    the group is sync, the lever is the loop's and names the call and its count per step."""
    fault = load(str(DATA / "syncloop_fault.json.gz"))
    ex = experiment(fault)
    assert ex.group == "sync" and ex.share > 0.5
    assert ex.lever.startswith("remove the synchronisation inside the loop")
    syncs = json.loads((DATA / "syncloop_fault.meta.json").read_text())["summary"]["trace_per_step_median"]["syncs"]
    assert f"cudaDeviceSynchronize ×{syncs:.3g} per step" in ex.lever


def _calls(lever: str) -> list[tuple[str, str]]:
    tail = lever.rsplit(": ", 1)[1]
    return [(p.split(" ×")[0].strip(), p) for p in tail.split(", ") if " ×" in p]


@pytest.mark.slow
def test_a_step_that_synchronises_per_layer_cannot_be_graphed_and_says_why() -> None:
    """syncloop's step synchronises 33 times between its launches: --graph step refuses, naming the call and
    the lever that comes first; step 6 (the sync group) never quotes a graph."""
    from gaplens.analysis.whatif import Change

    fault = load(str(DATA / "syncloop_fault.json.gz"))
    with pytest.raises(ValueError, match=r"cudaDeviceSynchronize, (\d+) per instance.*--remove sync") as refused:
        whatif(fault, [Change("graph", "step")])
    import re

    waiting = int(re.search(r"cudaDeviceSynchronize, (\d+) per instance", str(refused.value)).group(1))
    assert 2 < waiting <= 33  # the syncs that waited, of the 33 per step (meta.json): far past one read-back
    assert not any("--graph" in line for line in experiment(fault).facts)


@pytest.mark.slow
def test_the_eager_decode_sample_is_predicted_as_its_graphed_recording() -> None:
    """Held out: the shared eager decode sample and the same workload graphed (decode_graphs, recorded by
    tracegen/workloads.py, never used to build the model). Its steps synchronise ~5 times, so step 6 quotes
    --remove sync --graph step; the graphed recording's CUDA-event decode step is the truth (25% target)."""
    from tests.conftest import sample

    fault = load(str(sample("decode_eager.json.gz")))
    ex = experiment(fault)
    q = quote(fault, ex.group)
    assert q.command == "--remove sync --graph step"
    assert "take the synchronisations out" in ex.lever
    truth = json.loads(sample("decode_graphs.meta.json").read_text())["summary"]["decode_step_gpu_ms_median"]
    assert abs(q.predicted_ns / 1e6 / truth - 1) <= GRAPH_TARGET, (q.predicted_ns / 1e6, truth)
