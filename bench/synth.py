"""A big synthetic Kineto trace: a real sample tiled in time, correlation ids kept unique.

The copies keep the sample's own text layout (Kineto writes each event over a few
indented lines), so the loader meets the bytes a real writer produces; only ``ts``
and ``correlation`` change. Like one long recording, the result has the metadata
events (``ph: M``) once at the start and the profiler's own bookkeeping events
(string pids: the span, iteration markers) once at the end. Each copy is shifted by the sample's span (plus a gap)
on the exact decimal text of ``ts``, so the copies neither overlap nor lose
precision; ``correlation`` ids are offset per copy so every launch still finds
exactly its own GPU work.
"""

from __future__ import annotations

import itertools
import os
import re
import tempfile
import zlib
from pathlib import Path

from gaplens.loaders.files import Source
from gaplens.loaders.kineto.jsonblocks import Framed, frame_events

_TS = re.compile(rb'("ts": ?)(-?\d+)(?:\.(\d+))?')
_CORR = re.compile(rb'("correlation": ?)(\d+)')
_EVENTS = re.compile(rb'"traceEvents"\s*:\s*\[')


def _parts(sample: str) -> tuple[bytes, bytes, bytes]:
    """(text up to the event array's ``[``, the array's body, text from its ``]``) of a real sample."""
    raw = b"".join(Source(sample).chunks())
    m = _EVENTS.search(raw)
    start = m.end() if m else raw.index(b"[") + 1
    end = raw.rindex(b"]", start)
    body = raw[start:end].rstrip()
    return raw[:start], body, raw[end:]


def _ns(m: re.Match) -> int:
    frac = (m.group(3) or b"").ljust(3, b"0")[:3]
    whole = int(m.group(2))
    return whole * 1000 + (-int(frac) if whole < 0 else int(frac))


class _Template:
    """The array body cut around its ``ts`` and ``correlation`` values, to print shifted copies fast."""

    def __init__(self, body: bytes) -> None:
        hits = sorted(
            [(m.start(2), m.end(), "ts", _ns(m), m.group(3) is not None) for m in _TS.finditer(body)]
            + [(m.start(2), m.end(), "corr", int(m.group(2)), False) for m in _CORR.finditer(body)]
        )
        self.literals: list[bytes] = []
        self.values: list[tuple[str, int, bool]] = []
        at = 0
        for start, end, what, value, frac in hits:
            self.literals.append(body[at:start])
            self.values.append((what, value, frac))
            at = end
        self.literals.append(body[at:])
        ts = [v for w, v, _ in self.values if w == "ts"]
        integral = not any(f for w, _, f in self.values if w == "ts")
        span = (max(ts) - min(ts) if ts else 0) + 1_000_000
        self.span_ns = -(-span // 1000) * 1000 if integral else span
        self.corr_span = max((v for w, v, _ in self.values if w == "corr"), default=0) + 1

    def copy(self, k: int) -> bytes:
        shift, corr_shift = k * self.span_ns, k * self.corr_span
        texts = []
        for what, value, frac in self.values:
            if what == "corr":
                texts.append(b"%d" % (value + corr_shift))
                continue
            ns = value + shift
            sign = b"-" if ns < 0 else b""
            whole, part = divmod(abs(ns), 1000)
            texts.append(sign + (b"%d.%03d" % (whole, part) if frac else b"%d" % whole))
        return b"".join(itertools.chain.from_iterable(zip(self.literals, [*texts, b""], strict=True)))


_SEP = b"},\n  {"  # Kineto's separator between two events


def _split(body: bytes) -> tuple[bytes, bytes, bytes]:
    """(metadata events, activity events, bookkeeping events) of an array body, each joined by the separator."""
    events = body.split(_SEP)
    if len(events) < 3:
        return b"", body, b""
    events = [events[0] + b"}", *[b"{" + e + b"}" for e in events[1:-1]], b"{" + events[-1]]
    meta = [e for e in events if b'"ph": "M"' in e]
    books = [e for e in events if b'"ph": "M"' not in e and re.search(rb'"pid": ?"', e)]
    acts = [e for e in events if b'"ph": "M"' not in e and not re.search(rb'"pid": ?"', e)]
    lead = events[0][: len(events[0]) - len(events[0].lstrip())]

    def join(part: list[bytes]) -> bytes:
        return b",\n  ".join(e.strip() for e in part)

    return (lead + join(meta)) if meta else b"", lead + join(acts), join(books)


def tile(sample: str, copies: int, out: str) -> int:
    """Write ``copies`` time-shifted copies of ``sample`` to ``out`` (gzip); return the event count."""
    head, body, tail = _parts(sample)
    meta, acts, books = _split(body)
    template = _Template(acts)
    pieces = 0
    tmp = out + ".part"
    with open(tmp, "wb") as raw:
        # One deflate stream, level 1: the benchmark measures reading, not how the file was packed.
        deflate = zlib.compressobj(1, zlib.DEFLATED, 31)
        raw.write(deflate.compress(head))
        if meta:
            raw.write(deflate.compress(meta + b","))
        for k in range(copies):
            raw.write(deflate.compress(template.copy(k)))
            raw.write(deflate.compress(b"," if k + 1 < copies or books else b"\n"))
        if books:
            raw.write(deflate.compress(b"\n  " + _Template(books).copy(copies - 1) + b"\n"))
        raw.write(deflate.compress(tail))
        raw.write(deflate.flush())
    os.replace(tmp, out)
    for part in (meta, books):
        pieces += part.count(_SEP) + 1 if part else 0
    return pieces + (acts.count(_SEP) + 1) * copies


def synthetic(sample: str, min_events: int, folder: str | None = None) -> tuple[str, int]:
    """Path and event count of a tiled trace with at least ``min_events``, made once and kept."""
    from gaplens.store.cache import cache_dir

    base = Path(folder) if folder else cache_dir() / "bench"
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError:
        base = Path(tempfile.mkdtemp(prefix="gaplens-bench-"))
    meta, acts, books = _split(_parts(sample)[1])
    per_copy = acts.count(_SEP) + 1
    fixed = (meta.count(_SEP) + 1 if meta else 0) + (books.count(_SEP) + 1 if books else 0)
    copies = max(1, -(-(min_events - fixed) // per_copy))
    out = base / f"synth3_{Path(sample).name.split('.')[0]}_x{copies}.json.gz"
    if not out.exists():
        tile(sample, copies, str(out))
    return str(out), fixed + per_copy * copies


def _count(sample: str) -> int:
    framed = Framed()
    for _ in frame_events(Source(sample).chunks(), framed):
        pass
    return framed.events
