"""The gaplens Textual app: loads a trace in a worker, then shows header, ruler, timeline, details, footer.

``make_app`` is the one factory used by the CLI, the Pilot tests and the snapshot tests.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult, SystemCommand
from textual.containers import Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Label, ProgressBar, Static

from loaders import TraceError, load
from loaders.model import Trace, clean_name
from tui.details import Details
from tui.keys import KEYS
from tui.readings import compute
from tui.screens.help import HelpScreen
from tui.screens.prompts import PhaseScreen, SearchScreen
from tui.timeline import SelectionChanged, Timeline, ViewportChanged
from tui.viewmodel import TimelineModel, build_model, with_readings
from tui.viewport import Viewport, ruler_text


@dataclass
class LoadProgress(Message):
    stage: str
    fraction: float


@dataclass
class ModelReady(Message):
    model: TimelineModel
    final: bool  # readings (gaps, phases) are attached


@dataclass
class LoadFailed(Message):
    error: str


class Ruler(Static):
    """Tick labels over the timeline, in the unit that suits the zoom."""

    def show(self, vp: Viewport, gutter: int) -> None:
        self.update(Text(" " * gutter + ruler_text(vp), no_wrap=True, overflow="crop"))


class GaplensApp(App[int]):
    CSS_PATH = "app.tcss"
    TITLE = "gaplens"

    def __init__(self, source: str | Trace, mono: bool | None = None) -> None:
        super().__init__()
        self.source = source
        self.mono = bool(os.environ.get("NO_COLOR")) if mono is None else mono
        self.model: TimelineModel | None = None
        self.error: str | None = None
        self.last_search = ""

    # ---- layout ---------------------------------------------------------------
    def compose(self) -> ComposeResult:
        name = self.source if isinstance(self.source, str) else self.source.meta.path
        yield Static(Text(f"gaplens · {clean_name(os.path.basename(name or 'trace'))} · loading…"), id="header")
        with Vertical(id="loading"):
            yield Label("Reading the trace…", id="stage")
            yield ProgressBar(total=1.0, show_eta=False, id="progress")
        yield Ruler(id="ruler")
        yield Details(id="details")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#ruler").display = False
        self.query_one(Details).display = False
        self.load_trace()

    # ---- loading (worker thread; talks to the UI only through messages) -------
    @work(thread=True, exclusive=True, group="load")
    def load_trace(self) -> None:
        last = [0.0]

        def progress(stage: str, fraction: float) -> None:
            now = time.monotonic()
            if now - last[0] >= 0.25 or fraction >= 1.0:  # batch updates, do not flood the UI
                last[0] = now
                self.post_message(LoadProgress(stage, fraction))

        try:
            trace = self.source if isinstance(self.source, Trace) else load(self.source, progress)
            self.post_message(LoadProgress("indexing", 1.0))
            model = build_model(trace)
        except TraceError as exc:
            self.post_message(LoadFailed(str(exc)))
            return
        except Exception as exc:  # an internal failure is reported, not raised through the UI
            self.post_message(LoadFailed(f"internal error: {type(exc).__name__}: {exc}"))
            return
        self.post_message(ModelReady(model, final=False))
        try:
            self.post_message(ModelReady(with_readings(model, compute(trace)), final=True))
        except Exception as exc:
            self.post_message(LoadFailed(f"internal error in the readings: {type(exc).__name__}: {exc}"))

    def on_load_progress(self, msg: LoadProgress) -> None:
        if self.model is not None:
            return
        self.query_one("#stage", Label).update(Text(f"{msg.stage}…"))
        self.query_one("#progress", ProgressBar).update(progress=msg.fraction)

    def on_load_failed(self, msg: LoadFailed) -> None:
        self.error = msg.error
        code = 1 if msg.error.startswith("internal error") else 2
        self.exit(code, return_code=code)

    def on_model_ready(self, msg: ModelReady) -> None:
        self.model = msg.model
        timelines = self.query(Timeline)
        if timelines:
            timelines.first().set_model(msg.model)
        else:
            self.query_one("#loading").remove()
            self.query_one("#ruler").display = True
            timeline = Timeline(msg.model, mono=self.mono, id="timeline")
            self.mount(timeline, after=self.query_one("#ruler"))
            timeline.focus()
        self._update_header()

    # ---- reacting to the timeline --------------------------------------------
    @property
    def timeline(self) -> Timeline:
        return self.query_one(Timeline)

    def on_viewport_changed(self, msg: ViewportChanged) -> None:
        self.query_one(Ruler).show(msg.viewport, self.timeline.gutter)
        self._update_header()

    def on_selection_changed(self, msg: SelectionChanged) -> None:
        details = self.query_one(Details)
        details.show(self.timeline.model, msg.selection)
        details.display = msg.selection is not None

    def _update_header(self) -> None:
        if self.model is None:
            return
        tl = self.query(Timeline)
        phase = tl.first().phase if tl else None
        text = self.model.header(phase)
        if tl:
            vp = tl.first().viewport
            text += f" · view {ruler_span(vp)}"
        self.query_one("#header", Static).update(Text(text, no_wrap=True, overflow="ellipsis"))

    # ---- app-level actions ------------------------------------------------------
    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_toggle_details(self) -> None:
        details = self.query_one(Details)
        details.display = not details.display

    def action_search(self) -> None:
        if self.model is None:
            return

        def done(text: str | None) -> None:
            if text is None:
                return
            self.last_search = text
            n = self.timeline.set_search(text)
            self.notify(f"{n:,} events match {text!r}" if n else f"nothing matches {text!r}")

        self.push_screen(SearchScreen(self.last_search), done)

    def action_phase(self) -> None:
        if self.model is None:
            return
        phases = self.model.readings.phases
        if not phases:
            self.notify("No phases (no annotations in this trace, or still analysing)", severity="warning")
            return

        def done(k: int | None) -> None:
            if k is None:
                return
            tl = self.timeline
            tl.phase = None if k < 0 else phases[k]
            lo, hi = tl.bounds()
            tl.set_viewport(Viewport.fit(lo, hi, tl.cols))

        self.push_screen(PhaseScreen(phases), done)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """The palette lists every action of the viewer, with its keys."""
        yield from super().get_system_commands(screen)
        if self.model is None:
            return
        for keys, action, desc, _ in KEYS:
            target = action.removeprefix("app.")
            runner = self.run_action if action.startswith("app.") else self.timeline.run_action
            yield SystemCommand(f"{desc}", f"keys: {keys.replace(',', ' ')}", _bind(runner, target))


def _bind(runner, action: str):
    return lambda: runner(action)


def ruler_span(vp: Viewport) -> str:
    from analysis.units import fmt_ns

    return f"{fmt_ns(vp.span_ns)} ({fmt_ns(vp.ns_per_col)}/col)"


def make_app(path_or_trace: str | Trace, mono: bool | None = None) -> GaplensApp:
    """The app for a trace path (loaded in a worker) or an already loaded Trace."""
    return GaplensApp(path_or_trace, mono=mono)


def run_app(path: str) -> int:
    """Run the viewer; the exit status follows the CLI contract (2: unusable input)."""
    app = make_app(path)
    code = app.run()
    if app.error:
        print(f"gaplens: {app.error}", file=sys.stderr)
    return int(code or 0)
