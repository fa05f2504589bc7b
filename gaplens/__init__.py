"""gaplens: a terminal viewer for GPU profiler timelines, and the readings behind it.

The repository keeps the product's layout (``loaders/``, ``analysis/``, ``tui/``, ``samples/`` at the
top); the build backend installs them under this one import name (``gaplens.loaders`` and so on).
"""
