"""Per-trace memoisation: a reading computed once while its Trace lives.

Keyed by ``id(trace)`` with a weak reference to tell a live trace from a new one that
reused the id. Results are shared: callers must not modify them. A trace that came from
the cache also keeps its readings there (``analysis.persist``), so a reopen recomputes none.
"""

from __future__ import annotations

import functools
import time
import weakref
from collections.abc import Callable
from typing import TypeVar

from gaplens.loaders.model import Trace

R = TypeVar("R")
_MEMOS: list[dict] = []


def per_trace(fn: Callable[[Trace], R]) -> Callable[[Trace], R]:
    from gaplens.analysis import persist

    memo: dict[int, tuple[weakref.ref, R]] = {}
    _MEMOS.append(memo)
    reading = f"{fn.__module__}.{fn.__qualname__}"

    @functools.wraps(fn)
    def wrapper(trace: Trace) -> R:
        hit = memo.get(id(trace))
        if hit is not None and hit[0]() is trace:
            return hit[1]
        found, result = persist.recall(trace, reading)
        if not found:
            t0 = time.perf_counter()
            result = fn(trace)
            persist.keep(trace, reading, result, time.perf_counter() - t0)
        memo[id(trace)] = (weakref.ref(trace), result)
        return result

    return wrapper


def clear() -> None:
    """Forget every memoised reading (benchmarks time cold runs)."""
    for memo in _MEMOS:
        memo.clear()
