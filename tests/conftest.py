"""Shared fixtures: where the real traces live, and a cache of loaded traces per session."""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

import pytest

from gaplens.loaders import load
from gaplens.loaders.model import Trace

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
SAMPLES = SHARED / "samples"
PUBLIC = SHARED / "public-samples"
BUNDLED = ROOT / "samples"

#: For modules that read the shared recordings directly (raw JSON, SQL, nsys stats CSVs).
requires_shared = pytest.mark.skipif(not SAMPLES.is_dir(), reason="../shared/samples is not beside the checkout")


def sample(name: str) -> Path:
    """A shared H200 sample, or skip when the shared folder is not beside the checkout."""
    for folder in (SAMPLES, BUNDLED):
        path = folder / name
        if path.exists():
            return path
    pytest.skip(f"sample {name} not available")


@pytest.fixture(autouse=True, scope="session")
def _private_cache_dir(tmp_path_factory):
    """Keep the trace cache of the test run out of the user's cache directory."""
    patch = pytest.MonkeyPatch()
    patch.setenv("GAPLENS_CACHE_DIR", str(tmp_path_factory.mktemp("gaplens-cache")))
    yield
    patch.undo()


@functools.lru_cache(maxsize=16)
def _cached(path: str) -> Trace:
    return load(path)


def loaded(name: str) -> Trace:
    """Load a sample once per test session (traces are treated as read-only by tests)."""
    return _cached(str(sample(name)))


def meta(name: str) -> dict:
    return json.loads(sample(name).read_text())


@pytest.fixture
def trace_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The smells sample copied into a writable folder, with a private state dir."""
    monkeypatch.setenv("GAPLENS_STATE_DIR", str(tmp_path / "state"))
    dst = tmp_path / "traces" / "smells.json.gz"
    dst.parent.mkdir()
    shutil.copyfile(sample("smells.json.gz"), dst)
    return dst
