"""Per-trace memoisation: a reading computed once while its Trace lives.

Keyed by ``id(trace)`` with a weak reference to tell a live trace from a new one that
reused the id; a reading is dropped when its trace goes. Results are shared: callers must not
modify them. Where the app or the CLI installed a keeper (``use_keeper``; ``gaplens.store.readings``),
a trace that came from the cache also keeps its readings there, so a reopen recomputes none: the
readings never touch disk themselves.
"""

from __future__ import annotations

import functools
import time
import weakref
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, cast

from gaplens.loaders.model import Trace

R = TypeVar("R")
_MEMOS: list[dict] = []


class Keeper(Protocol):
    """Readings kept beyond the process (``gaplens.store.readings``)."""

    def recall(self, trace: Trace, reading: str) -> tuple[bool, Any]: ...

    def keep(self, trace: Trace, reading: str, value: Any, compute_s: float) -> object: ...


_KEEPER: Keeper | None = None


def use_keeper(keeper: Keeper | None) -> None:
    """Install (or, with None, remove) where computed readings are kept and recalled."""
    global _KEEPER
    _KEEPER = keeper


def per_trace(fn: Callable[[Trace], R]) -> Callable[[Trace], R]:
    memo: dict[int, tuple[weakref.ref, R]] = {}
    _MEMOS.append(memo)
    reading = f"{fn.__module__}.{fn.__qualname__}"

    @functools.wraps(fn)
    def wrapper(trace: Trace) -> R:
        hit = memo.get(id(trace))
        if hit is not None and hit[0]() is trace:
            return hit[1]
        keeper = _KEEPER
        found, kept = keeper.recall(trace, reading) if keeper is not None else (False, None)
        if found:
            result: R = cast(R, kept)
        else:
            t0 = time.perf_counter()
            result = fn(trace)
            if keeper is not None:
                keeper.keep(trace, reading, result, time.perf_counter() - t0)
        key = id(trace)
        memo[key] = (weakref.ref(trace, functools.partial(_forget, memo, key)), result)
        return result

    return wrapper


def _forget(memo: dict, key: int, gone: weakref.ref) -> None:
    """The trace is gone: so is its reading (a reading may hold what the trace held, never the trace)."""
    hit = memo.get(key)
    if hit is not None and hit[0] is gone:
        del memo[key]


def clear() -> None:
    """Forget every memoised reading (benchmarks time cold runs)."""
    for memo in _MEMOS:
        memo.clear()
