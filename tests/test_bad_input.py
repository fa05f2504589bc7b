"""Damaged and hostile inputs, built from real samples: one stderr line, never a traceback."""

from __future__ import annotations

import gzip
import json
import platform
import re
import time

import numpy as np
import pytest

from gaplens.loaders import load
from gaplens.loaders.model import Kind, TraceError
from gaplens.tui.cli import main
from tests.conftest import sample

SMALL = "train_step.json.gz"


def _text(name: str = SMALL) -> str:
    return gzip.decompress(sample(name).read_bytes()).decode()


def _run(capsys, path) -> tuple[int, str, list[str]]:
    rc = main(["summary", str(path)])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, [line for line in err.splitlines() if line.strip()]


def _fails(capsys, path, words: str) -> str:
    rc, _, err = _run(capsys, path)
    assert rc == 2
    assert len(err) == 1, err
    assert re.search(words, err[0], re.IGNORECASE), err[0]
    return err[0]


def _event_ends(text: str) -> list[tuple[dict, int]]:
    """Each event of the array with the offset just after it, by the stdlib decoder."""
    dec = json.JSONDecoder()
    pos = text.index("[", text.index('"traceEvents"')) + 1
    out = []
    while True:
        while text[pos] in " \t\r\n,":
            pos += 1
        if text[pos] == "]":
            return out
        obj, pos = dec.raw_decode(text, pos)
        out.append((obj, pos))


def test_truncated_json_keeps_the_events_before_the_cut(tmp_path, capsys):
    text = _text()
    cut = int(len(text) * 0.6)
    path = tmp_path / "cut.json"
    path.write_text(text[:cut])
    rc, out, err = _run(capsys, path)
    assert rc == 0 and "kernels" in out.lower()
    assert len(err) == 1 and "truncated" in err[0]
    kept = [ev for ev, end in _event_ends(text) if end <= cut]
    want = sum(1 for ev in kept if ev.get("ph") == "X" and ev.get("cat") == "kernel")
    trace = load(path, use_cache=False)
    assert 0 < want == int((trace.kind == Kind.KERNEL).sum())


def test_truncated_recovery_is_one_pass(tmp_path):
    """A cut 40 MB trace loads about as fast as the whole one: no re-parsing from the end."""
    text = gzip.decompress(sample("decode_eager.json.gz").read_bytes())
    path = tmp_path / "cut.json"
    path.write_bytes(text[: len(text) - 1000])
    whole = tmp_path / "whole.json"
    whole.write_bytes(text)
    t0 = time.perf_counter()
    load(whole, use_cache=False)
    t1 = time.perf_counter()
    trace = load(path, use_cache=False)
    t2 = time.perf_counter()
    assert "truncated" in trace.meta.warnings[0]
    assert t2 - t1 < 2 * (t1 - t0) + 1.0


def test_truncated_gzip_is_one_warning(tmp_path, capsys):
    raw = sample(SMALL).read_bytes()
    path = tmp_path / "cut.json.gz"
    path.write_bytes(raw[: len(raw) // 2])
    rc, _, err = _run(capsys, path)
    assert rc == 0
    assert len(err) == 1 and "gzip stream is truncated" in err[0] and "kept the" in err[0]


def test_corrupt_gzip(tmp_path, capsys):
    raw = sample(SMALL).read_bytes()
    path = tmp_path / "bad.json.gz"
    path.write_bytes(raw[:10] + bytes(b ^ 0x5A for b in raw[10:4000]) + raw[4000:])
    _fails(capsys, path, "gzip")


@pytest.fixture(params=["zlib-ng", "zlib"])
def inflater(request, monkeypatch):
    """Each gzip test runs with zlib-ng and with the stdlib zlib a platform without its wheel falls back to."""
    import zlib

    from gaplens.loaders import files

    if request.param == "zlib":
        monkeypatch.setattr(files, "inflate", zlib)
    elif files.inflate is zlib:  # pyproject's marker: the platforms zlib-ng has wheels for
        if platform.machine() in ("x86_64", "AMD64", "aarch64", "arm64"):
            pytest.fail("zlib-ng is a dependency on this platform, yet the loader runs on zlib")
        pytest.skip("no zlib-ng wheel for this platform")
    return request.param


def test_gzip_members_and_what_follows_them(tmp_path, inflater):
    """Concatenated members read as one document; bytes after the last member are dropped with a warning;
    a cut or corrupt member is a warning after some data, an error before any."""
    text = _text().encode()
    half = len(text) // 2
    whole = load(sample(SMALL), use_cache=False)
    members = tmp_path / "members.json.gz"
    members.write_bytes(gzip.compress(text[:half]) + gzip.compress(text[half:]))
    got = load(members, use_cache=False)
    assert len(got) == len(whole) and got.meta.warnings == whole.meta.warnings
    junk = tmp_path / "junk.json.gz"
    junk.write_bytes(gzip.compress(text) + b"not gzip at all")
    got = load(junk, use_cache=False)
    assert len(got) == len(whole)
    assert got.meta.warnings and "15 bytes after the gzip data are not gzip" in got.meta.warnings[0]
    raw = gzip.compress(text)
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(raw[: len(raw) // 2])
    assert "gzip stream is truncated" in load(cut, use_cache=False).meta.warnings[0]
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(raw[:10] + bytes(b ^ 0x5A for b in raw[10:4000]) + raw[4000:])
    with pytest.raises(TraceError, match="corrupt gzip data"):
        load(bad, use_cache=False)


def test_json_that_is_not_a_trace(tmp_path, capsys):
    path = tmp_path / "meta.json"
    path.write_bytes(sample("train_step.meta.json").read_bytes())
    _fails(capsys, path, "traceEvents")


def test_text_that_is_not_json(tmp_path, capsys):
    path = tmp_path / "notes.json"
    path.write_text((sample("README.md")).read_text())
    _fails(capsys, path, "not a trace")


def test_empty_trace_events(tmp_path, capsys):
    doc = json.loads(_text())
    doc["traceEvents"] = []
    path = tmp_path / "empty_events.json"
    path.write_text(json.dumps(doc))
    _fails(capsys, path, "no events")


def test_negative_and_missing_dur_load_with_a_warning(tmp_path, capsys):
    doc = json.loads(_text())
    kernels = [ev for ev in doc["traceEvents"] if ev.get("cat") == "kernel"]
    for ev in kernels[:3]:
        ev["dur"] = -5
    for ev in kernels[3:5]:
        del ev["dur"]
    path = tmp_path / "durs.json"
    path.write_text(json.dumps(doc))
    rc, _, err = _run(capsys, path)
    assert rc == 0
    assert err == ["gaplens: warning: 5 events with a missing, negative or unusable dur set to 0"]
    trace = load(path, use_cache=False)
    k = trace.kind == Kind.KERNEL
    assert int(k.sum()) == len(kernels)
    assert int(((trace.end_ns - trace.start_ns)[k] == 0).sum()) >= 5


def test_control_characters_in_names_are_cleaned(tmp_path, capsys):
    doc = json.loads(_text())
    kernels = [ev for ev in doc["traceEvents"] if ev.get("cat") == "kernel"]
    evil = "\x1b[2J\x1b]0;owned\x07evil\x9b31m_kernel"
    for ev in kernels:
        ev["name"] = evil
    path = tmp_path / "evil.json"
    path.write_text(json.dumps(doc))
    rc, out, err = _run(capsys, path)
    # The load says it changed names (once, with a count), and nothing raw reaches the output.
    assert rc == 0 and len(err) == 1 and "names or details with control characters" in err[0]
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", out)
    trace = load(path, use_cache=False)
    names = {trace.names[i] for i in np.unique(trace.name_id[trace.kind == Kind.KERNEL])}
    assert len(names) == 1 and "evil" in names.pop()
    assert not any(re.search(r"[\x00-\x1f\x7f-\x9f]", n) for n in trace.names)


def test_invalid_utf8_in_a_name_still_loads(tmp_path, capsys):
    text = _text().encode()
    name = b'"name": "aten::mm"'
    assert name in text
    path = tmp_path / "latin1.json"
    path.write_bytes(text.replace(name, b'"name": "aten::mm\xe9\xff"', 1))
    rc, _, err = _run(capsys, path)
    assert rc == 0 and not err
    assert int((load(path, use_cache=False).kind == Kind.KERNEL).sum()) == int(
        (load(sample(SMALL), use_cache=False).kind == Kind.KERNEL).sum()
    )


def test_empty_file(tmp_path, capsys):
    path = tmp_path / "empty.json"
    path.write_bytes(b"")
    _fails(capsys, path, "empty")


def test_directory(tmp_path, capsys):
    _fails(capsys, tmp_path, "directory")


def test_missing_file(tmp_path, capsys):
    _fails(capsys, tmp_path / "nope.json.gz", "no such file")


@pytest.mark.parametrize("cut", [0.001, 0.05, 0.3, 0.6, 0.999])
def test_any_cut_of_a_gzip_loads_or_says_why(tmp_path, cut):
    raw = sample(SMALL).read_bytes()
    path = tmp_path / "cut.json.gz"
    path.write_bytes(raw[: max(11, int(len(raw) * cut))])
    try:
        trace = load(path, use_cache=False)
    except TraceError as exc:
        assert "\n" not in str(exc)
        return
    assert len(trace.meta.warnings) == 1 and "truncated" in trace.meta.warnings[0]


@pytest.mark.parametrize("cut", [0.001, 0.999])
def test_cut_gzip_on_the_command_line(tmp_path, capsys, cut):
    raw = sample(SMALL).read_bytes()
    path = tmp_path / "cut.json.gz"
    path.write_bytes(raw[: max(11, int(len(raw) * cut))])
    rc, _, err = _run(capsys, path)
    assert rc in (0, 2) and len(err) == 1
