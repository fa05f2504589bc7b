"""The viewer on the new readings: deep stacks open with space, phases grouped by process, comm in the header."""

from __future__ import annotations

import asyncio
import gzip
import json
from decimal import Decimal

from textual.widgets import OptionList

from gaplens.loaders import load
from gaplens.tui.app import make_app
from gaplens.tui.lanetree import DEPTH_CAP
from tests.conftest import ROOT
from tests.pilot import readings_ready as ready

DATA = ROOT / "tests" / "data"


def test_space_on_a_plus_n_row_draws_the_whole_stack():
    """with_stack nests Python frames 20 deep; only 4 sub-rows were drawn and the rest could not be seen."""
    app = make_app(load(DATA / "shapes_stack.json.gz"))

    async def main() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            tl = await ready(app, pilot)
            k = next(i for i, r in enumerate(tl.rows) if r.more)
            lane, hidden = tl.rows[k].lane, tl.rows[k].more
            before = len(tl.rows)
            tl.set_row_cursor(k)
            await pilot.press("space")
            deep = [r for r in tl.rows if r.lane == lane and r.depth >= DEPTH_CAP]
            assert len(deep) == hidden and len(tl.rows) == before + hidden
            assert not tl.rows[k].more  # the "+N" mark goes while the stack is open
            tl.set_row_cursor(next(i for i, r in enumerate(tl.rows) if r is deep[-1]))
            await pilot.press("space")  # space on any of the opened levels closes them again
            assert len(tl.rows) == before and tl.rows[k].more == hidden

    asyncio.run(main())


def test_phase_picker_groups_phases_by_process():
    """Two ranks in one nsys report: their train_step ranges were interleaved in one list."""
    app = make_app(load(DATA / "nsys_ddp_straggler.sqlite.gz"))

    async def main() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            await ready(app, pilot)
            await pilot.press("p")
            await pilot.pause()
            options = app.screen.query_one(OptionList)
            labels = [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]
            heads = [i for i, label in enumerate(labels) if label.startswith("process ")]
            assert len(heads) == 2
            first = labels[heads[0] + 1 : heads[1]]
            assert sum(label.strip().startswith("train_step") for label in first) == 8
            assert all(options.get_option_at_index(i).disabled for i in heads)

    asyncio.run(main())


def _raw_busy_and_compute_pct(path) -> tuple[float, float]:
    """Busy (kernels, copies, memsets) and compute (kernels that are not NCCL) shares of the GPU window,
    from the raw JSON with exact decimal microseconds (DESIGN.md, Three classes of GPU work)."""
    with gzip.open(path) as fh:
        events = json.loads(fh.read())["traceEvents"]
    gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]

    def interval(e: dict) -> tuple[Decimal, Decimal]:
        start = Decimal(str(e["ts"]))
        return start, start + Decimal(str(e["dur"]))

    def union(intervals: list[tuple[Decimal, Decimal]]) -> Decimal:
        total, cur = Decimal(0), None
        for s, e in sorted(intervals):
            if cur is None or s > cur[1]:
                total += cur[1] - cur[0] if cur else 0
                cur = [s, e]
            else:
                cur[1] = max(cur[1], e)
        return total + (cur[1] - cur[0] if cur else 0)

    spans = [interval(e) for e in gpu]
    window = max(e for _, e in spans) - min(s for s, _ in spans)
    compute = [interval(e) for e in gpu if e["cat"] == "kernel" and "nccl" not in e["name"].lower()]
    return float(100 * union(spans) / window), float(100 * union(compute) / window)


def test_header_splits_compute_from_communication():
    path = DATA / "ddp_allreduce_straggler_rank0.json.gz"
    busy, compute = _raw_busy_and_compute_pct(path)
    app = make_app(load(path))

    async def main() -> None:
        async with app.run_test(size=(160, 30)) as pilot:
            await ready(app, pilot)
            header = str(app.query_one("#header").render())
            assert f"GPU busy {busy:.1f}%" in header and f"compute {compute:.1f}%" in header

    asyncio.run(main())
