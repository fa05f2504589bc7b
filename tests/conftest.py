"""Shared fixtures: where the real traces live, and a cache of loaded traces per session.

The larger corpus lives in ``../shared`` (samples/, public-samples/), beside the checkout, which a
fresh clone does not have: tests that need it go through ``sample()``, ``shared_file()``, ``public()``
or the ``requires_shared`` mark and skip there with a one-line reason. CI sets
``GAPLENS_REQUIRE_SHARED=1`` (``.ci/run``), which turns each of those skips into a failure, so a run
can never pass by skipping the corpus.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import warnings
from pathlib import Path
from typing import NoReturn

import pytest

from gaplens import store
from gaplens.loaders import load
from gaplens.loaders.model import Trace

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
SAMPLES = SHARED / "samples"
PUBLIC = SHARED / "public-samples"
BUNDLED = ROOT / "samples"

#: Set (to anything but "" or "0") by .ci/run: a test that needs ../shared fails instead of skipping.
REQUIRE_SHARED = "GAPLENS_REQUIRE_SHARED"
#: The start of every skip reason for a missing ../shared file (the safety net below keys on it too).
MISSING = "needs ../shared"


def shared_required() -> bool:
    return os.environ.get(REQUIRE_SHARED, "") not in ("", "0")


def missing_shared(what: str) -> NoReturn:
    """Skip (fail under ``GAPLENS_REQUIRE_SHARED``): ``what`` under ../shared is not beside the checkout."""
    reason = f"{MISSING}: {what} is not beside the checkout"
    if shared_required():
        pytest.fail(f"{reason} ({REQUIRE_SHARED} is set)", pytrace=False)
    pytest.skip(reason)


def shared_file(rel: str) -> Path:
    """``../shared/<rel>`` (a file or folder), or skip when it is not there."""
    path = SHARED / rel
    if not path.exists():
        missing_shared(f"shared/{rel}")
    return path


def public(rel: str) -> Path:
    """``../shared/public-samples/<rel>``, or skip when it is not there."""
    return shared_file(f"public-samples/{rel}")


#: For modules that read the shared recordings directly (raw JSON, SQL, nsys stats CSVs).
requires_shared = pytest.mark.requires_shared


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "requires_shared: reads ../shared/samples directly (skips when it is absent)")


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("requires_shared") is not None and not SAMPLES.is_dir():
        missing_shared("shared/samples")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Safety net under ``GAPLENS_REQUIRE_SHARED``: a skip that names the shared corpus is a failure,
    even when a test skips by hand instead of through the helpers above."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and shared_required() and not hasattr(report, "wasxfail"):
        reason = str(report.longrepr[-1] if isinstance(report.longrepr, tuple) else report.longrepr)
        if any(word in reason.lower() for word in ("shared", "sample")):
            report.outcome = "failed"
            report.longrepr = f"skipped while {REQUIRE_SHARED} is set: {reason}"


#: Heavy tests, marked ``slow`` here by file and function (every parametrisation) so the default run stays
#: fast: each took >= 3 s (or its parametrisations together >= 7 s) on the 2-core box (2026-12-02, load ~3.5).
#: New heavy tests say ``@pytest.mark.slow`` themselves; ``.ci/run`` runs them all (``-m slow``).
SLOW = {
    "test_analysis_public.py": {"test_device_idle_matches_an_independent_union"},
    "test_bounded_input.py": {"test_a_gzip_blank_bomb_is_read_in_pieces"},
    "test_causes_real.py": {
        "test_dependency_is_exactly_the_queued_regions",
        "test_device_to_device_copies_are_not_blamed_as_host_copies",
    },
    "test_corpus.py": {"test_every_corpus_file_through_the_cli", "test_python_m_gaplens_matches_the_forked_runs"},
    "test_fuzz.py": {"test_brief_fuzz_run_finds_no_crash_hang_or_blowup"},
    "test_hostile_pilot.py": {"test_hostile_trace_walks_the_whole_viewer"},
    "test_kineto.py": {"test_public_totals_match_raw_json", "test_fallback_path_builds_the_same_trace"},
    "test_kineto_fast.py": {
        "test_blocks_classified_apart_merge_into_the_ids_of_one_reading",
        "test_every_sample_reads_without_the_per_event_path",
    },
    "test_notes_shared.py": {"test_two_concurrent_processes_lose_no_note", "test_two_viewer_windows_on_one_trace"},
    "test_protocol_pilot.py": {
        "test_walk_all_six_steps",
        "test_answers_notes_and_phases_survive_a_restart",
        "test_app_killed_mid_write_keeps_the_previous_notes",
        "test_export_writes_markdown_and_svg",
    },
    "test_ranks_cli.py": {"test_dask_local_cluster_reads_the_same_job"},
    "test_tui_pilot.py": {
        "test_next_and_previous_blank_region_come_into_view",
        "test_search_marks_matches_and_n_walks_them_in_time_order",
    },
    "test_tui_qa.py": {"test_opening_the_details_panel_keeps_the_cursor_row_in_view"},
    "test_tui_readings.py": {
        "test_phase_picker_groups_phases_by_process",
        "test_header_splits_compute_from_communication",
    },
    "test_tui_repaint.py": {"test_j_repaints_two_rows_and_enter_only_the_selected_rows"},
    "test_tui_snapshots.py": {"test_decode_eager_largest_gap_with_details"},
    "test_tui_tables.py": {
        "test_statistics_sort_open_instances_and_jump_to_one",
        "test_lists_of_blank_regions_and_smells_jump_to_the_pick",
        "test_x_walks_blank_regions_by_size_and_X_walks_back",
        "test_go_to_time_moves_the_cursor_there",
    },
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--slow", action="store_true", help="also run the tests marked slow (default: deselected)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the ``SLOW`` tests; deselect every slow test unless ``--slow``, ``-m EXPR`` or a test id (``::``) asks."""
    seen: dict[str, set[str]] = {}
    for item in items:
        name = getattr(item, "originalname", item.name)
        seen.setdefault(item.path.name, set()).add(name)
        if name in SLOW.get(item.path.name, ()):
            item.add_marker(pytest.mark.slow)
    if not config.option.keyword and not any("::" in str(a) for a in config.args):
        for file, names in SLOW.items():  # a whole file was collected: a name it lacks is stale
            stale = sorted(names - seen.get(file, names))
            if stale:
                warnings.warn(pytest.PytestWarning(f"conftest.SLOW names no test in {file}: {stale}"), stacklevel=1)
    if config.getoption("--slow") or config.option.markexpr or any("::" in str(a) for a in config.args):
        return
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if item.get_closest_marker("slow") is None]


def sample(name: str) -> Path:
    """A shared H200 sample (or a bundled one), or skip when the shared folder is not beside the checkout."""
    for folder in (SAMPLES, BUNDLED):
        path = folder / name
        if path.exists():
            return path
    missing_shared(f"shared/samples/{name}")


@pytest.fixture(autouse=True, scope="session")
def _private_cache_dir(tmp_path_factory):
    """Keep the trace cache of the test run out of the user's cache directory.

    Kept readings (store.readings) are off for the session: a test that changes a threshold and
    reloads a trace must see the reading computed again, not one an earlier test kept.
    tests/test_persist.py turns them on for its own traces.
    """
    patch = pytest.MonkeyPatch()
    patch.setenv("GAPLENS_CACHE_DIR", str(tmp_path_factory.mktemp("gaplens-cache")))
    patch.setenv("GAPLENS_READINGS_CACHE", "0")
    store.install()  # as the CLI and the viewer do: loads go through the trace cache
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


@pytest.fixture
def smells_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A writable plain copy of the real 2025.3 nsys export (``nsys_smells.sqlite.gz``) that a test may edit,
    with a cache of its own (an edited copy must never be served from another test's entry)."""
    import gzip

    monkeypatch.setenv("GAPLENS_CACHE_DIR", str(tmp_path / "cache"))
    src = SAMPLES / "nsys_smells.sqlite.gz"
    if not src.exists():
        missing_shared("shared/samples/nsys_smells.sqlite.gz")
    dst = tmp_path / "edit.sqlite"
    with gzip.open(src) as fin, open(dst, "wb") as fout:
        shutil.copyfileobj(fin, fout)
    return dst
