"""``t`` / ``:``: go to a time typed as on the ruler (``12.5ms``, ``300us``, ``1.2s``; a bare number is ms)."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label

from gaplens.analysis.units import parse_ns


class TimeScreen(ModalScreen[int | None]):
    """A one-line prompt; enter goes there (ns from the trace's start, as the ruler counts), escape cancels."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, initial: str = "") -> None:
        super().__init__()
        self.initial = initial

    def compose(self) -> ComposeResult:
        with Vertical(id="goto"):
            yield Label("Go to a time from the start of the trace (12.5ms, 300us, 1.2s; a bare number is ms)")
            yield Input(value=self.initial, placeholder="e.g. 12.5ms", id="goto-input")
            yield Label("", id="goto-error")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        try:
            t_ns = parse_ns(event.value)
        except ValueError as exc:
            self.query_one("#goto-error", Label).update(Text(str(exc)))  # stay open: say what is wrong
            return
        self.dismiss(t_ns)

    def action_cancel(self) -> None:
        self.dismiss(None)
