"""Each kernel's launching op call (``analysis.floor.opcalls``), from the loaded Trace alone (issue 31).

Expectations come from the raw JSON, read here with the stdlib: a kernel's launch call is the runtime
event with its correlation id, the op that launched it the innermost ``cpu_op`` of that thread open
at the launch, and the op's args are the event's own.
"""

from __future__ import annotations

import builtins
import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from gaplens.analysis import memo
from gaplens.analysis.floor import opcalls
from gaplens.analysis.floor.floors import floors
from gaplens.analysis.floor.opcalls import kernel_calls
from gaplens.analysis.floor.opsize import has_formula
from gaplens.loaders import load
from gaplens.loaders.model import Kind

DATA = Path(__file__).parent / "data"
RUNTIME = ("cuda_runtime", "cuda_driver")


def _raw(path: Path) -> list[dict]:
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return [e for e in (doc["traceEvents"] if isinstance(doc, dict) else doc) if e.get("ph") == "X"]


def _expected(events: list[dict]) -> dict[int, tuple[dict, bool] | None]:
    """Per kernel correlation id: (the op whose args size it, sized?) by the documented rule, or None.

    The innermost op open at the launch launched it; when that op has no formula, the nearest
    enclosing op with one sizes it, unless an op under that one was sized on its own.
    """
    ops: dict[tuple, list[dict]] = {}
    for e in events:
        if e.get("cat") == "cpu_op":
            ops.setdefault((e["pid"], e["tid"]), []).append(e)
    launches = {e["args"]["correlation"]: e for e in events if e.get("cat") in RUNTIME}  # one process here

    def chain(call: dict) -> list[dict]:  # ops open at the launch, innermost first
        t = call["ts"]
        open_ = [o for o in ops.get((call["pid"], call["tid"]), []) if o["ts"] <= t <= o["ts"] + o["dur"]]
        return sorted(open_, key=lambda o: (o["ts"], -o["dur"]), reverse=True)

    chains = {}
    for k in events:
        if k.get("cat") == "kernel":
            corr = k["args"]["correlation"]
            call = launches.get(corr)
            chains[corr] = chain(call) if call is not None else []
    covered = {id(o) for ch in chains.values() if ch and has_formula(ch[0]["name"]) for o in ch[1:]}
    out: dict[int, tuple[dict, bool] | None] = {}
    for corr, ch in chains.items():
        if not ch:
            out[corr] = None
            continue
        with_formula = next((o for o in ch if has_formula(o["name"])), None)
        if with_formula is not None and (with_formula is ch[0] or id(with_formula) not in covered):
            out[corr] = (with_formula, True)
        else:
            out[corr] = (ch[0], False)
    return out


@pytest.mark.parametrize("name", ["shapes_stack.json.gz", "round3/floor_calib.json.gz", "round3/decode_shapes.json.gz"])
def test_each_kernel_gets_the_op_open_at_its_launch_with_that_ops_args(name):
    path = DATA / name
    trace = load(str(path), use_cache=False)
    kc = kernel_calls(trace)
    assert kc.has_shapes and kc.why == ""
    want = _expected(_raw(path))
    kernels = np.flatnonzero(trace.kind == int(Kind.KERNEL))
    assert kernels.size == len(want)
    linked = 0
    for k in kernels.tolist():
        expected = want[int(trace.corr[k])]
        c = int(kc.call_of[k])
        if expected is None:
            assert c == -1
            continue
        op, sized = expected
        call = kc.calls[c]
        assert (call.name, call.dims, call.types, call.concrete) == (
            op["name"],
            op["args"]["Input Dims"],
            op["args"]["Input type"],
            op["args"]["Concrete Inputs"],
        )
        assert (call.size is not None) <= sized  # an op the rule does not count is never sized
        linked += 1
    assert linked == sum(v is not None for v in want.values()) > 0


def test_kernels_of_one_op_call_share_one_call_and_calls_differ_per_op_call():
    """A call is one op *call*: its kernels share it (their times add up), two calls of an op are two."""
    path = DATA / "round3" / "floor_calib.json.gz"
    trace = load(str(path), use_cache=False)
    kc = kernel_calls(trace)
    want = _expected(_raw(path))
    by_op: dict[int, set[int]] = {}
    for k in np.flatnonzero(kc.call_of >= 0).tolist():
        op, _ = want[int(trace.corr[k])]
        by_op.setdefault(id(op), set()).add(int(kc.call_of[k]))
    assert all(len(calls) == 1 for calls in by_op.values())
    assert len({next(iter(c)) for c in by_op.values()}) == len(by_op) == len(kc.calls)


def _nested(tmp_path: Path) -> Path:
    """Hand-built: aten::linear holding aten::t (no formula) and aten::addmm (formula), each launching;
    aten::relu_ under a no-formula op; aten::unknown_op under aten::mm with no other sized op under it;
    a launch outside any op; ops on another thread."""
    bf = "c10::BFloat16"
    ops = [
        ("aten::linear", 100, 100, [[64, 128], [256, 128], [256]], [bf, bf, bf]),
        ("aten::t", 110, 10, [[256, 128]], [bf]),
        ("aten::addmm", 130, 20, [[256], [64, 128], [128, 256], [], []], [bf, bf, bf, "Scalar", "Scalar"]),
        ("aten::mm", 300, 50, [[64, 128], [128, 256]], [bf, bf]),
        ("aten::unknown_op", 310, 20, [[64, 128]], [bf]),
        ("my::block", 400, 50, [[64, 256]], [bf]),
        ("aten::relu_", 410, 10, [[64, 256]], [bf]),
    ]
    ev = [
        {"ph": "X", "cat": "cpu_op", "name": n, "pid": 1, "tid": 1, "ts": ts, "dur": d,
         "args": {"Input Dims": dims, "Input type": types, "Concrete Inputs": [""] * len(dims)}}
        for n, ts, d, dims, types in ops
    ]  # fmt: skip
    other = {"Input Dims": [[1, 1], [1, 1]], "Input type": [bf, bf], "Concrete Inputs": ["", ""]}
    ev.append(
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 100, "dur": 999, "args": other}
    )
    for corr, ts in enumerate([115, 140, 315, 415, 600], start=1):
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts,
                   "dur": 2, "args": {"correlation": corr}})  # fmt: skip
        ev.append({"ph": "X", "cat": "kernel", "name": f"k{corr}", "pid": 0, "tid": 7, "ts": 1000 + 10 * corr,
                   "dur": 5, "args": {"correlation": corr, "device": 0, "stream": 7}})  # fmt: skip
    path = tmp_path / "nested.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    return path


def test_nesting_rule_on_a_hand_built_trace(tmp_path):
    path = _nested(tmp_path)
    trace = load(str(path), use_cache=False)
    kc = kernel_calls(trace)
    got = {}
    for k in np.flatnonzero(trace.kind == int(Kind.KERNEL)).tolist():
        c = int(kc.call_of[k])
        got[trace.names[int(trace.name_id[k])]] = None if c < 0 else (kc.calls[c].name, kc.calls[c].size is not None)
    assert got == {
        "k1": ("aten::t", False),  # linear encloses addmm, sized on its own: counting linear would count twice
        "k2": ("aten::addmm", True),
        "k3": ("aten::mm", True),  # nothing else under mm is sized: mm sizes its kernel
        "k4": ("aten::relu_", True),
        "k5": None,  # launched outside any op of its thread (the other thread's op does not count)
    }
    want = _expected(_raw(path))
    for k in np.flatnonzero(trace.kind == int(Kind.KERNEL)).tolist():
        expected = want[int(trace.corr[k])]
        assert got[trace.names[int(trace.name_id[k])]] == (
            None if expected is None else (expected[0]["name"], expected[1])
        )


def test_kernel_calls_never_reads_the_trace_file(tmp_path, monkeypatch):
    """The floor's link comes from the loaded Trace: the file moved away and every open refused, same calls."""
    src = tmp_path / "floor_calib.json.gz"
    shutil.copy(DATA / "round3" / "floor_calib.json.gz", src)
    trace = load(str(src), use_cache=False)
    want = _expected(_raw(src))
    src.rename(tmp_path / "gone.json.gz")
    memo.clear()

    def refuse(*args, **kwargs):
        raise AssertionError(f"opened {args[:1]}")

    monkeypatch.setattr(builtins, "open", refuse)
    monkeypatch.setattr(gzip, "open", refuse)
    monkeypatch.setattr(Path, "open", refuse)
    assert not hasattr(opcalls, "Source")
    kc = kernel_calls(trace)
    f = floors(trace)
    monkeypatch.undo()
    assert kc.has_shapes and len(kc.calls) > 0
    assert int(np.sum(f.sized)) > 0
    for k in np.flatnonzero(kc.call_of >= 0).tolist():
        assert kc.calls[int(kc.call_of[k])].name == want[int(trace.corr[k])][0]["name"]
