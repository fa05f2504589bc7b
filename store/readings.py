"""Readings kept with the trace's cache entry, so reopening a trace recomputes none of them.

``memo.per_trace`` asks here before computing a reading and hands back what it computed.
Only a Trace that ``store.cache`` read or stored itself has a place to keep readings: one
file per reading in ``<entry>.readings/``, named after the function. A file is served only
when its header names the entry's token (a rebuilt entry has a new one), the digest of every
file of this package (the code that computed the reading), the Python/numpy versions and the
trace's shape, and when its payload's SHA-256 matches. Anything else (absent, stale, torn,
corrupt, unreadable, a symlink) is a miss: the reading is computed again and the file rewritten.
Writes are atomic. ``GAPLENS_READINGS_CACHE=0`` turns the whole thing off.

The payload is a pickle written and read with an allowlist: only builtin containers and
scalars, numpy arrays, dtypes and scalars, and classes defined in gaplens itself are
written or loaded (no functions), and the trace's own parts (the Trace, its columns, names,
lanes, meta) are written as references and resolved to the reopened Trace's.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import io
import os
import pickle
import platform
import re
import struct
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from gaplens.loaders.model import Trace
from gaplens.store import cache

ENV = "GAPLENS_READINGS_CACHE"
MAGIC = b"GLREAD1\n"
#: A reading computed faster than this is not kept: reading a file back costs about as much.
MIN_COMPUTE_S = 0.01
#: Largest payload kept for one reading: a bound on what one reading may add to the cache.
MAX_BYTES = 1 << 30
#: Bytes per second a kept reading is read back at (read, SHA-256, unpickle: the 42 MB critical-path graph
#: of a 1.26M-event trace unpickled in 109 ms on a loaded 2-core box): a reading whose payload would take
#: longer than half its compute time to read back is not kept.
READ_BACK_BYTES_PER_S = 300e6
#: Seconds to rebuild one object when a kept reading is read back, beside its bytes: 100k NVTX phases (8 MB,
#: 27 ms by bytes) took 0.2-0.6 s to read back on the 2-core box, about what computing them took, and a
#: per-device copy of them (14 ms to compute) as long again. A reading is kept only when its bytes and its
#: objects read back in under half its compute time.
READ_BACK_S_PER_OBJECT = 1e-6
_HEADER = struct.Struct("<I")  # length of the text header (token, code digest, reading, trace shape) after MAGIC
_NAME = re.compile(r"[^A-Za-z0-9_.]")

_BUILTIN_TYPES: frozenset[type] = frozenset(
    {type(None), bool, int, float, complex, str, bytes, bytearray, tuple, list, dict, set, frozenset, slice, range}
    | {pickle.PickleBuffer}
    | {collections.OrderedDict, collections.defaultdict, collections.deque, collections.Counter}
)
_NUMPY_GLOBALS = frozenset(
    {
        ("numpy", "dtype"),
        ("numpy", "ndarray"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"),
    }
)


def enabled() -> bool:
    return os.environ.get(ENV, "") != "0"


@functools.lru_cache(maxsize=1)
def code_stamp() -> str:
    """Digest of every file of the analysis package (names and bytes), and the versions that pickle."""
    from gaplens import analysis

    digest = hashlib.sha256()
    here = Path(analysis.__file__).resolve().parent
    for path in sorted(p for p in here.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(str(path.relative_to(here)).encode() + b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    digest.update(Path(__file__).read_bytes())  # how readings are pickled is part of what they are
    digest.update(f"{platform.python_version()} numpy {np.__version__}".encode())
    return digest.hexdigest()[:32]


def _inputs_stamp() -> str:
    """What readings read besides the trace and the code: the user's GPU spec rows (the experiment's
    floor branch reads them), by size and mtime, so adding or editing that file is a miss."""
    from gaplens.store.gpuspecs import default_spec_path

    try:
        st = default_spec_path().stat()
    except OSError:
        return "no-user-specs"
    return f"user-specs:{st.st_size}:{st.st_mtime_ns}"


def _shape(trace: Trace) -> str:
    """A cheap check that the Trace is the one stored: sizes and the first and last start."""
    first = int(trace.start_ns[0]) if len(trace) else 0
    last = int(trace.start_ns[-1]) if len(trace) else 0
    return f"{len(trace)}:{len(trace.names)}:{len(trace.details)}:{len(trace.lanes)}:{first}:{last}"


def _place(trace: Trace, reading: str) -> tuple[Path, bytes] | None:
    """(file, expected header) of ``reading`` for ``trace``, or None when the trace has no cache entry."""
    if not enabled():
        return None
    where = cache.origin(trace)
    if where is None:
        return None
    base, token = where
    header = f"{token}\n{code_stamp()}\n{_inputs_stamp()}\n{reading}\n{_shape(trace)}\n".encode()
    return base.parent / f"{base.name}.readings" / f"{_NAME.sub('_', reading)}.pkl", header


def _parts(trace: Trace) -> dict[str, Any]:
    """The trace's own objects, written as references instead of copies."""
    parts: dict[str, Any] = {"trace": trace, "meta": trace.meta, "names": trace.names, "lanes": trace.lanes}
    parts["details"] = trace.details
    for name, value in vars(trace).items():
        if isinstance(value, np.ndarray):
            parts[f"column:{name}"] = value
    return parts


class _Refused(Exception):
    """A reading holds something outside the allowlist: it is not kept."""


def _allowed_type(kind: type) -> bool:
    if kind in _BUILTIN_TYPES or kind is np.ndarray or issubclass(kind, (np.generic, np.dtype)):
        return True
    return kind.__module__.startswith("gaplens.") and isinstance(kind, type)


_SCALARS = frozenset({int, str, float, bool, type(None)})


#: Objects written between two looks at the payload's size (``_Pickler``'s budget): a look costs a call, a
#: block of this many objects ~1 ms.
_SIZE_EVERY = 4096


class _Pickler(pickle.Pickler):
    def __init__(self, fh: io.BytesIO | _Streamed, trace: Trace, budget_s: float = float("inf")) -> None:
        super().__init__(fh, protocol=5)
        self._fh, self._budget_s = fh, budget_s
        self.objects = 0  # objects the reading will rebuild when read back
        self._refs = {id(obj): key for key, obj in _parts(trace).items()}
        self._seen: set[type] = set()

    def read_back_s(self) -> float:
        """What reading the payload written so far back will cost: its bytes and its objects."""
        return self._fh.tell() / READ_BACK_BYTES_PER_S + self.objects * READ_BACK_S_PER_OBJECT

    def persistent_id(self, obj: Any) -> str | None:
        # Called for every object written (millions for 100k NVTX phases): scalars, never a trace part and
        # always allowed, leave at once.
        if type(obj) in _SCALARS:
            return None
        self.objects += 1
        check = self.objects % _SIZE_EVERY == 0
        if isinstance(obj, list) and type(obj) is not list:  # a list that pickles itself (as columns: PhaseList)
            self.objects += len(obj)  # still rebuilds its items when read back
            check = True
        # A payload already past what ``keep`` would keep is refused now, not once it is whole: a list of 100k
        # phases computed in 14 ms took 0.36 s to pickle, on every run, to be thrown away.
        if check and (self.read_back_s() > self._budget_s or self._fh.tell() > MAX_BYTES):
            raise _Refused(f"over {self._budget_s:.3f} s to read back")
        ref = self._refs.get(id(obj))
        if ref is not None:
            return ref
        kind = type(obj)
        if kind not in self._seen:
            if isinstance(obj, type):  # a class written by name: only the allowed ones
                if not _allowed_type(obj):
                    raise _Refused(obj.__qualname__)
            elif callable(obj) and not isinstance(obj, (np.ndarray, np.generic)):  # numpy's own rebuilders only
                if (getattr(obj, "__module__", ""), getattr(obj, "__name__", "")) not in _NUMPY_GLOBALS:
                    raise _Refused(repr(obj))
            elif not _allowed_type(kind):
                raise _Refused(kind.__qualname__)
            else:
                self._seen.add(kind)
        return None


class _Unpickler(pickle.Unpickler):
    def __init__(self, fh: io.BytesIO, trace: Trace) -> None:
        super().__init__(fh)
        self._parts = _parts(trace)

    def persistent_load(self, pid: Any) -> Any:
        return self._parts[pid]

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _NUMPY_GLOBALS:
            return super().find_class(module, name)
        if module == "builtins" or module == "collections":
            obj = super().find_class(module, name)
            if obj in _BUILTIN_TYPES:
                return obj
        elif module == "numpy" or module == "numpy.dtypes":
            obj = super().find_class(module, name)
            if isinstance(obj, type) and issubclass(obj, (np.generic, np.dtype)):
                return obj
        elif module.startswith("gaplens."):
            obj = super().find_class(module, name)
            if isinstance(obj, type) and obj.__module__ == module:
                return obj
        raise pickle.UnpicklingError(f"{module}.{name} is not a reading's type")


def recall(trace: Trace, reading: str) -> tuple[bool, Any]:
    """(True, the kept value) of ``reading`` for ``trace``, or (False, None): any doubt is a miss."""
    try:
        place = _place(trace, reading)
        if place is None:
            return False, None
        path, header = place
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))  # a symlink planted at the name is a miss
        with os.fdopen(fd, "rb") as fh:
            blob = fh.read()
        if not blob.startswith(MAGIC):
            return False, None
        at = len(MAGIC)
        (size,) = _HEADER.unpack_from(blob, at)
        at += _HEADER.size
        if blob[at : at + size] != header:
            return False, None
        at += size
        digest, payload = blob[at : at + 32], memoryview(blob)[at + 32 :]
        if hashlib.sha256(payload).digest() != digest:
            return False, None
        return True, _Unpickler(io.BytesIO(payload), trace).load()
    except Exception:  # a damaged file is a miss, whatever the damage
        return False, None


def keep(trace: Trace, reading: str, value: Any, compute_s: float) -> bool:
    """Write ``value`` as ``reading`` of ``trace`` beside its cache entry; False when not kept."""
    if compute_s < MIN_COMPUTE_S:
        return False
    try:
        place = _place(trace, reading)
        if place is None:
            return False
        path, header = place
        from gaplens.store.files import atomic_write

        path.parent.mkdir(parents=True, exist_ok=True)
        limit = min(MAX_BYTES, compute_s / 2 * READ_BACK_BYTES_PER_S)

        def write(fh) -> None:
            fh.write(MAGIC + _HEADER.pack(len(header)) + header)
            at = fh.tell()
            fh.write(bytes(_DIGEST_BYTES))  # the payload's digest, once it is known
            out = _Streamed(fh, limit)
            pickler = _Pickler(out, trace, compute_s / 2)
            pickler.dump(value)
            if pickler.read_back_s() > compute_s / 2:  # its objects, beside its bytes: refused, no file left
                raise _TooBig(f"{pickler.read_back_s():.3f} s to read back")
            fh.seek(at)
            fh.write(out.sha.digest())

        atomic_write(path, write)
        return True
    except Exception:  # keeping is best effort: the reading is already computed (_TooBig: not worth it)
        return False


_DIGEST_BYTES = 32  # SHA-256


class _TooBig(Exception):
    """A payload grew past what is worth keeping (``MAX_BYTES``, or slower to read back than to compute)."""


class _Streamed:
    """The payload on its way to the file, hashed and counted as the pickle writes it, never held whole.

    Pickled into a buffer first, the critical-path graph of a 5.1M-event trace (136 MB) sat beside
    the graph itself: the peak of a cold ``summary``. A payload that passes ``limit`` stops the write
    (the temp file is removed), as the size check before writing did.
    """

    def __init__(self, fh: BinaryIO, limit: float) -> None:
        self.fh, self.limit, self.size = fh, limit, 0
        self.sha = hashlib.sha256()

    def tell(self) -> int:
        """Bytes of payload written so far (``_Pickler`` looks at it as it goes)."""
        return self.size

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.size += view.nbytes
        if self.size > self.limit:
            raise _TooBig(f"{self.size} bytes")
        self.sha.update(view)
        return self.fh.write(view)
