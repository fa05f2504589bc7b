"""The timeline widget: a Line-API ScrollView that turns rasters into cached Strips.

Rows scroll vertically; time is the Viewport, not a scroll offset. Any change to
what is drawn bumps ``generation``, which keys the strip cache, so one increment
invalidates every cached line. A move of the row cursor or of the selection changes
only a few rows: those are dropped from the cache and repainted alone (``refresh_lines``),
like toolong does, instead of a new generation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from rich.segment import Segment
from rich.style import Style as RichStyle
from textual import events
from textual.binding import BindingType
from textual.cache import LRUCache
from textual.color import Color
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from gaplens.loaders.model import LaneKind
from gaplens.tui import keys
from gaplens.tui.jumps import TimelineJumps
from gaplens.tui.lanetree import Row, RowKind, ancestors, gutter_label, visible_rows
from gaplens.tui.navigate import Selection, TimelineActions
from gaplens.tui.raster import (
    BASE_MASK,
    CURSOR,
    LABEL,
    MARKER,
    MATCH,
    REV,
    SELECTED,
    STYLE_CLASSES,
    Raster,
    RowData,
    mark_events,
    mark_gaps,
    mark_span,
    put_labels,
    raster_row,
    raster_rows,
    runs,
)
from gaplens.tui.viewmodel import TimelineModel
from gaplens.tui.viewport import Viewport

_OVERLAYS = (
    (MATCH, "timeline--match"),
    (SELECTED, "timeline--selected"),
    (MARKER, "timeline--marker"),
    (CURSOR, "timeline--cursor"),
)
# Without colour (NO_COLOR) an overlay is a text attribute: backgrounds would vanish.
_MONO_OVERLAYS = {
    MATCH: RichStyle(bold=True),
    SELECTED: RichStyle(underline=True),
    MARKER: RichStyle(reverse=True),
    CURSOR: RichStyle(reverse=True),
}
_GUTTER, _GUTTER_CURSOR = -1, -2
_GUTTER_CLASSES = {_GUTTER: "timeline--gutter", _GUTTER_CURSOR: "timeline--gutter-cursor"}
_NO_GAPS = RowData.of_spans(np.empty(0, np.int64), np.empty(0, np.int64), 0)


@dataclass
class ViewportChanged(Message):
    viewport: Viewport


@dataclass
class SelectionChanged(Message):
    selection: Selection | None


class Timeline(TimelineJumps, TimelineActions, ScrollView, can_focus=True):
    """Lane-tree gutter on the left, bars on the right, one drawn row per line."""

    BINDINGS: ClassVar[list[BindingType]] = keys.bindings()
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        *STYLE_CLASSES,
        "timeline--gutter",
        "timeline--gutter-cursor",
        "timeline--match",
        "timeline--selected",
        "timeline--marker",
        "timeline--cursor",
    }
    DEFAULT_CSS = """
    Timeline { overflow-x: hidden; overflow-y: auto; }
    """

    def __init__(self, model: TimelineModel, mono: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.model = model
        self.mono = mono
        self.collapsed: set[str] = set()
        self.deep: dict[int, int] = {}  # lane → deeper level its "+N" row shows (the selection's)
        self.expanded: set[str] = set()  # lanes drawing every level of their stack
        self.rows: list[Row] = self._visible()
        self.row_cursor = 0
        # The first view is the analysis window (first to last GPU activity); 0 shows everything.
        self.viewport = Viewport.fit(*model.window, cols=80, extent=model.extent)
        self.cursor_ns = (model.window[0] + model.window[1]) / 2
        self.selection: Selection | None = None
        self.matches = np.empty(0, np.int64)
        self.phase = None  # the phase the view is filtered to
        self.match_order = np.empty(0, np.int64)
        self.search_text = ""
        self.markers: dict[str, float] = {}  # "a"/"b" -> time (ns)
        self.explaining: list[int] = []  # rows that explain the selected blank region (kept in view)
        self.generation = 0
        self._cache: LRUCache[tuple, Strip] = LRUCache(1024)
        self._styles: dict[int, RichStyle] = {}
        self._edges = self.viewport.edges()
        self._width = 80
        self._fitted = False

    # ---- model and geometry ---------------------------------------------------
    @property
    def label_width(self) -> int:
        return max(12, min(28, self.scrollable_content_region.width // 5))

    @property
    def cols(self) -> int:
        return max(self.scrollable_content_region.width - self.label_width, 1)

    def set_model(self, model: TimelineModel) -> None:
        """Swap in a model with more readings (gaps, phases); the view stays where it is."""
        self.model = model
        current = self.current_row()
        self.rows = self._visible()
        # The phase rows arrive with the readings and push the rows below them down.
        last = max(len(self.rows) - 1, 0)
        self.row_cursor = next((k for k, r in enumerate(self.rows) if r == current), min(self.row_cursor, last))
        self.scroll_to_region_row(self.row_cursor)
        self._changed()

    def on_resize(self, event: events.Resize) -> None:
        if not self._fitted:
            self._fitted = True
            self.viewport = Viewport.fit(*self.model.window, cols=self.cols, extent=self.model.extent)
        else:
            self.viewport = self.viewport.with_cols(self.cols)
        # Fewer lines (the details panel opened, the terminal shrank) must not hide the cursor's row,
        # nor, after a jump to a blank region, the rows that explain it.
        self.call_after_refresh(self.frame_rows)
        self._changed()

    def _changed(self, viewport: bool = True) -> None:
        self.generation += 1
        self._edges = self.viewport.edges()
        self._width = self.scrollable_content_region.width
        self.virtual_size = Size(self.scrollable_content_region.width, len(self.rows))
        self.refresh()
        if viewport:
            self.post_message(ViewportChanged(self.viewport))

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._styles.clear()
        self.generation += 1

    def set_viewport(self, vp: Viewport) -> None:
        self.viewport = vp
        if not vp.t0_ns <= self.cursor_ns < vp.t1_ns:
            self.cursor_ns = vp.t0_ns + vp.span_ns / 2
        self._changed()

    # ---- drawing --------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        i = self.scroll_offset.y + y
        width = self._width
        if i >= len(self.rows):
            key = (self.generation, -1, width)
            strip = self._cache.get(key)
            if strip is None:
                strip = self._cache[key] = Strip.blank(width, self.rich_style)
            return strip
        key = (self.generation, i, width)
        strip = self._cache.get(key)
        if strip is None:
            # A miss: draw every visible row the cache lacks in one pass (a whole frame after a new
            # generation, like a page of prefetch; one or two rows after a cursor move).
            self._render_window(self.scroll_offset.y, self.scrollable_content_region.height)
            strip = self._cache.get(key) or self.render_row(i)
        return strip

    def _render_window(self, top: int, height: int) -> None:
        gen, width = self.generation, self._width
        rows = range(max(top, 0), min(top + height, len(self.rows)))
        visible = [i for i in rows if (gen, i, width) not in self._cache]
        events = [i for i in visible if self.rows[i].kind == RowKind.EVENTS]
        m = self.model
        datas = [m.events_data(self.rows[i].trace_row) for i in events]
        rasters = raster_rows(datas, m.columns, self._edges, self.mono)
        ready = dict(zip(events, rasters, strict=True))
        for i in visible:
            self._cache[(gen, i, width)] = self.render_row(i, ready.get(i))

    def repaint_rows(self, rows: set[int]) -> None:
        """Redraw only these rows: their strips leave the cache and their lines alone are refreshed."""
        for i in rows:
            if 0 <= i < len(self.rows):
                self._cache.discard((self.generation, i, self._width))
                self.refresh_lines(i)

    def render_row(self, i: int, raster: Raster | None = None) -> Strip:
        """One row: gutter label plus bars; O(cols × log n), no per-event loop."""
        row = self.rows[i]
        gw = self.label_width
        label = gutter_label(row, self.collapsed, gw)
        gstyle = self._style(_GUTTER_CURSOR if i == self.row_cursor else _GUTTER)
        segments = [Segment(label, gstyle)]
        r = self.raster(row, raster)
        segments.extend(Segment(text, self._style(sid)) for text, sid in runs(r))
        return Strip(segments, gw + self.viewport.cols)

    def raster(self, row: Row, base: Raster | None = None) -> Raster:
        """The raster of one drawn row with gaps, matches, selection, labels and cursor applied."""
        edges = self._edges
        m = self.model
        data = m.row_data(row)
        cols = edges.size - 1
        if data is None:
            r = Raster(
                np.full(cols, ord(" "), np.uint32),
                np.zeros(cols, np.int16),
                np.zeros(cols, np.int64),
                np.zeros(cols, np.int64),
                np.zeros(cols),
            )
        else:
            r = base if base is not None else raster_row(data, edges, self.mono)
            if self._gap_row(row):
                lg = m.readings.largest
                span = (lg.start_ns, lg.end_ns) if lg is not None and lg.device == row.device else None
                gaps = m.gap_rows.get(row.device)
                if gaps is not None or span is not None:
                    mark_gaps(r, gaps if gaps is not None else _NO_GAPS, span, edges)
            mark_events(r, data, self.matches, MATCH)
            put_labels(r, data, m.trace.names, m.trace.name_id)
        sel = self.selection
        if sel is not None and self._selection_row(row, sel, data):
            mark_span(r, edges, sel.t0_ns, sel.t1_ns, SELECTED)
        for mcol in self.marker_cols():
            if 0 <= mcol < cols:
                r.style[mcol] |= MARKER
        col = self.viewport.col_of(self.cursor_ns)
        if 0 <= col < cols:
            r.style[col] |= CURSOR
        return r

    def _gap_row(self, row: Row) -> bool:
        if row.kind == RowKind.BUSY:
            return True
        if row.kind != RowKind.EVENTS or row.depth != 0:
            return False
        return self.model.trace.lanes[row.lane].kind == LaneKind.STREAM

    def _selection_row(self, row: Row, sel: Selection, data) -> bool:
        if sel.event >= 0:
            return data is not None and data.base >= 0 and data.base <= sel.event < data.base + len(data)
        if sel.gap is not None:
            return row.kind == RowKind.BUSY and row.device == sel.gap.device
        if sel.finding is not None:
            return row.kind == RowKind.BUSY and row.device == sel.finding.device
        if sel.phase is not None:
            return row.kind == RowKind.PHASES and self.model.phase_depth(sel.phase) == row.depth
        return False

    def _component(self, name: str) -> RichStyle:
        """A component class's colours resolved against this widget's background, and its text style.

        The partial style keeps theme colours with alpha (``$foreground 35%``) and ``auto`` text
        unresolved: white on every theme. The full style resolves them; the partial one says
        which of them the rule actually sets.
        """
        full = self.get_component_rich_style(name)
        part = self.get_component_rich_style(name, partial=True)
        return RichStyle(
            color=full.color if part.color is not None else None,
            bgcolor=full.bgcolor if part.bgcolor is not None else None,
            bold=part.bold,
            underline=part.underline,
            italic=part.italic,
            reverse=part.reverse,
        )

    def _style(self, sid: int) -> RichStyle:
        style = self._styles.get(sid)
        if style is None and sid < 0:
            if self.mono:  # NO_COLOR: the row cursor is reversed, not tinted
                gutter = RichStyle(reverse=sid == _GUTTER_CURSOR)
            else:
                gutter = self._component(_GUTTER_CLASSES[sid])
            style = self._styles[sid] = self.rich_style + gutter
        if style is None:
            style = self._component(STYLE_CLASSES[sid & BASE_MASK])
            if sid & (REV | LABEL):
                # Fill the cell with the bar colour; the glyph or the name is the gap colour.
                bg = self.rich_style.bgcolor
                fg = bg
                if sid & LABEL and style.color is not None and style.color.triplet is not None:
                    # A name inside a bar: black or white, whichever reads on the bar's colour.
                    fg = Color.from_rich_color(style.color).get_contrast_text(1.0).rich_color
                style = RichStyle(color=fg, bgcolor=style.color, bold=bool(sid & LABEL) and not self.mono)
                if self.mono or bg is None:
                    style = RichStyle(reverse=True)
            for flag, name in _OVERLAYS:
                if sid & flag:
                    style = style + (_MONO_OVERLAYS[flag] if self.mono else self._component(name))
            # On the widget's own colours: a cell without a background would show the terminal's.
            style = self._styles[sid] = self.rich_style + style
        return style

    # ---- helpers used by actions ---------------------------------------------
    def current_row(self) -> Row | None:
        return self.rows[self.row_cursor] if self.rows else None

    def set_row_cursor(self, i: int) -> None:
        self.explaining = []
        old = self.row_cursor
        self.row_cursor = max(0, min(i, len(self.rows) - 1))
        self.scroll_to_region_row(self.row_cursor)
        # Only the two gutters change; a scroll re-composes the lines from the cache.
        self.repaint_rows({old, self.row_cursor})

    # home/end come from ScrollableContainer and only scrolled, leaving the row cursor off screen.
    def action_scroll_home(self) -> None:
        self.set_row_cursor(0)

    def action_scroll_end(self) -> None:
        self.set_row_cursor(len(self.rows) - 1)

    def scroll_to_region_row(self, i: int) -> None:
        top = self.scroll_offset.y
        height = self.scrollable_content_region.height
        if i < top:
            self.scroll_to(y=i, animate=False)
        elif i >= top + height:
            self.scroll_to(y=i - height + 1, animate=False)

    def toggle(self, node: str, expand: bool = False) -> None:
        """Fold or unfold a group; ``expand`` shows or hides a lane's levels beyond the drawn sub-rows."""
        toggled = self.expanded if expand else self.collapsed
        if node in toggled:
            toggled.discard(node)
        else:
            toggled.add(node)
        current = self.current_row()
        self.rows = self._visible()
        # Stay on the same row if it is still drawn, else on the header of what was folded.
        head = next((k for k, r in enumerate(self.rows) if r.node == node and r.heads), 0)
        self.row_cursor = next((k for k, r in enumerate(self.rows) if r == current), head)
        self.scroll_to_region_row(self.row_cursor)
        self._changed(viewport=False)

    def _visible(self) -> list[Row]:
        return visible_rows(self.model.tree, self.collapsed, self.deep, self.expanded)

    def reveal_lane(self, lane: int, depth: int) -> None:
        """Expand whatever hides (lane, depth) and put the row cursor on it.

        A level deeper than the drawn sub-rows is shown in the lane's "+N" row.
        """
        self.deep = {lane: depth} if depth > 0 else {}
        self.collapsed -= set(ancestors(self.model.trace.lanes[lane]))
        drawn = self._visible()
        if drawn != self.rows:  # rows moved: every cached line may now belong to another row
            self.rows = drawn
            self._changed(viewport=False)
        rows = [(k, r) for k, r in enumerate(self.rows) if r.kind == RowKind.EVENTS and r.lane == lane]
        if rows:
            self.set_row_cursor(next((k for k, r in rows if r.depth == depth), rows[0][0]))

    def select(self, sel: Selection | None) -> None:
        old, self.selection = self.selection, sel
        # The "+N" row goes back to its own level once the deep event is no longer selected.
        if self.deep and (sel is None or sel.event < 0 or self.deep != self._deep_of(sel.event)):
            self.deep = {}
            self.rows = self._visible()
            self._changed(viewport=False)
        else:
            self.repaint_rows(self._selection_rows(old) | self._selection_rows(sel))
        self.post_message(SelectionChanged(sel))

    def _selection_rows(self, sel: Selection | None) -> set[int]:
        """Drawn rows that show ``sel``'s overlay (the rows a selection change repaints)."""
        if sel is None:
            return set()
        m = self.model
        if sel.event >= 0:
            trace_row = int(np.searchsorted(m.trace.row_offsets, sel.event, "right")) - 1
            return {k for k, r in enumerate(self.rows) if r.kind == RowKind.EVENTS and r.trace_row == trace_row}
        return {k for k, r in enumerate(self.rows) if self._selection_row(r, sel, None)}

    def _deep_of(self, i: int) -> dict[int, int]:
        t = self.model.trace
        return {int(t.lane[i]): int(t.depth[i])}

    # ---- mouse ----------------------------------------------------------------
    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        if event.ctrl or event.shift:  # ctrl/shift + wheel zooms at the pointer; the plain wheel scrolls rows
            event.prevent_default()
            event.stop()
            self._zoom_at(event.x, 0.5)

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        if event.ctrl or event.shift:
            event.prevent_default()
            event.stop()
            self._zoom_at(event.x, 2.0)

    def _zoom_at(self, x: int, factor: float) -> None:
        if x >= self.label_width:
            self.cursor_ns = self.viewport.time_of(x - self.label_width + 0.5)
        self.set_viewport(self.viewport.zoom(factor, self.cursor_ns))

    def on_click(self, event: events.Click) -> None:
        row = self.scroll_offset.y + event.y
        if row < len(self.rows):
            self.row_cursor = row
        if event.x >= self.label_width:
            self.cursor_ns = self.viewport.time_of(event.x - self.label_width + 0.5)
            self.action_select()  # not run_action: that is a coroutine, and un-awaited it never ran
        elif row < len(self.rows) and self.rows[row].heads:
            self.toggle(self.rows[row].node)
        self._changed(viewport=False)
