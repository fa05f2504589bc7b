"""File access shared by the loaders: reads that fail with one-line errors, and the cache folder."""

from __future__ import annotations

import os
from pathlib import Path

from loaders.model import TraceError

GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"


def read_head(path: str, size: int = -1) -> bytes:
    """The first ``size`` bytes of a file (all when -1), OS errors turned into TraceErrors."""
    try:
        with open(path, "rb") as fh:
            return fh.read(size)
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TraceError(f"{path}: is a directory, not a trace file") from None
    except PermissionError:
        raise TraceError(f"{path}: permission denied") from None
    except OSError as exc:
        raise TraceError(f"{path}: cannot read ({exc.strerror})") from None


def cache_dir() -> Path:
    """``$GAPLENS_CACHE_DIR``, else ``$XDG_CACHE_HOME/gaplens``, else ``~/.cache/gaplens``."""
    explicit = os.environ.get("GAPLENS_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "gaplens"
