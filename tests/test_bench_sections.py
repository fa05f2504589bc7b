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


def test_each_figure_is_printed_beside_its_target_baseline_and_verdict(capsys):
    from bench.targets import Figure, peak_met, print_figures

    print_figures(
        "load",
        [
            Figure("x1.26M: cold summary peak", "173 B/event", "<= 200 B/event", "JSON 250 B/event", True, "0.5/2"),
            Figure("x5.1M: cold summary peak", "131 B/event", "<= 120 B/event", "JSON 290 B/event", False, "0.5/2"),
        ],
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split()[:4] == ["figure", "value", "target", "baseline"]
    assert "<= 200 B/event" in lines[2] and "JSON 250 B/event" in lines[2] and " met " in lines[2]
    assert "MISSED" in lines[3] and lines[3].rstrip().endswith("0.5/2")
    # the 5M target from 3M events on; a --quick trace is not judged (the interpreter alone is ~65 MB)
    assert peak_met(150, 1_260_000) and not peak_met(150, 5_100_000) and peak_met(999, 100_000) is None


def test_the_viewer_child_opens_the_lighter_loads_of_the_bounds(tmp_path, monkeypatch):
    """``GAPLENS_BENCH_VIEWER_BOUND``'s opens reach the child: each draws fewer events than the whole load."""
    from bench import viewer
    from tests.test_kineto_pyevents import _tiled

    monkeypatch.setattr(children, "PYCACHE", tmp_path / "pycache")
    monkeypatch.setitem(children._DONE, "compiled", True)
    path = str(_tiled(tmp_path, copies=24))  # ~10 MB: most blocks cut at the writer's separator
    whole = len(load(path, use_cache=False))
    python = viewer._open(path, str(tmp_path / "c1"), keep=True, bound="python")
    gpu = viewer._open(path, str(tmp_path / "c2"), keep=True, bound="gpu")
    assert 0 < gpu["events"] < python["events"] < whole
