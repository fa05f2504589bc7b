"""The loaders never choose a place on disk: the store hands them its cache (``loaders.use_cache``).

With the store installed, an nsys ``.sqlite.gz`` is unpacked once into the store's cache folder and read
from there again; without it (a library user calling ``gaplens.loaders.load``) it still loads, from a
private temp file that is gone once the load returns. The expected kernel counts come from the export
itself, gunzipped here and counted with SQL.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from gaplens import loaders
from gaplens.loaders import TraceError, load
from gaplens.loaders.cache_hook import Writer, installed
from gaplens.loaders.model import Kind
from gaplens.store import cache
from tests.conftest import ROOT

SERVING = ROOT / "tests" / "data" / "nsys_serving.sqlite.gz"
KINETO = ROOT / "tests" / "data" / "ddp_straggler_rank0.json.gz"


def _kernels_in_export(gz: Path, folder: Path) -> int:
    """Kernel rows of the export inside ``gz``, counted with SQL on a copy gunzipped here."""
    db = folder / "truth.sqlite"
    with gzip.open(gz) as fin, open(db, "wb") as fout:
        shutil.copyfileobj(fin, fout)
    con = sqlite3.connect(db)
    try:
        return int(con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0])
    finally:
        con.close()
        db.unlink()


def _kernels(trace) -> int:
    return int((trace.kind == int(Kind.KERNEL)).sum())


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


class _Counting:
    """The store's cache, counting how many times an unpacked copy is written."""

    def __init__(self) -> None:
        self.writes = 0

    def lookup_checked(self, path: str):
        return cache.lookup_checked(path)

    def store(self, path: str, trace) -> object:
        return cache.store(path, trace)

    def unpacked(self, source: str, suffix: str, write: Writer) -> str:
        def counted(sink) -> object:
            self.writes += 1
            return write(sink)

        return cache.unpacked(source, suffix, counted)


@pytest.fixture
def hook():
    """Swap the installed cache for the test's, and put the session's back after."""
    was = installed()
    yield loaders.use_cache
    loaders.use_cache(was)


def test_a_fresh_interpreter_loads_without_the_store_and_leaves_no_file(tmp_path):
    """``gaplens.loaders.load`` alone: an nsys .sqlite.gz and a Kineto file load, ``gaplens.store`` is never
    imported, and neither the cache folder nor the temp folder holds anything afterwards."""
    want = _kernels_in_export(SERVING, tmp_path)
    temp, cache_dir = tmp_path / "tmp", tmp_path / "cache"
    temp.mkdir()
    code = (
        "import sys\n"
        "from gaplens.loaders import load\n"
        f"nsys = load({str(SERVING)!r})\n"
        f"kineto = load({str(KINETO)!r})\n"
        "print(int((nsys.kind == 5).sum()), len(kineto) > 0, 'gaplens.store' in sys.modules)\n"
    )
    env = {**os.environ, "TMPDIR": str(temp), "GAPLENS_CACHE_DIR": str(cache_dir)}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(want), "True", "False"]
    assert _files(temp) == [] and not cache_dir.exists()


def test_with_the_store_an_export_is_unpacked_once_and_read_again(tmp_path, monkeypatch, hook):
    monkeypatch.setenv("GAPLENS_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "in" / "serving.sqlite.gz"
    src.parent.mkdir()
    shutil.copyfile(SERVING, src)
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    want = _kernels_in_export(SERVING, tmp_path)
    counting = _Counting()
    hook(counting)

    first = load(src, use_cache=False)  # the Arrow entry skipped: the export is what is read
    copies = list((tmp_path / "cache").glob("serving-*.sqlite"))
    assert counting.writes == 1 and len(copies) == 1
    seen = os.stat(copies[0])
    second = load(src, use_cache=False)
    assert counting.writes == 1  # read from the copy, not unpacked again
    again = os.stat(copies[0])
    assert (again.st_ino, again.st_mtime_ns) == (seen.st_ino, seen.st_mtime_ns)
    assert _kernels(first) == _kernels(second) == want
    # The copy is the export: byte for byte what gzip gives.
    assert copies[0].read_bytes() == gzip.decompress(src.read_bytes())
    # The trace file is only read, and nothing is made beside it.
    assert hashlib.sha256(src.read_bytes()).hexdigest() == digest
    assert _files(src.parent) == ["serving.sqlite.gz"]


def test_without_the_store_each_load_unpacks_into_a_temp_file_it_removes(tmp_path, monkeypatch, hook):
    monkeypatch.setenv("GAPLENS_CACHE_DIR", str(tmp_path / "cache"))
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    want = _kernels_in_export(SERVING, tmp_path)
    hook(None)
    stages: list[str] = []
    for _ in range(2):
        stages.clear()
        trace = load(SERVING, progress=lambda stage, _done: stages.append(stage))
        assert _kernels(trace) == want
        assert "decompressing" in stages  # unpacked on every load: nothing kept
        assert _files(temp) == []
    assert not (tmp_path / "cache").exists()


def test_without_the_store_a_cut_export_is_refused_and_leaves_no_file(tmp_path, monkeypatch, hook):
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    cut = tmp_path / "cut.sqlite.gz"
    cut.write_bytes(SERVING.read_bytes()[: SERVING.stat().st_size // 2])
    hook(None)
    with pytest.raises(TraceError, match="incomplete"):
        load(cut)
    assert _files(temp) == []
