"""The six protocol steps as data: facts per step and where each step puts the view."""

from __future__ import annotations

import pytest

from gaplens.analysis.busy import gpu_window
from gaplens.analysis.gaps import analyse_gaps, blank_regions
from gaplens.analysis.protocol.notes import Notes
from gaplens.analysis.protocol.walk import Walkthrough, phase_rows
from gaplens.analysis.words import STEP_TITLES, busy_verdict
from tests.conftest import loaded


@pytest.fixture(scope="module")
def eager() -> Walkthrough:
    return Walkthrough(loaded("decode_eager.json.gz"))


@pytest.fixture(scope="module")
def smells() -> Walkthrough:
    return Walkthrough(loaded("smells.json.gz"))


def test_busy_verdict_words() -> None:
    assert busy_verdict(41.2) == "mostly waiting: 41% busy"
    assert busy_verdict(65) == "partly fed: 65% busy"
    assert busy_verdict(97) == "mostly dense: 97% busy"


def test_eager_steps(eager: Walkthrough) -> None:
    trace = eager.trace
    s1, s2, s3, s4, s5, s6 = eager.steps()
    assert [s.number for s in eager.steps()] == [1, 2, 3, 4, 5, 6]
    # 1: prefilled facts, the user completes the rest.
    assert any("1 × NVIDIA H200" in f for f in s1.facts)
    assert any("32 × decode_step" in f for f in s1.facts)
    assert s1.suggestion.startswith("1 × NVIDIA H200, bf16, 32 decode steps")
    assert s1.view.window_ns == gpu_window(trace)
    # 2: phases from the record_function ranges, drawn as a row.
    assert s2.view.show_phases
    names = " ".join(s2.facts)
    for phase in ("prefill", "decode", "32 × decode_step", "postprocess"):
        assert phase in names
    # 3: fit, busy overall and per phase with a plain verdict (README: ~6 % busy).
    assert s3.view.window_ns == gpu_window(trace)
    assert s3.facts[0].startswith("GPU mostly waiting: 6% busy")
    assert any(f.startswith("decode: mostly waiting") for f in s3.facts)
    # 4: zoomed to the largest blank region of a decode step, highlighted in the middle.
    g = eager.gap
    assert g is not None and 2_000_000 < g.dur_ns < 4_000_000
    assert s4.view.highlight_ns == (g.start_ns, g.end_ns)
    w0, w1 = s4.view.window_ns
    assert w0 < g.start_ns and g.end_ns < w1 and (w1 - w0) < 3 * g.dur_ns
    assert "decode_step" in s4.facts[0]
    # 5: the evidence is selected and lies in or at the gap.
    assert s5.view.select
    for i in s5.view.select:  # the ops on either side touch it; the host work overlaps it
        assert trace.start_ns[i] <= g.end_ns and trace.end_ns[i] >= g.start_ns
    assert any(f.startswith("evidence: ") for f in s5.facts)
    # 2 ms in decode_step 5 in which the thread ran no CPU op and no CUDA call: host time, not launches.
    assert s5.facts[0].startswith("cause: host")
    # The profiler's own buffer flush (2.81 ms, 96% "Activity Buffer Request") is larger but is no finding.
    flush = [r for r in blank_regions(trace) if r.dur_ns > g.dur_ns]
    assert flush and all(f.cause == "profiler" for f in analyse_gaps(trace) if f.dur_ns > g.dur_ns)
    # 6: the lever of the group holding most on-path blank time in steady steps, not THE gap's: the eager
    # decode loop launches every kernel from Python (no graph launch in the file), so launches dominate.
    assert s6.facts[0].startswith("launch-bound: ")
    assert "steady steps (decode_step" in s6.facts[0]
    assert s6.facts[1].startswith("lever: ") and "CUDA graph" in s6.facts[1]
    assert s6.suggestion == s6.facts[1].removeprefix("lever: ")
    assert any(f.startswith("the largest blank region (steps 4 and 5: ") for f in s6.facts)  # THE gap stays
    assert any("gaplens compare" in f for f in s6.facts)
    assert s6.view.highlight_ns is not None and s6.view.highlight_ns != s4.view.highlight_ns


def test_smells_zooms_into_tokenize(smells: Walkthrough) -> None:
    s4 = smells.step(4)
    g = smells.gap
    assert g is not None and g.dur_ns > 40_000_000  # the host island, README ~57 ms
    assert "tokenize" in s4.facts[0]
    assert smells.step(3).facts[0].startswith("GPU mostly waiting: ")  # compute share: copies no longer count
    assert any(f.startswith("dense_matmul: mostly dense") for f in smells.step(3).facts)
    assert any(f.startswith("tokenize: mostly waiting: 0% busy") for f in smells.step(3).facts)
    # The host island is also the largest blank region of all, and it is on the critical path.
    assert g.dur_ns == max(r.dur_ns for r in blank_regions(smells.trace))
    assert g.on_critical_path
    assert smells.step(5).facts[0].startswith("cause: host")
    assert not any("profiler overhead" in f for f in smells.step(5).facts)
    s6 = smells.step(6).facts
    assert s6[0].startswith("host work: ") and "smell: host island in 2 of 2 tokenize" in s6[2]
    assert "tokenis" in s6[1]  # the trace has tokenize ranges: tokenisation advice fits
    assert "on the critical path" in s4.facts[0]


def test_phase_rows_apply_renames_and_marks() -> None:
    trace = loaded("smells.json.gz")
    base = phase_rows(trace)
    tok = next(r for r in base if r.name == "tokenize")
    notes = Notes()
    notes.mark_phase("preprocess (regex)", tok.start_ns, tok.end_ns, original="tokenize")
    notes.mark_phase("my range", 10, 20)
    rows = phase_rows(trace, notes)
    assert len(rows) == len(base) + 1
    renamed = [r for r in rows if r.source == "renamed"]
    assert [(r.name, r.original) for r in renamed] == [("preprocess (regex)", "tokenize")]
    assert sum(r.name == "tokenize" for r in rows) == 1  # the second step's tokenize keeps its name
    assert rows[0].name == "my range" and rows[0].source == "user"


def test_report_quotes_answers_once(smells: Walkthrough) -> None:
    """The viewer's export and `gaplens report` are one text: the walkthrough's steps, the user's words."""
    from gaplens.analysis.protocol.report import report_markdown

    n = Notes()
    n.set_answer(1, "toy loop, batch 1")
    n.set_answer(6, "tokenize in a worker thread")
    n.experiment = "tokenize in a worker thread"
    n.add_note("host island starts here", 15_000_000)
    md = report_markdown(smells.trace, n, smells)
    assert md.startswith("# gaplens report: smells.json.gz")
    assert [line for line in md.splitlines() if line.startswith("## ")][:6] == [
        f"## {k}. {title}" for k, title in STEP_TITLES.items()
    ]
    assert md.count("tokenize in a worker thread") == 1
    assert "> toy loop, batch 1" in md and "host island starts here" in md
    assert "GPU mostly waiting: " in md


def test_marked_phase_gets_its_busy_share() -> None:
    trace = loaded("smells.json.gz")
    tok = next(p for p in Walkthrough(trace).phases if p.name == "tokenize")
    n = Notes()
    n.mark_phase("regex work", tok.start_ns, tok.end_ns)
    walk = Walkthrough(trace, n)
    assert "regex work (yours): mostly waiting: 0% busy" in walk.step(3).facts
    walk.refresh_notes(Notes())
    assert not any("(yours)" in f for f in walk.step(3).facts)


def test_gpu_only_trace_asks_for_a_better_trace() -> None:
    from gaplens.loaders.events import EventColumns
    from gaplens.loaders.model import Device, Kind, LaneKind, Meta

    cols = EventColumns()
    for k, (s, e) in enumerate([(0, 100), (300, 400), (450, 900)]):
        cols.add((LaneKind.STREAM, 0, 7), s, e, f"k{k}", Kind.KERNEL, k)
    trace = cols.finish(Meta("nsys", devices=[Device(0, "GPU 0")]), None)
    walk = Walkthrough(trace)
    assert walk.gap is not None and (walk.gap.start_ns, walk.gap.end_ns) == (100, 300)
    s4 = walk.step(4).facts[0]
    assert s4.startswith("largest blank region:") and "lacks the host side" in s4  # not claimed on the path
    s5 = walk.step(5)
    assert s5.facts[0].startswith("cause: unknown")
    assert any("torch.profiler" in f for f in s5.facts)
    assert walk.step(6).facts[1].startswith("lever: collect a better trace first")


def test_steps_4_and_6_name_the_same_step_for_the_largest_region():
    """options_all's largest region lies in request 0's prefill, before any decode_step: step 4 says
    "in request 0 › prefill"; step 6 said "lies outside the steady time: warm-up" (no step is warm-up
    there). Both now read the region's step from one rule (``gap_steps``): none."""
    from gaplens.analysis.protocol.walk import region_step
    from gaplens.analysis.steps import steps
    from gaplens.loaders import load
    from tests.conftest import ROOT

    trace = load(ROOT / "tests" / "data" / "options_all.json.gz")
    walk = Walkthrough(trace)
    assert region_step(trace, walk.gap, steps(trace)) == -1
    assert "in request 0 › prefill" in walk.step(4).facts[0]
    assert not any("warm-up step" in f for f in walk.step(4).facts)
    assert any("lies outside every decode_step" in f for f in walk.step(6).facts)


def test_step_3_splits_the_on_path_blank_time_by_each_regions_cause() -> None:
    """round-4 alloc_fault: step 3's split counts each on-path region whole under its own cause (raw sums of
    the regions' durations), and says so: it is not the share of time inside allocation calls."""
    import re
    from pathlib import Path

    from gaplens.analysis.causes import CAUSES
    from gaplens.analysis.gaps import gap_columns
    from gaplens.loaders import load

    trace = load(str(Path(__file__).parent / "data" / "round4" / "alloc_fault.json.gz"))
    line = next(f for f in Walkthrough(trace).steps()[2].facts if f.startswith("blank on the critical path"))
    assert ", by their causes: " in line
    cols = gap_columns(trace)
    on = cols.on_path
    dur = (cols.end_ns - cols.start_ns)[on]
    want = {CAUSES[c]: 0 for c in set(cols.cause[on].tolist())}
    for c, d in zip(cols.cause[on].tolist(), dur.tolist(), strict=True):
        want[CAUSES[c]] += d
    said = dict(re.findall(r"(\w+) (\d+)%", line.split("by their causes: ", 1)[1]))
    assert said and all(abs(int(p) - 100 * want[c] / dur.sum()) <= 0.5 for c, p in said.items())
