"""A big synthetic Kineto trace: a real sample tiled in time, correlation ids kept unique.

Each copy is shifted by the sample's span (plus a gap) on the exact decimal text of
``ts``, so the copies neither overlap nor lose precision; ``correlation`` ids are
offset per copy so every launch still finds exactly its own GPU work.
"""

from __future__ import annotations

import gzip
import os
import re
import tempfile
from pathlib import Path

from gaplens.loaders.files import Source
from gaplens.loaders.jsonframe import Framed, frame_events

_TS = re.compile(rb'("ts": ?)(-?\d+)(?:\.(\d+))?')
_CORR = re.compile(rb'("correlation": ?)(\d+)')


def _events(sample: str) -> tuple[bytes, bytes]:
    """(text before the event array, events as NDJSON) of a real sample."""
    framed = Framed()
    ndjson = b"\n".join(block.tobytes() for block in frame_events(Source(sample).chunks(), framed))
    # The framer renames string pids/tids (``pis``/``tis``) for Arrow; write them back.
    ndjson = ndjson.replace(b'"pis"', b'"pid"').replace(b'"tis"', b'"tid"')
    top = {k: v for k, v in framed.top.items() if k != "traceEvents"}
    import orjson

    head = orjson.dumps(top)[:-1] + (b', "traceEvents": [\n' if top else b'"traceEvents": [\n')
    return head, ndjson


def _ns(m: re.Match) -> int:
    frac = (m.group(3) or b"").ljust(3, b"0")[:3]
    whole = int(m.group(2))
    return whole * 1000 + (-int(frac) if whole < 0 else int(frac))


def tile(sample: str, copies: int, out: str) -> int:
    """Write ``copies`` time-shifted copies of ``sample`` to ``out`` (gzip); return event count."""
    head, ndjson = _events(sample)
    starts = [_ns(m) for m in _TS.finditer(ndjson)]
    span_ns = max(starts) - min(starts) + 1_000_000
    corr_span = max((int(m.group(2)) for m in _CORR.finditer(ndjson)), default=0) + 1
    lines = ndjson.count(b"\n") + 1
    tmp = out + ".part"
    with gzip.open(tmp, "wb", compresslevel=1) as fh:
        fh.write(head)
        for k in range(copies):
            shift, corr_shift = k * span_ns, k * corr_span

            def ts(m: re.Match, shift: int = shift) -> bytes:
                ns = _ns(m) + shift
                sign = b"-" if ns < 0 else b""
                return m.group(1) + sign + b"%d.%03d" % divmod(abs(ns), 1000)

            def corr(m: re.Match, corr_shift: int = corr_shift) -> bytes:
                return m.group(1) + b"%d" % (int(m.group(2)) + corr_shift)

            body = _CORR.sub(corr, _TS.sub(ts, ndjson)) if k else ndjson
            fh.write(body.replace(b"\n", b",\n"))
            fh.write(b",\n" if k + 1 < copies else b"\n")
        fh.write(b"]}\n")
    os.replace(tmp, out)
    return lines * copies


def synthetic(sample: str, min_events: int, folder: str | None = None) -> tuple[str, int]:
    """Path and event count of a tiled trace with at least ``min_events``, made once and kept."""
    from gaplens.loaders.cache import cache_dir

    base = Path(folder) if folder else cache_dir() / "bench"
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError:
        base = Path(tempfile.mkdtemp(prefix="gaplens-bench-"))
    per_copy = _count(sample)
    copies = max(1, -(-min_events // per_copy))
    out = base / f"synth_{Path(sample).name.split('.')[0]}_x{copies}.json.gz"
    if not out.exists():
        tile(sample, copies, str(out))
    return str(out), per_copy * copies


def _count(sample: str) -> int:
    framed = Framed()
    for _ in frame_events(Source(sample).chunks(), framed):
        pass
    return framed.events
