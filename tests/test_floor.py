"""The hardware floor (issue 20): op sizes by the DESIGN conventions, the GPU table, floors on real traces.

Expected FLOPs and bytes are worked out here from the shapes by hand (GEMM 2·M·N·K, attention
4·B·H·Sq·Sk·D, ...), and trace-level numbers from the raw JSON events, never from gaplens's output.
"""

from __future__ import annotations

import gzip
import json
import math
import re
from pathlib import Path

import pytest

from gaplens.analysis.floor.floors import floors
from gaplens.analysis.floor.gpuspecs import BUILTIN, SpecError, match_spec
from gaplens.analysis.floor.lever import floor_lever
from gaplens.analysis.floor.opsize import has_formula, size_op
from gaplens.analysis.floor.reading import floor_json
from gaplens.analysis.floor.windows import op_rows
from gaplens.loaders import load
from gaplens.store.gpuspecs import load_user_specs
from gaplens.tui.cli import main
from tests.conftest import public

DATA = Path(__file__).parent / "data"
BF, F32, F8 = "c10::BFloat16", "float", "c10::Float8_e4m3fn"


# ---- op sizes -----------------------------------------------------------------------------------


def test_gemm_family():
    s = size_op("aten::mm", [[64, 2048], [2048, 4096]], [BF, BF], ["", ""])
    assert s.flops == 2 * 64 * 4096 * 2048
    assert s.bytes == 2 * (64 * 2048 + 2048 * 4096 + 64 * 4096)
    assert (s.dtype, s.formula) == ("bf16", "gemm")
    s = size_op("aten::addmm", [[4096], [64, 2048], [2048, 4096], [], []], [BF, BF, BF, "Scalar", "Scalar"])
    assert s.flops == 2 * 64 * 4096 * 2048  # the bias add is not counted
    assert s.bytes == 2 * (4096 + 64 * 2048 + 2048 * 4096 + 64 * 4096)
    s = size_op("aten::bmm", [[8, 128, 64], [8, 64, 256]], [F32, F32])
    assert s.flops == 2 * 8 * 128 * 256 * 64 and s.dtype == "fp32"
    assert s.bytes == 4 * (8 * 128 * 64 + 8 * 64 * 256 + 8 * 128 * 256)
    s = size_op("aten::baddbmm", [[8, 128, 256], [8, 128, 64], [8, 64, 256], [], []], [BF, BF, BF, "Scalar", "Scalar"])
    assert s.flops == 2 * 8 * 128 * 256 * 64
    s = size_op("aten::linear", [[2, 256, 1024], [3072, 1024], [3072]], [BF, BF, BF])
    assert s.flops == 2 * 512 * 3072 * 1024
    s = size_op("aten::matmul", [[4, 1, 128, 64], [16, 64, 32]], [BF, BF])  # batch dims broadcast to 4x16
    assert s.flops == 2 * 64 * 128 * 32 * 64


def test_scaled_mm_fp8_with_out_dtype():
    dims = [[128, 4096], [4096, 8192], [], [], [], [], []]
    types = [F8, F8, F32, F32, "", "", "Scalar"]
    s = size_op("aten::_scaled_mm", dims, types, ["", "", "", "", "", "", "15"])  # 15 = bfloat16
    assert s.flops == 2 * 128 * 8192 * 4096 and s.dtype == "fp8"
    assert s.bytes == 128 * 4096 + 4096 * 8192 + 2 * 4 + 2 * 128 * 8192  # fp8 inputs, fp32 scales, bf16 output


def test_attention_forward_backward_causal():
    b, h, sq, sk, d = 2, 16, 256, 256, 64
    dims = [[b, h, sq, d]] * 3 + [[]] * 10
    types = [BF] * 3 + [""] * 10
    conc = [""] * 13
    conc[10] = "True"  # _cudnn_attention_forward's is_causal
    s = size_op("aten::_cudnn_attention_forward", dims, types, conc)
    assert s.flops == 4 * b * h * sq * sk * d / 2
    assert s.bytes == 2 * 4 * b * h * sq * d  # q, k, v read, out written
    conc[10] = "False"
    assert size_op("aten::_cudnn_attention_forward", dims, types, conc).flops == 4 * b * h * sq * sk * d
    # flash's own entry point: [B, S, H, D]; GQA: K/V with fewer heads; is_causal at 8
    fdims = [[b, sq, h, d], [b, sk, 4, d], [b, sk, 4, d], [], [], [], [], [], []]
    fconc = ["", "", "", "", "", "", "", "0.", "True"]
    s = size_op("aten::_flash_attention_forward", fdims, [BF, BF, BF, *[""] * 6], fconc)
    assert s.flops == 4 * b * h * sq * sk * d / 2
    bdims = [[b, sq, h, d], [b, sq, h, d], [b, sk, h, d], [b, sk, h, d], [b, sq, h, d], [b, h, sq]] + [[]] * 6
    bconc = [""] * 11 + ["False"]
    s = size_op("aten::_flash_attention_backward", bdims, [BF] * 5 + [F32] + [""] * 6, bconc)
    assert s.flops == 2.5 * 4 * b * h * sq * sk * d
    s = size_op(
        "flash_attn::_flash_attn_forward",
        fdims[:3] + [[]] * 3,
        [BF] * 3 + ["Scalar"] * 3,
        ["", "", "", "0.", "", "True"],
    )
    assert s.flops == 4 * b * h * sq * sk * d / 2
    # a recorded but unreadable causal flag: not sized, never guessed
    conc[10] = "maybe"
    assert size_op("aten::_cudnn_attention_forward", dims, types, conc) is None


def test_conv_forward_and_backward():
    # 3x3, stride 2, padding 1: 56 -> 28
    dims = [[8, 64, 56, 56], [128, 64, 3, 3], [], [], [], [], []]
    conc = ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "1"]
    s = size_op("aten::conv2d", dims, [BF, BF, "", "ScalarList", "ScalarList", "ScalarList", "Scalar"], conc)
    assert s.flops == 2 * 8 * 128 * 28 * 28 * 64 * 9
    assert s.bytes == 2 * (8 * 64 * 56 * 56 + 128 * 64 * 9 + 8 * 128 * 28 * 28)
    bd = [[8, 128, 28, 28], [8, 64, 56, 56], [128, 64, 3, 3], [], [], [], [], [], [], [], []]
    bc = ["", "", "", "[128]", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1", "[True, True, False]"]
    s = size_op("aten::convolution_backward", bd, [BF, BF, BF] + ["ScalarList"] * 8, bc)
    assert s.flops == 2 * (2 * 8 * 128 * 28 * 28 * 64 * 9)  # grad input and grad weight
    bc[-1] = "[False, True, False]"
    assert size_op("aten::convolution_backward", bd, [BF, BF, BF] + ["ScalarList"] * 8, bc).flops == (
        2 * 8 * 128 * 28 * 28 * 64 * 9
    )


def test_memory_bound_ops_bytes():
    n = 4096 * 1024
    s = size_op("aten::add", [[4096, 1024], [1024], []], [BF, BF, "Scalar"], ["", "", "1"])
    assert (s.flops, s.bytes) == (0.0, 2 * (n + 1024 + n))  # broadcast output
    s = size_op("aten::mul_", [[4096, 1024], [4096, 1024]], [F32, F32])
    assert s.bytes == 4 * 3 * n  # both read, the first written
    s = size_op("aten::mul", [[512, 64], [], [512, 64]], [F32, "double", F32])  # out= tensor: written only
    assert s.bytes == 4 * 512 * 64 + 8 + 4 * 512 * 64
    s = size_op("aten::mul", [[64, 2048], []], [BF, "double"])  # a 0-dim CPU scalar does not promote
    assert s.dtype == "bf16" and s.bytes == 2 * 64 * 2048 + 8 + 2 * 64 * 2048
    s = size_op("aten::gt", [[100, 10], [100, 10]], [F32, F32])
    assert s.bytes == 4 * 2000 + 1000  # bool output
    s = size_op("aten::sum", [[32, 1000], [], []], [F32, "ScalarList", "Scalar"], ["", "[1]", "False"])
    assert s.bytes == 4 * (32 * 1000 + 32)
    s = size_op("aten::argmax", [[2, 32000], [], []], [BF, "Scalar", "Scalar"], ["", "-1", "False"])
    assert s.bytes == 2 * 2 * 32000 + 8 * 2
    s = size_op("aten::native_layer_norm", [[2, 256, 1024], [], [1024], [1024], []],
                [BF, "ScalarList", BF, BF, "Scalar"], ["", "[1024]", "", "", "1e-05"])  # fmt: skip
    assert s.bytes == 2 * (2 * 512 * 1024 + 2 * 1024) + 2 * 512 * 4  # + mean and rstd (fp32 per row)
    s = size_op(
        "aten::embedding", [[32000, 1024], [2, 256], [], [], []], [BF, "long int", "Scalar", "Scalar", "Scalar"]
    )
    assert s.bytes == 8 * 512 + 2 * (512 * 1024 * 2)  # indices + gathered rows read + output written
    s = size_op("aten::gather", [[32000, 1024], [], [512, 1024], [], []], [BF, "Scalar", "long int", "Scalar", ""])
    assert s.bytes == 8 * 512 * 1024 + 2 * (2 * 512 * 1024)  # index + gathered elements read + output written
    strides = [[1024, 1], [], [1, 0], [], []]  # embedding's expanded index: stored once per row
    s = size_op("aten::gather", [[32000, 1024], [], [512, 1024], [], []], [BF, "Scalar", "long int"], (), strides)
    assert s.bytes == 8 * 512 + 2 * (2 * 512 * 1024)
    s = size_op("aten::copy_", [[1024, 1024], [1024, 1024], []], [BF, F32, "Scalar"], ["", "", "False"])
    assert s.bytes == 2 * 1024 * 1024 + 4 * 1024 * 1024
    s = size_op("aten::_to_copy", [[1024, 1024], [], [], [], [], [], []], [F32, "Scalar"] + [""] * 5, ["", "15"])
    assert s.bytes == 4 * 1024 * 1024 + 2 * 1024 * 1024


def test_unknown_ops_are_unsized():
    assert size_op("aten::nonzero", [[100]], [F32]) is None
    assert size_op("my_lib::fused_thing", [[10, 10]], [BF]) is None
    assert not has_formula("aten::nll_loss_forward")
    assert size_op("aten::mm", [[64, 2048], [2048]], [BF, BF]) is None  # malformed: not a guess


# ---- the GPU table ------------------------------------------------------------------------------

H200 = {"numSms": 132, "totalGlobalMem": 150109880320}


def test_table_covers_the_issue_list_with_sources():
    keys = {s.key for s in BUILTIN}
    wanted = "a100-sxm4-40gb a100-sxm4-80gb a100-pcie-40gb a100-pcie-80gb h100-sxm h100-pcie h100-nvl h200-sxm h20"
    for want in [*wanted.split(), "b200", "gb200", "l4", "l40s", "mi250x-gcd", "mi300x", "mi325x"]:
        assert want in keys
    for s in BUILTIN:
        assert s.source and s.mem_bytes_per_s > 0 and s.link_bytes_per_s > 0
        assert "bf16" in s.peak_flops or "fp16" in s.peak_flops


def test_dense_peaks_are_half_the_sparse_sheet_figures():
    by = {s.key: s for s in BUILTIN}
    assert by["h100-sxm"].peak_flops["bf16"] == pytest.approx(1979e12 / 2, rel=1e-3)  # sheet: 1,979* (sparse)
    assert by["h100-sxm"].peak_flops["fp8"] == pytest.approx(3958e12 / 2, rel=1e-3)
    assert by["h200-sxm"].mem_bytes_per_s == 4.8e12
    assert by["a100-sxm4-80gb"].peak_flops["tf32"] == 156e12  # sheet: 312* sparse
    assert by["b200"].peak_flops["fp4"] == pytest.approx(18e15 / 2)  # HGX B200: 18 PF sparse per GPU
    assert by["l40s"].peak_flops["fp8"] == pytest.approx(1466e12 / 2, rel=1e-3)
    assert by["mi300x"].peak_flops["bf16"] == pytest.approx(1307.4e12)


def test_match_by_name_and_properties():
    assert match_spec("NVIDIA H200", H200).spec.key == "h200-sxm"
    assert match_spec("NVIDIA H200 NVL", H200).spec.key == "h200-nvl"
    assert match_spec("NVIDIA H100 80GB HBM3", {"numSms": 132}).spec.key == "h100-sxm"
    assert match_spec("NVIDIA H100 PCIe", {"numSms": 114}).spec.key == "h100-pcie"
    assert match_spec("NVIDIA A100-SXM4-40GB", {"totalGlobalMem": 42505273344}).spec.key == "a100-sxm4-40gb"
    assert match_spec("NVIDIA A100-SXM4-80GB", {"totalGlobalMem": 85198045184}).spec.key == "a100-sxm4-80gb"
    assert match_spec("NVIDIA A100 80GB PCIe", {"totalGlobalMem": 85198045184}).spec.key == "a100-pcie-80gb"
    assert match_spec("AMD Instinct MI250X", {"numSms": 110}).spec.key == "mi250x-gcd"
    m = match_spec("Mystery Accelerator 9000", {})
    assert m.spec is None and "no row" in m.why


def test_user_spec_file_overrides_and_adds(tmp_path):
    f = tmp_path / "gpus.json"
    f.write_text(json.dumps({"gpus": [
        {"key": "h200-sxm", "name": "my H200", "match": "H200", "peak_tflops": {"bf16": 500}, "mem_gb_per_s": 4000,
         "link_gb_per_s": 50, "source": "measured"},
        {"name": "Mystery Accelerator 9000", "peak_tflops": {"bf16": 100}, "mem_gb_per_s": 1000},
    ]}))  # fmt: skip
    user = load_user_specs(f)
    m = match_spec("NVIDIA H200", H200, user)
    assert m.spec.user and m.spec.peak_flops["bf16"] == 500e12 and m.spec.mem_bytes_per_s == 4000e9
    assert match_spec("Mystery Accelerator 9000", {}, user).spec.peak_flops["bf16"] == 100e12
    f.write_text(json.dumps([{"name": "x", "peak_tflops": {"bf17": 1}, "mem_gb_per_s": 1}]))
    with pytest.raises(SpecError):
        load_user_specs(f)


def test_default_spec_location(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    (tmp_path / "gaplens").mkdir()
    (tmp_path / "gaplens" / "gpus.json").write_text(json.dumps([{"name": "Z1", "mem_gb_per_s": 10}]))
    assert [s.name for s in load_user_specs()] == ["Z1"]


def test_analysis_gets_user_rows_only_through_the_installed_reader(tmp_path, monkeypatch):
    """The floor reads no file itself (issue 28): without a reader there are no user rows, and a named file
    is an error, not silently the built-in table; ``store.install`` hands it the store's reader."""
    from gaplens import store
    from gaplens.analysis.floor import gpuspecs

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    (tmp_path / "gaplens").mkdir()
    (tmp_path / "gaplens" / "gpus.json").write_text(json.dumps([{"name": "Z1", "mem_gb_per_s": 10}]))
    monkeypatch.setattr(gpuspecs, "_USER_ROWS", None)
    assert gpuspecs.user_specs() == []
    with pytest.raises(SpecError, match="no reader installed"):
        gpuspecs.user_specs(str(tmp_path / "gaplens" / "gpus.json"))
    store.install()
    assert [s.name for s in gpuspecs.user_specs()] == ["Z1"]


def test_a_user_row_from_the_default_file_reaches_the_floor(tmp_path, monkeypatch):
    """shapes_stack records an H200 (its deviceProperties name); a default-location row that replaces
    h200-sxm with half the bf16 peak is the row the floor uses, through the store's reader."""
    path = DATA / "shapes_stack.json.gz"
    with gzip.open(path) as fh:
        name = json.load(fh)["deviceProperties"][0]["name"]
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    (tmp_path / "gaplens").mkdir()
    row = {"key": "h200-sxm", "name": name, "match": "H200", "peak_tflops": {"bf16": 400}, "mem_gb_per_s": 4000}
    (tmp_path / "gaplens" / "gpus.json").write_text(json.dumps([row]))
    (m,) = floors(load(str(path))).matches.values()
    assert m.spec is not None and m.spec.user and m.spec.peak_flops["bf16"] == 400e12
    assert m.spec.mem_bytes_per_s == 4000e9


# ---- floors on a recorded trace -----------------------------------------------------------------


def _raw(path: Path) -> list[dict]:
    return json.load(gzip.open(path))["traceEvents"]


def test_shapes_stack_flops_bytes_and_floor_from_the_raw_events():
    """shapes_stack (H200, bf16): 48 mm of 64x2048 by 2048x2048. FLOPs and kernel time from the raw JSON;
    the floor from the table's H200 row by hand."""
    path = DATA / "shapes_stack.json.gz"
    ev = _raw(path)
    ext = {e["args"]["External id"]: e for e in ev if e.get("cat") == "cpu_op"}
    mm_kernels = [e for e in ev if e.get("cat") == "kernel" and ext[e["args"]["External id"]]["name"] == "aten::mm"]
    mm_ops = {e["args"]["External id"] for e in mm_kernels}
    flops = sum(2 * math.prod(ext[i]["args"]["Input Dims"][0]) * ext[i]["args"]["Input Dims"][1][1] for i in mm_ops)
    nbytes = 2 * sum(64 * 2048 + 2048 * 2048 + 64 * 2048 for _ in mm_ops)
    kernel_ns = sum(e["dur"] * 1000 for e in mm_kernels)
    trace = load(str(path))
    (row,) = [r for r in op_rows(trace) if r["name"] == "aten::mm"]
    assert row["count"] == len(mm_ops) == 48
    assert row["flops"] == flops
    assert row["bytes"] == nbytes
    assert abs(row["time_ns"] - kernel_ns) <= len(mm_kernels)  # integer-ns rounding per kernel
    compute, memory = flops / 989.5e12 * 1e9, nbytes / 4.8e12 * 1e9
    assert row["bound"] == ("compute" if compute > memory else "memory") == "memory"
    assert row["floor_ns"] == pytest.approx(max(compute, memory), abs=1)
    assert row["efficiency"] == pytest.approx(max(compute, memory) / kernel_ns, rel=1e-3)


def test_step_floor_within_cuda_event_step_time():
    """Per step, the GPU ops' measured time fits in the CUDA-event step time of meta.json, and the floor is below."""
    path = DATA / "shapes_stack.json.gz"
    meta = json.loads((DATA / "shapes_stack.meta.json").read_text())
    gpu_ms = {s["name"]: s["gpu_ms"] for s in meta["iterations"][0]["spans"]}
    data = floor_json(load(str(path)))
    (ph,) = [p for p in data["phases"] if p["name"].startswith("step")]
    assert ph["instances"] == 3
    assert ph["time_ns"] <= sum(gpu_ms.values()) * 1e6
    assert 0 < ph["floor_ns"] < ph["time_ns"]


@pytest.mark.slow
def test_options_all_decode_gemv_lever_and_pageable_copy():
    trace = load(str(DATA / "options_all.json.gz"))
    data = floor_json(trace)
    assert data["unsized_ns"] == 0
    # decode's GEMVs (2 rows per weight read) and prefill's GEMMs (512 rows) are two rows, never one
    mm = {r["bound"]: r for r in data["ops"] if r["name"] == "aten::mm"}
    assert set(mm) == {"memory", "compute"}
    assert mm["memory"]["shape"].startswith("2x1024") and mm["compute"]["shape"].startswith("512x1024")
    pageable = [c for c in data["copies"] if "Pageable" in c["name"]]
    raw = [e for e in _raw(DATA / "options_all.json.gz") if e.get("name", "").startswith("Memcpy HtoD (Pageable")]
    assert pageable[0]["bytes"] == sum(e["args"]["bytes"] for e in raw)
    assert "pin it" in pageable[0]["note"]
    st = trace  # the decode steps: the lever names a memory-bound GEMM family
    from gaplens.analysis.steps import steps

    s = steps(st)
    t0, t1 = s.spans[s.steady[0]][0], s.spans[s.steady[-1]][1]
    lever = floor_lever(trace, t0, t1)
    assert lever is not None and lever.family == "aten::mm" and lever.bound == "memory"
    assert "batch" in lever.lever and lever.excess_ns > 0


def test_unknown_gpu_shows_flops_without_a_floor():
    trace = load(str(DATA / "shapes_stack.json.gz"))
    trace.meta.devices[0].name = "Mystery Accelerator 9000"
    f = floors(trace)
    assert f.matches[0].spec is None
    data = floor_json(trace)
    (mm,) = [r for r in data["ops"] if r["name"] == "aten::mm"]
    assert mm["floor_ns"] is None and mm["efficiency"] is None
    assert mm["flops"] == 48 * 2 * 64 * 2048 * 2048 and mm["bytes"] == 48 * 2 * (2 * 64 * 2048 + 2048 * 2048)
    assert any("Mystery" in n and "without a floor" in n for n in data["notes"])


def test_cli_json_contract_and_text(capsys):
    assert main(["floor", str(DATA / "shapes_stack.json.gz"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) >= {"origin_ns", "gpu", "ops", "phases", "unsized_ns"}
    assert set(data["gpu"]) >= {"device", "name", "spec", "peak_flops", "mem_bytes_per_s", "link_bytes_per_s"}
    for r in data["ops"]:
        assert set(r) >= {"name", "kernel", "dtype", "count", "time_ns", "flops", "bytes", "floor_ns", "bound",
                          "efficiency"}  # fmt: skip
    for p in data["phases"]:
        assert set(p) >= {"name", "pid", "count", "time_ns", "flops", "bytes", "floor_ns", "bound"}
    assert main(["floor", str(DATA / "shapes_stack.json.gz")]) == 0
    out = capsys.readouterr().out
    assert "NVIDIA H200" in out and "h200-sxm" in out and "aten::mm" in out


def test_cli_says_what_to_record(capsys):
    assert main(["floor", str(DATA / "gpu_only.json.gz")]) == 0
    assert "record_shapes=True" in capsys.readouterr().out
    assert main(["floor", str(DATA / "nsys_serving.sqlite.gz")]) == 0
    assert "emit_nvtx(record_shapes=True)" in capsys.readouterr().out


def test_cli_bad_spec_file_is_exit_2(tmp_path, capsys):
    f = tmp_path / "gpus.json"
    f.write_text("{not json")
    assert main(["floor", str(DATA / "shapes_stack.json.gz"), "--gpu-spec", str(f)]) == 2
    assert "GPU spec file" in capsys.readouterr().err


@pytest.mark.slow
def test_public_trace_with_shapes_a100():
    """HTA's cuda_graph_launches (A100-SXM4-80GB, record_shapes): the row is found by name and memory, and every
    sized elementwise call's bytes follow the inputs + output rule."""
    trace = load(str(public("hta/cuda_graph_launches.json.gz")))
    data = floor_json(trace)
    assert data["gpu"]["spec"]["key"] == "a100-sxm4-80gb"
    assert 0 < data["unsized_ns"] < data["total"]["time_ns"]  # communication and compiled regions stay unsized


# ---- the H200 calibration recording (tests/data/round3/floor_calib, CUDA-event truth in meta.json) ----------------

ROUND3 = DATA / "round3"
#: Kernel time inside a range vs its CUDA-event time: the events also time the gaps between a range's kernels.
EVENT_SLACK = 0.06


def _calib():
    from gaplens.analysis.floor.windows import window_sel
    from gaplens.analysis.phases import phases

    trace = load(str(ROUND3 / "floor_calib.json.gz"))
    meta = json.loads((ROUND3 / "floor_calib.meta.json").read_text())
    f = floors(trace)
    out = {}
    for op in meta["ops"]:
        per = []
        for p in (p for p in phases(trace) if p.name == op["name"]):
            sel = window_sel(trace, p.start_ns, p.end_ns, p.pid, p.device)
            own = [j for j in sel.tolist() if f.call[j] >= 0]  # the op's kernels: no memsets, no extra copies
            gpu = [j for j in sel.tolist() if not f.family[j].startswith("Memset")]
            per.append(
                {
                    "flops": sum(f.flops[j] for j in own),
                    "bytes": sum(f.bytes[j] for j in (own or gpu)),
                    "time_ns": sum(f.time_ns[j] for j in sel.tolist()),
                    "compute_ns": sum(f.compute_ns[j] for j in gpu),
                    "memory_ns": sum(f.memory_ns[j] for j in gpu),
                }
            )
        out[op["name"]] = (op, per)
    return trace, meta, out


def test_calibration_flops_exact_against_the_analytic_counts():
    _, _, got = _calib()
    for name, (op, per) in got.items():
        assert len(per) == op["instances_profiled"], name
        if not op["flops"] or name.startswith("add_"):
            continue  # add: meta counts 1 FLOP per element; DESIGN counts elementwise ops by bytes only
        for inst in per:
            assert inst["flops"] == pytest.approx(op["flops"], rel=1e-9), name
    (_, add) = got["add_bf16_2e28"]
    assert all(inst["flops"] == 0 for inst in add)


def test_calibration_bytes_against_the_analytic_counts():
    """Within 0.25% (ours also counts saved statistics: layer_norm's mean/rstd, attention backward's logsumexp);
    conv backward against its note's definition (x, w, dy read + dx, dw written), which its figure does not follow."""
    _, _, got = _calib()
    for name, (op, per) in got.items():
        want = op["bytes"]
        if name.startswith("conv2d_bwd"):
            n, c, h, w = 32, 256, 56, 56
            x, wt = n * c * h * w * 2, 256 * 256 * 9 * 2
            want = x + wt + x + x + wt  # x, w, dy (same size as x: stride 1, pad 1) read; dx, dw written
        for inst in per:
            assert inst["bytes"] == pytest.approx(want, rel=0.0025), name


def test_calibration_time_bound_and_achieved_rate_against_cuda_events():
    trace, _, got = _calib()
    spec = floors(trace).matches[0].spec
    for name, (op, per) in got.items():
        # Kernel time never exceeds the event pair around it; an event pair also times the device idling inside
        # the range (the first GEMM of a step waits ~0.3 ms for the host), so compare the quickest instances.
        for inst, event in zip(per, op["gpu_ms_profiled"], strict=True):
            assert inst["time_ns"] / 1e6 <= event * 1.001, name
        ours, event = min(inst["time_ns"] for inst in per) / 1e6, min(op["gpu_ms_profiled"])
        assert ours >= event * (1 - EVENT_SLACK), name
        if op["flops"] and not name.startswith("add_"):
            assert op["flops"] / ours / 1e9 == pytest.approx(op["flops"] / event / 1e9, rel=EVENT_SLACK), name
        # the bound by definition, from the analytic counts and the table's H200 row
        dtype = {"fp32 (TF32 off)": "fp32"}.get(op["dtype"], op["dtype"].split()[0])
        if name.startswith("memcpy"):
            continue
        peak = spec.peak_flops[dtype if dtype in spec.peak_flops else "bf16"]
        flops = 0 if name.startswith("add_") else op["flops"] or 0
        want = "compute" if flops / peak > op["bytes"] / spec.mem_bytes_per_s else "memory"
        inst = per[0]
        assert ("compute" if inst["compute_ns"] >= inst["memory_ns"] else "memory") == want, name


def test_calibration_pageable_copy_against_the_link():
    trace, meta, _ = _calib()
    data = floor_json(trace)
    ops = {o["name"]: o for o in meta["ops"]}
    (pageable,) = [c for c in data["copies"] if "Pageable" in c["name"]]
    (pinned,) = [c for c in data["copies"] if "Pinned" in c["name"]]
    truth = ops["memcpy_h2d_pageable_512MiB"]
    assert pageable["bytes"] == truth["bytes"] * truth["instances_profiled"]
    assert pageable["bytes_per_s"] / 1e9 == pytest.approx(truth["achieved_gb_per_s"], rel=0.02)
    assert "pageable" in pageable["note"] and "pin it" in pageable["note"]
    assert pinned["note"] == "" and pinned["bytes_per_s"] > 0.8 * pinned["link_bytes_per_s"]


def test_decode_shapes_lever_names_the_gemv():
    trace = load(str(ROUND3 / "decode_shapes.json.gz"))
    lever = floor_lever(trace)
    assert lever.family == "aten::mm" and lever.bound == "memory" and "GEMV" in lever.text
    assert "batch" in lever.lever and "quantise" in lever.lever


def _tiny_trace(tmp_path, args: dict, name: str = "aten::mm") -> Path:
    """A hand-built Kineto trace: one CPU op (``args``) launching one 10 µs kernel on an H200."""
    ev = [
        {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": 100.0, "dur": 50.0, "args": args},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 110.0, "dur": 5.0,
         "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "gemm_kernel", "pid": 0, "tid": 7, "ts": 120.0, "dur": 10.0,
         "args": {"correlation": 7, "device": 0, "stream": 7}},
    ]  # fmt: skip
    doc = {"deviceProperties": [{"id": 0, "name": "NVIDIA H200", **H200}], "traceEvents": ev}
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(doc))
    return path


def test_hand_built_trace_floor_by_hand(tmp_path):
    args = {"Input Dims": [[64, 4096], [4096, 4096]], "Input type": [BF, BF], "Concrete Inputs": ["", ""]}
    data = floor_json(load(str(_tiny_trace(tmp_path, args))))
    (op,) = data["ops"]
    flops, nbytes = 2 * 64 * 4096 * 4096, 2 * (64 * 4096 + 4096 * 4096 + 64 * 4096)
    assert (op["flops"], op["bytes"], op["time_ns"], op["count"]) == (flops, nbytes, 10_000, 1)
    floor = max(flops / 989.5e12, nbytes / 4.8e12) * 1e9
    assert op["floor_ns"] == round(floor) and op["efficiency"] == pytest.approx(floor / 10_000, abs=1e-4)
    assert op["bound"] == "memory" and op["kernel"] == "gemm_kernel"


@pytest.mark.parametrize(
    "args",
    [
        {"Input Dims": "[[1, 2]]", "Input type": "c10::BFloat16", "Concrete Inputs": 3},
        {"Input Dims": [["a", None], {"x": 1}], "Input type": [BF, 5], "Concrete Inputs": [None, []]},
        {"Input Dims": [[-1, 4096], [4096, 10**30]], "Input type": [BF, BF]},
        {"Input Dims": [[64, 4096], [4096, 4096]], "Input type": ["c10::Weird", BF]},
    ],
)
def test_hostile_args_are_unsized_never_a_crash(tmp_path, args):
    data = floor_json(load(str(_tiny_trace(tmp_path, args))))
    assert data["unsized_ns"] == 10_000  # none of these is a readable mm
    json.dumps(data, allow_nan=False)


def test_nsys_emit_nvtx_shapes_give_gemm_flops_without_a_floor():
    """nsys + emit_nvtx(record_shapes=True): range names carry sizes, not dtypes. A GEMM gets its FLOPs from the
    innermost sized range open at its launch; bytes and the floor stay unknown; the note says what to record."""
    from gaplens.loaders.model import Device
    from tests.handbuilt import Builder

    b = Builder()
    b.phase(1_000, 9_000, "aten::linear, seq = 4, op_id = 10, sizes = [[8, 1024], [4096, 1024], [4096]]")
    b.phase(2_000, 8_000, "aten::addmm, seq = 4, op_id = 11, sizes = [[4096], [8, 1024], [1024, 4096], [], []], "
            "input_op_ids = [(9, 0), (3, 0)]")  # fmt: skip
    b.launch(3_000, 4_000, 10_000, 30_000, name="gemm_kernel")
    b.phase(40_000, 50_000, "aten::_scaled_dot_product_flash_attention, seq = 5, op_id = 12, "
            "sizes = [[1, 8, 128, 64], [1, 8, 128, 64], [1, 8, 128, 64], [], [], [], []]")  # fmt: skip
    b.launch(41_000, 42_000, 60_000, 70_000, name="flash_fwd_kernel")
    trace = b.trace()
    trace.meta.source_format = "nsys"
    trace.meta.devices = [Device(0, "NVIDIA H200", dict(H200))]
    data = floor_json(trace)
    by = {r["name"]: r for r in data["ops"]}
    mm = by["aten::addmm"]
    assert mm["flops"] == 2 * 8 * 4096 * 1024 and mm["count"] == 1 and mm["time_ns"] == 20_000
    assert mm["bytes"] is None and mm["floor_ns"] is None and mm["unsized_ns"] == 20_000
    att = by["aten::_scaled_dot_product_flash_attention"]
    assert att["flops"] is None  # causality is not in the range name: not guessed
    assert data["unsized_ns"] == 30_000
    assert any("no dtypes" in n and "record_shapes=True" in n for n in data["notes"])


def test_rocm_copies_without_a_size_are_counted_never_a_crash(capsys):
    """HTA's mi250_rocm: its two ``gpu_memcpy`` events carry no ``bytes`` arg (the size sits on the hipMemcpy
    call). ``floor`` used to exit 1 (NaN bytes); the copy row now counts them, with their time and no rate."""
    path = public("hta/mi250_rocm.json.gz")
    raw = [e for e in _raw(path) if e.get("cat") == "gpu_memcpy"]
    assert raw and all("bytes" not in e["args"] for e in raw)
    assert main(["floor", str(path), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["copies"]
    assert row["count"] == row["unsized"] == len(raw) == 2
    assert row["time_ns"] == pytest.approx(sum(e["dur"] * 1000 for e in raw), abs=len(raw))
    assert row["bytes"] is None and row["bytes_per_s"] is None and row["floor_ns"] is None
    assert main(["floor", str(path)]) == 0
    out = capsys.readouterr().out
    assert "the trace records no size for these copies" in out


def test_copy_row_without_a_link_peak_says_so(capsys):
    """HTA's gpu_user_annotation (Quadro GP100, no row in the table): the copy line names the missing link peak
    instead of "of —"; bytes are the raw events' ``bytes`` args."""
    path = public("hta/gpu_user_annotation.json.gz")
    raw = [e for e in _raw(path) if e.get("name") == "Memcpy HtoD (Pageable -> Device)"]
    assert main(["floor", str(path)]) == 0
    out = capsys.readouterr().out
    (line,) = [x for x in out.splitlines() if x.strip().startswith("Memcpy HtoD (Pageable -> Device)") and "B " in x]
    assert f"{sum(e['args']['bytes'] for e in raw)} B" in line and f" {len(raw)} " in line
    assert "no link peak for this GPU" in line and "of —" not in line


_UNIT_NS = {"ns": 1, "µs": 1e3, "ms": 1e6, "s": 1e9}


def _ns(text: str) -> float:
    value, unit = text.split()
    return float(value) * _UNIT_NS[unit]


def test_step_line_says_the_roof_share_is_of_the_sized_ops_and_names_ops_whole(capsys):
    """Round-3 copy_bound (no record_shapes): per step one pageable copy (meta.json: copy_in ~84.6 ms on CUDA events)
    is sized, the ~16 ms of GEMMs are not. The step line gives the sized time beside the step's GPU-op time, its
    roof share is floor / sized (not floor / all ops: 11 of 100 ms read as 13% before), and every op named above
    the floor is a whole name of the raw events (it was cut to "Memcpy HtoD (Pageable -> Devi")."""
    path = ROUND3 / "copy_bound.json.gz"
    meta = json.loads((ROUND3 / "copy_bound.meta.json").read_text())["summary"]
    assert main(["floor", str(path)]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("step ")]
    m = re.search(r"GPU ops ([\d.]+ \S+) per step, sized ([\d.]+ \S+), against a floor of ([\d.]+ \S+) "
                  r"\(medians; the sized ops reach (\d+)% of the roof", line)  # fmt: skip
    assert m, line
    ops, sized, floor, pct = _ns(m[1]), _ns(m[2]), _ns(m[3]), int(m[4])
    assert sized == pytest.approx(meta["span_gpu_ms_median"]["copy_in"] * 1e6, rel=EVENT_SLACK)
    assert sized < ops <= meta["step_gpu_ms_median"] * 1e6 * (1 + EVENT_SLACK)
    assert abs(pct - 100 * floor / sized) <= 1.5  # medians of one copy per step: the share is floor / sized
    raw_names = {e["name"] for e in _raw(path) if e.get("cat") in ("gpu_memcpy", "gpu_memset", "kernel")}
    named = re.findall(r"([A-Za-z][^,:]*?(?: \([^)]*\))?) [\d.]+ (?:ns|µs|ms|s)(?:,|$)", line.split("steps: ", 1)[1])
    assert named and all(n in raw_names for n in named), named


def test_tiny_sized_ops_are_said_to_be_latency_paced_not_a_share_of_the_roof(capsys):
    """Round-3 graphs_fault (no record_shapes): the only sized GPU ops are copies and memsets of a few bytes
    (their sizes from the raw events' ``bytes``). They read "a floor of 0 ns (... 0% of the roof,
    memory-bound)": nothing true about a 4-byte memset. Now the lines say they are small and paced by latency."""
    from gaplens.analysis.floor.gpuspecs import BUILTIN
    from gaplens.analysis.floor.roof import LATENCY_FLOOR_NS

    path = ROUND3 / "graphs_fault.json.gz"
    sized = [e for e in _raw(path) if e.get("cat") in ("gpu_memcpy", "gpu_memset") and e.get("args", {}).get("bytes")]
    assert sized and max(e["args"]["bytes"] for e in sized) <= 64  # 8-byte read-backs, 32-byte DtoD copies
    # by hand: the largest of them at the H200's bandwidth is far under the latency floor
    h200 = next(s for s in BUILTIN if s.key == "h200-sxm")
    worst = max(e["args"]["bytes"] for e in sized)
    assert max(2 * worst / h200.mem_bytes_per_s, worst / h200.link_bytes_per_s) * 1e9 < LATENCY_FLOOR_NS
    assert main(["floor", str(path)]) == 0
    out = capsys.readouterr().out
    total = next(x for x in out.splitlines() if x.startswith("GPU ops "))
    step = next(x for x in out.splitlines() if x.startswith("step "))
    assert f"all small: {len(sized)} ops" in total and "paced by its own latency, not by the roof" in total
    assert "their time is per-op latency, not the roof" in step
    assert "of the roof," not in total + step and "memory-bound" not in total + step


def test_ops_with_a_real_floor_keep_their_roof_share(capsys):
    """options_all's decode GEMVs (~0.5 µs of floor each) still read as a share of the roof: that share is the lever."""
    assert main(["floor", str(DATA / "options_all.json.gz")]) == 0
    step = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("step "))
    assert re.search(r"the sized ops reach \d+% of the roof, memory-bound", step), step


def test_a_latency_paced_kernel_family_gets_the_fusion_lever(monkeypatch):
    """When the family with the most time above its floor is made of kernels whose floors are latency-sized,
    the lever says so (count and mean time from the op rows) instead of a roof share and a bandwidth lever."""
    import gaplens.analysis.floor.roof as roof

    trace = load(str(DATA / "options_all.json.gz"))
    before = floor_lever(trace)
    assert before is not None and "% of the roof" in before.text
    monkeypatch.setattr(roof, "LATENCY_FLOOR_NS", 10**9)  # every family counts as latency-paced
    after = floor_lever(trace)
    row = next(r for r in op_rows(trace) if r["name"] == after.family and r["dtype"] == after.dtype)
    assert "latency-bound" in after.text and "% of the roof" not in after.text
    assert f"{row['sized_kernels']:,} kernels of" in after.text and "fewer, larger kernels" in after.text


def test_a_phase_holds_the_ops_launched_inside_it_and_keeps_its_whole_name():
    """train_step's h2d_prefetch ranges queue copies on a side stream while the forward's kernels run on
    the compute stream: the raw file's launch calls say which ops each range asked for. Before issue 29
    the floor took every op starting inside the range's GPU span (14 ops: 8 of them forward's kernels)."""
    from tests.conftest import sample

    path = sample("train_step.json.gz")
    raw = _raw(path)
    ranges = [
        (e["ts"], e["ts"] + e["dur"])
        for e in raw
        if e.get("cat") == "user_annotation" and e.get("name") == "h2d_prefetch"
    ]
    calls = {
        e["args"]["correlation"]: e["ts"]
        for e in raw
        if e.get("ph") == "X" and e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    }
    gpu = [e for e in raw if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    inside = [e for e in gpu if any(a <= calls.get(e["args"].get("correlation"), -1) < b for a, b in ranges)]
    (row,) = [p for p in floor_json(load(str(path)))["phases"] if p["name"] == "h2d_prefetch"]
    assert row["instances"] == len(ranges) == 3
    assert row["count"] == len(inside) == 6 and all(e["cat"] == "gpu_memcpy" for e in inside)
    assert row["time_ns"] == pytest.approx(sum(e["dur"] for e in inside) * 1e3, abs=len(inside))


def test_a_range_named_with_a_size_keeps_its_whole_name():
    """floor_calib's six ``gemm_bf16_8192`` ranges are one name repeated, not members 8192 of ``gemm_bf16``."""
    data = floor_json(load(str(ROUND3 / "floor_calib.json.gz")))
    names = {p["name"]: p["instances"] for p in data["phases"]}
    assert names["gemm_bf16_8192"] == 6 and names["scaled_mm_fp8_e4m3_8192"] == 6 and names["gemm_fp32_4096"] == 6
    assert "gemm_bf16" not in names and not any("×" in n for n in names)


def test_a_gemm_and_a_gemv_of_one_op_and_dtype_are_two_rows():
    """floor_calib's bf16 8192³ GEMM and 1×8192×28672 GEMV are both aten::mm: before issue 29 one row
    ("aten::mm bf16 12 … 8192x8192, 8192x8192") mixed a compute-bound and a memory-bound op."""
    meta = json.loads((ROUND3 / "floor_calib.meta.json").read_text())
    by_flops = {o["flops"]: o for o in meta["ops"] if o["op"] == "aten::mm" and o["dtype"] == "bf16"}
    gemm, gemv = by_flops[2 * 8192**3], by_flops[2 * 8192 * 28672]
    rows = [r for r in floor_json(load(str(ROUND3 / "floor_calib.json.gz")))["ops"] if r["name"] == "aten::mm"]
    bf16 = {r["bound"]: r for r in rows if r["dtype"] == "bf16"}
    assert set(bf16) == {"compute", "memory"}
    n = len(gemm["gpu_ms_profiled"])
    assert bf16["compute"]["count"] == n and bf16["compute"]["flops"] == pytest.approx(n * gemm["flops"])
    assert bf16["memory"]["count"] == n and bf16["memory"]["flops"] == pytest.approx(n * gemv["flops"])
    assert bf16["memory"]["bytes"] == pytest.approx(n * gemv["bytes"], rel=0.01)


def test_a_dtod_copy_shows_the_bytes_its_floor_moves():
    """A DtoD copy reads and writes its bytes: the row's bytes are twice the copy's size, and the floor
    is those bytes over the memory bandwidth (before: the row showed the size and floored on twice it)."""
    raw = _raw(ROUND3 / "floor_calib.json.gz")
    copies = [e for e in raw if e.get("cat") == "gpu_memcpy" and e["name"].startswith("Memcpy DtoD")]
    size = sum(e["args"]["bytes"] for e in copies)
    data = floor_json(load(str(ROUND3 / "floor_calib.json.gz")))
    (row,) = [r for r in data["ops"] if r["name"].startswith("Memcpy DtoD")]
    assert row["count"] == len(copies) and row["bytes"] == 2 * size
    assert row["floor_ns"] == pytest.approx(2 * size / data["gpu"]["mem_bytes_per_s"] * 1e9, abs=1)
