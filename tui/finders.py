"""The viewer's finders: statistics (T), lists of blank regions and smells (L), go-to-time (t), what-if (W).

A mixin of the app, like ``ProtocolApp``: each action opens a screen from ``tui.screens``
and hands what the user picked to the timeline (``tui.jumps``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

# The screens (and the smells behind the lists) are imported when first opened, not with the app:
# every warm open would pay ~25 ms for screens it may never show.
if TYPE_CHECKING:
    from textual.app import App

    from gaplens.analysis.smells import Finding
    from gaplens.tui.screens.lists import Pick
    from gaplens.tui.screens.whatif import StepPick
    from gaplens.tui.timeline import Timeline
    from gaplens.tui.viewmodel import TimelineModel

    _Host = App[int]
else:
    _Host = object


class FinderApp(_Host):
    """Actions bound in ``tui.keys``: ``app.stats``, ``app.lists``, ``app.goto_time``, ``app.whatif``."""

    model: TimelineModel | None
    analysing: bool
    _findings: tuple[int, list[Finding]] | None = None  # (id of the trace, its smells)

    if TYPE_CHECKING:

        @property
        def timeline(self) -> Timeline: ...

    def action_stats(self) -> None:
        from gaplens.tui.screens.stats import StatsScreen

        if self.model is None:
            return

        def picked(i: int | None) -> None:
            if i is not None:
                self.timeline.show_event(i)

        self.push_screen(StatsScreen(self.model.trace), picked)

    def action_lists(self) -> None:
        from gaplens.tui.screens.lists import ListsScreen

        model = self.model
        if model is None:
            return
        if self.analysing:
            self.notify("Still analysing the blank regions (see the header): try again in a moment", severity="warning")
            return
        trace = model.trace
        cached = self._findings[1] if self._findings is not None and self._findings[0] == id(trace) else None
        screen = ListsScreen(trace, model.readings.gaps, cached)

        def picked(pick: Pick | None) -> None:
            if screen.findings is not None:  # computed while the screen was open: keep them
                self._findings = (id(trace), screen.findings)
            if pick is None:
                return
            if pick.kind == "gap":
                self.timeline.select_gap(model.readings.gaps[pick.index], frame=True)
            elif screen.findings is not None:
                self.timeline.select_finding(screen.findings[pick.index])

        self.push_screen(screen, picked)

    def action_goto_time(self) -> None:
        from gaplens.tui.screens.goto import TimeScreen

        if self.model is None:
            return

        def picked(t_ns: int | None) -> None:
            if t_ns is not None:
                self.timeline.go_to(t_ns)

        self.push_screen(TimeScreen(), picked)

    def action_whatif(self) -> None:
        """``W`` (and step 6 of the walk): predicted step times after a change; enter shows a step."""
        from gaplens.tui.screens.whatif import WhatIfScreen

        if self.model is None:
            return

        def picked(pick: StepPick | None) -> None:
            if pick is not None:
                self.timeline.show_step(pick.name, pick.host_ns, pick.span_ns)

        self.push_screen(WhatIfScreen(self.model.trace), picked)
