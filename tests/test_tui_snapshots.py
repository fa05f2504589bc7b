"""SVG snapshots of the screens that matter (textual 8.2.8, pytest-textual-snapshot 1.1.0, syrupy 4.8.0).

Re-record with ``pytest tests/test_tui_snapshots.py --snapshot-update`` after checking the pictures.
"""

from __future__ import annotations

from gaplens.tui.app import make_app
from tests.conftest import loaded, sample
from tests.pilot import snapshot_ready

SIZE = (120, 36)


def test_decode_eager_default_view(snap_compare):
    """Fit-all: GPU row mostly ░ (6 % busy), phases and annotation rows with names, host rows below."""
    assert snap_compare(
        make_app(loaded("decode_eager.json.gz"), mono=False), terminal_size=SIZE, run_before=snapshot_ready
    )


def test_decode_eager_largest_gap_with_details(snap_compare):
    """After `c`: the largest blank region fills 60 % of the view as ━ on the GPU rows; details name it."""
    assert snap_compare(
        make_app(loaded("decode_eager.json.gz"), mono=False), press=["c"], terminal_size=SIZE, run_before=snapshot_ready
    )


def test_nsys_smells_default_view(snap_compare):
    """An Nsight Systems export: the same rows and readings as a Kineto trace of the same workload."""
    app = make_app(str(sample("nsys_smells.sqlite.gz")), mono=False)
    assert snap_compare(app, terminal_size=SIZE, run_before=snapshot_ready)


# ---- any terminal ---------------------------------------------------------------------


async def _light(pilot) -> None:
    await snapshot_ready(pilot)
    pilot.app.theme = "textual-light"
    await pilot.pause()


def test_light_theme_after_c(snap_compare):
    """textual-light after `c`: dark row labels and readable bars on the light background, ━ on the GPU rows."""
    app = make_app(loaded("smells.json.gz"), mono=False)
    assert snap_compare(app, press=["c"], terminal_size=(100, 30), run_before=_light)


def test_no_color_after_c(snap_compare, monkeypatch):
    """NO_COLOR=1 after `c`: no colour at all; ━ (largest gap) vs · (gaps), shades and per-kind fills still differ."""
    monkeypatch.setenv("NO_COLOR", "1")
    app = make_app(loaded("smells.json.gz"))
    assert snap_compare(app, press=["c"], terminal_size=(100, 30), run_before=snapshot_ready)


def test_80x24_after_c(snap_compare):
    """80×24 after `c`: footer shows ? q / c g o p; compact details (3-4 lines); CPU ops and CUDA API rows in view."""
    app = make_app(loaded("decode_eager.json.gz"), mono=False)
    assert snap_compare(app, press=["c"], terminal_size=(80, 24), run_before=snapshot_ready)


async def _statistics(pilot) -> None:
    await snapshot_ready(pilot)
    await pilot.press("T")
    for _ in range(200):
        await pilot.pause()
        if getattr(pilot.app.screen, "tables", None):
            break


def test_statistics_screen(snap_compare):
    """T: the kernels table, largest total first, with share, total, count, avg, med, min, max and name."""
    app = make_app(loaded("smells.json.gz"), mono=False)
    assert snap_compare(app, terminal_size=(120, 24), run_before=_statistics)
