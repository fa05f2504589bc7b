"""The gaplens Textual app: loads a trace in a worker, then shows header, ruler, timeline, details, footer.

``make_app`` is the one factory used by the CLI, the Pilot tests and the snapshot tests.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer, Label, ProgressBar, Static
from textual.worker import get_current_worker

from gaplens import store
from gaplens.analysis.units import fmt_ns
from gaplens.loaders import TraceError, load
from gaplens.loaders.model import Trace, clean_name
from gaplens.loaders.text import shorten
from gaplens.tui.details import Details
from gaplens.tui.early import EarlyOpen, started_up
from gaplens.tui.finders import FinderApp
from gaplens.tui.keys import KEYS, key_names
from gaplens.tui.protocol import ProtocolApp
from gaplens.tui.readings import compute
from gaplens.tui.screens.help import HelpScreen
from gaplens.tui.screens.prompts import PhaseScreen, SearchScreen
from gaplens.tui.timeline import SelectionChanged, Timeline, ViewportChanged
from gaplens.tui.viewmodel import TimelineModel, build_model, with_readings
from gaplens.tui.viewport import Viewport, ruler_text

#: The readings wait for the first frame at most this long (a screen that never draws, a modal on top).
FIRST_FRAME_WAIT_S = 2.0
#: How long a warm open's timeline waits for the readings the early thread takes from the cache (they
#: follow its view model by 0.03-0.1 s at 1M events): drawn alone first, the timeline is drawn twice and
#: its first draw competes with them for the GIL. A cold open's, computed for seconds, are not waited for.
WARM_READINGS_WAIT_S = 0.25


class _Quit(Exception):
    """Raised from the progress callback to abandon a load after the app quit."""


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
    """Tick labels over the timeline, in the unit that suits the zoom, and the markers A/B."""

    def show(self, vp: Viewport, gutter: int, markers: dict[str, float] | None = None) -> None:
        chars = list(ruler_text(vp))
        for name, t in (markers or {}).items():
            col = vp.col_of(t)
            if 0 <= col < len(chars):
                chars[col] = name.upper()
        self.update(Text(" " * gutter + "".join(chars), no_wrap=True, overflow="crop"))


class GaplensApp(FinderApp, ProtocolApp):
    CSS_PATH = "app.tcss"
    TITLE = "gaplens"
    # The timeline binds q too; this one also works while a big trace is still loading.
    BINDINGS: ClassVar = [Binding("q", "quit", "quit", show=False)]

    def __init__(
        self, source: str | Trace | TimelineModel, mono: bool | None = None, early: EarlyOpen | None = None
    ) -> None:
        # NO_COLOR (set at all, as Textual reads it) means no colour: Textual's NoColor filter, which it
        # picks for ANSI colour; its default for truecolor themes, Monochrome, still sends greys.
        no_color = "NO_COLOR" in os.environ
        super().__init__(ansi_color=True if no_color else None)
        self.source = source
        self.early = early  # a warm open's cache hit, model and readings, begun before these imports
        self.mono = no_color if mono is None else mono
        self.model: TimelineModel | None = None
        self.error: str | None = None
        self.last_search = ""
        self.analysing = False
        self.loaded = False  # the loading worker has finished (model and readings, or failure)
        self._first_drawn = threading.Event()  # the first frame with a timeline is on screen

    # ---- layout ---------------------------------------------------------------
    def compose(self) -> ComposeResult:
        src = self.source
        name = src if isinstance(src, str) else (src.trace if isinstance(src, TimelineModel) else src).meta.path
        # Widgets are kept by reference: messages can arrive while a modal screen is on top.
        title = clean_name(os.path.basename(name or "trace"))
        self._header = Static(Text(f"gaplens · {title} · loading…"), id="header")
        self._stage = Label("Reading the trace…", id="stage")
        self._progress = ProgressBar(total=1.0, show_eta=False, id="progress")
        self._loading = Vertical(self._stage, self._progress, id="loading")
        self._ruler = Ruler(id="ruler")
        self._details = Details(id="details")
        self._hint = Static(id="hint")
        self._hint_timer: Timer | None = None
        self._timeline: Timeline | None = None
        yield self._header
        yield self._loading
        yield self._ruler
        yield self._details
        yield self._hint
        yield Footer()

    def on_mount(self) -> None:
        self._ruler.display = False
        self._details.display = False
        self.load_trace()

    # ---- loading (worker thread; talks to the UI only through messages) -------
    @work(thread=True, exclusive=True, group="load")
    def load_trace(self) -> None:
        try:
            self._load_trace()
        finally:
            self.loaded = True

    def _load_trace(self) -> None:
        last = [0.0]
        worker = get_current_worker()

        def progress(stage: str, fraction: float) -> None:
            if worker.is_cancelled:  # the app quit: stop reading rather than keep the process alive
                raise _Quit
            now = time.monotonic()
            if now - last[0] >= 0.25 or fraction >= 1.0:  # batch updates, do not flood the UI
                last[0] = now
                self.post_message(LoadProgress(stage, fraction))

        if isinstance(self.source, TimelineModel):  # benchmarks and tests that built it already
            model = self.source
            ready = model.readings.analysed or bool(model.readings.gaps or model.readings.phases)
            self.post_message(ModelReady(model, final=ready))
            if ready:
                return
            trace = model.trace
        try:
            if not isinstance(self.source, TimelineModel):
                early = self.early
                got: Trace | None = early.wait_trace(progress) if early is not None else None
                if got is None:
                    store.install()
                    got = self.source if isinstance(self.source, Trace) else load(self.source, progress)
                    early = None  # its model and readings, if any, are not this trace's
                trace = got
                self.post_message(LoadProgress("indexing", 1.0))
                early_model = early.wait("model") if early is not None else None
                model = early_model if early_model is not None else build_model(trace)
        except TraceError as exc:
            self.post_message(LoadFailed(str(exc)))
            return
        except Exception as exc:  # an internal failure is reported, not raised through the UI
            if not worker.is_cancelled:
                self.post_message(LoadFailed(f"internal error: {type(exc).__name__}: {shorten(exc, 300)}"))
            return
        early = self.early if self.early is not None and self.early.trace is trace else None
        if early is not None and early.settled("readings", WARM_READINGS_WAIT_S) and early.readings is not None:
            # A warm open's kept readings: the timeline goes up once, with them.
            self.post_message(ModelReady(with_readings(model, early.readings), final=True))
            return
        if not isinstance(self.source, TimelineModel):
            self.post_message(ModelReady(model, final=False))
        if early is not None and early.unstored:
            # A cold open's cache entry, written once the timeline is up (at once when the viewer quit).
            waited = 0.0
            while not worker.is_cancelled and waited < FIRST_FRAME_WAIT_S and not self._first_drawn.wait(0.05):
                waited += 0.05
            early.store()
        if worker.is_cancelled:  # quit before the readings: skip seconds of work nobody will see
            return
        try:
            readings = early.wait("readings") if early is not None else None
            if readings is None:
                # Computed now, they would compete with the first frame's mount and draw for the GIL:
                # the screen comes first, the readings stream in behind it.
                self._first_drawn.wait(FIRST_FRAME_WAIT_S)
                readings = compute(trace)
            self.post_message(ModelReady(with_readings(model, readings), final=True))
        except Exception as exc:
            self.post_message(LoadFailed(f"internal error in the readings: {type(exc).__name__}: {shorten(exc, 300)}"))

    def on_load_progress(self, msg: LoadProgress) -> None:
        if self.model is not None:
            return
        self._stage.update(Text(f"{msg.stage}…"))
        self._progress.update(progress=msg.fraction)

    def on_load_failed(self, msg: LoadFailed) -> None:
        started_up()
        self.error = msg.error
        code = 1 if msg.error.startswith("internal error") else 2
        self.exit(code, return_code=code)

    def on_model_ready(self, msg: ModelReady) -> None:
        self.model = msg.model
        self.analysing = not msg.final
        if msg.final:
            self.call_after_refresh(started_up)  # the readings are drawn: resume the paused collector
        self.call_after_refresh(self._first_drawn.set)
        if self._timeline is not None:
            self._timeline.set_model(msg.model)
        else:
            self._loading.remove()
            self._ruler.display = True
            self._timeline = Timeline(msg.model, mono=self.mono, id="timeline")
            self.mount(self._timeline, after=self._ruler)
            self._timeline.focus()
            # What the loader dropped or could not find (truncated file, no GPU activity) must not pass silently.
            for warning in msg.model.trace.meta.warnings:
                self.notify(clean_name(warning), title="warning", severity="warning", timeout=15, markup=False)
        self._update_header()

    # ---- reacting to the timeline --------------------------------------------
    @property
    def timeline(self) -> Timeline:
        assert self._timeline is not None, "no trace loaded yet"
        return self._timeline

    def on_viewport_changed(self, msg: ViewportChanged) -> None:
        if self._timeline is not None:
            self._ruler.show(msg.viewport, self._timeline.label_width, self._timeline.markers)
            self._update_header()

    def on_selection_changed(self, msg: SelectionChanged) -> None:
        if self._timeline is not None:
            self._details.show(self._timeline.model, msg.selection)
            self._details.display = msg.selection is not None

    def _update_header(self) -> None:
        if self.model is None:
            return
        tl = self._timeline
        parts = self.model.header_parts(tl.phase if tl else None)
        if tl is not None:
            parts.append((2, f"view {ruler_span(tl.viewport)}"))
            if tl.search_text:
                shown = clean_name(tl.search_text)
                parts.append((3, f"/{shown} {tl.matches.size:,} · {fmt_ns(tl.match_total_ns())}"))
            if tl.markers:
                parts.append((4, tl.marker_text()))
        if self.analysing:  # blank regions and phases are still being computed (seconds on 1M+ events)
            parts.append((6, "analysing gaps…"))
        text = fit_parts(parts, self._header.content_region.width or self.size.width - 2)
        self._header.update(Text(text, no_wrap=True, overflow="ellipsis"))

    def show_hint(self, text: str, seconds: float = 10.0) -> None:
        """A one-line hint above the footer: it takes its own line (covers nothing) and goes after a while."""
        self._hint.update(Text(text, no_wrap=True, overflow="ellipsis"))
        self._hint.display = True
        if self._hint_timer is not None:
            self._hint_timer.stop()
        self._hint_timer = self.set_timer(seconds, self._hide_hint)

    def _hide_hint(self) -> None:
        self._hint.display = False

    # ---- app-level actions ------------------------------------------------------
    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_roofline(self) -> None:
        """``F``: op families against the hardware floor (issue 20); enter shows one on the timeline."""
        from gaplens.tui.screens.roofline import RooflineScreen

        if self.model is None:
            return

        def picked(i: int | None) -> None:
            if i is not None:
                self.timeline.show_event(i)

        self.push_screen(RooflineScreen(self.model.trace), picked)

    def action_toggle_details(self) -> None:
        if not self._details.display and self._timeline is not None:
            self._details.show(self._timeline.model, self._timeline.selection)
        self._details.display = not self._details.display

    def action_search(self) -> None:
        if self.model is None:
            return

        def done(text: str | None) -> None:
            if text is None:
                return
            self.last_search = text
            n = self.timeline.set_search(text)
            shown = clean_name(text)  # typed text, but never markup or control codes
            total = fmt_ns(self.timeline.match_total_ns())
            found = f"{n:,} events match {shown!r}, {total} in total; n/N step through them, zoomed to each"
            # On the status line, not a toast: a toast would cover the details of the first match.
            self.show_hint(found if n else f"nothing matches {shown!r}", 6.0)
            self._update_header()

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

        self.push_screen(PhaseScreen(phases, self.model.trace.meta.processes), done)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """The palette lists every action of the viewer, with its keys."""
        yield from super().get_system_commands(screen)
        if self.model is None:
            return
        for keys, action, desc, _ in KEYS:
            target = action.removeprefix("app.")
            runner = self.run_action if action.startswith("app.") else self.timeline.run_action
            yield SystemCommand(f"{desc}", f"keys: {key_names(keys)}", _bind(runner, target))


def _bind(runner, action: str):
    return lambda: runner(action)


def fit_parts(parts: list[tuple[int, str]], width: int, sep: str = " · ") -> str:
    """Join header items, dropping the least important until the line fits ``width`` cells."""
    keep = list(parts)
    while len(keep) > 1 and len(sep.join(t for _, t in keep)) > width:
        keep.remove(min(keep, key=lambda p: p[0]))
    return sep.join(t for _, t in keep)


def ruler_span(vp: Viewport) -> str:
    return f"{fmt_ns(vp.span_ns)} ({fmt_ns(vp.ns_per_col)}/col)"


def make_app(
    path_or_trace: str | Trace | TimelineModel, mono: bool | None = None, early: EarlyOpen | None = None
) -> GaplensApp:
    """The app for a trace path (loaded in a worker), a loaded Trace or a prepared view model."""
    return GaplensApp(path_or_trace, mono=mono, early=early)


def run_app(path: str, early: EarlyOpen | None = None) -> int:
    """Run the viewer; the exit status follows the CLI contract (2: unusable input)."""
    app = make_app(path, early=early)
    # Our own loop: asyncio.run would end by joining the loading thread (shutdown_default_executor).
    loop = asyncio.new_event_loop()
    try:
        code = int(app.run(loop=loop) or 0)
    finally:
        loop.close()  # does not wait for executor threads
    if app.error:
        print(f"gaplens: {shorten(app.error, 600)}", file=sys.stderr)
    if not app.loaded:
        # Quit mid-load or mid-analysis: the worker thread cannot be interrupted inside numpy or
        # SQLite, and interpreter exit would join it, seconds later. Nothing it does needs saving.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
