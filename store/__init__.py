"""Everything that touches disk besides reading the input.

The trace cache, kept readings, the notes store and export writers.

The loaders and the readings never reach disk on their own: ``install`` hands them the trace cache
(``loaders.use_cache``), the keeper of readings (``analysis.memo.use_keeper``) and the reader of the
user's GPU-spec file (``analysis.floor.gpuspecs.use_user_rows``). The CLI, the viewer and the public
API call it where they open a trace.
"""

from __future__ import annotations


def install() -> None:
    """Let ``load`` use the trace cache, ``@per_trace`` readings be kept with its entries and the floor read
    the user's GPU rows (idempotent)."""
    from gaplens.analysis import memo
    from gaplens.analysis.floor import gpuspecs as specs
    from gaplens.loaders import use_cache
    from gaplens.store import cache, gpuspecs, readings

    use_cache(cache)
    memo.use_keeper(readings)
    specs.use_user_rows(gpuspecs.load_user_specs)
