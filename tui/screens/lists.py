"""``L``: the blank regions (largest first, with cause and critical-path flag) and the smells, each jumpable.

The screen dismisses with a ``Pick`` (which list, which entry); the app moves the
timeline there. Smells are computed on first use, in a worker: seconds on a big trace.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import DataTable, Footer, Static, TabbedContent, TabPane

from gaplens.analysis.gaps import CAUSES
from gaplens.analysis.regions import shares_text
from gaplens.analysis.smells import Finding, smells
from gaplens.analysis.units import fmt_ns
from gaplens.loaders.model import Trace, clean_name
from gaplens.tui.readings import GapTable
from gaplens.tui.screens.tables import MAX_ROWS, TabbedTables, cell, fill, more_note, name_width


@dataclass(frozen=True)
class Pick:
    """What the user chose: ``("gap", index into the gap table)`` or ``("smell", index into the findings)``."""

    kind: str
    index: int


@dataclass
class SmellsReady(Message):
    findings: list[Finding]


def gaps_by_size(gaps: GapTable) -> np.ndarray:
    """Every blank region, largest first (ties: earliest first)."""
    return np.lexsort((gaps.start, -(gaps.end - gaps.start)))


def gap_cells(gaps: GapTable, k: int, rank: int) -> list:
    cols = gaps.cols
    assert cols is not None  # a table with rows has its columns
    c = int(cols.cause[k])
    return [
        cell(f"{rank:,}", right=True),
        cell(str(int(cols.device[k])), right=True),
        cell(fmt_ns(int(cols.start_ns[k]), 7), right=True),
        cell(fmt_ns(int(cols.end_ns[k] - cols.start_ns[k])), right=True),
        cell("●" if bool(cols.on_path[k]) else ""),
        cell(CAUSES[c]),
        cell(shares_text(cols.shares_of(k))),
    ]


def smell_cells(f: Finding) -> list:
    return [
        cell(f.kind.replace("_", " ")),
        cell(str(f.device), right=True),
        cell(fmt_ns(f.start_ns, 7), right=True),
        cell(fmt_ns(f.dur_ns), right=True),
        cell(clean_name(f.summary)),
    ]


class ListsScreen(TabbedTables[Pick | None]):
    """Two tabs: blank regions by size, smells in time order; enter jumps to one."""

    PREFIX = "lists"
    FIRST_TAB = "gaps"

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "close", "close"),
        Binding("1", "tab('gaps')", "blank regions"),
        Binding("2", "tab('smells')", "smells"),
    ]

    def __init__(self, trace: Trace, gaps: GapTable, findings: list[Finding] | None, start: str = "gaps") -> None:
        super().__init__()
        self.trace = trace
        self.gaps = gaps
        self.findings = findings
        self.start = start

    def compose(self) -> ComposeResult:
        yield Static(id="lists-title")
        with TabbedContent(id="lists-tabs", initial=self.start):
            with TabPane("Blank regions", id="gaps"):
                yield DataTable(id="lists-gaps", cursor_type="row", zebra_stripes=True)
            with TabPane("Smells", id="smells"):
                yield DataTable(id="lists-smells", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#lists-gaps", DataTable)
        for key, label in (
            ("n", "#"),
            ("gpu", "GPU"),
            ("start", "start"),
            ("len", "length"),
            ("path", "path"),
            ("cause", "cause"),
            ("shares", "shares"),
        ):
            table.add_column(label, key=key)
        order = gaps_by_size(self.gaps)[:MAX_ROWS].tolist()
        fill(table, [(str(k), gap_cells(self.gaps, k, n)) for n, k in enumerate(order, 1)])
        smells_table = self.query_one("#lists-smells", DataTable)
        for key, label in (
            ("kind", "smell"),
            ("gpu", "GPU"),
            ("start", "start"),
            ("len", "length"),
            ("what", "finding"),
        ):
            smells_table.add_column(label, key=key)
        if self.findings is None:
            self.compute_smells()
        else:
            self._fill_smells()
        self._focus_table()
        self._title()

    @work(thread=True, exclusive=True)
    def compute_smells(self) -> None:
        self.post_message(SmellsReady(smells(self.trace)))

    def on_smells_ready(self, msg: SmellsReady) -> None:
        self.findings = msg.findings
        self._fill_smells()
        self._title()

    def _fill_smells(self) -> None:
        found = self.findings or []
        table = self.query_one("#lists-smells", DataTable)
        table.columns["what"].width = name_width(clean_name(f.summary) for f in found)  # type: ignore[index]
        table.columns["what"].auto_width = False  # type: ignore[index]
        fill(self.query_one("#lists-smells", DataTable), [(str(k), smell_cells(f)) for k, f in enumerate(found)])

    def _title(self) -> None:
        if self.active == "gaps":
            n = len(self.gaps)
            on = int(self.gaps.on_path.sum())
            blank = fmt_ns(int((self.gaps.end - self.gaps.start).sum()))  # "idle" only when nothing was asked
            text = (
                f"Blank regions, largest first: {n:,} ({blank} without compute), {on:,} on the critical path (●) · "
                "enter: show it" + more_note(MAX_ROWS, n, "regions")
            )
        elif self.findings is None:
            text = "Smells: computing…"
        else:
            text = f"Smells in time order: {len(self.findings)} · enter: show it with its lever"
            if not self.findings:
                text = "Smells: none (the thresholds scale with the step time, and nothing crossed them)"
        self.query_one("#lists-title", Static).update(cell(text))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is None:
            return
        kind = "gap" if event.data_table.id == "lists-gaps" else "smell"
        self.dismiss(Pick(kind, int(event.row_key.value)))

    def action_close(self) -> None:
        self.dismiss(None)
