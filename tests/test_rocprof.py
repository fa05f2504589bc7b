"""rocprofv3 results JSON: kernel counts and busy time equal a reading of the raw document with json.

The reference keys a stream by (agent handle, stream handle) and sums the union of
[start_timestamp, end_timestamp) per stream and per agent, with nothing of the loader.
"""

from __future__ import annotations

import gzip
import json
import re

import numpy as np
import pytest

from gaplens.loaders import load
from gaplens.loaders.model import GPU_WORK_KINDS, Kind, TraceError
from gaplens.tui.cli import main
from tests.conftest import shared_file
from tests.test_xplane import _union

SAMPLE = "formats/rocprofv3/908_results.json.gz"


def reference(doc: dict) -> dict:
    streams: dict[tuple[int, int], list[tuple[int, int]]] = {}
    per_agent: dict[int, int] = {}
    for tool in doc["rocprofiler-sdk-tool"]:
        gpus = [a for a in tool["agents"] if a["type"] == 2]
        ordinal = {a["id"]["handle"]: a.get("logical_node_type_id", i) for i, a in enumerate(gpus)}
        buffers = tool["buffer_records"]
        for k in buffers.get("kernel_dispatch", []):
            dev = ordinal[k["dispatch_info"]["agent_id"]["handle"]]
            streams.setdefault((dev, k["stream_id"]["handle"]), []).append((k["start_timestamp"], k["end_timestamp"]))
            per_agent[dev] = per_agent.get(dev, 0) + 1
        for c in buffers.get("memory_copy", []):
            dev = ordinal.get(c["dst_agent_id"]["handle"], ordinal.get(c["src_agent_id"]["handle"]))
            streams.setdefault((dev, c["stream_id"]["handle"]), []).append((c["start_timestamp"], c["end_timestamp"]))
    devices = {d for d, _ in streams}
    return {
        "kernels": per_agent,
        "stream_busy": {k: _union(v) for k, v in streams.items()},
        "device_busy": {d: _union([iv for (dd, _), v in streams.items() if dd == d for iv in v]) for d in devices},
    }


def _reading(trace) -> dict:
    from gaplens.analysis.busy import busy_share

    dev = trace.device_of_event()
    k = trace.kind == Kind.KERNEL
    stream_busy = {}
    for ln in trace.gpu_lanes():
        sl = trace.lane_events(ln.id)
        stream_busy[(ln.device, ln.stream)] = _union(
            list(zip(trace.start_ns[sl].tolist(), trace.end_ns[sl].tolist(), strict=True))
        )
    return {
        "kernels": {int(d): int((k & (dev == d)).sum()) for d in np.unique(dev[k])},
        "stream_busy": stream_busy,
        "device_busy": {d.id: d.busy_ns for d in busy_share(trace).devices},
    }


def test_the_908_sample_equals_the_raw_json(capsys):
    path = shared_file(SAMPLE)
    doc = json.loads(gzip.decompress(path.read_bytes()))
    trace = load(path, use_cache=False)
    want, got = reference(doc), _reading(trace)
    assert got == want
    assert want["kernels"] == {0: 43_915}
    assert set(trace.meta.lacks) >= {"cpu", "cuda_api"}
    assert main(["gaps", str(path), "--json", "--top", "0"]) == 0
    gaps = json.loads(capsys.readouterr().out)["gaps"]
    causes = {g["cause"] for g in gaps}
    assert causes <= {"unknown", "comm"} and "unknown" in causes  # no host side: never guessed


def _doc() -> dict:
    """A GPU and a CPU agent; two kernels on stream 3, a copy, HIP calls linking each, a roctx range.

    thread 7   [hipLaunchKernel][hipMemcpyAsync][hipLaunchKernel]     roctx "step 0" around them all
    stream 3        [kernel a 100..200)               [kernel b 400..450)
    copies                  [HtoD 220..300)
    """
    ops = [{"kind": "NONE", "operations": []}] + [{"kind": f"K{i}", "operations": []} for i in range(1, 12)]
    ops[5] = {"kind": "HIP_RUNTIME_API", "operations": ["hipLaunchKernel", "hipMemcpyAsync"]}
    ops[7] = {"kind": "MARKER_CORE_API", "operations": ["roctxMarkA", "roctxRangePushA", "roctxRangePop"]}
    ops[10] = {
        "kind": "MEMORY_COPY",
        "operations": ["MEMORY_COPY_NONE", "MEMORY_COPY_HOST_TO_HOST", "MEMORY_COPY_HOST_TO_DEVICE"],
    }

    def kernel(kid, corr, s, e):
        return {
            "kind": 11,
            "operation": 2,
            "thread_id": 7,
            "correlation_id": {"internal": corr, "external": 0},
            "start_timestamp": s,
            "end_timestamp": e,
            "dispatch_info": {
                "agent_id": {"handle": 50},
                "queue_id": {"handle": 1},
                "kernel_id": kid,
                "grid_size": {"x": 64, "y": 1, "z": 1},
                "workgroup_size": {"x": 64, "y": 1, "z": 1},
            },
            "stream_id": {"handle": 3},
        }

    def api(op, corr, s, e):
        return {
            "kind": 5,
            "operation": op,
            "thread_id": 7,
            "correlation_id": {"internal": corr},
            "start_timestamp": s,
            "end_timestamp": e,
        }

    return {
        "rocprofiler-sdk-tool": [
            {
                "metadata": {"pid": 4242, "command": ["python", "train.py"], "node": {"hostname": "h"}},
                "agents": [
                    {"id": {"handle": 49}, "type": 1, "name": "cpu"},
                    {
                        "id": {"handle": 50},
                        "type": 2,
                        "name": "gfx942",
                        "product_name": "AMD Instinct MI300X",
                        "logical_node_type_id": 0,
                    },
                ],
                "kernel_symbols": [
                    {"kernel_id": 0, "formatted_kernel_name": "a"},
                    {"kernel_id": 1, "formatted_kernel_name": "b"},
                ],
                "strings": {"buffer_records": ops, "marker_api": [{"key": 9, "value": "step 0"}]},
                "buffer_records": {
                    "kernel_dispatch": [kernel(0, 1, 100, 200), kernel(1, 3, 400, 450)],
                    "memory_copy": [
                        {
                            "kind": 10,
                            "operation": 2,
                            "thread_id": 7,
                            "correlation_id": {"internal": 2},
                            "start_timestamp": 220,
                            "end_timestamp": 300,
                            "dst_agent_id": {"handle": 50},
                            "src_agent_id": {"handle": 49},
                            "bytes": 1024,
                            "stream_id": {"handle": 3},
                        }
                    ],
                    "hip_api": [api(0, 1, 50, 90), api(1, 2, 95, 210), api(0, 3, 215, 230)],
                    "marker_api": [
                        {
                            "kind": 7,
                            "operation": 1,
                            "thread_id": 7,
                            "correlation_id": {"internal": 9},
                            "start_timestamp": 40,
                            "end_timestamp": 460,
                        }
                    ],
                },
            }
        ]
    }


def test_a_whole_document_reads_every_record(tmp_path):
    doc = _doc()
    path = tmp_path / "1_results.json"
    path.write_text(json.dumps(doc))
    trace = load(path, use_cache=False)
    assert _reading(trace)["device_busy"] == reference(doc)["device_busy"] == {0: 100 + 80 + 50}
    kinds = {Kind(k).name: int((trace.kind == k).sum()) for k in np.unique(trace.kind)}
    assert kinds == {"KERNEL": 2, "MEMCPY_HTOD": 1, "CUDA_API": 3, "ANNOTATION": 1}
    gpu = np.flatnonzero(trace.mask(GPU_WORK_KINDS))
    assert (trace.launch[gpu] >= 0).all()
    assert int(trace.bytes[trace.kind == Kind.MEMCPY_HTOD][0]) == 1024
    assert trace.names[int(trace.name_id[trace.kind == Kind.ANNOTATION][0])] == "step 0"
    assert "cpu" not in trace.meta.lacks and trace.meta.source_format == "rocprof"
    assert [d.name for d in trace.meta.devices] == ["AMD Instinct MI300X (gfx942)"]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (
            '{"rocprofiler-sdk-tool": [{"agents": [], '
            '"buffer_records": {"kernel_dispatch": [{"start_timestamp": 1}]}}]}',
            "rocprofv3 record",
        ),
        ('{"rocprofiler-sdk-tool": 3}', "not a rocprofv3"),
        ('{"rocprofiler-sdk-tool": [{"agents": []', "damaged rocprofv3"),
        ('{"rocprofiler-sdk-tool": [{"agents": []}]}', "no duration events|no events"),
    ],
)
def test_bad_documents_are_one_line(tmp_path, capsys, text, words):
    path = tmp_path / "bad_results.json"
    path.write_text(text)
    rc = main(["summary", str(path)])
    out, err = capsys.readouterr()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and "Traceback" not in out + err and len(lines) == 1, err
    assert re.search(words, lines[0]), lines[0]


def test_neither_json_nor_protobuf_is_refused(tmp_path, capsys):
    path = tmp_path / "x.bin"
    path.write_bytes(b"\x00\x01binary junk" * 10)
    assert main(["summary", str(path)]) == 2
    err = capsys.readouterr().err
    assert "not a trace" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(TraceError):
        load(path, use_cache=False)
