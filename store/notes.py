"""The annotations store: step answers, pinned notes, marked phases and the chosen experiment.

Saved in the user's state directory (``state_dir()``), keyed by the trace's content, so a
moved or copied trace keeps its notes and nothing is written where the user did not ask.
Beside the trace (``<trace>.gaplens.json``) only on request (``GAPLENS_NOTES_BESIDE=1``,
``gaplens --notes-beside``), falling back to the state directory when that folder is not
writable; a file found beside the trace is still read (older gaplens wrote there). Writes are atomic and durable
(``store.files.atomic_write``), so a crash mid-write leaves the previous file whole.
Two windows on one trace share the file: a save takes a lock, re-reads the file and
merges (``notes_merge``), so neither window's notes are lost. A store is keyed to the
trace's content by a fingerprint; a file written for other content, or one that does
not parse, is ignored with a warning and never crashes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from collections.abc import Callable
from pathlib import Path

from gaplens.analysis.protocol.notes import Notes
from gaplens.loaders.files import open_regular
from gaplens.loaders.model import TraceError
from gaplens.loaders.validate import loose_json
from gaplens.store.files import atomic_write, locked, remove_stale_temps
from gaplens.store.notes_merge import merge

SUFFIX = ".gaplens.json"
#: Set (to anything but "" or "0") to keep notes beside the trace instead of in the state directory.
BESIDE_ENV = "GAPLENS_NOTES_BESIDE"
_CHUNK = 1 << 20
_MAX_TEXT = 4000  # a note is a sentence or a paragraph, not a document
MAX_NOTES_BYTES = 64 << 20  # ~10^4 notes of _MAX_TEXT each, indented: anything larger is not ours


def fingerprint(path: str | os.PathLike) -> str:
    """Size plus a hash of the first and last MiB: fast on a 200 MB trace, yet content-keyed."""
    size = os.path.getsize(path)
    h = hashlib.blake2b(digest_size=16)
    h.update(str(size).encode())
    with open(path, "rb") as fh:
        h.update(fh.read(_CHUNK))
        if size > _CHUNK:
            fh.seek(max(_CHUNK, size - _CHUNK))
            h.update(fh.read(_CHUNK))
    return f"fp1:{size}:{h.hexdigest()}"


def state_dir() -> Path:
    """``$GAPLENS_STATE_DIR``, else ``$XDG_STATE_HOME/gaplens``, else ``~/.local/state/gaplens``."""
    if os.environ.get("GAPLENS_STATE_DIR"):
        return Path(os.environ["GAPLENS_STATE_DIR"])
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "gaplens"


def beside_requested() -> bool:
    """Whether the user asked for notes and exports beside the trace (``GAPLENS_NOTES_BESIDE``)."""
    return os.environ.get(BESIDE_ENV, "") not in ("", "0")


def beside_path(trace_path: str | os.PathLike) -> Path:
    p = Path(trace_path)
    return p.with_name(p.name + SUFFIX)


def state_path(fp: str) -> Path:
    """One file per trace content in the state dir, named by the content's hash alone (any name, any folder)."""
    return state_dir() / "notes" / f"{fp.rsplit(':', 1)[-1]}{SUFFIX}"


def legacy_state_path(trace_path: str | os.PathLike, fp: str) -> Path:
    """Where gaplens before 0.2 kept a read-only folder's notes (read, never written)."""
    digest = fp.rsplit(":", 1)[-1][:16]
    return state_dir() / f"{Path(trace_path).name}.{digest}{SUFFIX}"


def export_folder(trace_path: str | os.PathLike | None) -> Path:
    """Where the viewer's exports go: ``state_dir()/exports``, or beside the trace when asked and writable."""
    if trace_path and beside_requested():
        parent = Path(trace_path).parent
        if _writable(parent):
            return parent
    folder = state_dir() / "exports"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _writable(folder: Path) -> bool:
    return folder.is_dir() and os.access(folder, os.W_OK | os.X_OK)


class NotesStore:
    """Loads and saves the notes of one trace; remembers where they live.

    ``warn`` receives one-line messages (ignored files, fallbacks); it never raises. ``beside``
    (default: ``beside_requested()``) saves beside the trace instead of in the state dir.
    """

    def __init__(
        self,
        trace_path: str | os.PathLike,
        origin_ns: int = 0,
        warn: Callable[[str], None] | None = None,
        writable: Callable[[Path], bool] = _writable,
        beside: bool | None = None,
    ) -> None:
        self.trace_path = Path(trace_path)
        self.fingerprint = fingerprint(trace_path)
        self.origin_ns = int(origin_ns)
        self.warnings: list[str] = []
        self._warn_cb = warn
        self._writable = writable
        self.beside = beside_requested() if beside is None else beside
        self.path: Path | None = None  # where the last load found / save wrote the notes
        self._unreadable: set[Path] = set()
        self._base: Notes | None = None  # the file as this window last read or wrote it
        self._memo: dict = {}  # raw stored fields → parsed Note

    def _warn(self, msg: str) -> None:
        self.warnings.append(msg)
        if self._warn_cb is not None:
            self._warn_cb(msg)

    def candidates(self) -> list[Path]:
        """Every place notes for this content may be, read on load; the last one is the default home."""
        return [
            beside_path(self.trace_path),
            legacy_state_path(self.trace_path, self.fingerprint),
            state_path(self.fingerprint),
        ]

    def load(self) -> Notes:
        """The notes saved for this trace's content, or empty notes (with warnings) when none are usable."""
        found: list[tuple[Path, Notes]] = []
        for path in self.candidates():
            notes = self._read(path)
            if notes is not None:
                found.append((path, notes))
        if not found:
            self.path = None
            notes = self._fresh()
        else:
            # Saved in both places (the folder became writable again): the newer one wins.
            self.path, best = max(found, key=lambda pn: pn[1].saved_at)
            notes = self._rebase(best)
        self._base = _snapshot(notes)
        return notes

    def _read(self, path: Path) -> Notes | None:
        if not path.exists():
            return None
        try:
            # A FIFO or device planted at the notes name would block or stream forever: regular files only.
            with open_regular(str(path)) as fh:
                raw = fh.read(MAX_NOTES_BYTES + 1)
            if len(raw) > MAX_NOTES_BYTES:
                raise TraceError(f"{path}: larger than {MAX_NOTES_BYTES >> 20} MiB, not a notes file")
        except (OSError, TraceError) as exc:
            self._unreadable.add(path)  # a save keeps it aside (.bak) rather than replace it unread
            self._warn(f"cannot read notes {path}: {getattr(exc, 'strerror', None) or exc}")
            return None
        try:
            data = loose_json(raw)
            if not isinstance(data, dict):
                raise ValueError("not a gaplens notes file")
            notes = Notes.from_dict(data, self._memo)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # RecursionError: repr of deep lists
            self._unreadable.add(path)
            self._warn(f"ignoring notes file {path}: {str(exc).splitlines()[0][:120]}")
            return None
        if notes.fingerprint != self.fingerprint:
            self._unreadable.add(path)
            self._warn(f"ignoring notes file {path}: it was written for other content of {notes.trace_name!r}")
            return None
        return notes

    def _fresh(self) -> Notes:
        return Notes(fingerprint=self.fingerprint, trace_name=self.trace_path.name, origin_ns=self.origin_ns)

    def _rebase(self, notes: Notes) -> Notes:
        """Times are relative to the loader's origin; shift them if the origin moved."""
        shift = notes.origin_ns - self.origin_ns
        if shift and notes.origin_ns and self.origin_ns:
            notes.notes = [
                dataclasses.replace(
                    n, start_ns=n.start_ns + shift, end_ns=None if n.end_ns is None else n.end_ns + shift
                )
                for n in notes.notes
            ]
            notes.phases = [
                dataclasses.replace(p, start_ns=p.start_ns + shift, end_ns=p.end_ns + shift) for p in notes.phases
            ]
            notes.origin_ns = self.origin_ns
        return notes

    def save(self, notes: Notes) -> Path:
        """Merge into the saved file and write it: in the state dir, or beside the trace when asked.

        Under the file's lock: re-read what other windows saved, apply this window's
        changes since it last read or wrote (``notes_merge``), write atomically. ``notes``
        is updated in place to the merged whole. Returns where it went.
        """
        notes.fingerprint = self.fingerprint
        notes.trace_name = notes.trace_name or self.trace_path.name
        notes.origin_ns = notes.origin_ns or self.origin_ns
        beside, fallback = beside_path(self.trace_path), state_path(self.fingerprint)
        targets = [beside] if self.beside and self._writable(beside.parent) else []
        targets.append(fallback)
        last_error: OSError | None = None
        for target in targets:
            try:
                if target == fallback:
                    target.parent.mkdir(parents=True, exist_ok=True)
                with locked(target):
                    merged = self._merged(target, notes)
                    merged.saved_at = time.time()
                    data = merged.to_json()
                    if target in self._unreadable and target.exists():
                        # Keep what we could not read rather than silently overwrite it.
                        os.replace(target, target.with_name(target.name + ".bak"))
                        self._unreadable.discard(target)
                    remove_stale_temps(target, age_s=0)  # the lock is ours: no live writer owns them
                    atomic_write(target, data, durable=True)
            except OSError as exc:
                last_error = exc
                continue
            _adopt(notes, merged)
            self._base = _snapshot(merged)
            if self.beside and target == fallback and self.path != fallback:
                self._warn(f"{beside.parent} is not writable: notes saved in {fallback}")
            self.path = target
            return target
        raise OSError(f"cannot save notes: {last_error}")

    def _merged(self, target: Path, notes: Notes) -> Notes:
        """``notes`` merged into what ``target`` holds now (just ``notes`` when it holds nothing usable)."""
        theirs = self._read(target) if target not in self._unreadable else None
        if theirs is None:
            return _snapshot(notes)
        # Loaded from elsewhere (a beside file being moved home): all of mine is new to ``target``.
        base = self._base if self._base is not None and target == self.path else self._fresh()
        return merge(base, notes, self._rebase(theirs))


def _snapshot(notes: Notes) -> Notes:
    """A copy that later edits of ``notes`` do not reach (notes and phases are frozen: lists suffice)."""
    return dataclasses.replace(notes, answers=dict(notes.answers), notes=list(notes.notes), phases=list(notes.phases))


def _adopt(notes: Notes, merged: Notes) -> None:
    """Make ``notes`` (the object a window holds) the merged whole, in place."""
    notes.answers = dict(merged.answers)
    notes.notes = list(merged.notes)
    notes.phases = list(merged.phases)
    notes.experiment = merged.experiment
    notes.saved_at = merged.saved_at


# ---- re-attaching to the trace ------------------------------------------------


def notes_for_trace(trace, warn: Callable[[str], None] | None = None) -> Notes | None:
    """The saved notes of a loaded trace (for reports), or None when there are none."""
    path = trace.meta.path
    if not path or not os.path.isfile(path):
        return None
    try:
        notes = NotesStore(path, trace.meta.origin_ns, warn=warn).load()
    except OSError as exc:
        if warn is not None:
            warn(f"cannot read notes: {exc}")
        return None
    return None if notes.empty else notes
