"""Everything that touches disk besides reading the input.

The trace cache, kept readings, the notes store and export writers.

The loaders and the readings never reach disk on their own: ``install`` hands them the trace cache
(``loaders.use_cache``) and the keeper of readings (``analysis.memo.use_keeper``). The CLI, the
viewer and the public API call it where they open a trace.
"""

from __future__ import annotations


def install() -> None:
    """Let ``load`` use the trace cache and ``@per_trace`` readings be kept with its entries (idempotent)."""
    from gaplens.analysis import memo
    from gaplens.loaders import use_cache
    from gaplens.store import cache, readings

    use_cache(cache)
    memo.use_keeper(readings)
