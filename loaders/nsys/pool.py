"""The threads of one export's read: a read-only connection per worker thread, the worker pool, and the
tally of values that were not integers or out of range.

The integer-column reads (``nsys.pages`` from the pages, ``nsys.chunks`` through SQL) run on these
threads; ``nsys.sql.Reader`` chooses between them for each table.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gaplens.loaders.nsys.files import connect

#: Worker threads of one read (sqlite3 releases the GIL while stepping, numpy while decoding pages).
WORKERS = 2


class Pool:
    """Connections per worker thread and the worker pool of one export's read."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self.bad: dict[str, int] = {}  # values that were not integers or out of range, per table

    def con(self) -> sqlite3.Connection:
        c = getattr(self._local, "con", None)
        if c is None:
            c = connect(self.uri)
            self._local.con = c
            with self._lock:
                self._all.append(c)
        return c

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        for c in self._all:
            c.close()
        self._all.clear()

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on a worker thread, as a future; called now when there is one worker."""
        if WORKERS < 2:
            return _Done(fn, args)
        if self._pool is None:  # one pool (and one connection per worker) for the whole load
            self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="nsys-read")
        return self._pool.submit(fn, *args)

    def add_bad(self, table: str, n: int) -> None:
        """Count ``n`` values of ``table`` that were not integers or out of range (thread-safe)."""
        if n:
            with self._lock:
                self.bad[table] = self.bad.get(table, 0) + n


class _Done:
    """A call made now, with a future's ``result()`` (the single-thread path)."""

    def __init__(self, fn: Callable[..., Any], args: tuple) -> None:
        try:
            self._value, self._error = fn(*args), None
        except Exception as exc:  # re-raised by result(), as a future would
            self._value, self._error = None, exc

    def result(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._value
