"""Readings kept with the cache entry (store.readings): a reopen serves them unchanged and computes none;
a damaged, foreign or stale file is a miss and the reading is computed again."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

from gaplens.analysis import memo
from gaplens.analysis.critical_path import critical_path
from gaplens.analysis.gaps import analyse_gaps, gap_columns
from gaplens.analysis.phases import phases
from gaplens.analysis.smells import smells
from gaplens.analysis.steps import steps
from gaplens.loaders import load
from gaplens.store import cache
from gaplens.store import readings as persist
from gaplens.tui.commands.readings import render_top_gaps
from gaplens.tui.commands.summary import render_text

DATA = Path(__file__).resolve().parent / "data"
GAPS = "gaplens.analysis.gaps._default_columns"


@pytest.fixture()
def trace_file(tmp_path, monkeypatch):
    """A real DDP rank trace (comm, steps, blank regions) with its own cache; every reading is kept."""
    monkeypatch.setenv("GAPLENS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(persist.ENV, raising=False)
    monkeypatch.setattr(persist, "MIN_COMPUTE_S", 0.0)
    monkeypatch.setattr(persist, "READ_BACK_BYTES_PER_S", float("inf"))
    monkeypatch.setattr(persist, "READ_BACK_S_PER_OBJECT", 0.0)
    path = tmp_path / "rank0.json.gz"
    shutil.copyfile(DATA / "ddp_straggler_rank0.json.gz", path)
    memo.clear()
    yield path
    memo.clear()


def _readings(trace) -> dict:
    gaps = analyse_gaps(trace)
    return {
        "columns": gap_columns(trace),
        "gaps": gaps,
        "critical path": critical_path(trace),
        "smells": smells(trace, gap_columns(trace)),
        "phases": phases(trace),
        "steps": steps(trace),
        "summary": render_text(trace, 10),
        "top gaps": render_top_gaps(trace, 20),
    }


def _same(a, b, where="") -> None:
    """Deep equality that compares numpy arrays by dtype and content and dataclasses field by field."""
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b), where
    elif dataclasses.is_dataclass(a) and not isinstance(a, type):
        assert type(a) is type(b), where
        for f in dataclasses.fields(a):
            if f.name == "trace":
                continue
            _same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), where
        for k in a:
            _same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def _computed(monkeypatch) -> list[str]:
    """Names of the readings computed (not served from a file) from now on."""
    seen: list[str] = []
    keep = persist.keep

    def spy(trace, reading, value, compute_s):
        seen.append(reading)
        return keep(trace, reading, value, compute_s)

    monkeypatch.setattr(persist, "keep", spy)
    return seen


def _fresh(path):
    """The readings of a load that neither reads nor writes any cache: the reference."""
    memo.clear()
    before = os.environ.get(persist.ENV)
    os.environ[persist.ENV] = "0"
    try:
        return _readings(load(path, use_cache=False))
    finally:
        if before is None:
            del os.environ[persist.ENV]
        else:
            os.environ[persist.ENV] = before
        memo.clear()


def _reading_file(path, reading=GAPS) -> Path:
    found = list((Path(os.environ["GAPLENS_CACHE_DIR"]) / "traces").glob(f"*.readings/{reading}.pkl"))
    assert len(found) == 1, found
    return found[0]


def test_a_reopen_serves_identical_readings_and_computes_none(trace_file, monkeypatch):
    reference = _fresh(trace_file)
    first = _readings(load(trace_file))  # builds the entry and keeps the readings
    _same(first, reference)
    memo.clear()
    computed = _computed(monkeypatch)
    reopened = _readings(load(trace_file))
    assert computed == []  # every reading came from its file
    _same(reopened, reference)


def test_a_trace_not_from_the_cache_keeps_nothing(trace_file):
    _readings(load(trace_file, use_cache=False))
    assert not list((Path(os.environ["GAPLENS_CACHE_DIR"])).rglob("*.pkl"))


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "header"])
def test_a_damaged_readings_file_is_computed_again(trace_file, monkeypatch, damage):
    reference = _fresh(trace_file)
    _readings(load(trace_file))
    memo.clear()
    target = _reading_file(trace_file)
    blob = bytearray(target.read_bytes())
    if damage == "flip":
        blob[-10] ^= 0xFF
    elif damage == "truncate":
        blob = blob[: len(blob) // 2]
    elif damage == "empty":
        blob = bytearray()
    else:
        blob[len(persist.MAGIC) + 6] ^= 0x01  # inside the header (the token)
    target.write_bytes(bytes(blob))
    computed = _computed(monkeypatch)
    reopened = _readings(load(trace_file))
    assert computed == [GAPS]
    _same(reopened, reference)
    assert target.read_bytes() != bytes(blob)
    memo.clear()
    computed.clear()
    _readings(load(trace_file))
    assert computed == []  # rewritten whole: the next reopen reads it


class _Boom:
    def __reduce__(self):
        return (os.system, ("echo persisted-pickle-ran > /dev/null",))


def test_a_file_naming_a_function_is_refused_not_run(trace_file, monkeypatch):
    """A well-formed file (right header, right digest) whose pickle names a global outside the allowlist."""
    reference = _fresh(trace_file)
    _readings(load(trace_file))
    memo.clear()
    target = _reading_file(trace_file)
    blob = target.read_bytes()
    start = len(persist.MAGIC) + persist._HEADER.size + persist._HEADER.unpack_from(blob, len(persist.MAGIC))[0]
    payload = pickle.dumps(_Boom(), protocol=5)
    target.write_bytes(blob[:start] + hashlib.sha256(payload).digest() + payload)
    ran: list[tuple] = []
    monkeypatch.setattr(os, "system", lambda *a: ran.append(a) or 0)
    computed = _computed(monkeypatch)
    reopened = _readings(load(trace_file))
    assert ran == [] and computed == [GAPS]
    _same(reopened, reference)


def test_changed_code_is_a_miss(trace_file, monkeypatch):
    _readings(load(trace_file))
    memo.clear()
    monkeypatch.setattr(persist, "code_stamp", lambda: "another version of analysis/")
    computed = _computed(monkeypatch)
    _readings(load(trace_file))
    assert GAPS in computed and len(computed) >= 5


def test_a_new_user_gpu_spec_file_is_a_miss(trace_file, monkeypatch, tmp_path):
    """Readings that consult the user's GPU rows (the experiment's floor branch) are not served stale."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    _readings(load(trace_file))
    memo.clear()
    spec = tmp_path / "config" / "gaplens" / "gpus.json"
    spec.parent.mkdir(parents=True)
    spec.write_text("[]")
    computed = _computed(monkeypatch)
    _readings(load(trace_file))
    assert GAPS in computed


def test_a_rebuilt_entry_is_a_miss(trace_file, monkeypatch):
    """The entry is rebuilt (a new token): the old readings are not served."""
    _readings(load(trace_file))
    memo.clear()
    assert cache.store(str(trace_file), load(trace_file, use_cache=False))
    computed = _computed(monkeypatch)
    _readings(load(trace_file))
    assert GAPS in computed


def test_the_code_stamp_covers_every_analysis_file():
    from gaplens import analysis

    here = Path(analysis.__file__).resolve().parent
    assert (here / "gaps.py").is_file() and (here / "floor" / "reading.py").is_file()
    stamp = persist.code_stamp()
    assert len(stamp) == 32


def test_off_switch(trace_file, monkeypatch):
    monkeypatch.setenv(persist.ENV, "0")
    _readings(load(trace_file))
    assert not list((Path(os.environ["GAPLENS_CACHE_DIR"])).rglob("*.pkl"))


def test_a_symlink_at_the_name_is_not_followed(trace_file, monkeypatch, tmp_path):
    _readings(load(trace_file))
    memo.clear()
    target = _reading_file(trace_file)
    elsewhere = tmp_path / "planted.pkl"
    elsewhere.write_bytes(target.read_bytes())  # a valid file, reached through a link
    target.unlink()
    target.symlink_to(elsewhere)
    computed = _computed(monkeypatch)
    _readings(load(trace_file))
    assert computed == [GAPS]
    assert not target.is_symlink()  # rewritten as a file of its own


def test_a_reading_past_the_limit_is_not_kept_and_leaves_no_file(trace_file, monkeypatch):
    """The payload streams into its file (no copy of it in memory): one that grows past what is worth
    keeping stops the write, and neither the reading's file nor a temp file stays behind."""
    trace = load(trace_file)
    graph_bytes = 2 * len(trace)  # the graph's pred column alone holds 2n ids of at least 4 bytes each
    monkeypatch.setattr(persist, "MAX_BYTES", graph_bytes)
    critical_path(trace)
    kept = {p.name for p in (Path(os.environ["GAPLENS_CACHE_DIR"]) / "traces").rglob("*.readings/*")}
    assert "gaplens.analysis.critical_path.graph.pkl" not in kept
    assert not [name for name in kept if name.endswith(".tmp")]
    monkeypatch.setattr(persist, "MAX_BYTES", 1 << 30)
    memo.clear()
    critical_path(load(trace_file))  # now kept: the file holds the digest of what was streamed
    path = _reading_file(trace_file, "gaplens.analysis.critical_path.graph")
    blob = path.read_bytes()
    at = len(persist.MAGIC) + 4 + int.from_bytes(blob[len(persist.MAGIC) : len(persist.MAGIC) + 4], "little")
    assert hashlib.sha256(blob[at + 32 :]).digest() == blob[at : at + 32]
