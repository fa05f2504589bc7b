"""The lane model's vocabulary in one import: what every loader fills and every reading consumes.

Its parts, each in its own module: ``kinds`` (``Kind``, ``LaneKind`` and their groups), ``meta``
(``Lane``, ``Device``, ``Meta``), ``trace`` (``Trace``: the event columns and their row queries) and
``errors`` (``TraceError``). Building a Trace is ``loaders.build`` (depth rows: ``loaders.rows``).

Why a module of names: the readings, the viewer, the store and the tests (over a hundred modules)
speak this vocabulary; they import it from here and need not know which part holds which name.
The loaders' own modules import from the parts, so nothing here stands between them.
"""

from __future__ import annotations

from gaplens.loaders.errors import TraceError
from gaplens.loaders.kinds import CPU_KINDS, GPU_LANE_KINDS, GPU_WORK_KINDS, MEMCPY_KINDS, Kind, LaneKind
from gaplens.loaders.meta import FORMAT_NAMES, Device, Lane, Meta
from gaplens.loaders.text import clean_text
from gaplens.loaders.trace import Trace

__all__ = [
    "CPU_KINDS",
    "FORMAT_NAMES",
    "GPU_LANE_KINDS",
    "GPU_WORK_KINDS",
    "MEMCPY_KINDS",
    "Device",
    "Kind",
    "Lane",
    "LaneKind",
    "Meta",
    "Trace",
    "TraceError",
    "clean_name",
]

#: The one sanitiser (``loaders.text``), under the name the viewer has always used.
clean_name = clean_text
