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
    w = workload(loaded("smells.json.gz"))
    assert [f.label for f in w.steps][:1] == ["step"]
    assert (w.steps[0].count, w.steps[0].first, w.steps[0].last) == (2, 1, 2)
    # Whole step on the GPU, README ground truth: 107.24 / 88.08 ms.
    assert w.steps[0].median_ns / 1e6 == pytest.approx(statistics.median([107.24, 88.08]), rel=0.03)
    labels = {f.label for f in w.steps}
    assert "ProfilerStep" in labels
    t = workload(loaded("train_step.json.gz"))
    fam = t.iterations
    assert fam is not None and (fam.label, fam.count, fam.first, fam.last) == ("train_step", 3, 2, 4)
    want = statistics.median([9.76, 9.31, 9.44])  # README ground truth, ms
    assert fam.median_ns / 1e6 == pytest.approx(want, rel=0.05)


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
    assert fam is not None and (fam.label, fam.count) == ("decode_step", 32)
