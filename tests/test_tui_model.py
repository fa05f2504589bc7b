"""The viewer's pure pieces on real and hand-built traces: lane tree, details, untrusted names."""

from __future__ import annotations

import asyncio

import numpy as np

from gaplens.analysis.units import fmt_ns
from gaplens.loaders.events import EventColumns
from gaplens.loaders.model import MEMCPY_KINDS, Device, Kind, LaneKind, Meta
from gaplens.tui.app import make_app
from gaplens.tui.details import describe
from gaplens.tui.lanetree import DEPTH_CAP, RowKind, build_tree, gutter_label, visible_rows
from gaplens.tui.navigate import Selection
from gaplens.tui.readings import compute
from gaplens.tui.viewmodel import build_model, with_readings
from tests.conftest import loaded
from tests.pilot import readings_ready


def test_lane_tree_orders_devices_first_and_caps_depth():
    trace = loaded("decode_eager.json.gz")
    rows = visible_rows(build_tree(trace, phase_depths=2), set())
    assert rows[0].kind == RowKind.BUSY and rows[1].kind == RowKind.PHASES
    cpu = [r for r in rows if r.kind == RowKind.EVENTS and trace.lanes[r.lane].kind == LaneKind.CPU_OPS]
    assert len(cpu) == min(DEPTH_CAP, trace.lane_depth(cpu[0].lane))
    hidden = trace.lane_depth(cpu[0].lane) - DEPTH_CAP
    assert hidden > 0 and cpu[-1].more == hidden
    assert gutter_label(cpu[-1], set(), 20).rstrip().endswith(f"+{hidden}")
    # Collapsing the process keeps its header only; the GPU rows stay.
    proc = next(r for r in rows if r.node.startswith("p:") and r.heads)
    fewer = visible_rows(build_tree(trace, phase_depths=2), {proc.node})
    pid = proc.node.split(":")[1]
    assert proc in fewer and len(fewer) < len(rows)
    assert not any(r.node.startswith(f"t:{pid}:") for r in fewer)
    assert [r for r in fewer if r.device >= 0] == [r for r in rows if r.device >= 0]
    assert gutter_label(proc, {proc.node}, 20).startswith("▸")


def test_details_of_a_kernel_name_its_launch_and_args():
    model = build_model(loaded("decode_eager.json.gz"))
    t = model.trace
    k = int(np.flatnonzero((t.kind == int(Kind.KERNEL)) & (t.launch >= 0))[0])
    lines = dict(describe(model, Selection(int(t.start_ns[k]), int(t.end_ns[k]), event=k)))
    assert lines["name"] == t.name(k) and lines["kind"] == "kernel"
    assert lines["lane"] == "GPU 0 · stream 7"
    assert "grid" in lines["args"] and lines["correlation"] == str(int(t.corr[k]))
    assert lines["launched by"].startswith(t.name(int(t.launch[k])))
    api = dict(describe(model, Selection(0, 1, event=int(t.launch[k]))))
    assert api["launched"].startswith(t.name(k))


def test_details_of_the_largest_blank_region():
    trace = loaded("smells.json.gz")
    model = with_readings(build_model(trace), compute(trace))
    g = model.readings.largest
    lines = dict(describe(model, Selection(g.start_ns, g.end_ns, gap=g)))
    # Derived from the trace: the region runs from the end of the last compute kernel before it to the start
    # of the next one (no kernel of this sample communicates), and takes in the small DtoD copy near its end,
    # since copies are not compute; a tokenize range lies inside it (the host island).
    k = np.flatnonzero(trace.kind == int(Kind.KERNEL))
    s, e = trace.start_ns[k], trace.end_ns[k]
    before, after = int(e[e <= g.start_ns].max()), int(s[s >= g.end_ns].min())
    assert (before, after) == (g.start_ns, g.end_ns) and not ((s < after) & (e > before)).any()
    assert (trace.mask(MEMCPY_KINDS) & (trace.start_ns >= before) & (trace.end_ns <= after)).any()
    tok = np.flatnonzero((trace.start_ns >= before) & (trace.end_ns <= after))
    assert any(trace.name(int(i)) == "tokenize" for i in tok)
    assert "largest" in lines["blank"] and f"duration {fmt_ns(after - before)}" in lines["time"]


def _hostile_trace():
    cols = EventColumns()
    evil = "\x1b]0;pwned\x07\x1b[31mred\x1b[0m\u200bkernel\x9b2J"
    cols.add((LaneKind.CPU_OPS, 1, 1), 0, 1_000_000, evil, Kind.CPU_OP)
    cols.add((LaneKind.CUDA_API, 1, 1), 10, 500_000, "cudaLaunchKernel\x1b[2J", Kind.CUDA_API, corr=7)
    cols.add((LaneKind.STREAM, 0, 7), 600_000, 2_000_000, evil, Kind.KERNEL, corr=7)
    meta = Meta("kineto", path="evil\x1b[2J.json", devices=[Device(0, "GPU\x1b[5m")])
    meta.threads[(1, 1)] = "thread\x1b[31m 1"
    meta.processes[1] = "proc\x07"
    return cols.finish(meta, None)


def test_untrusted_names_never_reach_the_terminal():
    app = make_app(_hostile_trace(), mono=False)

    async def main() -> None:
        async with app.run_test(size=(100, 20)) as pilot:
            tl = await readings_ready(app, pilot)
            await pilot.press("w")
            texts = [tl.render_row(i).text for i in range(len(tl.rows))]
            texts.append(str(app.query_one("#header").render()))
            await pilot.press("enter")
            texts.append(str(app.query_one("#details").render()))
            for text in texts:  # the details panel is several lines: newlines are its own
                assert not any(ord(c) < 32 or 0x7F <= ord(c) < 0xA0 for c in text.replace("\n", "")), repr(text)
            assert any("redkernel" in t or "red" in t for t in texts)

    asyncio.run(main())


def test_gap_columns_match_blank_regions():
    """The viewer's gap columns are exactly ``analysis.gaps.blank_regions``, and indexing makes the analysed Gap."""
    from gaplens.analysis.gaps import analyse_gaps, blank_regions
    from gaplens.tui.readings import compute

    for name in ("smells.json.gz", "decode_eager.json.gz"):
        trace = loaded(name)
        table = compute(trace).gaps
        ref = blank_regions(trace)
        assert len(table) == len(ref)
        assert table.start.tolist() == [g.start_ns for g in ref]
        assert table.end.tolist() == [g.end_ns for g in ref]
        analysed = analyse_gaps(trace)
        for k in (0, len(ref) // 2, len(ref) - 1):
            got, want = table[k], analysed[k]
            assert (got.start_ns, got.end_ns, got.cause, got.on_critical_path) == (
                want.start_ns,
                want.end_ns,
                want.cause,
                want.on_critical_path,
            )
            assert got.evidence, "the gap the user looks at carries its evidence"
        g = ref[len(ref) // 3]
        assert table[table.index_at(g.device, (g.start_ns + g.end_ns) // 2)].start_ns == g.start_ns
