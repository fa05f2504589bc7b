"""The columnar Kineto path on every trace: layout blocks, structural blocks, rewinds, twins, Input Dims.

Each test compares against an independent reading of the same JSON (the stdlib
decoder, or the per-event fallback forced by refusing every Arrow parse), so a
difference in any column fails it.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gaplens.loaders import load
from gaplens.loaders.kineto import reader as kineto
from gaplens.loaders.kineto.jsonblocks import EventBlocks, arrow_input
from gaplens.loaders.kineto.opdetail import EXTRA_KEYS, op_args
from gaplens.loaders.kineto.reader import LoadStats
from gaplens.loaders.model import Kind
from tests.conftest import BUNDLED, PUBLIC, ROOT, SAMPLES, sample
from tests.strategies import kineto_events

FILES = sorted(
    [
        *SAMPLES.glob("*.json.gz"),
        *PUBLIC.glob("*/*.json*"),
        *(ROOT / "tests" / "data").glob("*.json.gz"),
        *BUNDLED.glob("*.json.gz"),
    ]
)
COLUMNS = ("lane", "depth", "start_ns", "end_ns", "kind", "corr", "bytes", "launch")


def _raw_events(path: Path) -> list:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = json.loads(raw)
    return doc if isinstance(doc, list) else doc["traceEvents"]


def _same(a, b) -> None:
    for col in COLUMNS:
        assert np.array_equal(getattr(a, col), getattr(b, col)), col
    assert [a.names[i] for i in a.name_id] == [b.names[i] for i in b.name_id]
    assert [a.details[i] for i in a.detail_id] == [b.details[i] for i in b.detail_id]
    assert a.lanes == b.lanes and a.meta.origin_ns == b.meta.origin_ns


def _per_event(monkeypatch, path):
    """The trace as the per-event fallback reads it: every Arrow parse refused."""

    def refuse(text, options):
        raise pa.ArrowInvalid("forced")

    with monkeypatch.context() as m:
        m.setattr(kineto, "_read_json", refuse)
        return load(path, use_cache=False)


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_every_sample_reads_without_the_per_event_path(path):
    stats = LoadStats()
    load(path, use_cache=False, stats=stats)
    assert stats.slow_events == 0, stats
    assert stats.events == len(_raw_events(path))


# Real traces with several processes, named pids ("Spans", "Traces"), many streams and details.
MERGED = [p for p in FILES if p.stat().st_size < 250_000]


@pytest.mark.parametrize("path", MERGED, ids=[p.name for p in MERGED])
def test_blocks_classified_apart_merge_into_the_ids_of_one_reading(path, monkeypatch):
    """Each block is classified against a Context of its own on a worker thread, then merged in
    file order: names, lanes, named pids and process/thread names get the ids that one Context
    reading the whole file gives them (details are registered kind by kind within a block, so
    their order follows the blocks; every event still reads the same text), and the per-event
    reading agrees on every event."""
    with monkeypatch.context() as m:
        m.setattr(kineto, "BLOCK_SIZE", 1 << 30)
        whole = load(path, use_cache=False)  # one block: one Context, as a single thread reads it
    _small_blocks(monkeypatch, 1 << 11)
    monkeypatch.setattr(kineto, "WORKERS", 4)
    stats = LoadStats()
    got = load(path, use_cache=False, stats=stats)
    assert stats.layout_blocks + stats.structure_blocks >= 3
    _same(got, whole)
    assert (got.names, got.lanes, sorted(got.details)) == (whole.names, whole.lanes, sorted(whole.details))
    assert (got.meta.processes, got.meta.threads) == (whole.meta.processes, whole.meta.threads)
    assert got.meta.extra.get("unknown_categories") == whole.meta.extra.get("unknown_categories")
    assert np.array_equal(got.name_id, whole.name_id)
    _same(got, _per_event(monkeypatch, path))


def test_named_pids_met_in_another_order_by_a_later_block(tmp_path, monkeypatch):
    """A block meets "beta" before "alpha" where the file met "alpha" first: its own ids for the two
    names are swapped against the file's, and the merge must swap them back (lanes, thread names);
    within a block, names get their ids in the order the per-event reader meets them."""
    _small_blocks(monkeypatch, 1 << 10)
    monkeypatch.setattr(kineto, "WORKERS", 4)

    def op(pid: str, tid: str, i: int) -> dict:
        return {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": pid, "tid": tid, "ts": 100 * i, "dur": 5}

    events = [{"ph": "M", "name": "thread_name", "pid": "alpha", "tid": "main", "args": {"name": "A"}}]
    events += [op("alpha", "main", i) for i in range(40)]
    events += [op("beta" if i % 2 else "alpha", "side" if i % 3 else "main", i) for i in range(40, 120)]
    events += [{"ph": "M", "name": "thread_name", "pid": "beta", "tid": "side", "args": {"name": "B"}}]
    events += [op("beta", "side", i) for i in range(120, 160)]
    # Within one block: a tid named before a new pid, and a thread named after an event of another
    # new process: ids go event by event, pid before tid, metadata where it stands.
    events += [op("alpha", "late", 160), op("delta", "late", 161)]
    events += [{"ph": "M", "name": "thread_name", "pid": "gamma", "tid": "gt", "args": {"name": "G"}}]
    events += [op("gamma", "gt", 162)]
    path = _write(tmp_path, {"traceEvents": events}, "named.json", indent=2)
    stats = LoadStats()
    got = load(path, use_cache=False, stats=stats)
    want = _per_event(monkeypatch, path)
    assert stats.layout_blocks > 5
    _same(got, want)
    assert sorted(got.meta.threads.values()) == ["A", "B", "G"] and got.meta.threads == want.meta.threads
    assert len({(ln.pid, ln.tid) for ln in got.lanes}) == 7


def test_kineto_layout_is_cut_at_its_separator(monkeypatch):
    """A 40 MB trace from the writer: every block but the first and the tail is cut at '},\\n  {';
    a trace estimated past BIG_JSON is cut in the bigger blocks."""
    stats = LoadStats()
    path = sample("decode_eager.json.gz")
    load(path, use_cache=False, stats=stats)
    size = len(gzip.decompress(path.read_bytes()))
    assert stats.layout_blocks >= size // kineto.BLOCK_SIZE - 2 and stats.structure_blocks <= 2, stats
    assert stats.rewinds == 0
    monkeypatch.setattr(kineto, "BIG_JSON", 1)
    big = LoadStats()
    load(path, use_cache=False, stats=big)
    assert size // kineto.BIG_BLOCK_SIZE - 2 <= big.layout_blocks <= size // kineto.BIG_BLOCK_SIZE + 2, big


def test_layout_pieces_end_at_the_buffers_last_event_and_average_a_block():
    """The framer cuts at the last separator it holds: a piece is whole events, at most a block
    plus a chunk, and only the part of one event that follows the cut is carried over."""
    events = [{"ph": "X", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(3000)]
    text = json.dumps({"traceEvents": events}, indent=2).encode()
    chunk, block = 997, 20_000
    longest = max(len(json.dumps(e, indent=2)) for e in events) + 8
    blocks = EventBlocks([text[i : i + chunk] for i in range(0, len(text), chunk)], block)
    sizes = []
    for piece in blocks:
        if piece.gap is not None:
            raw = piece.raw()
            assert raw.startswith(b"{") and raw.endswith(b"}")
            assert len(raw) <= block + chunk + longest
            sizes.append(len(raw))
        blocks.confirm(piece.seq)
    assert len(sizes) > 10 and 0.8 * block <= sum(sizes[:-1]) / len(sizes[:-1]) <= 1.2 * block, sizes


def _write(tmp_path: Path, doc, name: str, **dump) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc, **dump))
    return path


def _small_blocks(monkeypatch, size: int = 700) -> None:
    """Blocks of ``size`` bytes from reads of 256, so a few KB of JSON make many layout blocks."""
    from gaplens.loaders import files

    monkeypatch.setattr(kineto, "BLOCK_SIZE", size)
    monkeypatch.setattr(files, "READ_SIZE", 256)


def _events(n: int, first_ts: int = 1_000_000) -> list[dict]:
    """A host thread launching kernels on two streams, with record_shapes-style args."""
    out: list[dict] = [{"ph": "M", "name": "thread_name", "pid": 7, "tid": 8, "args": {"name": "main"}}]
    for i in range(n):
        ts = first_ts + 10 * i
        out.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": f"aten::op{i % 5}",
                "pid": 7,
                "tid": 8,
                "ts": ts,
                "dur": 4,
                "args": {"External id": i, "Input Dims": [[i % 3, 4], []], "Input type": ["float", ""]},
            }
        )
        launch = {"correlation": 100 + i}
        out.append(
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 8, "ts": ts + 1,
             "dur": 2, "args": launch}
        )  # fmt: skip
        work = {"correlation": 100 + i, "stream": 7 + (i % 2), "grid": [i % 4, 1, 1]}
        out.append(
            {"ph": "X", "cat": "kernel", "name": f"k{i % 3}", "pid": 0, "tid": 7 + (i % 2), "ts": ts + 5,
             "dur": 3, "args": work}
        )  # fmt: skip
    return out


def test_one_line_trace_is_cut_by_structure_and_reads_like_its_indented_twin(tmp_path, monkeypatch):
    _small_blocks(monkeypatch)
    doc = {"schemaVersion": 1, "traceEvents": _events(60)}
    flat, indented = LoadStats(), LoadStats()
    a = load(_write(tmp_path, doc, "flat.json"), use_cache=False, stats=flat)
    b = load(_write(tmp_path, doc, "indented.json", indent=2), use_cache=False, stats=indented)
    assert flat.layout_blocks == 0 and flat.structure_blocks > 3
    assert indented.layout_blocks > 3 and indented.rewinds == 0
    _same(a, b)


def test_a_cut_inside_an_event_rewinds_to_structure(tmp_path, monkeypatch):
    """An args list of objects written with the events' own separator: the layout cut lands inside an event.

    The padding after the inner separator is longer than a block, so some buffer ends in
    it and its last separator is the inner one: the piece ends in an unclosed object.
    """
    _small_blocks(monkeypatch, 400)
    events = _events(40)
    body = ",\n  ".join(json.dumps(e) for e in events[:30])
    trap = (
        '{"ph": "X", "cat": "cpu_op", "name": "trap", "pid": 7, "tid": 8, "ts": 2000000, "dur": 1, '
        '"args": {"l": [{"a": 1},\n  {"b": 2}], "pad": "' + "x" * 3000 + '"}}'
    )
    tail = ",\n  ".join(json.dumps(e) for e in events[30:])
    path = tmp_path / "trap.json"
    path.write_text('{"traceEvents": [\n  ' + body + ",\n  " + trap + ",\n  " + tail + "\n]}")
    stats = LoadStats()
    got = load(path, use_cache=False, stats=stats)
    assert stats.rewinds >= 1 and stats.slow_events == 0 and stats.layout_blocks > 0, stats
    assert len(got) == 3 * 40 + 1
    _same(got, _per_event(monkeypatch, path))


def test_mixed_types_are_read_through_twins(tmp_path, monkeypatch):
    """ROCm's "stream": "0x0", Triton's "grid": "grid(100,)", string pids and times, 6-digit fractions."""
    _small_blocks(monkeypatch)
    events = _events(50)
    kernels = [e for e in events if e.get("cat") == "kernel"]
    kernels[10]["args"]["stream"] = "0x0"
    kernels[11]["args"]["grid"] = "grid(100,)"
    kernels[12]["args"]["correlation"] = "112"
    kernels[13]["pid"] = "0"
    kernels[14]["ts"] = "1000143.25"
    kernels[15]["dur"] = 0.123456
    events[5]["tid"] = "8"
    path = _write(tmp_path, {"traceEvents": events}, "mixed.json", indent=2)
    stats = LoadStats()
    got = load(path, use_cache=False, stats=stats)
    assert stats.slow_events == 0 and {"stream", "grid", "correlation"} <= set(stats.twins), stats
    _same(got, _per_event(monkeypatch, path))
    details = {got.details[i] for i in got.detail_id}
    assert "grid grid(100,)" in details


def test_record_shapes_fields_any_depth(tmp_path, monkeypatch):
    """Input Dims of any depth read from the text; odd values and spacing read as the per-event path does;
    the op's other recorded args follow its dims in its detail, each decoded back to what the file holds."""
    _small_blocks(monkeypatch)
    events = _events(30)
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    ops[1]["args"]["Input Dims"] = [[64, 2048], [], [[1, 2], [3]]]  # a TensorList input: one level deeper
    ops[2]["args"]["Input Dims"] = [[1.5, 2]]  # not integers: decoded from its own event
    ops[3]["args"]["Input Dims"] = []  # says nothing: no detail
    ops[4]["args"]["Input Dims"] = [list(range(200))]  # longer than the first look
    ops[5]["args"]["Concrete Inputs"] = ["", "[64, 2048]", "True"]
    ops[5]["args"]["Call stack"] = "a.py(1): f;b.py(2): g"
    ops[6]["args"] = {"Input dims": [[3, 3]]}  # the 2020 spelling
    ops[7]["args"]["Input Strides"] = [[1, 0], [], [[2, 1], [1]]]  # a broadcast dim, a TensorList
    ops[7]["args"]["Concrete Inputs"] = ['"q"  Input Strides [9]', None]  # text that reads like the next arg
    ops[8]["args"]["flops"] = 262144
    ops[9]["args"]["Input type"] = ["c10::BFloat16", None]
    ops[10]["args"]["Input Strides"] = []  # says nothing: left out
    path = _write(tmp_path, {"traceEvents": events}, "shapes.json", indent=2)
    compact = _write(tmp_path, {"traceEvents": events}, "compact.json", separators=(",", ":"))
    stats = LoadStats()
    got = load(path, use_cache=False, stats=stats)
    assert stats.slow_events == 0
    _same(got, _per_event(monkeypatch, path))
    _same(got, load(compact, use_cache=False))
    details = {got.details[i] for i in got.detail_id}
    typed = '  Input type ["float", ""]'
    assert "Input Dims [[64, 2048], [], [[1, 2], [3]]]" + typed in details
    assert "Input Dims [[1.5, 2]]" + typed in details
    assert "Input Dims [[3, 3]]" in details
    assert f"Input Dims [{list(range(200))}]" + typed in details
    ops_by_name = {}
    for i in np.flatnonzero(got.kind == int(Kind.CPU_OP)).tolist():
        ops_by_name.setdefault(int(got.start_ns[i] + got.meta.origin_ns), op_args(got.details[int(got.detail_id[i])]))
    for op in ops:
        args = op["args"]
        want = {k: args[k] for k in ("Input Dims", *EXTRA_KEYS) if k in args}
        if want.get("Input Strides") == []:
            del want["Input Strides"]  # an empty list says nothing
        if "Input dims" in args:
            want = {"Input Dims": args["Input dims"]}
        if not want.get("Input Dims"):
            want = {}  # no dims: the op keeps no args
        assert ops_by_name[op["ts"] * 1000] == want, op


_names = st.text(st.sampled_from(list('ab{}[]",:\\ /é\n\t')), max_size=6)
_nested = st.lists(st.dictionaries(_names, st.integers()), max_size=3)
_event = kineto_events(_names, st.one_of(st.integers(), _names, _nested))


@settings(max_examples=60, deadline=None)
@given(st.lists(_event, min_size=1, max_size=30), st.sampled_from([1, 2, 4]), st.integers(64, 2048), st.booleans())
def test_any_layout_gives_back_the_events(events, indent, block, bare):
    """Layout and structural blocks, as handed to Arrow, hold exactly the events, whatever nests inside them."""
    doc = events if bare else {"schemaVersion": 1, "traceEvents": events, "z": [{"a": 1}, {"b": 2}]}
    text = json.dumps(doc, indent=indent).encode()
    blocks = EventBlocks([text[i : i + 97] for i in range(0, len(text), 97)], block)
    got: list = []
    for piece in blocks:
        data, _ = arrow_input(piece, {})
        try:
            got_here = _decode_all(data.tobytes().decode())
        except ValueError:  # as Arrow would refuse it: a layout cut inside an event
            assert piece.gap is not None
            blocks.rewind(piece.seq)
            continue
        got.extend(got_here)
        blocks.confirm(piece.seq)
    assert got == events and not blocks.warnings and blocks.damaged_at is None


def _decode_all(text: str) -> list:
    """Whitespace-separated JSON objects, as Arrow reads a block; string ids renamed back."""
    dec, pos, out = json.JSONDecoder(), 0, []
    while text[pos:].strip():
        pos += len(text[pos:]) - len(text[pos:].lstrip())
        obj, pos = dec.raw_decode(text, pos)
        if not isinstance(obj, dict):
            raise ValueError("not an event")
        for key in ("pid", "tid"):  # string ids come out of the structural scan renamed
            if key[0] + "is" in obj:
                obj[key] = obj.pop(key[0] + "is")
        out.append(obj)
    return out


def test_a_headless_load_stays_lean(tmp_path):
    """Loading (Kineto, nsys, then a cache hit) imports neither pandas nor Textual (~40 MB of RSS together)."""
    import subprocess
    import sys

    kineto_path, nsys_path = str(sample("train_step.json.gz")), str(sample("nsys_train_step.sqlite.gz"))
    code = (
        "import sys; from gaplens.loaders import load\n"
        f"load({kineto_path!r}); load({kineto_path!r})\n"
        f"load({nsys_path!r}, use_cache=False)\n"
        "print(sorted(m for m in ('pandas', 'textual') if m in sys.modules))"
    )
    env = {"GAPLENS_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def _block(first: int, n: int):
    from gaplens.loaders.kineto.context import Block

    i = np.arange(first, first + n)
    return Block(
        i.astype(np.int32), i * 10, i + 1, i.astype(np.int32), (i % 7).astype(np.int8), i - 5, i * 3, i.astype(np.int32)
    )


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 40_000), min_size=1, max_size=12), st.integers(1, 50))
def test_kept_columns_hold_every_block_in_order_whatever_the_estimate(sizes, skew):
    """Columns fill from an estimate of the file: right or wrong, take() gives the blocks' columns in order."""
    from gaplens.loaders.kineto.context import Columns

    kept, at, read = Columns(), 0, 0
    for n in sizes:
        read += 1000
        kept.append(_block(at, n), read, read * len(sizes) // skew)  # an estimate up to 50x too small
        at += n
    want = _block(0, at)
    for name in ("lane", "start", "dur", "name_id", "kind", "corr", "nbytes", "detail_id"):
        got = kept.take(name)
        assert got.dtype == getattr(want, name).dtype and (got == getattr(want, name)).all(), name


def test_kept_columns_are_read_in_place_when_the_estimate_holds():
    """The build gets a view of the one buffer each column was filled in: nothing joined, nothing copied."""
    from gaplens.loaders.kineto.context import Columns

    kept = Columns()
    for k in range(10):
        kept.append(_block(k * 5000, 5000), (k + 1) * 1000, 10_000)
    start = kept.take("start")
    assert start.base is not None and start.base.size >= 50_000 and (start == np.arange(50_000) * 10).all()
