"""The trace cache: hits are identical to fresh loads; stale or broken entries are misses."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from gaplens.loaders import load
from gaplens.store import cache
from tests.conftest import sample

COLUMNS = (*cache.COLUMNS, "row_lane", "row_depth", "row_offsets", "row_maxend")


@pytest.fixture()
def trace_file(tmp_path, monkeypatch):
    monkeypatch.setenv("GAPLENS_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "smells.json.gz"
    shutil.copyfile(sample("smells.json.gz"), path)
    return path


def _same(a, b) -> None:
    for col in COLUMNS:
        x, y = getattr(a, col), getattr(b, col)
        assert x.dtype == y.dtype and np.array_equal(x, y), col
    assert a.names == b.names and a.details == b.details
    assert a.lanes == b.lanes
    assert a.meta == b.meta


def test_cache_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("GAPLENS_CACHE_DIR", str(tmp_path / "x"))
    assert cache.cache_dir() == tmp_path / "x"
    monkeypatch.delenv("GAPLENS_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == tmp_path / "xdg" / "gaplens"


def test_second_load_is_a_hit_equal_to_a_fresh_load(trace_file):
    before = (trace_file.read_bytes(), os.stat(trace_file).st_mtime_ns)
    fresh = load(trace_file)
    assert cache.lookup(str(trace_file)) is not None
    hit = load(trace_file)
    _same(fresh, hit)
    _same(load(trace_file, use_cache=False), hit)
    hit.kind[:1] = hit.kind[:1]  # a hit owns writable arrays, like a fresh load
    assert (trace_file.read_bytes(), os.stat(trace_file).st_mtime_ns) == before
    entries = (cache.cache_dir() / "traces").iterdir()
    leftovers = [p.name for p in entries if p.suffix not in (".arrow", ".json") and p.name != "paths"]
    assert not leftovers


def test_opt_out_writes_nothing(trace_file):
    load(trace_file, use_cache=False)
    assert not cache.cache_dir().exists()


def test_stale_entry_is_ignored(trace_file):
    load(trace_file)
    # Another content at the same path (same mtime, so only the content can tell): a miss.
    st = os.stat(trace_file)
    shutil.copyfile(sample("train_step.json.gz"), trace_file)
    os.utime(trace_file, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert cache.lookup(str(trace_file)) is None
    load(trace_file)  # rebuilds and refreshes the entry
    assert cache.lookup(str(trace_file)) is not None


def test_a_touched_trace_is_still_a_hit(trace_file):
    load(trace_file)
    st = os.stat(trace_file)
    os.utime(trace_file, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert cache.lookup(str(trace_file)) is not None  # the content did not change


def test_one_content_at_two_paths_is_one_entry(trace_file, tmp_path):
    """Issue 31: the bundled sample at two paths was parsed and cached twice (25 MB)."""
    fresh = load(trace_file)
    copy = tmp_path / "elsewhere" / "renamed.json.gz"
    copy.parent.mkdir()
    shutil.copyfile(trace_file, copy)
    hit = cache.lookup(str(copy))
    assert hit is not None and hit.meta.path == str(copy)  # served from the first path's entry, named as asked
    _same(load(copy, use_cache=False), load(copy))
    assert fresh.meta.path == str(trace_file)
    assert len(list((cache.cache_dir() / "traces").glob("*.arrow"))) == 1
    moved = tmp_path / "moved.json.gz"
    os.replace(trace_file, moved)
    assert cache.lookup(str(moved)) is not None


def test_a_known_path_is_looked_up_without_reading_the_trace(trace_file, monkeypatch):
    load(trace_file)
    assert cache.lookup(str(trace_file)) is not None  # the first lookup remembers the path's content id

    def refuse(path):
        raise AssertionError("read the trace to find its content id")

    monkeypatch.setattr(cache, "content_id", refuse)
    assert cache.lookup(str(trace_file)) is not None
    st = os.stat(trace_file)
    os.utime(trace_file, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # touched: the record no longer vouches
    with pytest.raises(AssertionError):
        cache._entry(str(trace_file))


def test_content_id_sees_an_edit_in_the_middle(tmp_path):
    """Same size and ends, one sampled block changed: another id (a change between samples is not seen)."""
    size = 8 * cache.ID_END_BYTES
    data = bytearray(os.urandom(size))
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(bytes(data))
    data[cache.ID_END_BYTES + 5] ^= 1  # inside the first sampled block
    b.write_bytes(bytes(data))
    assert cache.content_id(a) != cache.content_id(b)
    assert cache.content_id(a) == cache.content_id(a)


def _entry(path) -> str:
    return str(cache._entry(str(path))[0])


@pytest.mark.parametrize("damage", ["garbage_arrow", "truncated_arrow", "garbage_json", "torn_pair", "missing"])
def test_broken_entry_is_a_miss_not_a_crash(trace_file, damage):
    fresh = load(trace_file)
    base = _entry(trace_file)
    arrow, info = Path(base + ".arrow"), Path(base + ".json")
    if damage == "garbage_arrow":
        arrow.write_bytes(b"\x00garbage" * 100)
    elif damage == "truncated_arrow":
        arrow.write_bytes(arrow.read_bytes()[: arrow.stat().st_size // 2])
    elif damage == "garbage_json":
        info.write_bytes(b"{not json")
    elif damage == "torn_pair":
        # The JSON of one write with the Arrow file of another: tokens differ.
        other = load(sample("train_step.json.gz"), use_cache=True)
        cache.store(str(trace_file), other)
        info.write_bytes(info.read_bytes().replace(b'"token":"', b'"token":"0'))
    else:
        os.unlink(arrow)
    assert cache.lookup(str(trace_file)) is None
    again = load(trace_file)
    # One line says the entry was damaged and rebuilt; the readings are the fresh ones.
    assert again.meta.warnings.pop() == (
        f"the cached copy of {trace_file} was damaged (checksum mismatch): read from the trace again"
    )
    _same(fresh, again)
    assert cache.lookup_checked(str(trace_file))[1] == ""  # rebuilt: the next open is a clean hit


def test_unwritable_cache_dir_still_loads(trace_file, monkeypatch, tmp_path):
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("x")
    monkeypatch.setenv("GAPLENS_CACHE_DIR", str(blocker))
    assert len(load(trace_file)) > 0


def test_flipped_bytes_are_caught_never_read(trace_file):
    """Any byte of an entry flipped: a miss (rebuilt, with a warning), never other readings."""
    import random

    fresh = load(trace_file)
    base = _entry(trace_file)
    rng = random.Random(22)
    for suffix in [".arrow"] * 8 + [".json"] * 4:
        part = Path(base + suffix)
        data = bytearray(part.read_bytes())
        at = rng.randrange(len(data))
        data[at] ^= 1 << rng.randrange(8)
        part.write_bytes(bytes(data))
        assert cache.lookup(str(trace_file)) is None, (suffix, at)
        again = load(trace_file)
        assert "damaged (checksum mismatch)" in again.meta.warnings.pop()
        _same(fresh, again)


def test_a_symlinked_traces_folder_is_never_followed(trace_file, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    traces = cache.cache_dir() / "traces"
    traces.parent.mkdir(parents=True)
    traces.symlink_to(elsewhere, target_is_directory=True)
    fresh = load(trace_file)  # the lookup refuses the link; the store replaces it with a real folder
    assert not traces.is_symlink() and traces.is_dir()
    assert list(elsewhere.iterdir()) == []
    _same(fresh, load(trace_file))


def test_a_symlinked_entry_is_never_read(trace_file, tmp_path):
    load(trace_file)
    base = _entry(trace_file)
    planted = tmp_path / "planted.json"
    os.replace(base + ".json", planted)
    os.symlink(planted, base + ".json")
    assert cache.lookup(str(trace_file)) is None


def test_a_file_planted_at_the_unpack_name_is_never_read(tmp_path, monkeypatch):
    """The .sqlite.gz unpack cache is keyed by content and sealed: another database there is replaced."""
    import gzip

    monkeypatch.setenv("GAPLENS_CACHE_DIR", str(tmp_path / "cache"))
    data = Path("tests/data")
    gz = tmp_path / "serving.sqlite.gz"
    shutil.copyfile(data / "nsys_serving.sqlite.gz", gz)
    want = load(gz, use_cache=False)
    name = cache.unpacked_path(str(gz), ".sqlite")
    for plant in ("file", "symlink"):
        for old in name.parent.glob("*"):
            old.unlink()
        other = tmp_path / "other.sqlite"
        other.write_bytes(gzip.decompress((data / "nsys_ddp_straggler.sqlite.gz").read_bytes()))
        if plant == "file":
            os.replace(other, name)
        else:
            name.symlink_to(other)
        got = load(gz, use_cache=False)
        assert len(got) == len(want) and got.meta.devices == want.meta.devices, plant
        assert not name.is_symlink()
    # Sealed: the next open reuses the copy as it is.
    before = os.stat(name).st_mtime_ns
    load(gz, use_cache=False)
    assert os.stat(name).st_mtime_ns == before


def test_the_code_stamp_covers_every_loader_file(tmp_path, monkeypatch):
    """A loader fix (any subpackage) must retire entries built by the old code."""
    from gaplens import loaders

    root = Path(loaders.__file__).resolve().parent
    deep = sorted(root.rglob("*.py"), key=lambda p: -len(p.parts))[0]
    assert deep.parent != root  # a subpackage's module: kineto/, nsys/ ...
    before = cache._code_stamp()
    real = Path.read_bytes

    def edited(self: Path) -> bytes:
        return real(self) + (b"\n# edited" if self.resolve() == deep else b"")

    monkeypatch.setattr(Path, "read_bytes", edited)
    cache._code_stamp.cache_clear()
    try:
        assert cache._code_stamp() != before
    finally:
        monkeypatch.undo()
        cache._code_stamp.cache_clear()


def _rewrite_info(base: str, change) -> None:
    """Change the entry's JSON and recompute its checksum line, as a buggy writer (not a flipped bit) would."""
    import orjson

    from gaplens.store.files import checksum

    info_path = Path(base + ".json")
    head, _, body = info_path.read_bytes().partition(b"\n")
    sums, info = orjson.loads(head), orjson.loads(body)
    change(info)
    body = orjson.dumps(info)
    sums["info_crc"] = checksum(body)
    info_path.write_bytes(orjson.dumps(sums) + b"\n" + body)


def _rewrite_column(base: str, column: str, change) -> None:
    """Change one Arrow column and rewrite the file with checksums that agree."""
    import orjson
    import pyarrow as pa
    import pyarrow.ipc as ipc

    from gaplens.store.files import checksum

    arrow = Path(base + ".arrow")
    table = ipc.open_file(pa.BufferReader(arrow.read_bytes())).read_all()
    values = table.column(column).to_numpy().copy()
    change(values)
    table = table.set_column(table.column_names.index(column), column, pa.array(values))
    sums: dict = {}
    with arrow.open("wb") as fh:
        cache._write_ipc(fh, table, sums)
    info_path = Path(base + ".json")
    head, _, body = info_path.read_bytes().partition(b"\n")
    info_path.write_bytes(orjson.dumps({**orjson.loads(head), **sums, "info_crc": checksum(body)}) + b"\n" + body)


INCONSISTENT = {
    "names emptied": lambda b: _rewrite_info(b, lambda i: i.__setitem__("names", [])),
    "details emptied": lambda b: _rewrite_info(b, lambda i: i.__setitem__("details", [])),
    "lanes emptied": lambda b: _rewrite_info(b, lambda i: i.__setitem__("lanes", [])),
    "lanes cut": lambda b: _rewrite_info(b, lambda i: i.__setitem__("lanes", i["lanes"][:1])),
    "a name id past the names": lambda b: _rewrite_column(b, "name_id", lambda v: v.__setitem__(-1, 10**6)),
    "a launch past the events": lambda b: _rewrite_column(b, "launch", lambda v: v.__setitem__(-1, 10**7)),
    "an unknown kind": lambda b: _rewrite_column(b, "kind", lambda v: v.__setitem__(0, 99)),
    "events out of order": lambda b: _rewrite_column(b, "start_ns", lambda v: v.__setitem__(slice(0, 2), v[1::-1])),
}


@pytest.mark.parametrize("damage", list(INCONSISTENT), ids=list(INCONSISTENT))
def test_an_inconsistent_entry_with_good_checksums_is_rebuilt(trace_file, damage):
    """Issue 31: checksums agreed, names/lanes/details were emptied, and every reading ended in an internal error."""
    from gaplens.analysis.gaps import analyse_gaps

    fresh = load(trace_file)
    INCONSISTENT[damage](_entry(trace_file))
    hit, warning = cache.lookup_checked(str(trace_file))
    assert hit is None and "was inconsistent" in warning and "read from the trace again" in warning
    again = load(trace_file)
    assert "was inconsistent" in again.meta.warnings.pop()
    _same(fresh, again)
    analyse_gaps(again)
    assert cache.lookup_checked(str(trace_file))[1] == ""  # rebuilt: the next open is a clean hit
