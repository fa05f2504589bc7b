"""The notes' data: step answers, pinned notes, marked phases and the chosen experiment, and their Markdown.

What the user wrote about one trace, as values: parsed from and written to JSON (``Notes.to_json`` /
``Notes.from_json``), merged three ways by ``store.notes_merge``, kept on disk by ``store.notes``.
Nothing here reads or writes a file.
"""

from __future__ import annotations

import dataclasses
import secrets
from dataclasses import dataclass, field

import numpy as np
import orjson

from gaplens.analysis.units import fmt_ns
from gaplens.analysis.words import STEP_TITLES
from gaplens.loaders.text import clean_text, shorten
from gaplens.loaders.validate import TIME_LIMIT_NS, int_or_none

SCHEMA = "gaplens-notes"
VERSION = 1
_MAX_TEXT = 4000  # a note is a sentence or a paragraph, not a document


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
