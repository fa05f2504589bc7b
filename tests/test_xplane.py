"""XSpace (.xplane.pb) loading: counts and busy time equal a reference reading of the raw protobuf.

The reference reader below walks the wire format with a plain recursive decoder of its own (not
``loaders.xplane.wire``) and sums per stream and per device the union of GPU events, each at
[timestamp_ns + floor(offset_ps / 1000), timestamp_ns + floor((offset_ps + duration_ps) / 1000)).
"""

from __future__ import annotations

import contextlib
import re
import struct

import numpy as np
import pytest

from gaplens.loaders import load
from gaplens.loaders.model import GPU_WORK_KINDS, Kind, LaneKind, TraceError
from gaplens.tui.cli import main
from tests import xplane_bytes as xb
from tests.conftest import shared_file

MI300X = "formats/jax_mi300x_conv/chi-mi300x-013.ord.vultr.cpe.ice.amd.com.xplane.pb"


# ---- the reference reader --------------------------------------------------------------------
def _varint(b: bytes, i: int) -> tuple[int, int]:
    r = s = 0
    while True:
        c = b[i]
        i += 1
        r |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return r, i


def _msg(b: bytes) -> dict[int, list]:
    """Every field of one message: number -> values (ints, or bytes for LEN and fixed fields)."""
    out: dict[int, list] = {}
    i = 0
    while i < len(b):
        tag, i = _varint(b, i)
        f, wt = tag >> 3, tag & 7
        if wt == 0:
            v, i = _varint(b, i)
        elif wt == 2:
            n, i = _varint(b, i)
            v, i = b[i : i + n], i + n
        elif wt == 1:
            v, i = b[i : i + 8], i + 8
        else:
            v, i = b[i : i + 4], i + 4
        out.setdefault(f, []).append(v)
    return out


def _union(iv: list[tuple[int, int]]) -> int:
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(iv):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (cur_e - cur_s if cur_e is not None else 0)


def reference(data: bytes) -> dict:
    """Kernels and copies per device and stream, read straight from the bytes."""
    streams: dict[tuple[int, int], list[tuple[int, int]]] = {}
    kernels: dict[int, int] = {}
    copies: dict[int, int] = {}
    for raw in _msg(data).get(1, []):
        plane = _msg(raw)
        name = plane.get(2, [b""])[0].decode()
        m = re.match(r"^/device:GPU:(\d+)$", name)
        if not m:
            continue
        dev = int(m.group(1))
        names = {}
        for entry in plane.get(4, []):
            e = _msg(entry)
            names[e[1][0]] = _msg(e[2][0]).get(2, [b""])[0].decode()
        for raw_line in plane.get(3, []):
            line = _msg(raw_line)
            lname = line.get(2, [b""])[0].decode()
            sm = re.match(r"^Stream #(\d+)", lname)
            if not sm:
                continue
            ts = line.get(3, [0])[0]
            for raw_ev in line.get(4, []):
                ev = _msg(raw_ev)
                if 5 in ev:
                    continue
                off, dur = ev.get(2, [0])[0], ev.get(3, [0])[0]
                iv = (ts + off // 1000, ts + (off + dur) // 1000)
                streams.setdefault((dev, int(sm.group(1))), []).append(iv)
                ename = names.get(ev.get(1, [0])[0], "")
                if re.search("memcpy|copy|memset", ename, re.IGNORECASE) or "Memcpy" in lname:
                    copies[dev] = copies.get(dev, 0) + 1
                else:
                    kernels[dev] = kernels.get(dev, 0) + 1
    devices = {d for d, _ in streams}
    return {
        "kernels": kernels,
        "copies": copies,
        "stream_busy": {k: _union(v) for k, v in streams.items()},
        "device_busy": {d: _union([iv for (dd, _), v in streams.items() if dd == d for iv in v]) for d in devices},
        "events": {k: len(v) for k, v in streams.items()},
    }


# ---- against the trace -----------------------------------------------------------------------
def _reading(trace) -> dict:
    from gaplens.analysis.busy import busy_share

    gpu = trace.mask(GPU_WORK_KINDS)
    dev = trace.device_of_event()
    kernels = {int(d): int(((trace.kind == Kind.KERNEL) & (dev == d)).sum()) for d in np.unique(dev[gpu])}
    copies = {int(d): int((gpu & (trace.kind != Kind.KERNEL) & (dev == d)).sum()) for d in np.unique(dev[gpu])}
    stream_busy, events = {}, {}
    for ln in trace.gpu_lanes():
        sl = trace.lane_events(ln.id)
        iv = list(zip(trace.start_ns[sl].tolist(), trace.end_ns[sl].tolist(), strict=True))
        stream_busy[(ln.device, ln.stream)] = _union(iv)
        events[(ln.device, ln.stream)] = len(iv)
    share = busy_share(trace)
    return {
        "kernels": {d: n for d, n in kernels.items() if n},
        "copies": {d: n for d, n in copies.items() if n},
        "stream_busy": stream_busy,
        "device_busy": {d.id: d.busy_ns for d in share.devices if d.busy_ns},
        "events": events,
    }


def _check(trace, data: bytes) -> dict:
    want, got = reference(data), _reading(trace)
    for key in want:
        assert got[key] == want[key], key
    return want


def test_mi300x_sample_equals_the_raw_protobuf():
    path = shared_file(MI300X)
    trace = load(path, use_cache=False)
    want = _check(trace, path.read_bytes())
    # The figures TraceLens's report gives for the same file (gpu_timeline.csv): busy 3.586493 ms on
    # GPU 7 over 15.761301 ms, 0.889028 ms of copies on GPU 0 over 27.867728 ms.
    assert want["device_busy"] == {7: 3_586_493, 0: 889_028}
    assert want["kernels"] == {7: 25} and want["copies"] == {0: 53}
    assert trace.meta.source_format == "xplane"
    assert "cpu" not in trace.meta.lacks and "shapes" in trace.meta.lacks
    linked = trace.launch[trace.mask(GPU_WORK_KINDS)]
    assert (linked >= 0).all()  # every kernel and copy finds its host call by correlation_id


def test_mi300x_sample_through_every_command(capsys):
    path = str(shared_file(MI300X))
    import json

    for cmd in ("summary", "gaps", "smells", "floor", "whatif"):
        assert main([cmd, path, "--json"]) == 0, cmd
        out = json.loads(capsys.readouterr().out)
        assert out["origin_ns"] >= 0
    assert main(["summary", path, "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["source"]["format"] == "xplane" and s["kernels"]["count"] == 25
    window = {d["id"]: d["window_ns"][1] - d["window_ns"][0] for d in s["devices"]}
    assert window == {7: 15_761_301, 0: 27_867_728}


def _small() -> bytes:
    """Two streams of one GPU, a host thread launching each op, a step range, an aggregate.

    host  [step 0 ...........................]  [launch a][launch b] [launch c]
    s#7         [kernel a 0..3us)[kernel c 5..6us)
    s#8               [memcpy b 1..4us)
    """
    S = xb.STAT_NAMES
    gpu = xb.plane_bytes(
        1,
        "/device:GPU:0",
        [
            xb.line_bytes(
                7,
                "Stream #7(Kernel)",
                1000,
                [
                    xb.Ev(1, 0, 3_000_000, {xb.CORR: 11, xb.HLO_OP: "fusion.1", xb.HLO_MODULE: "jit_f"}),
                    xb.Ev(1, 5_000_000, 1_000_500, {xb.CORR: 13}),
                    xb.Ev(1, 0, 9_000_000, occurrences=4),  # an aggregate: not on the timeline
                ],
            ),
            xb.line_bytes(
                8,
                "Stream #8(MemcpyH2D)",
                1000,
                [xb.Ev(2, 1_000_000, 3_000_000, {xb.CORR: 12, xb.MEMCPY_DETAILS: "size:4096"})],
            ),
        ],
        {1: "fusion_1", 2: "MemcpyH2D"},
        S,
    )
    host = xb.plane_bytes(
        2,
        "/host:CPU",
        [
            xb.line_bytes(
                99,
                "main",
                0,
                [
                    xb.Ev(3, 0, 8_000_000, {xb.STEP_NUM: 0}),
                    xb.Ev(4, 200_000, 500_000, {xb.CORR: 11}),
                    xb.Ev(5, 900_000, 100_000, {xb.CORR: 12}),
                    xb.Ev(4, 1_200_000, 300_000, {xb.CORR: 13}),
                    xb.Ev(6, 100_000, 50_000),
                ],
            )
        ],
        {3: "train", 4: "cuLaunchKernelEx", 5: "cuMemcpyHtoDAsync", 6: "$main.py:3 step"},
        S,
    )
    return xb.space_bytes([gpu, host, xb.plane_bytes(3, "/host:metadata", [], {}, {})])


def test_synthetic_space_reads_exactly(tmp_path):
    data = _small()
    path = tmp_path / "h.xplane.pb"
    path.write_bytes(data)
    trace = load(path, use_cache=False)
    _check(trace, data)
    kinds = {Kind(k).name: int((trace.kind == k).sum()) for k in np.unique(trace.kind)}
    # ANNOTATION: the step, and jit_f's one execution spanned from its kernel (the host names no module span)
    assert kinds == {"KERNEL": 2, "MEMCPY_HTOD": 1, "CUDA_API": 3, "ANNOTATION": 2, "PYTHON": 1}
    gpu = np.flatnonzero(trace.mask(GPU_WORK_KINDS))
    assert (trace.launch[gpu] >= 0).all()
    assert trace.names[int(trace.name_id[trace.kind == Kind.ANNOTATION][0])] == "train 0"
    assert int(trace.bytes[trace.kind == Kind.MEMCPY_HTOD][0]) == 4096
    assert "1 aggregate" in " ".join(trace.meta.warnings)
    k = np.flatnonzero(trace.kind == Kind.KERNEL)
    assert any("hlo_op fusion.1" in trace.details[int(trace.detail_id[i])] for i in k)
    # Kernel c: offset 5 us, 1,000,500 ps long: it ends at floor(6,000,500 ps) = 6,000 ns after the line's start.
    assert trace.meta.origin_ns == 0
    assert int(trace.end_ns[k].max()) == 1000 + 6_000
    assert [ln.kind for ln in trace.lanes if ln.is_gpu] == [LaneKind.STREAM, LaneKind.STREAM]


def test_a_big_synthetic_space_equals_the_reference(tmp_path):
    data = xb.synthetic(20_000, streams=3)
    path = tmp_path / "big.xplane.pb"
    path.write_bytes(data)
    trace = load(path, use_cache=False)
    _check(trace, data)
    assert int((trace.launch >= 0).sum()) == 20_000


def test_a_profile_folder_opens_its_newest_run(tmp_path):
    old = tmp_path / "plugins" / "profile" / "2024_01_01_00_00_00"
    new = tmp_path / "plugins" / "profile" / "2024_02_01_00_00_00"
    old.mkdir(parents=True)
    new.mkdir(parents=True)
    (old / "h.xplane.pb").write_bytes(xb.synthetic(10))
    (new / "h.xplane.pb").write_bytes(xb.synthetic(20))
    trace = load(tmp_path, use_cache=False)
    assert trace.meta.path.endswith("2024_02_01_00_00_00/h.xplane.pb")
    assert int((trace.kind == Kind.KERNEL).sum()) == 20
    (new / "h2.xplane.pb").write_bytes(xb.synthetic(5))
    with pytest.raises(TraceError, match=r"2 hosts.*ranks"):
        load(tmp_path, use_cache=False)


def test_two_hosts_read_as_a_job(tmp_path, capsys):
    import json

    run = tmp_path / "plugins" / "profile" / "2024_02_01_00_00_00"
    run.mkdir(parents=True)
    (run / "a.xplane.pb").write_bytes(xb.synthetic(30))
    (run / "b.xplane.pb").write_bytes(xb.synthetic(40))
    assert main(["ranks", str(tmp_path), "--json", "--workers", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["ranks"]) == 2


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (_small()[:-40], "XSpace|truncated"),
        (b"\x0a\xff\xff\xff\xff\x0f" + b"\x00" * 20, "XSpace|truncated|runs past"),
        (xb.space_bytes([xb.plane_bytes(1, "something else", [], {}, {})]), "not an XSpace"),
        (xb.lfield(1, xb.vfield(1, 3) + bytes([0x0F, 0x01])), "XSpace"),  # wire type 7
        (b"\x0a\x00", "no .*events|not an XSpace"),
    ],
)
def test_bad_protobufs_are_one_line(tmp_path, capsys, data, words):
    path = tmp_path / "bad.xplane.pb"
    path.write_bytes(data)
    rc = main(["summary", str(path)])
    out, err = capsys.readouterr()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and "Traceback" not in out + err and len(lines) == 1, err
    assert re.search(words, lines[0]), lines[0]


def test_random_mutations_never_escape_as_tracebacks(tmp_path):
    rng = np.random.default_rng(7)
    base = bytearray(_small())
    for i in range(150):
        data = bytearray(base)
        for _ in range(int(rng.integers(1, 6))):
            data[int(rng.integers(0, len(data)))] = int(rng.integers(0, 256))
        if i % 5 == 0:
            data = data[: int(rng.integers(1, len(data)))]
        path = tmp_path / f"m{i}.xplane.pb"
        path.write_bytes(bytes(data))
        with contextlib.suppress(TraceError):
            load(path, use_cache=False)


def test_doubles_and_refs_decode():
    data = xb.stat(3, 2.5) + b""
    from gaplens.loaders.xplane.wire import DOUBLE, event_columns

    ev = xb.event_bytes(xb.Ev(1, 10, 20, {3: 2.5, 4: (9,)}))
    blob = np.frombuffer(ev + b"\x00" * 16, np.uint8)
    cols = event_columns(blob, np.asarray([0, 0, len(ev)], np.int64))
    assert cols.offset_ps.tolist() == [10] and cols.duration_ps.tolist() == [20]
    assert cols.stat_kind.tolist()[0] == DOUBLE and cols.stat_float.tolist()[0] == 2.5
    assert cols.stat_int.tolist()[1] == 9
    assert struct.unpack("<d", data[-8:])[0] == 2.5


JAX_TRACE_JSON = {
    "displayTimeUnit": "ns",
    "metadata": {"highres-ticks": True},
    "traceEvents": [
        {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/device:GPU:0"}},
        {"ph": "M", "pid": 1, "tid": 7, "name": "thread_name", "args": {"name": "Stream #7(Kernel)"}},
        {"ph": "M", "pid": 1, "tid": 8, "name": "thread_name", "args": {"name": "Stream #8(MemcpyD2H)"}},
        {"ph": "M", "pid": 2, "name": "process_name", "args": {"name": "/host:CPU"}},
        {"ph": "M", "pid": 2, "tid": 99, "name": "thread_name", "args": {"name": "main"}},
        {"ph": "X", "pid": 1, "tid": 7, "ts": 10.5, "dur": 3.25, "name": "fusion_1", "args": {"correlation_id": "11"}},
        {"ph": "X", "pid": 1, "tid": 8, "ts": 14, "dur": 2, "name": "MemcpyD2H", "args": {"correlation_id": "12"}},
        {"ph": "X", "pid": 2, "tid": 99, "ts": 1, "dur": 20, "name": "train", "args": {"step_num": "0"}},
        {
            "ph": "X",
            "pid": 2,
            "tid": 99,
            "ts": 2,
            "dur": 1,
            "name": "cuLaunchKernelEx",
            "args": {"correlation_id": "11"},
        },
        {
            "ph": "X",
            "pid": 2,
            "tid": 99,
            "ts": 3.5,
            "dur": 1,
            "name": "cuMemcpyDtoHAsync",
            "args": {"correlation_id": "12"},
        },
        {},
    ],
}


def test_jax_trace_json_is_recognised_and_never_read_as_pytorch(tmp_path):
    import gzip
    import json

    path = tmp_path / "perfetto_trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps(JAX_TRACE_JSON).encode()))
    trace = load(path, use_cache=False)
    assert trace.meta.source_format == "jax-trace-json"
    kinds = {Kind(k).name: int((trace.kind == k).sum()) for k in np.unique(trace.kind)}
    assert kinds == {"KERNEL": 1, "MEMCPY_DTOH": 1, "CUDA_API": 2, "ANNOTATION": 1}
    gpu = np.flatnonzero(trace.mask(GPU_WORK_KINDS))
    assert (trace.launch[gpu] >= 0).all()
    k = trace.kind == Kind.KERNEL
    assert int(trace.end_ns[k][0] - trace.start_ns[k][0]) == 3_250
    # A PyTorch trace with a process that happens to be called /host:CPU stays a Kineto trace.
    events = [dict(e, cat="cpu_op") if e.get("ph") == "X" else e for e in JAX_TRACE_JSON["traceEvents"][:-1]]
    torch_like = {"schemaVersion": 1, "traceEvents": events}
    other = tmp_path / "torch.json"
    other.write_text(json.dumps(torch_like))
    assert load(other, use_cache=False).meta.source_format == "kineto"


def test_a_real_jax_cpu_run_reads_alike_from_its_xplane_and_its_json():
    from pathlib import Path

    from gaplens.analysis.steps import steps

    data = Path(__file__).parent / "data" / "formats"
    pb = load(data / "jax_cpu_train.xplane.pb", use_cache=False)
    js = load(data / "jax_cpu_train.perfetto_trace.json.gz", use_cache=False)
    assert pb.meta.source_format == "xplane" and js.meta.source_format == "jax-trace-json"
    for t in (pb, js):
        assert "gpu" in t.meta.lacks and "cpu" not in t.meta.lacks
        s = steps(t)
        assert s.count == 6 and s.label.startswith("train")
    for kind in (Kind.PYTHON, Kind.ANNOTATION):
        assert int((pb.kind == kind).sum()) == int((js.kind == kind).sum()) > 0


def test_a_real_jax_h200_run_equals_the_reference_in_both_files():
    from pathlib import Path

    data = Path(__file__).parent / "data" / "formats"
    raw = (data / "jax_h200_train.xplane.pb").read_bytes()
    pb = load(data / "jax_h200_train.xplane.pb", use_cache=False)
    want = _check(pb, raw)
    assert want["kernels"] == {0: 126} and want["copies"] == {0: 18}
    gpu = pb.mask(GPU_WORK_KINDS)
    assert (pb.launch[gpu] >= 0).all()
    js = load(data / "jax_h200_train.perfetto_trace.json.gz", use_cache=False)
    got = _reading(js)
    assert got["kernels"] == want["kernels"] and got["device_busy"] == want["device_busy"]


# ---- HLO modules as a phase family -------------------------------------------------------------
def reference_host_names(data: bytes) -> dict[str, int]:
    """How many timeline events of each name the raw ``/host:CPU`` plane holds (aggregates left out)."""
    counts: dict[str, int] = {}
    for raw in _msg(data).get(1, []):
        plane = _msg(raw)
        if plane.get(2, [b""])[0].decode() != "/host:CPU":
            continue
        names = {}
        for entry in plane.get(4, []):
            e = _msg(entry)
            names[e[1][0]] = _msg(e[2][0]).get(2, [b""])[0].decode()
        for raw_line in plane.get(3, []):
            for raw_ev in _msg(raw_line).get(4, []):
                ev = _msg(raw_ev)
                if 5 not in ev:
                    name = names.get(ev.get(1, [0])[0], "")
                    counts[name] = counts.get(name, 0) + 1
    return counts


def _module_families(trace) -> dict[str, int]:
    from gaplens.analysis.phases import phases

    out: dict[str, int] = {}
    for p in phases(trace):
        if p.name.startswith("jit_"):
            out[p.name] = out.get(p.name, 0) + 1
    return out


def test_h200_module_executions_are_a_phase_family_beside_the_train_steps(capsys):
    import gzip
    import json
    from pathlib import Path

    from gaplens.analysis.steps import steps

    data = Path(__file__).parent / "data" / "formats"
    raw = reference_host_names((data / "jax_h200_train.xplane.pb").read_bytes())
    # one XLA module span per execution, and PjRt's execute event agrees on the count
    assert raw["jit_train_step:XLA GPU module"] == raw["CommonPjRtLoadedExecutable::Execute (jit_train_step)"] == 6
    doc = json.loads(gzip.decompress((data / "jax_h200_train.perfetto_trace.json.gz").read_bytes()))
    in_json = sum(
        1 for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("name") == "jit_train_step:XLA GPU module"
    )
    assert in_json == 6
    for path in ("jax_h200_train.xplane.pb", "jax_h200_train.perfetto_trace.json.gz"):
        t = load(data / path, use_cache=False)
        assert _module_families(t) == {"jit_train_step": 6}, path
        s = steps(t)
        assert s.label == "train" and s.count == 6, path
        assert main(["summary", str(data / path), "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        fams = {(f["family"], f["count"]) for f in out["phase_families"]}
        assert {("train", 6), ("jit_train_step", 6)} <= fams, path
        assert out["step"]["label"] == "train" and out["step"]["count"] == 6
        assert sum(p["name"] == "jit_train_step" for p in out["phases"]) == 6


def test_mi300x_module_executions_are_a_phase_family(capsys):
    import json

    path = shared_file(MI300X)
    raw = reference_host_names(path.read_bytes())
    modules = {k: v for k, v in raw.items() if k.endswith(":XLA GPU module")}
    assert modules == {"jit_forward_3d_conv:XLA GPU module": 80}
    assert raw["PjRtStreamExecutorLoadedExecutable::ExecuteHelper"] == 80  # one per execution, per device
    t = load(path, use_cache=False)
    assert _module_families(t) == {"jit_forward_3d_conv": 80}
    assert main(["summary", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert ("jit_forward_3d_conv", 80) in {(f["family"], f["count"]) for f in out["phase_families"]}
    assert out["step"] is None  # no step annotations; the modules' executions overlap (8 devices): not steps


def test_kernels_carry_their_xla_op_and_module_as_details():
    from pathlib import Path

    t = load(Path(__file__).parent / "data" / "formats" / "jax_h200_train.xplane.pb", use_cache=False)
    k = np.flatnonzero(t.kind == Kind.KERNEL)
    details = {t.details[int(i)] for i in t.detail_id[k].tolist()}
    assert all("hlo_op " in d and "hlo_module jit_train_step" in d for d in details)
    # the viewer's details panel shows them on the kernel's ``args`` line (as a PyTorch kernel's op args)
    from gaplens.tui.details import describe
    from gaplens.tui.navigate import Selection
    from gaplens.tui.viewmodel import build_model

    i = int(k[0])
    lines = dict(describe(build_model(t), Selection(int(t.start_ns[i]), int(t.end_ns[i]), event=i)))
    assert "hlo_op command_buffer_1" in lines["args"] and "hlo_module jit_train_step" in lines["args"]


def test_a_gpu_only_space_spans_each_run_of_one_modules_kernels(tmp_path):
    """No host plane: each run of consecutive kernels of one HLO module (across streams) is one execution."""
    from gaplens.analysis.phases import phases

    S = xb.STAT_NAMES
    # stream 7: f f . g . f f      stream 8: . . f . . . .    (1 us slots, each kernel 0.8 us)
    layout = [(7, 0, "jit_f"), (7, 1, "jit_f"), (8, 2, "jit_f"), (7, 3, "jit_g"), (7, 5, "jit_f"), (7, 6, "jit_f")]
    lines = [
        xb.line_bytes(
            s,
            f"Stream #{s}(Kernel)",
            1000,
            [
                xb.Ev(1, t * 1_000_000, 800_000, {xb.HLO_OP: "fusion.1", xb.HLO_MODULE: m})
                for ss, t, m in layout
                if ss == s
            ],
        )
        for s in (7, 8)
    ]
    path = tmp_path / "gpu_only.xplane.pb"
    path.write_bytes(xb.space_bytes([xb.plane_bytes(1, "/device:GPU:0", lines, {1: "fusion_1"}, S)]))
    t = load(path, use_cache=False)
    got = [(p.name, p.host_start_ns, p.host_end_ns) for p in phases(t)]
    assert got == [("jit_f", 0, 2800), ("jit_g", 3000, 3800), ("jit_f", 5000, 6800)]  # ns from the first kernel
    assert "cpu" in t.meta.lacks  # rows drawn from GPU work are no host side


def test_module_rows_leave_what_a_trace_lacks_alone():
    from pathlib import Path

    t = load(Path(__file__).parent / "data" / "formats" / "jax_h200_train.xplane.pb", use_cache=False)
    assert t.meta.lacks == ["shapes"]
