"""Jumps and measures on the timeline: blank regions by size, go-to-time, markers A/B, smells, instances.

A mixin beside ``navigate.TimelineActions`` so the widget module stays about drawing;
the screens that pick a target (statistics, lists, the time prompt) call these.

    ruler      ▏10ms     A            ▏20ms        B
    rows       ░░██▓░░░░░│░░████░░░░░░░░░░░░░░░░░│░░     marker columns on every row
    header     … · A→B 8.42 ms
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from gaplens.analysis.units import fmt_ns
from gaplens.loaders.model import LaneKind
from gaplens.tui.lanetree import RowKind
from gaplens.tui.navigate import Selection

if TYPE_CHECKING:
    from gaplens.analysis.gaps import Gap
    from gaplens.analysis.smells import Finding
    from gaplens.tui.navigate import TimelineActions

    _Host = TimelineActions
else:
    _Host = object

MARKERS = ("a", "b")


class TimelineJumps(_Host):
    """Actions bound in ``tui.keys`` (x X 1 2) and the jumps the finder screens ask for."""

    markers: dict[str, float]
    explaining: list[int]
    _by_size: tuple[int, np.ndarray] | None = None  # (id of the readings, marked gaps largest first)

    # ---- blank regions by size ------------------------------------------------
    def action_next_largest_gap(self) -> None:
        self._step_by_size(+1)

    def action_prev_largest_gap(self) -> None:
        self._step_by_size(-1)

    def gaps_by_size(self) -> np.ndarray:
        """Indices into ``readings.gaps`` of the marked regions, largest first (ties: earliest first)."""
        r = self.model.readings
        if self._by_size is None or self._by_size[0] != id(r):
            marked, starts, ends = self.model.gap_arrays()
            order = marked[np.lexsort((starts, -(ends - starts)))]
            self._by_size = (id(r), order)
        return self._by_size[1]

    def _step_by_size(self, direction: int) -> None:
        order = self.gaps_by_size()
        if order.size == 0:
            self.notify(self._no_gap_message(), severity="warning")
            return
        table = self.model.readings.gaps
        sel = self.selection
        here = -1
        if sel is not None and sel.gap is not None:
            k = table.index_at(sel.gap.device, sel.gap.start_ns)
            hit = np.flatnonzero(order == k)
            here = int(hit[0]) if hit.size else -1
        rank = 0 if here < 0 and direction > 0 else here + direction
        if here < 0 and direction < 0:
            rank = order.size - 1
        if not 0 <= rank < order.size:
            self.notify("No more blank regions this way", severity="information")
            return
        self.select_gap(table[int(order[rank])], frame=True)
        status = f"blank region {rank + 1:,} of {order.size:,} by size (x: next smaller, X: next larger)"
        show_hint = getattr(self.app, "show_hint", None)  # the status line: a toast would cover the details
        if show_hint is not None:
            show_hint(status, 4.0)

    # ---- go to a time -----------------------------------------------------------
    def go_to(self, t_ns: float) -> None:
        """Put the time cursor on ``t_ns`` (clamped to the trace), panning only if it is out of view."""
        lo, hi = self.model.extent
        t = min(max(float(t_ns), lo), hi)
        if t != t_ns:
            self.notify(f"The trace spans {fmt_ns(lo)} to {fmt_ns(hi)}: went to {fmt_ns(t)}", severity="warning")
        self._leave_phase_for(int(t), int(t))
        self.cursor_ns = t
        self.set_viewport(self.viewport.reveal(t, t + self.viewport.ns_per_col))

    # ---- markers ------------------------------------------------------------------
    def action_set_marker(self, name: str) -> None:
        """Drop marker A or B at the time cursor; again at the same column removes it."""
        at = self.markers.get(name)
        if at is not None and self.viewport.col_of(at) == self.viewport.col_of(self.cursor_ns):
            del self.markers[name]
        else:
            self.markers[name] = self.cursor_ns
        self._changed()  # every row draws the marker columns; the ruler and header follow the message

    def marker_text(self) -> str:
        """``A→B 8.42 ms`` once both are set, ``A 12.3 ms`` for one alone, else empty."""
        a, b = self.markers.get("a"), self.markers.get("b")
        if a is not None and b is not None:
            return f"A→B {fmt_ns(b - a)}"
        if a is not None:
            return f"A at {fmt_ns(a)}"
        if b is not None:
            return f"B at {fmt_ns(b)}"
        return ""

    def marker_cols(self) -> list[int]:
        return [self.viewport.col_of(t) for t in self.markers.values()]

    # ---- keeping the explaining rows in view ------------------------------------
    def show_explaining(self, g: Gap) -> None:
        """After a jump to ``g``: keep the rows of its evidence (the host work, calls, syncs) on screen too."""
        t = self.model.trace
        lanes = {int(t.lane[i]) for i in g.evidence}
        rows = enumerate(self.rows)
        self.explaining = [k for k, r in rows if r.kind == RowKind.EVENTS and r.depth == 0 and r.lane in lanes]
        self.frame_rows()

    def frame_rows(self) -> None:
        """Scroll so the row cursor and the explaining rows are in view.

        When they do not fit (a short terminal, many rows between), the cursor moves from the
        device row to the device's first stream row, which shows the blank region too; failing
        that, the explaining rows win.
        """
        height = self.scrollable_content_region.height
        cursor = self.row_cursor
        rows = self.explaining
        if not rows or height <= 0:
            self.scroll_to_region_row(cursor)
            return
        top, low = min(cursor, *rows), max(cursor, *rows)
        if low - top >= height:
            device = self.rows[cursor].device
            after = enumerate(self.rows[cursor + 1 :], cursor + 1)
            lanes = self.model.trace.lanes
            stream = next(
                (
                    k
                    for k, r in after
                    if r.kind == RowKind.EVENTS and r.device == device and lanes[r.lane].kind == LaneKind.STREAM
                ),
                None,
            )
            low = max(rows)
            if stream is not None and low - min(stream, *rows) < height:
                top = min(stream, *rows)
                self.row_cursor = stream
                self.repaint_rows({cursor, stream})
            else:
                top = low - height + 1
        y = self.scroll_offset.y
        if y <= top and low < y + height:
            return  # all in view already
        self.scroll_to(y=max(top if top < y else low - height + 1, 0), animate=False)

    # ---- picks from the finder screens ------------------------------------------
    def show_event(self, i: int) -> None:
        """Select event ``i`` and zoom so it fills half the width (an instance, a search match)."""
        t = self.model.trace
        s, e = int(t.start_ns[i]), int(t.end_ns[i])
        self.select_event(i)
        self.cursor_ns = (s + e) / 2
        self.set_viewport(self.viewport.show(s, e, fill=0.5))

    def show_step(self, name: str, host_ns: tuple[int, int], span_ns: tuple[int, int]) -> None:
        """Frame a step as CUDA events time it (what-if's numbers) and select it: its phase, else its range."""
        s, e = span_ns
        self._leave_phase_for(min(s, host_ns[0]), max(e, host_ns[1]))
        m = self.model
        p = next((p for p in m.readings.phases if p.name == name and p.host_start_ns == host_ns[0]), None)
        if p is not None:
            row = next((k for k, r in enumerate(self.rows) if r.kind == RowKind.PHASES and r.depth == p.depth), None)
            if row is not None:
                self.set_row_cursor(row)
            self.select(Selection(p.start_ns, p.end_ns, phase=p))
        else:  # a profiler step (no phase): its range event
            t = m.trace
            ids = [k for k, nm in enumerate(t.names) if nm == name]
            hit = np.flatnonzero(np.isin(t.name_id, ids) & (t.start_ns == host_ns[0]) & (t.end_ns == host_ns[1]))
            if hit.size:
                self.select_event(int(hit[0]))
        self.cursor_ns = (s + e) / 2
        self.set_viewport(self.viewport.show(s, e, fill=0.8))

    def select_finding(self, f: Finding) -> None:
        """Frame a smell on its device's busy row and show it in the details panel."""
        self._leave_phase_for(f.start_ns, f.end_ns)
        row = next((k for k, r in enumerate(self.rows) if r.kind == RowKind.BUSY and r.device == f.device), None)
        if row is not None:
            self.set_row_cursor(row)
        self.cursor_ns = (f.start_ns + f.end_ns) / 2
        self.set_viewport(self.viewport.show(f.start_ns, f.end_ns, fill=0.8))
        self.select(Selection(f.start_ns, f.end_ns, finding=f))
