"""What a newcomer meets first (issue 22): --version, early input errors, bounded JSON, sanitised paths,
outputs that never overwrite the input nor write through links, exports opened without writing beside them."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from gaplens.loaders import load
from gaplens.loaders.model import Kind
from gaplens.tui import cli
from gaplens.tui.cli import main
from tests.conftest import ROOT, sample

ESC = "\x1b"


def run(capsys, *argv) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture
def trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GAPLENS_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    dst = tmp_path / "t.json.gz"
    shutil.copyfile(sample("smells.json.gz"), dst)
    return dst


# ---- --version, early errors -------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_prints_the_projects_version(capsys, flag):
    want = re.search(r'^version = "(.+)"$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert want is not None
    assert run(capsys, flag) == (0, f"gaplens {want.group(1)}\n", "")


@pytest.mark.parametrize("make", ["missing", "fifo", "folder"])
def test_unusable_trace_is_one_line_before_the_screen_switches(capsys, tmp_path, monkeypatch, make):
    """The viewer is never started (so the terminal never enters the alternate screen) for a bad path."""
    started: list[str] = []
    monkeypatch.setattr("gaplens.tui.app.run_app", lambda path, early=None: started.append(path) or 0)
    path = tmp_path / "nosuch.json"
    if make == "fifo":
        os.mkfifo(path)
    elif make == "folder":  # a folder is a job: one with no traces is said before any screen too
        path = tmp_path / "a.json"
        path.mkdir()
    rc, out, err = run(capsys, path)
    assert rc == 2 and not started and out == ""
    assert err.count("\n") == 1 and err.startswith("gaplens: ")
    assert {"missing": "no such file", "fifo": "not a regular file", "folder": "no trace files"}[make] in err


def test_a_good_trace_still_reaches_the_viewer(monkeypatch, trace):
    started: list[str] = []
    monkeypatch.setattr("gaplens.tui.app.run_app", lambda path, early=None: started.append(path) or 0)
    assert main([str(trace)]) == 0 and started == [str(trace)]


# ---- gaps --json is bounded ----------------------------------------------------------------------


def test_gaps_json_has_a_default_top_and_top_0_gives_all(capsys, trace):
    rc, out, _ = run(capsys, "gaps", trace, "--json", "--top", "0")
    every = json.loads(out)
    assert rc == 0 and every["total"] == len(every["gaps"]) > 50  # the smells trace has more than a page
    rc, out, _ = run(capsys, "gaps", trace, "--json")
    default = json.loads(out)
    assert rc == 0 and default["total"] == every["total"]
    assert default["gaps"] == every["gaps"][:50]  # the 50 largest, in the same order
    rc, _, err = run(capsys, "gaps", trace, "--top", "-1")
    assert rc == 2 and "--top -1" in err


# ---- JSON echoes the path without control characters -----------------------------------------------


def test_json_path_has_no_escape_even_as_text(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    evil = tmp_path / f"e{ESC}[31mvil{ESC}]0;title\x07.json.gz"
    shutil.copyfile(sample("smells.json.gz"), evil)
    rc, out, _ = run(capsys, "summary", "--json", evil)
    assert rc == 0
    assert ESC not in out and "\\u001b" not in out.lower() and "\\u0007" not in out.lower()
    doc = json.loads(out)
    texts = [v for v in _strings(doc) if "vil" in v]
    assert texts and all(ESC not in t and "\x07" not in t for t in texts)
    assert any(t.endswith("evil.json.gz") for t in texts)


def _strings(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield k
            yield from _strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)


# ---- outputs: never the input, never through a link, never a special file -------------------------


def _place(trace: Path, kind: str) -> Path:
    """An output path of ``kind`` next to ``trace`` (a victim file for the link cases)."""
    folder = trace.parent
    if kind == "input":
        return trace
    if kind == "hardlink":
        os.link(trace, folder / "hard.json.gz")
        return folder / "hard.json.gz"
    if kind == "symlink":
        (folder / "victim.txt").write_text("keep")
        (folder / "link.md").symlink_to(folder / "victim.txt")
        return folder / "link.md"
    if kind == "dangling":
        (folder / "dangling.md").symlink_to(folder / "created-through-link.md")
        return folder / "dangling.md"
    if kind == "fifo":
        os.mkfifo(folder / "fifo")
        return folder / "fifo"
    if kind == "folder":
        (folder / "dir.md").mkdir()
        return folder / "dir.md"
    raise AssertionError(kind)


KINDS = ["input", "hardlink", "symlink", "dangling", "fifo", "folder"]
WHY = {
    "input": "is the input trace",
    "hardlink": "is the input trace",
    "symlink": "is a symlink",
    "dangling": "is a symlink",
    "fifo": "not a regular file",
    "folder": "a directory",
}


def _untouched(trace: Path) -> None:
    assert trace.read_bytes() == sample("smells.json.gz").read_bytes()
    folder = trace.parent
    if (folder / "victim.txt").exists():
        assert (folder / "victim.txt").read_text() == "keep"
    assert not (folder / "created-through-link.md").exists()
    assert not list(folder.glob(".*.tmp"))


@pytest.mark.parametrize("kind", KINDS)
def test_report_output_refused(capsys, trace, kind):
    out = _place(trace, kind)
    rc, stdout, err = run(capsys, "report", trace, "-o", out)
    assert rc == 2 and stdout == "" and err.count("\n") == 1
    assert err.startswith("gaplens: report -o ") and WHY[kind] in err
    _untouched(trace)


@pytest.mark.parametrize("kind", KINDS)
def test_export_perfetto_output_refused(capsys, trace, kind):
    out = _place(trace, kind)
    rc, _, err = run(capsys, "export", trace, "--perfetto", out)
    assert rc == 2 and err.count("\n") == 1 and WHY[kind] in err
    _untouched(trace)


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
@pytest.mark.parametrize("kind", ["linked_dir", "linked_file", "file", "fifo_inside"])
def test_export_tables_folder_refused(capsys, trace, tmp_path, fmt, kind):
    other = tmp_path / "other"
    other.mkdir()
    (other / f"events.{fmt}").write_text("keep")
    folder = tmp_path / "out"
    if kind == "linked_dir":
        folder.symlink_to(other, target_is_directory=True)
    elif kind == "linked_file":
        folder.mkdir()
        (folder / f"events.{fmt}").symlink_to(other / f"events.{fmt}")
    elif kind == "file":
        folder.write_text("a file, not a folder")
    else:
        folder.mkdir()
        os.mkfifo(folder / f"gaps.{fmt}")
    rc, _, err = run(capsys, "export", trace, f"--{fmt}", folder)
    assert rc == 2 and err.count("\n") == 1 and err.startswith(f"gaplens: export --{fmt} ")
    assert (other / f"events.{fmt}").read_text() == "keep"
    assert sorted(p.name for p in other.iterdir()) == [f"events.{fmt}"]


def test_good_outputs_are_written_whole_with_no_temp_left(capsys, trace, tmp_path):
    rc, _, _ = run(capsys, "report", trace, "-o", tmp_path / "r.md")
    assert rc == 0 and (tmp_path / "r.md").read_text().startswith("# gaplens report")
    rc, _, _ = run(capsys, "export", trace, "--csv", tmp_path / "tables", "--perfetto", tmp_path / "p.json.gz")
    assert rc == 0 and json.loads(gzip.decompress((tmp_path / "p.json.gz").read_bytes()))
    written = sorted(p.name for p in (tmp_path / "tables").iterdir())
    assert written == ["details.csv", "events.csv", "gaps.csv", "names.csv"]
    assert not list(tmp_path.rglob("*.tmp"))
    # Over an existing regular file: replaced (the old one stays whole until the rename).
    rc, _, _ = run(capsys, "report", trace, "-o", tmp_path / "r.md")
    assert rc == 0 and not list(tmp_path.glob(".r.md.*"))


def test_pinning_a_note_writes_nothing_beside_the_trace(capsys, trace):
    """The CLI side of the notes home: a report reads notes, and no file appears in the trace's folder."""
    from gaplens.store.notes import NotesStore

    store = NotesStore(trace)
    notes = store.load()
    notes.add_note("look here", 1000)
    store.save(notes)
    rc, out, _ = run(capsys, "report", trace)
    assert rc == 0 and "look here" in out
    assert sorted(p.name for p in trace.parent.iterdir()) == ["state", "t.json.gz"]


# ---- nsys exports are read without writing beside them ----------------------------------------------


def _wal_export(tmp_path: Path, with_wal_content: bool) -> tuple[Path, int]:
    """A WAL-mode copy of a recorded export; with WAL content, its kernels are deleted in the -wal only.

    Returns the path and the number of kernels the export holds as SQL sees it (ground truth).
    """
    plain = tmp_path / "src" / "export.sqlite"
    plain.parent.mkdir()
    with gzip.open(ROOT / "tests" / "data" / "nsys_serving.sqlite.gz") as fin, open(plain, "wb") as fout:
        shutil.copyfileobj(fin, fout)
    con = sqlite3.connect(plain)
    con.execute("PRAGMA journal_mode=WAL")
    kernels = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    assert kernels > 0
    out = tmp_path / "shared-folder"
    out.mkdir()
    if with_wal_content:
        con.execute("PRAGMA wal_autocheckpoint=0")
        con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL")
        con.commit()
        kernels = 0
        shutil.copyfile(f"{plain}-wal", out / "export.sqlite-wal")  # copied while the writer holds it
        shutil.copyfile(plain, out / "export.sqlite")
        con.close()
    else:
        con.close()  # a clean close checkpoints and removes the -wal
        shutil.copyfile(plain, out / "export.sqlite")
    assert (out / "export.sqlite").read_bytes()[18:20] == b"\x02\x02"  # WAL mode in the header
    return out / "export.sqlite", kernels


@pytest.mark.parametrize("with_wal_content", [False, True])
def test_a_wal_mode_export_is_read_without_creating_files_beside_it(tmp_path, with_wal_content):
    path, kernels = _wal_export(tmp_path, with_wal_content)
    before = sorted(p.name for p in path.parent.iterdir())
    trace = load(path, use_cache=False)
    assert sorted(p.name for p in path.parent.iterdir()) == before  # no -shm, no -wal created
    assert int((trace.kind == int(Kind.KERNEL)).sum()) == kernels  # what the WAL says, not the stale main file


def test_cli_runs_in_process(monkeypatch):
    """``cli.main`` is the entry point these tests drive (the console script calls it)."""
    assert cli.main is main
