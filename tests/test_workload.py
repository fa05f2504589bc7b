"""Step 1 facts read from the trace: hardware, versions, dtype, shapes, step counts."""

from __future__ import annotations

import statistics

import pytest

from gaplens.analysis.workload import versions, workload
from gaplens.loaders import load
from tests.conftest import loaded, meta, public


def test_decode_eager_facts() -> None:
    w = workload(loaded("decode_eager.json.gz"))
    truth = meta("decode_eager.meta.json")
    assert w.gpu_count == 1
    assert w.gpus[0]["name"] == truth["env"]["gpu_name"] == "NVIDIA H200"
    assert w.gpus[0]["sms"] == truth["env"]["gpu_sm_count"]
    assert w.gpus[0]["memory_bytes"] == truth["env"]["gpu_mem_bytes"]
    assert w.versions["CUDA runtime"] == truth["env"]["cuda_runtime"] == "13.0"
    assert w.versions["CUPTI"] == "13.0.1"
    assert w.framework.startswith("PyTorch")
    assert w.dtype == "bf16"  # the model runs in torch.bfloat16
    steps = w.iterations
    assert steps is not None and steps.label == "decode_step"
    assert (steps.count, steps.first, steps.last) == (truth["decode"]["decode_steps"], 0, 31)
    # Median decode step on the GPU vs CUDA-event ground truth (18.05 ms).
    assert steps.median_ns / 1e6 == pytest.approx(truth["summary"]["decode_step_gpu_ms_median"], rel=0.03)
    assert w.shapes == []  # recorded without record_shapes
    facts = "\n".join(w.facts())
    assert "1 × NVIDIA H200" in facts and "32 × decode_step" in facts


def test_smells_and_train_step_families() -> None:
    # smells.json.gz names two ``step N`` ranges: too few for a family (steps.MIN_MEMBERS), so the
    # profiler's ProfilerStep# is the step. (This test pinned ``step`` ×2 while there were two rules.)
    w = workload(loaded("smells.json.gz"))
    assert [f.label for f in w.steps] == ["ProfilerStep"]
    assert w.steps[0].count == 2 and w.steps[0].warmup == []
    # Each ProfilerStep holds one ``step N``; README ground truth of those by CUDA events: 107.24 / 88.08 ms.
    assert w.steps[0].median_ns / 1e6 == pytest.approx(statistics.median([107.24, 88.08]), rel=0.03)
    # train_step.json.gz: ``iteration N (profiled)`` holds ``train_step N``: the outermost family is the step.
    t = workload(loaded("train_step.json.gz"))
    fam = t.iterations
    assert fam is not None and (fam.label, fam.count, fam.first, fam.last) == ("iteration (profiled)", 3, 2, 4)
    assert fam.warmup == ["iteration 2 (profiled)"]  # the first step is set apart
    truth = meta("train_step.meta.json")
    steady = [s["gpu_ms"] for it in truth["iterations"][3:] for s in it["spans"] if s["name"].startswith("train_step")]
    assert len(steady) == 2  # iterations 3 and 4 (CUDA events), the steady ones
    # The iteration holds its train_step: never shorter, and not much longer.
    assert statistics.median(steady) <= fam.median_ns / 1e6 <= 1.05 * statistics.median(steady)


def test_input_dims_are_read_when_recorded() -> None:
    path = public("kineto/resnet50_2021_06.pt.trace.json.gz")
    w = workload(load(path))
    assert w.gpus[0]["name"] == "Tesla V100-DGXS-32GB"
    assert w.shapes, "record_shapes trace must yield shapes"
    top = w.shapes[0]
    assert top["op"].startswith("aten::conv") and top["dims"].startswith("[[32, ")  # batch 32
    assert all(any(ch.isdigit() for ch in s["dims"]) for s in w.shapes)


def test_version_decoding() -> None:
    v = versions({"cuda_runtime_version": 12090, "cuda_driver_version": 12000, "cupti_version": 28})
    assert v == {"CUDA runtime": "12.9", "CUDA driver": "12.0", "CUPTI": "API 28"}
    assert versions({"torch_version": "2.5.1", "schemaVersion": 1}) == {"torch_version": "2.5.1"}


def test_workload_dict_is_json_ready() -> None:
    import json

    d = workload(loaded("decode_eager.json.gz")).to_dict()
    assert json.loads(json.dumps(d))["steps"][0]["count"] == 32


def test_nsys_short_names_claim_no_dtype() -> None:
    # nsys keeps short kernel names; cuDNN's "f16" in them is no evidence of fp16 (the run is bf16).
    w = workload(loaded("nsys_decode_eager.sqlite.gz"))
    assert w.dtype in ("", "bf16")
    assert w.gpus[0]["name"] == "NVIDIA H200"
    fam = w.iterations
    # The run decodes 32 steps twice (a warm-up pass, then the measured one): 64 ranges, and the
    # warm-up pass (each >= 2x the median) is set apart, so the median is the measured pass's.
    assert fam is not None and (fam.label, fam.count, len(fam.warmup)) == ("decode_step", 64, 32)
    truth = meta("nsys_decode_eager.meta.json")["summary"]["decode_step_gpu_ms_median"]
    assert fam.median_ns / 1e6 == pytest.approx(truth, rel=0.03)
