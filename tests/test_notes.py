"""The annotations store: round trip, atomic writes under SIGKILL, the state dir by default, content keying."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gaplens.analysis.protocol.notes import Notes, find_event, note_for_event, notes_markdown
from gaplens.store import notes as notes_mod
from gaplens.store.notes import NotesStore, fingerprint
from tests.conftest import ROOT, loaded, sample


def _filled(store: NotesStore) -> Notes:
    n = store.load()
    n.set_answer(1, "Llama-style decoder, batch 4\nprompt 512, 32 steps")
    n.set_answer(6, "CUDA graphs for the decode step")
    n.experiment = "capture one decode step in a CUDA graph"
    n.add_note("the host waits here", 1_000_000)
    n.add_note("copy on the path", 2_000_000, 2_500_000, event_name="Memcpy HtoD", lane_name="stream 7")
    n.mark_phase("warm cache", 5_000, 9_000)
    return n


def test_round_trip(trace_copy: Path) -> None:
    store = NotesStore(trace_copy, origin_ns=123)
    saved = _filled(store)
    path = store.save(saved)
    assert path == notes_mod.state_path(fingerprint(trace_copy)) and path.is_relative_to(
        trace_copy.parent.parent / "state"
    )
    assert os.listdir(trace_copy.parent) == ["smells.json.gz"], "nothing is written beside the trace"
    again = NotesStore(trace_copy, origin_ns=123)
    got = again.load()
    assert again.path == path and not again.warnings
    assert got.answers == {
        1: "Llama-style decoder, batch 4\nprompt 512, 32 steps",
        6: "CUDA graphs for the decode step",
    }
    assert got.experiment == saved.experiment
    assert [(n.id, n.text, n.start_ns, n.end_ns, n.event_name) for n in got.notes] == [
        (1, "the host waits here", 1_000_000, None, ""),
        (2, "copy on the path", 2_000_000, 2_500_000, "Memcpy HtoD"),
    ]
    assert [(p.name, p.start_ns, p.end_ns) for p in got.phases] == [("warm cache", 5_000, 9_000)]
    # Edit and delete survive the next round trip too.
    got.edit_note(2, "pageable copy, 128 MiB")
    got.delete_note(1)
    again.save(got)
    third = NotesStore(trace_copy, origin_ns=123).load()
    assert [(n.id, n.text) for n in third.notes] == [(2, "pageable copy, 128 MiB")]
    assert not list(trace_copy.parent.glob("*.tmp")), "temp files are cleaned up"


def test_origin_shift_rebases_times(trace_copy: Path) -> None:
    store = NotesStore(trace_copy, origin_ns=1_000)
    n = store.load()
    n.add_note("x", 5_000)
    store.save(n)
    # A loader that places time 0 100 ns later must see the note 100 ns earlier.
    got = NotesStore(trace_copy, origin_ns=1_100).load()
    assert got.notes[0].start_ns == 4_900


def test_untrusted_text_is_cleaned(trace_copy: Path) -> None:
    path = trace_copy.with_name(trace_copy.name + ".gaplens.json")
    data = Notes(fingerprint=fingerprint(trace_copy)).to_dict()
    data["notes"] = [{"id": 1, "text": "evil\x1b[2Jtext", "start_ns": 5}]
    data["answers"] = {"3": "ok\x07", "99": "ignored"}
    path.write_text(json.dumps(data))
    got = NotesStore(trace_copy).load()
    assert got.notes[0].text == "eviltext"
    assert got.answers == {3: "ok"}


@pytest.mark.parametrize(
    "content",
    [
        b"{ not json",
        b"\xff\xfe\x00garbage",
        b'{"schema": "something-else"}',
        b'{"schema": "gaplens-notes", "notes": 5}',
    ],
)
def test_corrupt_or_foreign_file_is_ignored_with_a_warning(trace_copy: Path, content: bytes) -> None:
    path = trace_copy.with_name(trace_copy.name + ".gaplens.json")
    path.write_bytes(content)
    warned: list[str] = []
    store = NotesStore(trace_copy, warn=warned.append)
    got = store.load()
    assert got.empty and store.path is None
    assert len(warned) == 1 and "ignoring notes file" in warned[0]
    # Saving keeps the unreadable file aside instead of destroying it.
    got.add_note("fresh", 1)
    assert store.save(got).parent.parent == trace_copy.parent.parent / "state"
    assert path.read_bytes() == content  # the file beside the trace is the user's: left as it was
    assert NotesStore(trace_copy).load().notes[0].text == "fresh"


@pytest.mark.parametrize("content", [b"{ not json", b'{"schema": "gaplens-notes", "notes": 5}'])
def test_corrupt_file_asked_beside_is_kept_aside(trace_copy: Path, content: bytes) -> None:
    path = trace_copy.with_name(trace_copy.name + ".gaplens.json")
    path.write_bytes(content)
    store = NotesStore(trace_copy, beside=True)
    got = store.load()
    got.add_note("fresh", 1)
    assert store.save(got) == path
    # Saving keeps the unreadable file aside instead of destroying it.
    assert path.with_name(path.name + ".bak").read_bytes() == content
    assert NotesStore(trace_copy).load().notes[0].text == "fresh"


@pytest.mark.parametrize("beside", [False, True])
def test_fingerprint_mismatch_is_ignored(trace_copy: Path, beside: bool) -> None:
    store = NotesStore(trace_copy, beside=beside)
    store.save(_filled(store))
    # Replace the trace with other content under the same name: the old notes must not attach.
    shutil.copyfile(sample("decode_eager.json.gz"), trace_copy)
    warned: list[str] = []
    got = NotesStore(trace_copy, warn=warned.append, beside=beside).load()
    assert got.empty
    # Kept at home, notes are found by content: other content has none. Beside, the name matches: a warning.
    assert any("other content" in w for w in warned) == beside


def test_fingerprint_sees_the_tail(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    body = os.urandom(3 << 20)
    a.write_bytes(body)
    b.write_bytes(body[:-1] + bytes([body[-1] ^ 1]))
    assert fingerprint(a) != fingerprint(b)
    assert fingerprint(a) == fingerprint(a)


def test_read_only_folder_falls_back_to_state_dir(trace_copy: Path, tmp_path: Path) -> None:
    # Tests may run as root, who can write anywhere: simulate the read-only folder.
    folder = trace_copy.parent

    def writable(p: Path) -> bool:
        return p != folder

    warned: list[str] = []
    store = NotesStore(trace_copy, warn=warned.append, writable=writable, beside=True)
    path = store.save(_filled(store))
    assert path == tmp_path / "state" / "notes" / f"{fingerprint(trace_copy).rsplit(':', 1)[-1]}.gaplens.json"
    assert not (folder / "smells.json.gz.gaplens.json").exists()
    assert any("not writable" in w for w in warned)
    got = NotesStore(trace_copy, writable=writable, beside=True).load()
    assert got.experiment == "capture one decode step in a CUDA graph"


def test_read_only_folder_via_os_access(trace_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if Path(p) == trace_copy.parent else real(p, mode))
    store = NotesStore(trace_copy, beside=True)
    assert store.save(_filled(store)).parent == tmp_path / "state" / "notes"


def test_state_dir_from_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("GAPLENS_STATE_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert notes_mod.state_dir() == tmp_path / "gaplens"


def test_failed_replace_leaves_previous_file(trace_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = NotesStore(trace_copy)
    first = _filled(store)
    path = store.save(first)
    before = path.read_bytes()

    def boom(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(notes_mod.os, "replace", boom)
    first.add_note("never saved", 7)
    with pytest.raises(OSError):
        store.save(first)
    assert path.read_bytes() == before
    assert not list(path.parent.glob("*.tmp"))


_KILLER = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, {root!r})
    from gaplens.store import notes as m
    store = m.NotesStore({trace!r})
    n = store.load()
    for i in range(2000):
        n.add_note("new note %d " % i + "x" * 200, i)
    if {where!r} == "replace":
        m.os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)
    elif {where!r} == "fsync":
        m.os.fsync = lambda *a: os.kill(os.getpid(), signal.SIGKILL)
    else:
        while True:  # the parent kills us at a random point of a save
            store.save(n)
    store.save(n)
    """
)


@pytest.mark.parametrize("where", ["fsync", "replace", "loop"])
def test_sigkill_mid_write_keeps_previous_file(trace_copy: Path, where: str) -> None:
    store = NotesStore(trace_copy)
    path = store.save(_filled(store))
    before = path.read_bytes()
    script = _KILLER.format(root=str(ROOT), trace=str(trace_copy), where=where)
    proc = subprocess.Popen([sys.executable, "-c", script], env={**os.environ})
    if where == "loop":
        time.sleep(1.0)
        proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    got = NotesStore(trace_copy).load()  # parses: old or complete new, never half
    if where == "loop":
        assert got.answers[1].startswith("Llama-style")
    else:
        assert path.read_bytes() == before
        assert len(got.notes) == 2
    # The killed writer's temp file is swept by a later save once it is stale.
    temps = list(path.parent.glob(f".{path.name}.*.tmp"))
    if where != "loop":
        assert temps
    for tmp in temps:
        os.utime(tmp, (time.time() - 3600, time.time() - 3600))
    NotesStore(trace_copy).save(got)
    assert not list(path.parent.glob(f".{path.name}.*.tmp"))


def test_find_event_reattaches() -> None:
    trace = loaded("smells.json.gz")
    idx = int(next(i for i in range(len(trace)) if trace.name(i) == "cudaStreamSynchronize"))
    n = Notes()
    note = note_for_event(n, trace, idx, "the sync cliff")
    assert note.event_name == "cudaStreamSynchronize" and note.lane_name
    assert find_event(trace, note.event_name, note.start_ns) == idx
    assert find_event(trace, note.event_name, note.start_ns + 10_000_000) is None
    assert find_event(trace, "no such event", note.start_ns) is None


def test_markdown_holds_everything(trace_copy: Path) -> None:
    store = NotesStore(trace_copy)
    md = notes_markdown(_filled(store))
    for text in ("**1. Name the workload.**", "prompt 512", "capture one decode step", "warm cache", "`Memcpy HtoD`"):
        assert text in md
    assert notes_markdown(Notes()) == ""


def test_notes_for_trace(trace_copy: Path) -> None:
    from gaplens.loaders import load
    from gaplens.store.notes import notes_for_trace

    trace = load(trace_copy)
    assert notes_for_trace(trace) is None
    store = NotesStore(trace_copy, trace.meta.origin_ns)
    store.save(_filled(store))
    got = notes_for_trace(trace)
    assert got is not None and got.experiment.startswith("capture one decode step")


def test_beside_only_on_request(trace_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    beside = trace_copy.with_name(trace_copy.name + ".gaplens.json")
    store = NotesStore(trace_copy)
    store.save(_filled(store))
    assert not beside.exists() and not list(trace_copy.parent.glob(".*.lock"))
    monkeypatch.setenv(notes_mod.BESIDE_ENV, "1")
    store = NotesStore(trace_copy)
    assert store.save(store.load()) == beside
    assert json.loads(beside.read_text())["experiment"] == "capture one decode step in a CUDA graph"


def test_a_moved_and_renamed_trace_keeps_its_notes(trace_copy: Path, tmp_path: Path) -> None:
    store = NotesStore(trace_copy)
    store.save(_filled(store))
    moved = tmp_path / "elsewhere" / "renamed.json.gz"
    moved.parent.mkdir()
    trace_copy.rename(moved)
    got = NotesStore(moved).load()
    assert got.experiment == "capture one decode step in a CUDA graph" and len(got.notes) == 2


def test_notes_beside_the_trace_from_an_older_gaplens_move_home(trace_copy: Path) -> None:
    """A file an older gaplens wrote beside the trace is read, and the next save keeps all of it at home."""
    old = NotesStore(trace_copy, beside=True)
    path = old.save(_filled(old))
    assert path.parent == trace_copy.parent
    store = NotesStore(trace_copy)
    got = store.load()
    assert store.path == path and len(got.notes) == 2
    got.add_note("third", 3_000_000)
    home = store.save(got)
    assert home == notes_mod.state_path(store.fingerprint)
    again = NotesStore(trace_copy).load()
    assert [n.text for n in again.notes] == ["the host waits here", "copy on the path", "third"]
    assert again.answers[6] == "CUDA graphs for the decode step"


def test_a_symlinked_lock_is_not_followed(trace_copy: Path, tmp_path: Path) -> None:
    store = NotesStore(trace_copy, beside=True)
    beside = trace_copy.with_name(trace_copy.name + ".gaplens.json")
    victim = tmp_path / "victim"
    beside.with_name(f".{beside.name}.lock").symlink_to(victim)
    path = store.save(_filled(store))
    assert not victim.exists(), "the lock's target was created"
    assert path == notes_mod.state_path(store.fingerprint)  # refused beside: saved at home instead


def test_a_fifo_at_the_notes_name_is_refused_not_waited_on(trace_copy: Path) -> None:
    """A FIFO planted beside the trace as its notes file would block a read forever."""
    beside = trace_copy.with_name(trace_copy.name + ".gaplens.json")
    os.mkfifo(beside)
    warned: list[str] = []
    store = NotesStore(trace_copy, warn=warned.append)
    got = store.load()  # returns at once
    assert got.empty and any("not a regular file" in w for w in warned)
    got.add_note("fresh", 1)
    assert store.save(got) == notes_mod.state_path(store.fingerprint)
