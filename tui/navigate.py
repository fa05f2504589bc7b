"""The timeline's actions: zoom, pan, cursor, selection, blank regions, flows and matches.

A mixin so the widget module stays about drawing; every action ends in a new
Viewport and/or Selection handed to the widget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from gaplens.analysis.gaps import Gap
from gaplens.analysis.phases import Phase
from gaplens.loaders.model import Kind, clean_name
from gaplens.tui.lanetree import DEPTH_CAP, Row, RowKind, group_of
from gaplens.tui.viewport import Viewport

if TYPE_CHECKING:
    from textual.scroll_view import ScrollView

    from gaplens.analysis.smells import Finding  # only a type here: the smells load with the lists screen
    from gaplens.tui.viewmodel import TimelineModel

    # For the type checker the mixin is the widget it is mixed into (notify, app, refresh);
    # at run time it stays a plain class so it adds nothing to Textual's DOM types.
    _Host = ScrollView
else:
    _Host = object

ZOOM_STEP = 0.5


@dataclass(frozen=True)
class Selection:
    """What the details panel shows: an event, a blank region, a phase or a smell."""

    t0_ns: int
    t1_ns: int
    event: int = -1
    gap: Gap | None = None
    phase: Phase | None = None
    finding: Finding | None = None


class TimelineActions(_Host):
    """Actions bound in ``tui.keys``; mixed into ``Timeline``."""

    # State of the widget the actions read and write; ``Timeline.__init__`` sets each one.
    model: TimelineModel
    viewport: Viewport
    cursor_ns: float
    selection: Selection | None
    phase: Phase | None  # the phase the view is filtered to
    rows: list[Row]
    row_cursor: int
    matches: np.ndarray
    match_order: np.ndarray
    expanded: set[str]
    search_text: str
    _gap_floor: float | None = None

    if TYPE_CHECKING:  # what ``Timeline`` provides; the signatures are checked against its definitions

        @property
        def cols(self) -> int: ...
        def set_viewport(self, vp: Viewport) -> None: ...
        def select(self, sel: Selection | None) -> None: ...
        def current_row(self) -> Row | None: ...
        def set_row_cursor(self, i: int) -> None: ...
        def scroll_to_region_row(self, i: int) -> None: ...
        def repaint_rows(self, rows: set[int]) -> None: ...
        def toggle(self, node: str, expand: bool = False) -> None: ...
        def reveal_lane(self, lane: int, depth: int) -> None: ...
        def show_event(self, i: int) -> None: ...
        def show_explaining(self, g: Gap) -> None: ...
        def _changed(self, viewport: bool = True) -> None: ...

    # ---- zoom and pan ---------------------------------------------------------
    def action_zoom_in(self) -> None:
        self.set_viewport(self.viewport.zoom(ZOOM_STEP, self.cursor_ns))

    def action_zoom_out(self) -> None:
        self.set_viewport(self.viewport.zoom(1 / ZOOM_STEP, self.cursor_ns))

    def action_pan(self, fraction: float) -> None:
        vp = self.viewport.pan(fraction * self.viewport.cols)
        self.cursor_ns += vp.t0_ns - self.viewport.t0_ns  # the cursor rides along
        self.set_viewport(vp)

    def action_fit(self) -> None:
        """Fit the analysis window: the phase filtered to, else first to last GPU activity."""
        lo, hi = self.bounds()
        extent = None if self.phase is not None else self.model.extent
        self.set_viewport(Viewport.fit(lo, hi, self.cols, extent=extent))

    def action_fit_all(self) -> None:
        """Fit every event of the trace (start-up, host-only tails included)."""
        self.phase = None
        self.set_viewport(Viewport.fit(*self.model.extent, self.cols))

    def bounds(self) -> tuple[int, int]:
        if self.phase is not None:
            return self.phase.start_ns, self.phase.end_ns
        return self.model.window

    # ---- cursors --------------------------------------------------------------
    def action_cursor(self, step: int) -> None:
        vp = self.viewport
        t = self.cursor_ns + step * vp.ns_per_col
        col = vp.col_of(t)
        if col < 0 or col >= vp.cols:
            vp = vp.pan(step * max(vp.cols // 8, 1))
        self.cursor_ns = min(max(t, vp.t0_ns), vp.t1_ns - vp.ns_per_col / 2)
        self.set_viewport(vp)

    def action_row(self, step: int) -> None:
        self.set_row_cursor(self.row_cursor + step)

    def action_toggle_row(self) -> None:
        row = self.current_row()
        if row is None:
            return
        deeper = row.kind == RowKind.EVENTS and (row.more or (row.node in self.expanded and row.depth >= DEPTH_CAP))
        if deeper:  # the "+N" row: draw (or hide again) the rest of the stack
            self.toggle(row.node, expand=True)
        else:
            self.toggle(group_of(row, self.model.trace))

    # ---- selection ------------------------------------------------------------
    def action_select(self) -> None:
        row = self.current_row()
        if row is None:
            return
        t, tol = self.cursor_ns, self.viewport.ns_per_col
        m = self.model
        sel = None
        if row.kind == RowKind.EVENTS:
            i = m.event_at(row, t, tol)
            if i is not None:
                sel = Selection(int(m.trace.start_ns[i]), int(m.trace.end_ns[i]), event=i)
        elif row.kind == RowKind.BUSY:
            g = m.gap_at(row.device, t)
            if g is not None:
                sel = Selection(g.start_ns, g.end_ns, gap=g)
            else:  # the device was busy here: pick the op that kept it busy, on its stream's row
                i = m.gpu_op_at(row.device, t, tol)
                if i is not None:
                    self.select_event(i)
                    return
        elif row.kind == RowKind.PHASES:
            p = m.phase_at(row.depth, t)
            if p is not None:
                sel = Selection(p.start_ns, p.end_ns, phase=p)
        if sel is None:
            self.notify("Nothing under the cursor on this row", timeout=2)
        self.select(sel)

    def action_zoom_selection(self) -> None:
        sel = self.selection
        if sel is None:
            self.notify("Nothing selected: move the cursor onto a bar and press enter", severity="warning")
            return
        self.cursor_ns = (sel.t0_ns + sel.t1_ns) / 2
        self.set_viewport(self.viewport.show(sel.t0_ns, sel.t1_ns, fill=0.8))

    def action_clear(self) -> None:
        self.matches = np.empty(0, np.int64)
        self.match_order = np.empty(0, np.int64)
        self.search_text = ""
        self.select(None)
        self._changed()  # the match marks go, and the header drops the search

    def select_event(self, i: int) -> None:
        """Select event ``i``, bring its row under the row cursor and its span into view."""
        t = self.model.trace
        s, e = int(t.start_ns[i]), int(t.end_ns[i])
        self._leave_phase_for(s, e)
        self.reveal_lane(int(t.lane[i]), int(t.depth[i]))
        self.cursor_ns = s if e - s < self.viewport.ns_per_col else (s + e) / 2
        self.set_viewport(self.viewport.reveal(s, e))
        self.select(Selection(s, e, event=i))

    def _leave_phase_for(self, t0_ns: int, t1_ns: int) -> None:
        """A jump (search, flow, largest gap) to outside the phase filter drops the filter; else it could not show."""
        p = self.phase
        if p is None or (p.start_ns <= t0_ns and t1_ns <= p.end_ns):
            return
        self.phase = None
        self.viewport = self.viewport.with_extent(*self.model.extent)
        self.notify(f"Showing the whole trace: the target lies outside the phase {clean_name(p.name)!r}", markup=False)

    def select_gap(self, g, frame: bool) -> None:
        self._leave_phase_for(g.start_ns, g.end_ns)
        row = next((k for k, r in enumerate(self.rows) if r.kind == RowKind.BUSY and r.device == g.device), None)
        if row is not None:
            self.set_row_cursor(row)
        vp = self.viewport.show(g.start_ns, g.end_ns, fill=0.6) if frame else self.viewport.reveal(g.start_ns, g.end_ns)
        self.cursor_ns = (g.start_ns + g.end_ns) / 2
        self.set_viewport(vp)
        self.select(Selection(g.start_ns, g.end_ns, gap=g))
        self.show_explaining(g)

    # ---- blank regions --------------------------------------------------------
    def action_next_gap(self) -> None:
        self._step_gap(+1)

    def action_prev_gap(self) -> None:
        self._step_gap(-1)

    def _step_gap(self, direction: int) -> None:
        """The next marked blank region at least one cell wide at this zoom, keeping the zoom."""
        m = self.model
        marked, starts, ends = m.gap_arrays()
        if not marked.size:
            self.notify(self._no_gap_message(), severity="warning")
            return
        sel = self.selection
        ref = sel.gap.start_ns if sel is not None and sel.gap is not None else self.cursor_ns
        lo, hi = self.bounds()
        inside = (starts >= lo) & (ends <= hi)
        if not inside.any():
            self.notify("No blank regions in this range", severity="information")
            return
        # Regions you could see at this zoom, but never only the few giants when zoomed out;
        # a run of g/G keeps its first floor so stepping back returns where it came from.
        stepping = sel is not None and sel.gap is not None and self._gap_floor is not None
        if not stepping:
            self._gap_floor = min(self.viewport.ns_per_col, 0.25 * float((ends - starts)[inside].max()))
        inside &= (ends - starts) >= self._gap_floor
        cand = np.flatnonzero(inside & ((starts > ref) if direction > 0 else (starts < ref)))
        if cand.size == 0:
            self.notify("No more blank regions this way", severity="information")
            return
        k = int(cand[0] if direction > 0 else cand[-1])
        self.select_gap(m.readings.gaps[int(marked[k])], frame=False)

    def _no_gap_message(self) -> str:
        r = self.model.readings
        if getattr(self.app, "analysing", False):
            return "Still analysing the blank regions (see the header): try again in a moment"
        if not self.model.busy:
            return "No GPU activity in this trace, so no blank regions between GPU ops"
        if r.analysed and len(r.gaps):
            # Blank regions exist but none waited on the host: say so rather than "no blank regions".
            return f"None of the {len(r.gaps):,} blank regions is on the critical path (`gaplens gaps` lists them)"
        return "No blank regions in this trace" if r.analysed else "No blank regions (still analysing?)"

    def action_largest_gap(self) -> None:
        g = self.model.readings.largest
        if g is None:
            self.notify(self._no_gap_message(), severity="warning")
            return
        self.select_gap(g, frame=True)
        if not g.on_critical_path:
            self.notify(
                f"{self._no_gap_message()}; this is the largest blank region ({g.cause})", severity="information"
            )

    # ---- flows ----------------------------------------------------------------
    def action_flow(self) -> None:
        """From a launch call to the GPU op it queued, and back."""
        sel = self.selection
        if sel is None or sel.event < 0:
            self.notify("Select a launch call or a GPU op first (enter)", severity="warning")
            return
        t = self.model.trace
        i = sel.event
        if int(t.kind[i]) == int(Kind.CUDA_API):
            targets = self.model.launched_by(i)
            if targets.size == 0:
                self.notify("This call queued no GPU work", severity="information")
                return
            self.select_event(int(targets[np.argmin(t.start_ns[targets])]))
        elif int(t.launch[i]) >= 0:
            self.select_event(int(t.launch[i]))
        else:
            self.notify("No flow from this event", severity="information")

    # ---- search ---------------------------------------------------------------
    def set_search(self, text: str) -> int:
        m = self.model
        self.search_text = text
        self.matches = m.search(text)
        self.match_order = self.matches[np.argsort(m.trace.start_ns[self.matches], kind="stable")]
        self._changed(viewport=False)
        if self.matches.size:
            self.action_next_match()
        return int(self.matches.size)

    def action_next_match(self) -> None:
        self._step_match(+1)

    def action_prev_match(self) -> None:
        self._step_match(-1)

    def _step_match(self, direction: int) -> None:
        order = self.match_order
        if order.size == 0:
            self.notify("No search matches (press / to search)", severity="information")
            return
        starts = self.model.trace.start_ns[order]
        sel = self.selection
        here = np.flatnonzero(order == sel.event) if sel is not None and sel.event >= 0 else np.empty(0, np.int64)
        if here.size:
            k = int(here[0]) + direction
        else:
            k = int(np.searchsorted(starts, self.cursor_ns, "left" if direction > 0 else "right"))
            k = k if direction > 0 else k - 1
        self.show_event(int(order[k % order.size]))  # zoomed to the match, not only scrolled to it

    def match_total_ns(self) -> int:
        """Summed duration of the search matches (what the header and the search notice report).

        GPU annotations are left out of the sum: they mirror a CPU range on a stream (``nccl:all_reduce``
        twice), so counting both gave totals longer than the window (issue 19 item 8). They still match.
        """
        t = self.model.trace
        m = self.matches[t.kind[self.matches] != int(Kind.GPU_ANNOTATION)]
        return int((t.end_ns[m] - t.start_ns[m]).sum())
