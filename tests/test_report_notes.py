"""`gaplens report TRACE -o FILE.md` quotes the user's saved answers, experiment and notes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gaplens.analysis.protocol.notes import Notes
from gaplens.analysis.protocol.report import report_markdown
from gaplens.loaders import load
from gaplens.store.notes import NotesStore
from gaplens.tui.cli import main
from tests.conftest import sample


@pytest.fixture
def trace_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GAPLENS_STATE_DIR", str(tmp_path / "state"))
    dst = tmp_path / "smells.json.gz"
    shutil.copyfile(sample("smells.json.gz"), dst)
    return dst


def test_report_command_includes_saved_notes(trace_copy: Path, tmp_path: Path, capsys) -> None:
    trace = load(trace_copy)
    store = NotesStore(trace_copy, trace.meta.origin_ns)
    n = store.load()
    n.set_answer(1, "toy loop, batch 1")
    n.set_answer(5, "the host tokenizes in Python while the GPU waits")
    n.experiment = "tokenize in a worker thread ahead of the step"
    n.add_note("the island starts here", 15_400_000)
    n.mark_phase("my warmup", 0, 1_000_000)
    store.save(n)

    out = tmp_path / "reading.md"
    assert main(["report", str(trace_copy), "-o", str(out)]) == 0
    md = out.read_text()
    # Answers are quoted under their own step.
    step1 = md.index("## 1. ")
    assert md.index("> toy loop, batch 1") > step1 and md.index("> toy loop, batch 1") < md.index("## 2. ")
    assert md.index("> the host tokenizes in Python") > md.index("## 5. ")
    # The experiment (not the step-6 answer here), notes and marked phases close it.
    assert "## Your experiment" in md and "tokenize in a worker thread ahead of the step" in md
    assert "the island starts here" in md and "my warmup" in md
    assert "gaplens: warning" not in capsys.readouterr().err


def test_report_without_notes_is_unchanged(trace_copy: Path) -> None:
    trace = load(trace_copy)
    assert report_markdown(trace) == report_markdown(trace, notes=None) == report_markdown(trace, notes=Notes())
    assert "Your experiment" not in report_markdown(trace)


def test_report_keeps_dict_answers(trace_copy: Path) -> None:
    md = report_markdown(load(trace_copy), notes={"6": "one experiment"})
    assert "> one experiment" in md


def test_experiment_equal_to_answer_is_quoted_once(trace_copy: Path) -> None:
    n = Notes()
    n.set_answer(6, "CUDA graphs")
    n.experiment = "CUDA graphs"
    md = report_markdown(load(trace_copy), notes=n)
    assert md.count("CUDA graphs") == 1


def test_corrupt_notes_warn_but_report(trace_copy: Path, tmp_path: Path, capsys) -> None:
    trace_copy.with_name(trace_copy.name + ".gaplens.json").write_text("{broken")
    assert main(["report", str(trace_copy)]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("# gaplens report")
    assert "gaplens: warning: ignoring notes file" in captured.err
