"""The early work of an open (tui.early): what it serves is what the worker would have built; a cold
open's parse starts there, its progress and errors reach the screen through the worker, as they always
have; a failed stage is left to the worker."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

import gaplens.tui.app as app_module
from gaplens.loaders import load
from gaplens.tui.app import make_app
from gaplens.tui.early import EarlyOpen
from gaplens.tui.readings import compute
from gaplens.tui.viewmodel import build_model

DATA = Path(__file__).parent / "data"


@pytest.fixture
def trace_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    # A cache of its own: the cache is keyed by content, so the session's copy of this sample would be a hit.
    monkeypatch.setenv("GAPLENS_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "serving.json.gz"
    shutil.copyfile(DATA / "serving.json.gz", path)
    return str(path)


def _run(app) -> None:
    async def main() -> None:
        async with app.run_test(size=(100, 30)) as pilot:
            for _ in range(400):
                if app.loaded and (app.error or (app.model is not None and not app.analysing)):
                    break
                await pilot.pause(0.02)

    asyncio.run(main())


def test_a_cached_trace_is_served_with_the_model_and_readings_the_worker_would_build(trace_path):
    fresh = load(trace_path)  # the cache entry
    early = EarlyOpen(trace_path)
    trace = early.wait("trace")
    assert trace is not None and trace is not fresh and len(trace) == len(fresh)
    assert trace.meta.path == trace_path
    model, readings = early.wait("model"), early.wait("readings")
    assert model is not None and model.trace is trace
    want = build_model(fresh)
    assert model.window == want.window and model.extent == want.extent
    assert np.array_equal(model.cum, want.cum) and np.array_equal(model.style, want.style)
    expected = compute(fresh)
    assert len(readings.gaps) == len(expected.gaps) > 0
    assert np.array_equal(readings.gaps.start, expected.gaps.start)
    assert np.array_equal(readings.gaps.on_path, expected.gaps.on_path)


def test_the_viewer_takes_the_early_work_and_does_not_load_again(trace_path, monkeypatch):
    load(trace_path)
    early = EarlyOpen(trace_path)
    early.wait("readings")

    def no_second_load(*_args, **_kwargs):
        raise AssertionError("the worker loaded the trace although the early open had it")

    monkeypatch.setattr(app_module, "load", no_second_load)
    monkeypatch.setattr(app_module, "compute", no_second_load)
    app = make_app(trace_path, early=early)
    _run(app)
    assert app.error is None and app.model is not None and not app.analysing
    assert app.model.trace is early.trace and len(app.model.readings.gaps) == len(early.readings.gaps)


def test_a_cold_open_is_parsed_early_and_the_worker_relays_it(trace_path, monkeypatch):
    early = EarlyOpen(trace_path)  # nothing cached yet: the parse starts here, before the app exists
    seen: list[tuple[str, float]] = []
    trace = early.wait_trace(lambda stage, fraction: seen.append((stage, fraction)))
    assert trace is not None and len(trace) == len(load(trace_path, use_cache=False))
    assert early.wait("model") is not None and early.wait("model").trace is trace
    assert early.wait("readings") is None  # a cold open's readings wait for the first frame, in the worker
    assert all(0.0 <= f <= 1.0 for _, f in seen)

    def no_second_load(*_args, **_kwargs):
        raise AssertionError("the worker parsed the trace although the early open had it")

    monkeypatch.setattr(app_module, "load", no_second_load)
    app = make_app(trace_path, early=early)
    _run(app)
    assert app.error is None and app.model is not None and not app.analysing
    assert app.model.trace is trace and len(app.model.readings.gaps) == len(compute(trace).gaps) > 0
    from gaplens.store import cache

    hit, damaged = cache.lookup_checked(trace_path)  # the early parse filled the cache, as a worker's would
    assert hit is not None and not damaged and len(hit) == len(trace)


def test_a_cold_parse_reports_progress_and_stops_when_the_viewer_quits(tmp_path, monkeypatch):
    import gaplens.loaders
    import gaplens.tui.early as early_module

    calls = []

    def slow_load(path, progress=None, **_kwargs):
        for i in range(10_000):  # a parse that only ends when cancelled
            progress("parsing", min(i / 100, 1.0))
            calls.append(i)
            time.sleep(0.005)
        raise AssertionError("the parse was not cancelled")

    monkeypatch.setattr(gaplens.loaders, "load", slow_load)
    monkeypatch.setenv("GAPLENS_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": []}')
    early = early_module.EarlyOpen(str(path))
    reported: list[float] = []

    def report(stage: str, fraction: float) -> None:
        reported.append(fraction)
        if len(reported) >= 3:
            raise KeyboardInterrupt  # what the worker's own progress raises once the app quit

    with pytest.raises(KeyboardInterrupt):
        early.wait_trace(report)
    assert len(reported) == 3 and reported == sorted(reported) and reported[-1] > 0
    assert early._stages["trace"].wait(5)  # the thread ended: the next progress call raised Cancelled
    n = len(calls)
    time.sleep(0.05)
    assert len(calls) == n and early.trace is None and early.error is None


def test_a_failing_stage_is_redone_by_the_worker(trace_path, monkeypatch):
    load(trace_path)
    import gaplens.tui.readings as readings_module

    real = readings_module.compute
    monkeypatch.setattr(readings_module, "compute", lambda trace: 1 / 0)
    early = EarlyOpen(trace_path)
    assert early.wait("trace") is not None and early.wait("model") is not None
    assert early.wait("readings") is None  # it failed: left to the worker
    monkeypatch.setattr(readings_module, "compute", real)
    app = make_app(trace_path, early=early)
    _run(app)
    assert app.error is None and not app.analysing and len(app.model.readings.gaps) == len(compute(early.trace).gaps)


def test_a_damaged_trace_is_reported_by_the_worker_in_one_line(tmp_path):
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00garbage")
    early = EarlyOpen(str(bad))
    assert early.wait("readings") is None
    app = make_app(str(bad), early=early)
    _run(app)
    assert app.error and "\n" not in app.error and app.return_code == 2


@pytest.fixture
def collector():
    """Leave the test session's garbage collector as it was (enabled, nothing frozen)."""
    import gc

    yield gc
    gc.unfreeze()
    gc.enable()


def test_a_warm_open_pauses_the_collector_until_its_readings_are_drawn(trace_path, collector):
    from gaplens.tui.early import start

    load(trace_path)
    frozen = collector.get_freeze_count()
    early = start(trace_path)
    assert not collector.isenabled()
    early.wait("readings")
    assert not collector.isenabled()  # still paused: the screen is not up yet
    app = make_app(trace_path, early=early)
    resumed: list[bool] = []

    async def main() -> None:
        async with app.run_test(size=(100, 30)) as pilot:
            # The collector resumes after the refresh that draws the readings: wait for that refresh
            # (up to 8 s), not only for the model (the loop used to quit in between).
            for _ in range(400):
                if app.loaded and app.model is not None and not app.analysing and collector.isenabled():
                    break
                await pilot.pause(0.02)
            resumed.append(collector.isenabled())

    asyncio.run(main())
    assert app.error is None and not app.analysing
    assert resumed == [True] and collector.get_freeze_count() > frozen  # start-up's objects set aside


def test_a_cold_open_resumes_the_collector_before_it_parses(trace_path, collector):
    from gaplens.tui.early import start

    early = start(trace_path)  # nothing cached
    assert early.wait("trace") is not None  # parsed by the early thread, with the collector running
    assert collector.isenabled() and collector.get_freeze_count() == 0


def test_a_failed_open_resumes_the_collector(tmp_path, collector, monkeypatch):
    import gaplens.tui.early as early_module

    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00garbage")
    early = early_module.EarlyOpen(str(bad))
    early.wait("readings")
    collector.disable()  # paused, as if the miss had not resumed it yet: the failure must
    monkeypatch.setitem(early_module._PAUSED, "gc", True)
    app = make_app(str(bad), early=early)
    _run(app)
    assert app.error and collector.isenabled()


def test_the_cli_never_leaves_the_collector_paused(trace_path, collector, monkeypatch):
    """``gaplens TRACE`` pauses it before the app's imports; a viewer that ends without drawing readings
    (here: never run) must not leave this process without a collector."""
    import gaplens.tui.app
    from gaplens.tui.cli import main

    load(trace_path)  # warm: the early open keeps it paused
    monkeypatch.setattr(gaplens.tui.app, "run_app", lambda path, early=None: early.wait("readings") and 0)
    assert main([trace_path]) == 0
    assert collector.isenabled()


def test_a_cold_open_caches_its_trace_once_the_timeline_is_up(trace_path, monkeypatch):
    from gaplens.store import cache

    early = EarlyOpen(trace_path)
    assert early.wait_trace(lambda *_: None) is not None
    assert cache.lookup(trace_path) is None  # parsed, not yet written: the first frame does not wait for it
    app = make_app(trace_path, early=early)
    drawn_at_store: list[bool] = []
    real = cache.store

    def store(path, trace):
        drawn_at_store.append(app._first_drawn.is_set())
        return real(path, trace)

    monkeypatch.setattr(cache, "store", store)
    _run(app)
    assert app.error is None and drawn_at_store == [True]  # once, after the first frame
    assert cache.lookup(trace_path) is not None


def test_a_cold_open_that_quits_at_once_still_caches(trace_path):
    from gaplens.store import cache

    early = EarlyOpen(trace_path)
    assert early.wait_trace(lambda *_: None) is not None
    app = make_app(trace_path, early=early)

    async def main() -> None:
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.press("q")

    asyncio.run(main())
    for _ in range(200):  # the worker writes it when it sees the quit
        if cache.lookup(trace_path) is not None:
            break
        time.sleep(0.02)
    assert cache.lookup(trace_path) is not None


def test_a_damaged_entry_is_said_on_a_cold_early_open(trace_path):
    from gaplens.store import cache

    load(trace_path)
    base, _, _ = cache._entry(trace_path)
    arrow = base.with_suffix(".arrow")
    data = bytearray(arrow.read_bytes())
    data[len(data) // 2] ^= 0xFF
    arrow.write_bytes(bytes(data))
    early = EarlyOpen(trace_path)
    trace = early.wait_trace(lambda *_: None)
    assert trace is not None and any("damaged" in w for w in trace.meta.warnings)
    early.store()
    hit, damaged = cache.lookup_checked(trace_path)
    assert hit is not None and not damaged  # rebuilt
