"""A warm open's work started before the viewer's own imports.

Importing Textual and the app costs a warm open ~0.4 s of one core, while the cache hit,
the view model and the kept readings (~0.2 s at 1M events) wait behind it. Much of that
work runs outside the GIL (file reads, Arrow, numpy), so ``EarlyOpen`` does it on a second
thread while the imports run, and the app's loading worker takes what is done instead of
redoing it. It only ever serves a cache hit: a cold open goes through the worker, which
reports progress and errors as usual; anything that fails here is simply left for the
worker to redo, so it reports the failure in the one place that does.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gaplens.loaders.model import Trace
    from gaplens.tui.readings import Readings
    from gaplens.tui.viewmodel import TimelineModel


class EarlyOpen:
    """The trace from the cache, its view model and its readings, each set as it is ready."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.trace: Trace | None = None
        self.model: TimelineModel | None = None
        self.readings: Readings | None = None
        self._stages = {name: threading.Event() for name in ("trace", "model", "readings")}
        threading.Thread(target=self._run, name="gaplens-early-open", daemon=True).start()

    def wait(self, stage: str) -> Any:
        """What ``stage`` produced (None when it missed or failed: the caller does it itself)."""
        self._stages[stage].wait()
        return getattr(self, stage)

    def _run(self) -> None:
        try:
            from gaplens.loaders import cache

            trace, _damaged = cache.lookup_checked(self.path)  # a damaged entry: the worker rebuilds and says so
            if trace is None:
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
