"""The benchmark sections stay runnable: each imports, its children start as an installed gaplens does,
and the viewer's child opens a real trace through the app (a renamed helper once broke ``bench whatif``
with an ImportError no test saw)."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest

from bench import children
from gaplens.loaders import load

DATA = Path(__file__).parent / "data"
SECTIONS = ("load", "reopen", "viewer", "nsys", "nvtx", "analysis", "render", "ranks", "whatif", "fuzz")


@pytest.mark.parametrize("name", SECTIONS)
def test_every_section_imports_and_has_run(name):
    module = importlib.import_module(f"bench.{name}")
    assert callable(module.run)


def test_children_start_with_compiled_bytecode_and_the_checkout_first(monkeypatch):
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setitem(children._DONE, "compiled", True)  # compiling the checkout is not this test's business
    env = children.child_env(GAPLENS_CACHE_DIR="/somewhere")
    assert "PYTHONDONTWRITEBYTECODE" not in env and env["PYTHONPYCACHEPREFIX"] == str(children.PYCACHE)
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(children.ROOT) and env["GAPLENS_CACHE_DIR"] == "/somewhere"


def test_the_viewer_child_opens_a_trace_cold_then_warm(tmp_path, monkeypatch):
    from bench import viewer

    monkeypatch.setattr(children, "PYCACHE", tmp_path / "pycache")
    monkeypatch.setitem(children._DONE, "compiled", True)  # the children compile what they import
    path = str(DATA / "serving.json.gz")
    cache = str(tmp_path / "cache")
    cold = viewer._open(path, cache, keep=True)
    warm = viewer._open(path, cache, keep=True)
    assert cold["events"] == warm["events"] == len(load(path))
    for run in (cold, warm):
        assert 0 < run["first"] <= run["readings"] and run["cpu"] > 0
