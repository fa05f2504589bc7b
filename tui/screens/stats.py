"""``T``: per-name statistics of kernels, CUDA API calls and ranges (``nsys stats``), then a row's instances.

    StatsScreen ── enter on a row ──▶ InstancesScreen ── enter on an instance ──▶ the timeline, zoomed to it

Both screens dismiss with the event to jump to (or None). The numbers come from
``analysis.stats``, the function ``gaplens summary`` prints from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static, TabbedContent, TabPane

from gaplens.analysis.stats import COLUMNS, TABLES, NameStats, table_stats
from gaplens.analysis.units import fmt_ns
from gaplens.loaders.model import Trace, clean_name
from gaplens.tui.screens.tables import MAX_ROWS, TabbedTables, cell, fill, more_note, name_width

HEADERS = {
    "pct": "share",
    "total_ns": "total",
    "count": "count",
    "avg_ns": "avg",
    "med_ns": "med",
    "min_ns": "min",
    "max_ns": "max",
    "name": "name",
}


@dataclass
class StatsReady(Message):
    tables: dict[str, NameStats]


@dataclass
class FloorReady(Message):
    """Floor / measured time (%) per kernel row (NaN: unsized), from ``analysis.floor.reading``."""

    pct: np.ndarray


#: The kernels table's column of floor / measured time (issue 20); it arrives after the table.
FLOOR_COLUMN = "floor_pct"


def stats_cells(st: NameStats, k: int) -> list:
    """One row of a statistics table, in ``COLUMNS`` order."""
    return [
        cell(f"{st.pct[k]:.1f}%", right=True),
        cell(fmt_ns(int(st.total_ns[k])), right=True),
        cell(f"{int(st.count[k]):,}", right=True),
        cell(fmt_ns(int(st.avg_ns[k])), right=True),
        cell(fmt_ns(int(st.med_ns[k])), right=True),
        cell(fmt_ns(int(st.min_ns[k])), right=True),
        cell(fmt_ns(int(st.max_ns[k])), right=True),
        cell(st.name(k)),
    ]


def _with_floor(cells: list, floor: np.ndarray | None, k: int) -> list:
    """A kernels row with its floor cell before the name: … while computing, — when unsized."""
    text = "…" if floor is None else "—" if np.isnan(floor[k]) else f"{floor[k]:.0f}%"
    return [*cells[:-1], cell(text, right=True), cells[-1]]


class StatsScreen(TabbedTables[int | None]):
    """Kernels / CUDA API / ranges per name: count, total, avg, median, min, max, share; sortable."""

    PREFIX = "stats"
    FIRST_TAB = TABLES[0][0]

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "close", "close"),
        Binding("s", "sort_next", "sort column"),
        Binding("r", "reverse", "reverse"),
        Binding("1", "tab('kernels')", "kernels"),
        Binding("2", "tab('cuda_api')", "CUDA API"),
        Binding("3", "tab('ranges')", "ranges"),
    ]

    def __init__(self, trace: Trace) -> None:
        super().__init__()
        self.trace = trace
        self.tables: dict[str, NameStats] = {}
        self.sort: dict[str, tuple[str, bool]] = {key: ("total_ns", True) for key, _, _ in TABLES}
        self.floor_pct: np.ndarray | None = None
        from gaplens.analysis.floor.opcalls import records_shapes

        self.with_floor = records_shapes(trace)  # no shapes: no floor column (nothing could be sized)

    def compose(self) -> ComposeResult:
        yield Static("Statistics: computing…", id="stats-title")
        with TabbedContent(id="stats-tabs"):
            for key, title, _kinds in TABLES:
                with TabPane(title, id=key):
                    yield DataTable(id=f"stats-{key}", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        self.compute()

    @work(thread=True, exclusive=True)
    def compute(self) -> None:
        # Memoised per trace: the second T is instant; the first sorts each class once.
        self.post_message(StatsReady(table_stats(self.trace)))

    @work(thread=True, exclusive=True, group="floor")
    def compute_floor(self, name_ids: np.ndarray) -> None:
        from gaplens.analysis.floor.reading import name_floor_pct

        try:
            pct = name_floor_pct(self.trace, name_ids)
        except Exception:  # a spec file or trace args that cannot be read: the column says unsized
            pct = np.full(name_ids.size, np.nan)
        self.post_message(FloorReady(pct))

    def on_floor_ready(self, msg: FloorReady) -> None:
        self.floor_pct = msg.pct
        self._refill("kernels", keep_cursor=True)

    def on_stats_ready(self, msg: StatsReady) -> None:
        self.tables = msg.tables
        for key, _title, _kinds in TABLES:
            table = self.query_one(f"#stats-{key}", DataTable)
            st = self.tables[key]
            for column in COLUMNS:
                width = name_width(st.name(k) for k in range(min(len(st), MAX_ROWS))) if column == "name" else None
                if (
                    column == "name" and key == "kernels" and self.with_floor
                ):  # floor / measured, before the wide name column
                    table.add_column("floor %", key=FLOOR_COLUMN)
                table.add_column(HEADERS[column], key=column, width=width)
            self._refill(key)
        self._focus_table()
        self._title()
        if self.with_floor:
            self.compute_floor(self.tables["kernels"].name_id)

    # ---- sorting ----------------------------------------------------------------
    def _refill(self, key: str, keep_cursor: bool = False) -> None:
        st = self.tables[key]
        column, descending = self.sort[key]
        floor = self.floor_pct
        if column == FLOOR_COLUMN and floor is not None:
            keys = np.nan_to_num(floor, nan=-1.0)  # unsized rows last when descending
            order = np.argsort(-keys if descending else keys, kind="stable")[:MAX_ROWS].tolist()
        else:
            order = st.order(column if column in COLUMNS else "total_ns", descending)[:MAX_ROWS].tolist()
        table = self.query_one(f"#stats-{key}", DataTable)
        if key == "kernels" and self.with_floor:
            rows = [(str(k), _with_floor(stats_cells(st, k), floor, k)) for k in order]
        else:
            rows = [(str(k), stats_cells(st, k)) for k in order]
        fill(table, rows, keep_cursor)
        if key == "kernels" and self.with_floor:
            label = "floor %" + ((" ▼" if descending else " ▲") if column == FLOOR_COLUMN else "")
            table.columns[FLOOR_COLUMN].label = cell(label)  # type: ignore[index]
        for c in COLUMNS:
            label = HEADERS[c] + ((" ▼" if descending else " ▲") if c == column else "")
            table.columns[c].label = cell(label)  # type: ignore[index]
        table.refresh()

    def _title(self) -> None:
        key = self.active
        st = self.tables.get(key)
        if st is None:
            return
        column, descending = self.sort[key]
        title = next(t for k, t, _ in TABLES if k == key)
        total = fmt_ns(int(st.total_ns.sum()))
        self.query_one("#stats-title", Static).update(
            cell(
                f"{title}: {len(st):,} names, {int(st.count.sum()):,} events, {total} · sorted by "
                f"{HEADERS[column]} {'▼' if descending else '▲'} (s: next column, r: reverse, enter: instances)"
                + more_note(MAX_ROWS, len(st), "names")
            )
        )

    def action_sort_next(self) -> None:
        key = self.active
        if key not in self.tables:
            return
        column, _ = self.sort[key]
        nxt = COLUMNS[(COLUMNS.index(column) + 1) % len(COLUMNS)]
        self.sort[key] = (nxt, nxt != "name")  # numbers largest first, names A→Z
        self._refill(key)
        self._title()

    def action_reverse(self) -> None:
        key = self.active
        if key not in self.tables:
            return
        column, descending = self.sort[key]
        self.sort[key] = (column, not descending)
        self._refill(key)
        self._title()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        key = self.active
        column = str(event.column_key.value)
        current, descending = self.sort[key]
        self.sort[key] = (column, not descending if column == current else column != "name")
        self._refill(key)
        self._title()

    # ---- tabs and picks ---------------------------------------------------------
    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        key = self.active
        st = self.tables.get(key)
        if st is None or event.row_key.value is None:
            return
        k = int(event.row_key.value)

        def picked(i: int | None) -> None:
            if i is not None:
                self.dismiss(i)

        self.app.push_screen(InstancesScreen(self.trace, st, k), picked)

    def action_close(self) -> None:
        self.dismiss(None)


class InstancesScreen(Screen[int | None]):
    """Every instance of one name (the longest first, or in time order); enter jumps to it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "close", "back"),
        Binding("s", "toggle_order", "longest / by time"),
    ]

    def __init__(self, trace: Trace, stats: NameStats, row: int) -> None:
        super().__init__()
        self.trace = trace
        self.stats = stats
        self.row = row
        self.by_time = False

    def compose(self) -> ComposeResult:
        yield Static(id="instances-title")
        yield DataTable(id="instances", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for key, label in (("n", "#"), ("start", "start"), ("dur", "duration"), ("lane", "where")):
            table.add_column(label, key=key)
        self._refill()
        table.focus()

    def instances(self) -> np.ndarray:
        """Event indices in display order, at most ``MAX_ROWS``."""
        inst = self.stats.instances(self.row)  # shortest first
        t = self.trace
        if self.by_time:
            return inst[np.argsort(t.start_ns[inst], kind="stable")][:MAX_ROWS]
        return inst[::-1][:MAX_ROWS]

    def _refill(self) -> None:
        t = self.trace
        st, k = self.stats, self.row
        inst = self.instances()
        lanes = t.lanes
        rows = []
        for n, i in enumerate(inst.tolist(), 1):
            ln = lanes[int(t.lane[i])]
            where = f"GPU {ln.device} · {ln.name}" if ln.is_gpu else f"{ln.pid}/{ln.tid} · {ln.name}"
            rows.append(
                (
                    str(i),
                    [
                        cell(f"{n:,}", right=True),
                        cell(fmt_ns(int(t.start_ns[i]), 7), right=True),
                        cell(fmt_ns(int(t.end_ns[i] - t.start_ns[i])), right=True),
                        cell(clean_name(where)),
                    ],
                )
            )
        fill(self.query_one(DataTable), rows)
        order = "in time order" if self.by_time else "longest first"
        title = (
            f"{st.name(k)[:80]} · {int(st.count[k]):,} instances, total {fmt_ns(int(st.total_ns[k]))}, "
            f"{order} (s: toggle, enter: show on the timeline)" + more_note(MAX_ROWS, int(st.count[k]), "instances")
        )
        self.query_one("#instances-title", Static).update(cell(title))

    def action_toggle_order(self) -> None:
        self.by_time = not self.by_time
        self._refill()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            self.dismiss(int(event.row_key.value))

    def action_close(self) -> None:
        self.dismiss(None)
