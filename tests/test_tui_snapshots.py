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
