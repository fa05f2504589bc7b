"""The help screen: every key from ``tui.keys`` and ``tui.protocol``, and what the glyphs mean."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from gaplens.tui.keys import help_rows
from gaplens.tui.protocol import PROTOCOL_KEYS

LEGEND = (
    ("█ ▓ ▒ ░", "busy share of a cell when many events fall in it"),
    ("▏▎▍▌▋▊▉", "bar edges in eighths of a cell when zoomed in"),
    ("·", "blank region on the critical path (the device waited for the host)"),
    ("━", "the largest blank region on the critical path"),
    ("A B", "markers (1, 2) on the ruler; the header shows the time between them"),
    ("+N", "N deeper nesting levels not drawn"),
    ("┆dN", "level N, deeper than the drawn rows, shown while its event is selected"),
    ("mouse", "click selects a bar or folds a group; ctrl/shift + wheel zooms at the pointer"),
)


def key_rows() -> list[tuple[str, str]]:
    """(keys, what they do): the viewer's keys, then the guided reading's (P starts it)."""
    return [*help_rows(), *((shown, title) for _key, _action, title, shown in PROTOCOL_KEYS)]


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar = [Binding("escape,q,question_mark", "close", "Close")]

    def compose(self) -> ComposeResult:
        keys = Table.grid(padding=(0, 2))
        keys.add_column(style="bold")
        keys.add_column()
        for k, desc in key_rows():
            keys.add_row(k, desc)
        legend = Table.grid(padding=(0, 2))
        legend.add_column(style="bold")
        legend.add_column()
        for glyph, desc in LEGEND:
            legend.add_row(glyph, desc)
        with VerticalScroll(id="help"):
            yield Static("[b]gaplens[/b] — is the GPU busy, or not being fed?  (esc closes; ctrl+p lists every action)")
            yield Static(keys)
            yield Static(legend)

    def action_close(self) -> None:
        self.dismiss(None)
