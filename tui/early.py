"""An open's work started before the viewer's own imports.

Importing Textual and the app costs ~0.4 s of one core (0.7-1 s on a busy box), while the
cache hit, the view model and the kept readings (~0.2 s at 1M events) wait behind it. Much of
that work runs outside the GIL (file reads, Arrow, numpy), so ``EarlyOpen`` does it on a second
thread while the imports run, and the app's loading worker takes what is done instead of
redoing it. A cold open starts its parse here too (the parse threads are Arrow's, the imports
one Python thread): the worker relays its progress to the loading screen and raises its error,
so a failure is still reported in the one place that does. The readings of a cold open are
left to the worker, which computes them once the first frame is drawn.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gaplens.loaders.model import Trace
    from gaplens.tui.readings import Readings
    from gaplens.tui.viewmodel import TimelineModel


_PAUSED = {"gc": False}
#: How often the worker relays a cold parse's progress: the loading screen's own refresh is 0.25 s.
PROGRESS_POLL_S = 0.1


class Cancelled(Exception):
    """The viewer quit during the early parse: stop reading rather than keep the process busy."""


def start(path: str) -> EarlyOpen:
    """Begin opening ``path`` with the cyclic garbage collector paused until the readings are on screen.

    Start-up allocates hundreds of thousands of long-lived objects (modules, classes, Textual's
    styles, the trace's names), and the collector traversed them again and again: 40-80 ms of a
    warm open, and nothing it freed. ``started_up`` freezes what start-up built and resumes it. A
    cold open resumes it at once (the cache missed): a parse of seconds (minutes at 10M events)
    must not pile up cyclic garbage with nothing to collect it.
    """
    if gc.isenabled():
        gc.disable()
        _PAUSED["gc"] = True
    return EarlyOpen(path)


def started_up(freeze: bool = True) -> None:
    """The first screen with readings is up (or the open failed): resume the collector paused by ``start``,
    with what start-up built moved out of its way (``gc.freeze``: refcounting still frees it)."""
    if _PAUSED["gc"]:
        _PAUSED["gc"] = False
        if freeze:
            gc.freeze()
        gc.enable()


class EarlyOpen:
    """The trace from the cache, its view model and its readings, each set as it is ready."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.trace: Trace | None = None
        self.model: TimelineModel | None = None
        self.readings: Readings | None = None
        self.error: Exception | None = None  # what a cold parse raised, raised again by ``wait_trace``
        self.progress: tuple[str, float] | None = None  # a cold parse's last (stage, fraction)
        self.unstored = False  # a cold parse's trace, not yet written to the cache (``store``)
        self._cancelled = False
        self._stages = {name: threading.Event() for name in ("trace", "model", "readings")}
        threading.Thread(target=self._run, name="gaplens-early-open", daemon=True).start()

    def wait(self, stage: str) -> Any:
        """What ``stage`` produced (None when it missed or failed: the caller does it itself)."""
        self._stages[stage].wait()
        return getattr(self, stage)

    def settled(self, stage: str, timeout: float) -> bool:
        """Whether ``stage`` is done (produced or given up) within ``timeout`` seconds."""
        return self._stages[stage].wait(timeout)

    def store(self) -> None:
        """Write a cold parse's trace to the cache (once; best effort, as every cache write)."""
        if self.unstored and self.trace is not None:
            self.unstored = False
            from gaplens.store import cache

            cache.store(self.path, self.trace)

    def wait_trace(self, report: Callable[[str, float], None]) -> Trace | None:
        """The trace, from the cache or parsed here (None when this thread did not get that far: the caller
        loads it). A parse's progress goes to ``report`` while it runs; whatever ``report`` raises (the viewer
        quit) cancels the parse and is raised again; a parse's own error is raised as the loader raised it."""
        seen = None
        try:
            while not self._stages["trace"].wait(PROGRESS_POLL_S):
                if self.progress is not None and self.progress != seen:
                    seen = self.progress
                    report(*seen)
        except BaseException:
            self._cancelled = True
            raise
        if self.error is not None:
            raise self.error
        return self.trace

    def _report(self, stage: str, fraction: float) -> None:
        if self._cancelled:
            raise Cancelled
        self.progress = (stage, fraction)

    def _run(self) -> None:
        try:
            from gaplens import store
            from gaplens.store import cache

            store.install()
            trace, damaged = cache.lookup_checked(self.path)  # a damaged entry: rebuilt, and said
            if trace is None:
                started_up(freeze=False)  # a cold open: the parse needs the collector
                self._parse(damaged)
                return
            trace.meta.path = self.path  # as the user spelled it, like ``loaders.load``
            self.trace = trace
            self._stages["trace"].set()
            from gaplens.tui.viewmodel import build_model

            self.model = build_model(trace)
            self._stages["model"].set()
            from gaplens.tui.readings import compute

            self.readings = compute(trace)
        except Exception:  # the worker redoes the stage and reports what fails
            pass
        finally:
            for event in self._stages.values():
                event.set()

    def _parse(self, damaged: str) -> None:
        """A cold open: parse the trace and build its view model; an error is kept for the worker. The trace
        is cached by ``store``, once the first frame is up: writing the entry of a 1.19M-event trace took
        ~0.15 s, and the timeline waited for it."""
        from gaplens.loaders import load

        try:
            self.trace = load(self.path, self._report, use_cache=False)
        except Cancelled:
            return
        except Exception as exc:  # the worker raises it, as if it had parsed the file itself
            self.error = exc
            return
        if damaged:  # as ``loaders.load`` says it
            self.trace.meta.warnings.append(damaged)
        self.unstored = True
        self._stages["trace"].set()
        from gaplens.tui.viewmodel import build_model

        self.model = build_model(self.trace)
