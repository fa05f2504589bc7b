"""The annotations store: step answers, pinned notes, marked phases and the chosen experiment.

Saved in the user's state directory (``state_dir()``), keyed by the trace's content, so a
moved or copied trace keeps its notes and nothing is written where the user did not ask.
Beside the trace (``<trace>.gaplens.json``) only on request (``GAPLENS_NOTES_BESIDE=1``,
``gaplens --notes-beside``), falling back to the state directory when that folder is not
writable; a file found beside the trace is still read (older gaplens wrote there). Writes are atomic and durable
(``loaders.files.atomic_write``), so a crash mid-write leaves the previous file whole.
Two windows on one trace share the file: a save takes a lock, re-reads the file and
merges (``notes_merge``), so neither window's notes are lost. A store is keyed to the
trace's content by a fingerprint; a file written for other content, or one that does
not parse, is ignored with a warning and never crashes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson

from gaplens.analysis.notes_merge import merge
from gaplens.analysis.words import STEP_TITLES
from gaplens.loaders.files import atomic_write, locked, open_regular, remove_stale_temps
from gaplens.loaders.model import TraceError
from gaplens.loaders.text import clean_text, shorten
from gaplens.loaders.validate import TIME_LIMIT_NS, int_or_none, loose_json

SCHEMA = "gaplens-notes"
VERSION = 1
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


@dataclass(frozen=True)
class Note:
    """A note pinned to a time (``event_name`` empty) or to an event (re-found by name and start).

    Frozen: an edit makes a new Note, so a snapshot of the list is a snapshot of the notes.
    """

    id: int
    text: str
    start_ns: int
    end_ns: int | None = None
    event_name: str = ""
    lane_name: str = ""
    uid: str = field(default_factory=lambda: secrets.token_hex(8))  # the same note in every window

    @property
    def pinned_to_event(self) -> bool:
        return bool(self.event_name)


@dataclass(frozen=True)
class MarkedPhase:
    """A range the user marked, or a trace phase the user renamed (``original`` set)."""

    name: str
    start_ns: int
    end_ns: int
    original: str = ""


@dataclass
class Notes:
    """Everything the user wrote about one trace."""

    fingerprint: str = ""
    trace_name: str = ""
    origin_ns: int = 0
    answers: dict[int, str] = field(default_factory=dict)
    notes: list[Note] = field(default_factory=list)
    phases: list[MarkedPhase] = field(default_factory=list)
    experiment: str = ""
    saved_at: float = 0.0

    # ---- editing ----------------------------------------------------------
    def add_note(
        self,
        text: str,
        start_ns: int,
        end_ns: int | None = None,
        event_name: str = "",
        lane_name: str = "",
    ) -> Note:
        nid = max((n.id for n in self.notes), default=0) + 1
        note = Note(nid, _text(text), int(start_ns), None if end_ns is None else int(end_ns), event_name, lane_name)
        self.notes.append(note)
        self.notes.sort(key=lambda n: (n.start_ns, n.id))
        return note

    def edit_note(self, note_id: int, text: str) -> Note:
        note = dataclasses.replace(self.note(note_id), text=_text(text))
        self.notes = [note if n.id == note_id else n for n in self.notes]
        return note

    def delete_note(self, note_id: int) -> None:
        self.notes = [n for n in self.notes if n.id != note_id]

    def note(self, note_id: int) -> Note:
        for n in self.notes:
            if n.id == note_id:
                return n
        raise KeyError(note_id)

    def set_answer(self, step: int, text: str) -> None:
        if step not in STEP_TITLES:
            raise ValueError(f"no protocol step {step}")
        text = _text(text)
        if text:
            self.answers[step] = text
        else:
            self.answers.pop(step, None)

    def mark_phase(self, name: str, start_ns: int, end_ns: int, original: str = "") -> MarkedPhase:
        a, b = sorted((int(start_ns), int(end_ns)))
        # Renaming twice replaces the first rename rather than stacking them.
        if original:
            self.phases = [p for p in self.phases if not (p.original == original and p.start_ns == a)]
        phase = MarkedPhase(_text(name) or "phase", a, b, original)
        self.phases.append(phase)
        self.phases.sort(key=lambda p: (p.start_ns, p.end_ns))
        return phase

    @property
    def empty(self) -> bool:
        return not (self.answers or self.notes or self.phases or self.experiment)

    # ---- (de)serialising --------------------------------------------------
    def to_dict(self) -> dict:
        return {
            **self._document(),
            "notes": [_fields(n) for n in self.notes],
            "phases": [_fields(p) for p in self.phases],
        }

    def to_json(self) -> bytes:
        """The stored file: ``to_dict`` as indented JSON (orjson writes the frozen notes itself, fast)."""
        return orjson.dumps(
            {**self._document(), "notes": self.notes, "phases": self.phases}, option=orjson.OPT_INDENT_2
        )

    def _document(self) -> dict:
        return {
            "schema": SCHEMA,
            "version": VERSION,
            "fingerprint": self.fingerprint,
            "trace_name": self.trace_name,
            "origin_ns": self.origin_ns,
            "saved_at": self.saved_at,
            "answers": {str(k): v for k, v in sorted(self.answers.items())},
            "experiment": self.experiment,
        }

    @classmethod
    def from_dict(cls, data: dict, memo: dict | None = None) -> Notes:
        """Parse a stored dict; raises ValueError on anything that is not our schema.

        ``memo`` (raw fields → Note) spares re-cleaning the notes a store has read
        before: a save re-reads the whole file.
        """
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ValueError("not a gaplens notes file")
        version = int_or_none(data.get("version", 0), floats=False)
        if version is None or version > VERSION:
            raise ValueError(f"written by a newer gaplens (notes version {data.get('version')})")
        try:
            answers = {int(k): _text(v) for k, v in dict(data.get("answers") or {}).items() if int(k) in STEP_TITLES}
            notes = [_note(n, memo) for n in data.get("notes") or []]
            phases = [
                MarkedPhase(_text(p["name"]), _int(p["start_ns"]), _int(p["end_ns"]), _text(p.get("original", "")))
                for p in data.get("phases") or []
            ]
            return cls(
                fingerprint=str(data.get("fingerprint", "")),
                trace_name=_text(data.get("trace_name", "")),
                origin_ns=_int(data.get("origin_ns") or 0),
                answers=answers,
                notes=notes,
                phases=phases,
                experiment=_text(data.get("experiment", "")),
                saved_at=float(data.get("saved_at") or 0.0),
            )
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise ValueError(f"malformed notes file ({type(exc).__name__}: {exc})") from None


def _note(raw: dict, memo: dict | None) -> Note:
    """One stored note, cleaned (or found in ``memo`` when these exact raw fields were seen)."""
    try:
        key = tuple(raw.items())
        hit = memo.get(key) if memo is not None else None
    except (TypeError, AttributeError):  # not a dict, or unhashable fields: parsed (and rejected) below
        key, hit, memo = (), None, None
    if hit is not None:
        return hit
    note = Note(
        _int(raw["id"]),
        _text(raw.get("text", "")),
        _int(raw["start_ns"]),
        None if raw.get("end_ns") is None else _int(raw["end_ns"]),
        _text(raw.get("event_name", "")),
        _text(raw.get("lane_name", "")),
        # Files from before uids: id and start do not change when a note is edited.
        _text(raw.get("uid") or f"legacy:{raw['id']}:{raw['start_ns']}"),
    )
    if memo is not None:
        if len(memo) > 100_000:
            memo.clear()
        memo[key] = note
    return note


def _fields(obj: Note | MarkedPhase) -> dict:
    """A flat dataclass as a dict (``asdict`` deep-copies, which costs on every save)."""
    return {name: getattr(obj, name) for name in obj.__dataclass_fields__}


def _int(value: object) -> int:
    """A stored time or id: an int64, else the file is malformed."""
    v = None if isinstance(value, bool) else int_or_none(value, floats=False)
    if v is None or abs(v) > TIME_LIMIT_NS:
        raise ValueError(f"not a usable integer: {shorten(value, 40)}")
    return v


def _text(value: object) -> str:
    """Stored text is untrusted on the way back in: the one sanitiser (newlines kept), length capped."""
    text = value if isinstance(value, str) else ("" if value is None else str(value))
    return clean_text(text[:_MAX_TEXT], keep_newlines=True).strip()


# ---- where the file lives ----------------------------------------------------


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


def find_event(trace, name: str, start_ns: int, tolerance_ns: int = 1000) -> int | None:
    """Index of the event called ``name`` starting nearest ``start_ns`` (within tolerance)."""
    try:
        name_id = trace.names.index(name)
    except ValueError:
        return None
    idx = np.flatnonzero(trace.name_id == name_id)
    if idx.size == 0:
        return None
    k = int(np.argmin(np.abs(trace.start_ns[idx] - int(start_ns))))
    if abs(int(trace.start_ns[idx[k]]) - int(start_ns)) > tolerance_ns:
        return None
    return int(idx[k])


def note_for_event(notes: Notes, trace, index: int, text: str) -> Note:
    """Pin a note to event ``index``, storing what re-finds it next time (name, start, lane)."""
    lane = trace.lanes[int(trace.lane[index])]
    return notes.add_note(
        text,
        int(trace.start_ns[index]),
        int(trace.end_ns[index]),
        event_name=trace.names[int(trace.name_id[index])],
        lane_name=lane.name,
    )


# ---- Markdown --------------------------------------------------------------------


def notes_markdown(notes: Notes | None, heading: str = "##", answers: bool = True) -> str:
    """The user's words as Markdown: answers per step, the experiment, marked phases, pinned notes.

    ``answers=False`` leaves out answers and experiment, for a report that already
    quotes them under each step.
    """
    from gaplens.analysis.units import fmt_ns

    if notes is None or notes.empty:
        return ""
    if not answers and not (notes.phases or notes.notes):
        return ""
    lines = [f"{heading} Your reading", ""] if answers else [f"{heading} Your annotations", ""]
    for step, title in STEP_TITLES.items():
        answer = notes.answers.get(step) if answers else None
        if answer:
            lines += [f"**{step}. {title}.** " + answer.replace("\n", "  \n"), ""]
    if notes.experiment and answers:
        lines += [f"**The experiment.** {notes.experiment}", ""]
    if notes.phases:
        lines += [f"{heading}# Phases you marked", ""]
        for p in notes.phases:
            what = f" (renamed from `{_code(p.original)}`)" if p.original else ""
            span = f"{fmt_ns(p.start_ns)} – {fmt_ns(p.end_ns)} ({fmt_ns(p.end_ns - p.start_ns)})"
            lines.append(f"- **{p.name}**{what}: {span}")
        lines.append("")
    if notes.notes:
        lines += [f"{heading}# Notes", ""]
        for n in notes.notes:
            where = f"at {fmt_ns(n.start_ns)}"
            if n.event_name:
                where += f", on `{_code(n.event_name[:80])}`"
                if n.lane_name:
                    where += f" ({_code(n.lane_name)})"
            lines.append(f"- {where}: {n.text}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _code(text: str) -> str:
    return text.replace("`", "'")


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
