"""The cache stays under its size limit: the entries used longest ago go first, nothing else is touched."""

from __future__ import annotations

import gzip
import os
import shutil
import time
from pathlib import Path

import pytest

from gaplens.loaders import load
from gaplens.store import cache, trim

DATA = Path(__file__).parent / "data"
TRACES = ("ddp_even_rank0.json.gz", "ddp_even_rank1.json.gz", "gpu_only.json.gz")


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("GAPLENS_CACHE_DIR", str(folder))
    return folder


def _copies(tmp_path: Path) -> list[Path]:
    out = []
    for name in TRACES:
        dst = tmp_path / "traces" / name
        dst.parent.mkdir(exist_ok=True)
        shutil.copyfile(DATA / name, dst)
        out.append(dst)
    return out


def _entry_size(path: Path) -> int:
    base, _, _ = cache._entry(str(path))
    return sum(os.path.getsize(base.with_suffix(s)) for s in (".json", ".arrow"))


def _age(path: Path, seconds_ago: float) -> None:
    """Make ``path``'s cache entry look last used ``seconds_ago``."""
    base, _, _ = cache._entry(str(path))
    when = time.time() - seconds_ago
    os.utime(base.with_suffix(".json"), (when, when))


def test_the_limit_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("GAPLENS_CACHE_MAX_MB", "3")
    assert trim.limit_bytes() == 3 << 20
    for bad in ("", "lots", "-5", "0", "inf", "nan"):
        monkeypatch.setenv("GAPLENS_CACHE_MAX_MB", bad)
        assert trim.limit_bytes() == trim.DEFAULT_MAX_MB << 20


def test_past_the_limit_the_least_recently_used_entry_goes(own_cache, tmp_path, monkeypatch):
    a, b, c = _copies(tmp_path)
    for path in (a, b, c):
        load(str(path))
    _age(a, 300)
    _age(b, 200)
    _age(c, 100)
    assert cache.lookup(str(a)) is not None  # a hit: now b is the one used longest ago, then c
    total = sum(e.size for e in trim.entries())
    # Over the limit by less than b: trimming b alone brings the cache under TRIM_TO of it.
    b_size = _entry_size(b)
    limit = int((total - b_size) / trim.TRIM_TO) + 1
    assert limit < total
    assert trim.trim(limit=limit) >= b_size
    assert cache.lookup(str(b)) is None
    assert cache.lookup(str(a)) is not None and cache.lookup(str(c)) is not None
    assert sum(e.size for e in trim.entries()) <= limit * trim.TRIM_TO


def test_the_entry_just_written_stays_even_alone_over_the_limit(own_cache, tmp_path, monkeypatch):
    a, b, _ = _copies(tmp_path)
    monkeypatch.setenv("GAPLENS_CACHE_MAX_MB", "0.001")  # ~1 KB: smaller than any entry
    load(str(a))
    load(str(b))
    assert cache.lookup(str(b)) is not None  # the newest stays
    assert cache.lookup(str(a)) is None


def test_only_the_caches_own_entries_are_removed(own_cache, tmp_path, monkeypatch):
    a, b, _ = _copies(tmp_path)
    load(str(a))
    # Other files in the cache folder: a benchmark's traces, a user's file, the path records.
    (own_cache / "bench").mkdir()
    keep = [own_cache / "bench" / "big.json.gz", own_cache / "notes.txt"]
    for path in keep:
        path.write_bytes(b"x" * 200_000)
    records = sorted((own_cache / "traces" / "paths").iterdir())
    # A symlinked "entry" pointing at a file outside the cache: the link may go, its target never.
    outside = tmp_path / "precious.json"
    outside.write_bytes(b"{}" * 100_000)
    (own_cache / "traces" / "link.json").symlink_to(outside)
    monkeypatch.setenv("GAPLENS_CACHE_MAX_MB", "0.001")
    load(str(b))
    assert cache.lookup(str(a)) is None
    assert all(path.exists() for path in keep)
    assert records and all(path.exists() for path in records)
    assert outside.read_bytes() == b"{}" * 100_000


def test_columns_left_without_their_index_count_and_go(own_cache, tmp_path, monkeypatch):
    a, b, _ = _copies(tmp_path)
    load(str(a))
    base, _, _ = cache._entry(str(a))
    base.with_suffix(".json").unlink()  # as a write cut between the entry's two files leaves it
    orphan = base.with_suffix(".arrow")
    assert any(e.files == [orphan] for e in trim.entries())
    monkeypatch.setenv("GAPLENS_CACHE_MAX_MB", "0.001")
    load(str(b))
    assert not orphan.exists() and cache.lookup(str(b)) is not None


def test_an_unpacked_export_counts_and_goes_first_when_oldest(own_cache, tmp_path, monkeypatch):
    export = tmp_path / "traces" / "nsys_serving.sqlite.gz"
    export.parent.mkdir()
    shutil.copyfile(DATA / "nsys_serving.sqlite.gz", export)
    load(str(export))
    unpacked = list(own_cache.glob("*.sqlite"))
    assert len(unpacked) == 1 and any(e.files[1] == unpacked[0] for e in trim.entries())
    seal = unpacked[0].with_name(unpacked[0].name + ".sum")
    when = time.time() - 600
    os.utime(seal, (when, when))
    (a,) = _copies(tmp_path)[:1]
    total = sum(e.size for e in trim.entries())
    monkeypatch.setenv("GAPLENS_CACHE_MAX_MB", str(total / (1 << 20) * 0.9))
    load(str(a))
    assert not unpacked[0].exists() and not seal.exists()
    # Its trace entry was newer than the export: it stays, and the export is unpacked again when needed.
    assert len(load(str(export))) > 0


def test_a_process_writing_many_entries_does_not_look_at_the_folder_each_time(own_cache, tmp_path, monkeypatch):
    """A job read in one process writes an entry per rank: under the limit, the folder is looked at whole
    once per RESCAN_WRITES writes, not once per write (which grew with the square of the ranks)."""
    looks = []
    real = trim.entries
    monkeypatch.setattr(trim, "entries", lambda root=None: looks.append(1) or real(root))
    monkeypatch.setattr(trim, "RESCAN_WRITES", 4)
    paths = _copies(tmp_path)
    for k in range(12):  # twelve entries: copies of three traces, each with its own content
        dst = tmp_path / "traces" / f"rank{k}.json"
        dst.write_bytes(gzip.decompress(paths[k % 3].read_bytes()) + b" " * (k + 1))
        load(str(dst))
    assert 2 <= len(looks) <= 4  # the first write, then one per four
    # Past the limit the next write looks at once, and trims.
    monkeypatch.setenv("GAPLENS_CACHE_MAX_MB", "0.001")
    dst = tmp_path / "traces" / "last.json"
    dst.write_bytes(gzip.decompress(paths[0].read_bytes()) + b"  \n" * 50)
    load(str(dst))
    assert len(trim.entries()) == 1 and cache.lookup(str(dst)) is not None
