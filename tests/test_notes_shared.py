"""Two windows on one trace: saves merge under a lock, nothing acknowledged is lost, temps are swept."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from gaplens.analysis.protocol.notes import Notes
from gaplens.store.notes import NotesStore
from gaplens.store.notes_merge import merge
from tests.conftest import ROOT


def test_two_windows_keep_each_others_notes(trace_copy: Path) -> None:
    a_store, b_store = NotesStore(trace_copy), NotesStore(trace_copy)
    a, b = a_store.load(), b_store.load()
    a.add_note("from A", 10)
    a_store.save(a)
    b.add_note("from B", 20)  # B never re-read the file: its note is numbered 1 too
    b_store.save(b)
    assert sorted(n.text for n in b.notes) == ["from A", "from B"]  # B's window now shows A's note
    assert len({n.id for n in b.notes}) == 2
    a.add_note("A again", 30)
    a_store.save(a)
    got = NotesStore(trace_copy).load()
    assert sorted(n.text for n in got.notes) == ["A again", "from A", "from B"]
    assert len({n.id for n in got.notes}) == 3


def test_edits_and_deletes_merge_by_note(trace_copy: Path) -> None:
    seed = NotesStore(trace_copy)
    notes = seed.load()
    first = notes.add_note("one", 1)
    second = notes.add_note("two", 2)
    notes.set_answer(1, "llama")
    seed.save(notes)
    a_store, b_store = NotesStore(trace_copy), NotesStore(trace_copy)
    a, b = a_store.load(), b_store.load()
    a.edit_note(first.id, "one, edited in A")
    a.set_answer(2, "decode")
    a_store.save(a)
    b.delete_note(second.id)
    b.set_answer(1, "llama 8B")
    b.mark_phase("warmup", 0, 5)
    b_store.save(b)
    got = NotesStore(trace_copy).load()
    assert [n.text for n in got.notes] == ["one, edited in A"]
    assert got.answers == {1: "llama 8B", 2: "decode"}
    assert [p.name for p in got.phases] == ["warmup"]


def test_merge_is_three_way() -> None:
    base = Notes()
    kept = base.add_note("kept", 1)
    gone = base.add_note("gone here", 2)
    mine = merge(Notes(), base, Notes())  # a copy of base
    theirs = merge(Notes(), base, Notes())
    mine.delete_note(gone.id)
    theirs.edit_note(kept.id, "kept, edited there")
    theirs.add_note("new there", 3)
    out = merge(base, mine, theirs)
    assert [n.text for n in out.notes] == ["kept, edited there", "new there"]
    # Inputs are untouched.
    assert [n.text for n in theirs.notes] == ["kept, edited there", "gone here", "new there"]


_WRITER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {root!r})
    from gaplens.store.notes import NotesStore
    store = NotesStore({trace!r})
    notes = store.load()
    print("ready", flush=True)
    sys.stdin.readline()  # start together
    for i in range({count}):
        notes.add_note("writer {who} note %d" % i, i)
        store.save(notes)  # acknowledged once this returns
    """
)


def test_two_concurrent_processes_lose_no_note(trace_copy: Path) -> None:
    count = 1000
    procs = []
    for who in "AB":
        script = _WRITER.format(root=str(ROOT), trace=str(trace_copy), who=who, count=count)
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", script],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env={**os.environ},
            )
        )
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    for p in procs:
        assert p.wait(timeout=300) == 0
    got = NotesStore(trace_copy).load()
    texts = {n.text for n in got.notes}
    want = {f"writer {who} note {i}" for who in "AB" for i in range(count)}
    assert texts == want
    assert len(got.notes) == 2 * count and len({n.id for n in got.notes}) == 2 * count
    assert not list(trace_copy.parent.glob(".*.tmp"))


def test_temps_of_a_killed_writer_are_swept_on_the_next_save(trace_copy: Path) -> None:
    store = NotesStore(trace_copy)
    notes = store.load()
    notes.add_note("x", 1)
    path = store.save(notes)
    orphan = path.with_name(f".{path.name}.deadbeef0000.tmp")
    orphan.write_bytes(b"half a file")
    os.utime(orphan, (time.time(), time.time()))  # young: only the lock proves no writer owns it
    store.save(notes)
    assert not orphan.exists()
    assert [n.text for n in NotesStore(trace_copy).load().notes] == ["x"]


def test_two_viewer_windows_on_one_trace(trace_copy: Path) -> None:
    """Two apps on one trace, each pinning notes: both keep all, and the second window shows the first's."""
    import asyncio

    from gaplens.tui.app import make_app
    from tests.pilot import readings_ready as _ready

    a, b = make_app(str(trace_copy)), make_app(str(trace_copy))

    async def main() -> None:
        async with a.run_test(size=(120, 40)) as pa, b.run_test(size=(120, 40)) as pb:
            await _ready(a, pa)
            await _ready(b, pb)
            await pa.press("b", *"from window A", "enter")
            await pb.press("b", *"from window B", "enter")
            await pa.press("l", "l", "b", *"A again", "enter")
            assert sorted(n.text for n in b.notes.notes) == ["from window A", "from window B"]
            assert sorted(n.text for n in a.notes.notes) == ["A again", "from window A", "from window B"]

    asyncio.run(main())
    saved = NotesStore(trace_copy).load()
    assert sorted(n.text for n in saved.notes) == ["A again", "from window A", "from window B"]
