"""gaplens: a terminal viewer for GPU profiler timelines, and the readings behind it.

The repository keeps the product's layout (``loaders/``, ``analysis/``, ``tui/``, ``samples/`` at the
top); the build backend installs them under this one import name (``gaplens.loaders`` and so on).

As a library (``gaplens.api``)::

    t = gaplens.load("trace.json.gz")      # a Trace: columnar events, lanes, metadata
    t.events()                             # pandas DataFrame of every event
    gaplens.gaps(t), gaplens.smells(t), gaplens.phases(t), gaplens.kernels_summary(t)

Importing gaplens loads neither pandas nor the viewer (Textual).
"""

from gaplens.api import (
    Trace,
    TraceError,
    api_summary,
    gaps,
    kernels_summary,
    load,
    phases,
    ranges_summary,
    smells,
    summary,
)

__all__ = [
    "Trace",
    "TraceError",
    "api_summary",
    "gaps",
    "kernels_summary",
    "load",
    "phases",
    "ranges_summary",
    "smells",
    "summary",
]
