"""gaplens: a terminal viewer for GPU profiler timelines, and the readings behind it.

The repository keeps the product's layout (``loaders/``, ``analysis/``, ``tui/``, ``samples/`` at the
top); the build backend installs them under this one import name (``gaplens.loaders`` and so on).

As a library (``gaplens.api``)::

    t = gaplens.load("trace.json.gz")      # a Trace: columnar events, lanes, metadata
    t.events()                             # pandas DataFrame of every event
    gaplens.gaps(t), gaplens.smells(t), gaplens.phases(t), gaplens.kernels_summary(t)

Importing gaplens loads neither pandas nor the viewer (Textual).
"""

import os as _os

# Python started in a checkout (the repository root first on sys.path) finds this folder before the
# installed package, and it holds only the package's own modules: look for the layers beside it, as
# the build backend maps them (``loaders/`` → ``gaplens.loaders`` and so on). Installed, they are inside.
_here = _os.path.dirname(_os.path.abspath(__file__))
if not _os.path.isdir(_os.path.join(_here, "loaders")) and _os.path.isfile(
    _os.path.join(_here, _os.pardir, "loaders", "model.py")
):
    __path__.append(_os.path.dirname(_here))

from gaplens.api import *  # noqa: E402, F403  (after the path above; the API is gaplens.api's __all__)
from gaplens.api import __all__ as __all__  # noqa: E402
