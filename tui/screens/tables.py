"""What the table screens share: cells as plain Text (trace names are never markup), and a title line."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, TypeVar

from rich.text import Text
from textual.screen import Screen
from textual.widgets import DataTable, TabbedContent

#: Rows a table shows at most; the title says when there are more (Tracy shows a few thousand too).
MAX_ROWS = 5_000


def cell(value: str, right: bool = False) -> Text:
    """A table cell; ``Text`` so that brackets in kernel names are shown, not parsed as markup."""
    return Text(value, justify="right" if right else "left", no_wrap=True, overflow="ellipsis")


def fill(table: DataTable, rows: Sequence[tuple[str, Sequence[Text]]], keep_cursor: bool = False) -> None:
    """Replace a table's rows: (row key, cells) each; the cursor goes back to the top unless kept."""
    row = table.cursor_row
    table.clear()
    for key, cells in rows:
        table.add_row(*cells, key=key)
    if keep_cursor and rows:
        table.move_cursor(row=min(row, len(rows) - 1))


def name_width(names) -> int:
    """Width of a last, free-text column: its longest entry (a long C++ name scrolls sideways), within bounds."""
    return min(max((len(n) for n in names), default=20), 400)


def more_note(shown: int, total: int, what: str) -> str:
    return f" · showing the first {shown:,} of {total:,} {what}" if total > shown else ""


ResultT = TypeVar("ResultT")


class TabbedTables(Screen[ResultT], Generic[ResultT]):
    """A screen of tabs, one DataTable each (ids ``#{PREFIX}-{tab}``): switching tabs focuses the table."""

    PREFIX = ""
    FIRST_TAB = ""

    @property
    def active(self) -> str:
        return self.query_one(TabbedContent).active or self.FIRST_TAB

    def _title(self) -> None:
        """Subclasses redraw their title line for the active tab."""

    def action_tab(self, key: str) -> None:
        self.query_one(TabbedContent).active = key
        self._focus_table()

    def on_tabbed_content_tab_activated(self, _event: TabbedContent.TabActivated) -> None:
        self._focus_table()
        self._title()

    def _focus_table(self) -> None:
        self.query_one(f"#{self.PREFIX}-{self.active}", DataTable).focus()
