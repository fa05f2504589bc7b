"""XSpace protobuf (JAX/XLA ``jax.profiler``, XProf): one ``<host>.xplane.pb`` or a profile directory.

A profile directory (``plugins/profile/<run>/<host>.xplane.pb``, or a run folder itself) opens its
newest run; a run of several hosts is a job (``gaplens ranks DIR``), one host per rank.
"""

from __future__ import annotations

from gaplens.loaders.errors import TraceError
from gaplens.loaders.files import GZIP_MAGIC, Progress, Source, read_head
from gaplens.loaders.trace import Trace
from gaplens.loaders.validate import Repairs
from gaplens.loaders.xplane.build import build
from gaplens.loaders.xplane.wire import WireError, decode


def load_xplane(path: str, progress: Progress | None = None) -> Trace:
    """Read one ``.xplane.pb`` (plain or gzip) into a Trace; malformed bytes are a one-line TraceError."""
    if progress is not None:
        progress("reading", 0.0)
    data = b"".join(Source(path).chunks()) if read_head(path, 2) == GZIP_MAGIC else read_head(path)
    if progress is not None:
        progress("decoding", 0.3)
    try:
        space = decode(data)
    except WireError as exc:
        raise TraceError(f"{path}: not a readable XSpace protobuf ({exc})") from None
    if not space.planes:
        raise TraceError(f"{path}: a protobuf with no XSpace planes (not a jax.profiler / XProf trace)")
    if not any(p.name.startswith(("/device:", "/host:")) for p in space.planes):
        names = ", ".join(repr(p.name) for p in space.planes[:3])
        raise TraceError(f"{path}: not an XSpace (no /device: or /host: plane; planes {names})")
    if progress is not None:
        progress("building", 0.8)
    return build(space, data, path, Repairs())
