"""The notes side panel and the one-line input used to write notes, answers and phase names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList, Static
from textual.widgets.option_list import Option

from gaplens.analysis.protocol.notes import Note, Notes
from gaplens.analysis.units import fmt_ns


class LineInput(ModalScreen[str | None]):
    """A one-line prompt: enter returns the text, escape returns None."""

    DEFAULT_CSS = """
    LineInput { align: center middle; }
    LineInput > #line-input { width: 76; height: auto; border: round $primary; background: $surface; padding: 0 1; }
    LineInput #line-hint { color: $text-muted; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, title: str, initial: str = "", placeholder: str = "", hint: str = "") -> None:
        super().__init__()
        self.title_text = title
        self.initial = initial
        self.placeholder = placeholder
        self.hint = hint or "enter to save · escape to cancel"

    def compose(self) -> ComposeResult:
        with Vertical(id="line-input"):
            yield Label(Text(self.title_text))
            yield Input(value=self.initial, placeholder=self.placeholder, id="line-value")
            yield Label(Text(self.hint), id="line-hint")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)


@dataclass
class NoteAction(Message):
    """The user asked to jump to, edit or delete a note."""

    action: str  # "jump" | "edit" | "delete"
    note_id: int


def note_label(note: Note) -> Text:
    where = fmt_ns(note.start_ns)
    text = Text(f"{where:>9}  ", style="bold")
    if note.event_name:
        name = note.event_name if len(note.event_name) <= 28 else note.event_name[:27] + "…"
        text.append(f"[{name}] ", style="italic")
    text.append(note.text.replace("\n", " "))
    return text


class NotesPanel(Vertical, can_focus=False):
    """Every note of the trace in time order; enter jumps, e edits, x deletes, escape leaves."""

    DEFAULT_CSS = """
    NotesPanel {
        dock: right; width: 42%; min-width: 34; max-width: 56; height: 1fr;
        border-left: solid $primary; padding: 0 1;
    }
    NotesPanel > #notes-title { text-style: bold; }
    NotesPanel > #notes-list { height: 1fr; border: none; }
    NotesPanel > #notes-keys { color: $text-muted; height: auto; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("e", "edit", "edit note"),
        Binding("x,delete", "delete", "delete note"),
        Binding("escape", "leave", "back to the timeline"),
    ]

    def compose(self) -> ComposeResult:
        yield Static(Text("Notes"), id="notes-title")
        yield OptionList(id="notes-list")
        yield Static(
            Text("b pin a note · enter jump · e edit · x delete · esc back · B close"),
            id="notes-keys",
        )

    def show(self, notes: Notes) -> None:
        lst = self.query_one(OptionList)
        highlighted = lst.highlighted
        lst.clear_options()
        if not notes.notes:
            lst.add_option(Option(Text("No notes yet: press b on the timeline to pin one."), id="none", disabled=True))
            return
        lst.add_options([Option(note_label(n), id=str(n.id)) for n in notes.notes])
        if highlighted is not None:
            lst.highlighted = min(highlighted, len(notes.notes) - 1)

    def focus_list(self) -> None:
        lst = self.query_one(OptionList)
        lst.focus()
        if lst.highlighted is None and lst.option_count:
            lst.highlighted = 0

    def _current(self) -> int | None:
        lst = self.query_one(OptionList)
        if lst.highlighted is None:
            return None
        oid = lst.get_option_at_index(lst.highlighted).id
        return int(oid) if oid and oid.isdigit() else None

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if event.option.id and event.option.id.isdigit():
            self.post_message(NoteAction("jump", int(event.option.id)))

    def action_edit(self) -> None:
        nid = self._current()
        if nid is not None:
            self.post_message(NoteAction("edit", nid))

    def action_delete(self) -> None:
        nid = self._current()
        if nid is not None:
            self.post_message(NoteAction("delete", nid))

    def action_leave(self) -> None:
        self.post_message(NoteAction("leave", -1))
