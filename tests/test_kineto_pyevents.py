"""A layout block's Python events parsed apart (``loaders/kineto/pyevents.py``) give the trace a single parse gives."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import numpy as np
import pytest

from gaplens.loaders.kineto import reader
from gaplens.loaders.kineto.reader import LoadStats, load_kineto
from gaplens.loaders.model import Kind

DATA = Path(__file__).parent / "data"
COLUMNS = ("lane", "depth", "start_ns", "end_ns", "name_id", "kind", "corr", "bytes", "detail_id", "launch")
COLUMNS += ("row_lane", "row_depth", "row_offsets", "row_maxend")


def _tiled(tmp_path: Path, copies: int = 12) -> Path:
    """shapes_stack's events written ``copies`` times over (~5 MB): past the first chunk, so that most
    blocks are cut at the writer's separator, the blocks this split applies to. Each copy's names and
    threads are its own (``c3/aten::mm``, tid + 3): every block meets names and lanes no block before it
    did, Python events' and others' interleaved, so their ids show the order they were numbered in."""
    text = gzip.decompress((DATA / "shapes_stack.json.gz").read_bytes())
    start = text.index(b"[", text.index(b'"traceEvents"')) + 1
    end = text.rindex(b"]")
    events = text[start:end].strip()
    parts = []
    for k in range(copies):
        copy = events.replace(b'"name": "', b'"name": "c%d/' % k)
        parts.append(re.sub(rb'"tid": (\d+)', lambda m, k=k: b'"tid": %d' % (int(m.group(1)) + k), copy))
    path = tmp_path / "shapes_stack_tiled.json"
    path.write_bytes(text[:start] + b"\n  " + b",\n  ".join(parts) + b"\n" + text[end:])
    return path


def _load(path: Path, split: bool, monkeypatch, block: int) -> tuple:
    monkeypatch.setattr(reader, "SPLIT_PYTHON", split)
    monkeypatch.setattr(reader, "BLOCK_SIZE", block)
    stats = LoadStats()
    return load_kineto(str(path), stats=stats), stats


def _same(a, b) -> None:
    for column in COLUMNS:
        x, y = getattr(a, column), getattr(b, column)
        assert x.dtype == y.dtype and np.array_equal(x, y), column
    assert a.names == b.names and a.details == b.details and a.lanes == b.lanes and a.meta == b.meta


@pytest.mark.parametrize(
    "name",
    ["tiled", pytest.param("options_all.json.gz", marks=pytest.mark.slow)],  # options_all: 297k events
)
def test_python_events_apart_read_as_one_parse(name, tmp_path, monkeypatch):
    path = _tiled(tmp_path) if name == "tiled" else DATA / name
    whole, one = _load(path, False, monkeypatch, 256 << 10)
    apart, split = _load(path, True, monkeypatch, 256 << 10)
    assert one.split_blocks == 0 and split.split_blocks > 0  # the split did happen
    assert split.slow_events == 0 and split.rewinds == 0
    assert int((apart.kind == int(Kind.PYTHON)).sum()) > 0
    _same(whole, apart)


def test_named_pids_turn_the_split_off(tmp_path, monkeypatch):
    """A pid written as a name gets its id in the order a single reader meets it: a block whose Python
    events have one is parsed whole, and the trace is the one a single parse gives."""
    text = _tiled(tmp_path).read_bytes()
    # The last Python event: by then the reader is cutting blocks at the writer's separator.
    at = text.rfind(b'"cat": "python_function"')
    pid = text.index(b'"pid": ', at)
    end = text.index(b",", pid)
    text = text[:pid] + b'"pid": "host-7"' + text[end:]
    # A name the reader meets after it in the same block (the next event's pid): numbered second.
    pid = text.index(b'"pid": ', text.index(b'"ph"', pid))
    end = text.index(b",", pid)
    text = text[:pid] + b'"pid": "host-8"' + text[end:]
    path = tmp_path / "named_pid.json"
    path.write_bytes(text)
    whole, _ = _load(path, False, monkeypatch, 256 << 10)
    apart, stats = _load(path, True, monkeypatch, 256 << 10)
    assert "pid" in stats.twins and 0 < stats.split_blocks < stats.layout_blocks  # all but its block
    _same(whole, apart)
    assert any(ln.pid <= -1000 for ln in apart.lanes)  # the named pid has its lane


#: One Python event of a late block rewritten as a hostile or unusual writer would: (what, by what).
HOSTILE = [
    ("name", b'"name": "esc\\"aped \\u00e9\\t"'),
    ("name", b'"name": ""'),
    ("pid", b'"pid": 9223372036854775807'),
    ("pid", b'"pid": "host-9"'),
    ("ts", b'"ts": "5096716331701.973"'),
    ("ts", b'"ts": 5096716331701.97312'),
    ("dur", b'"dur": -5.5'),
    ("dur", b""),  # no dur
    ("args", b'"args": {"correlation": 77}'),
    ("args", b'"args": {"Input Dims": [[2, 3]], "Input Strides": [[3, 1]]}'),
    ("args", b'"args": {"Python id": {"deep": [1, 2, {"x": null}]}}'),
    ("extra", b'"extra": [1, "two"]'),
]


_FIELD = rb'"(name|pid|tid|ts|dur|args)": ((?:"(?:[^"\\]|\\.)*"|\{[^{}]*\}|[^,\n]+))'


def _rewrite(text: bytes, key: str, value: bytes, nth_from_end: int = 40) -> bytes:
    """``text`` with the ``nth_from_end`` Python event's ``key`` written as ``value`` (b"": dropped; "extra":
    ``value`` added), its head (``{`` to its category) kept as the writer wrote it: the split still takes it."""
    at = len(text)
    for _ in range(nth_from_end):
        at = text.rfind(b'"cat": "python_function"', 0, at)
    end = text.index(b"\n  }", at) + 4
    head_end = at + len(b'"cat": "python_function"')
    fields = dict(
        re.findall(rb'"(name|pid|tid|ts|dur|args)": ((?:"(?:[^"\\]|\\.)*"|\{[^{}]*\}|[^,\n]+))', text[head_end:end])
    )
    assert set(fields) == {b"name", b"pid", b"tid", b"ts", b"dur", b"args"}
    fields.pop(key.encode(), None)
    body = b"".join(b', "%s": %s' % (k, v) for k, v in fields.items()) + (b", " + value if value else b"")
    return text[:head_end] + body + b"}" + text[end:]


@pytest.mark.parametrize(("key", "value"), HOSTILE, ids=[f"{k}-{i}" for i, (k, _) in enumerate(HOSTILE)])
def test_a_hostile_python_event_reads_as_one_parse_reads_it(key, value, tmp_path, monkeypatch):
    path = tmp_path / "hostile.json"
    path.write_bytes(_rewrite(_tiled(tmp_path).read_bytes(), key, value))
    got = []
    for split in (False, True):
        try:
            got.append(_load(path, split, monkeypatch, 256 << 10)[0])
        except Exception as exc:  # both must fail alike, or both read the same trace
            got.append(f"{type(exc).__name__}: {exc}")
    if isinstance(got[0], str) or isinstance(got[1], str):
        assert got[0] == got[1]
    else:
        _same(*got)
