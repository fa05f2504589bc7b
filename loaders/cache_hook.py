"""The hook through which the loaders reach a disk cache: one the store installs, never one they choose.

``gaplens.store.install`` hands in its cache (``use_cache``): it keeps built Traces, and the SQLite
unpacked from an nsys ``.sqlite.gz`` or exported from a ``.nsys-rep``. Without one (a library user
calling ``loaders.load``), nothing a load makes outlives it (``nsys.files.opened``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from gaplens.loaders.trace import Trace


class Sink(Protocol):
    """Where a ``Writer`` writes: a binary file, or the cache's checksumming wrapper around one."""

    def write(self, data: bytes, /) -> object: ...


#: Writes the bytes of an unpacked copy into the sink it is given; raises when the copy cannot be whole.
Writer = Callable[[Sink], object]


class TraceCache(Protocol):
    """Where built Traces and unpacked exports are kept between runs (``gaplens.store.cache``)."""

    def lookup_checked(self, path: str) -> tuple[Trace | None, str]: ...

    def store(self, path: str, trace: Trace) -> object: ...

    def unpacked(self, source: str, suffix: str, write: Writer) -> str:
        """The path of the copy ``write`` makes of ``source``: written once, reused while ``source``
        keeps its content."""
        ...


_CACHE: TraceCache | None = None


def use_cache(cache: TraceCache | None) -> None:
    """Install (or, with None, remove) the cache the loaders consult."""
    global _CACHE
    _CACHE = cache


def installed() -> TraceCache | None:
    """The cache installed, if any."""
    return _CACHE
