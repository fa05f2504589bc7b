"""The XSpace protobuf (``xplane.proto`` of XLA/TSL) decoded from its wire bytes, into plain columns.

Only what the lane model reads is decoded; unknown fields are skipped by wire type, as protobuf
itself does, so newer writers' additions pass through. Schema (field numbers):

    XSpace         planes 1, errors 2, warnings 3, hostnames 4
    XPlane         id 1, name 2, lines 3, event_metadata 4 (map<int64, XEventMetadata>),
                   stat_metadata 5 (map<int64, XStatMetadata>), stats 6
    XLine          id 1, display_id 10, name 2, display_name 11, timestamp_ns 3, duration_ps 9, events 4
    XEvent         metadata_id 1, offset_ps 2 | num_occurrences 5, duration_ps 3, stats 4
    XStat          metadata_id 1, double 2 | uint64 3 | int64 4 | str 5 | bytes 6 | ref 7
    XEventMetadata id 1, name 2, display_name 4, metadata 3, stats 5, child_id 6
    XStatMetadata  id 1, name 2, description 3

A hand-written decoder rather than the ``protobuf`` package: README (Dependencies) has the
measurement. Stats are kept flat per line (event index, metadata id, value) so that a
reading picks the few it needs with numpy instead of walking per-event dicts.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

_DOUBLE = struct.Struct("<d")


class WireError(ValueError):
    """The bytes are not a well-formed protobuf message (truncated, or a field runs past its end)."""


# Value kinds of a stat (``Events.stat_kind``).
NONE, DOUBLE, UINT64, INT64, STR, BYTES, REF = range(7)


@dataclass
class Line:
    id: int = 0
    display_id: int = 0
    name: str = ""
    display_name: str = ""
    timestamp_ns: int = 0
    duration_ps: int = 0


def _empty(dtype) -> np.ndarray:
    return np.zeros(0, dtype)


@dataclass
class Events:
    """Every XEvent of a plane, one row each, and every stat of those events, one row each.

    ``line`` indexes the plane's lines; ``aggregate`` marks events with ``num_occurrences``.
    A stat row names its event (``stat_event``), its metadata id, its value kind, and the value:
    ``stat_int`` (uint64/int64 as int64 bits, or a ref id), ``stat_float``, or a byte span
    ``stat_start``..``stat_end`` of the file for strings and bytes.
    """

    line: np.ndarray = field(default_factory=lambda: _empty(np.int32))
    metadata_id: np.ndarray = field(default_factory=lambda: _empty(np.int64))
    offset_ps: np.ndarray = field(default_factory=lambda: _empty(np.int64))
    duration_ps: np.ndarray = field(default_factory=lambda: _empty(np.int64))
    aggregate: np.ndarray = field(default_factory=lambda: _empty(bool))
    stat_event: np.ndarray = field(default_factory=lambda: _empty(np.int64))
    stat_id: np.ndarray = field(default_factory=lambda: _empty(np.int64))
    stat_kind: np.ndarray = field(default_factory=lambda: _empty(np.int8))
    stat_int: np.ndarray = field(default_factory=lambda: _empty(np.int64))
    stat_float: np.ndarray = field(default_factory=lambda: _empty(np.float64))
    stat_start: np.ndarray = field(default_factory=lambda: _empty(np.int64))
    stat_end: np.ndarray = field(default_factory=lambda: _empty(np.int64))


@dataclass
class Plane:
    id: int = 0
    name: str = ""
    lines: list[Line] = field(default_factory=list)
    events: Events = field(default_factory=Events)
    event_names: dict[int, str] = field(default_factory=dict)
    event_display: dict[int, str] = field(default_factory=dict)
    event_stats: dict[int, list[tuple[int, object, bool]]] = field(default_factory=dict)
    stat_names: dict[int, str] = field(default_factory=dict)
    stats: list[tuple[int, object, bool]] = field(default_factory=list)

    def stat_value(self, stat_id: int, value: object, ref: bool) -> object:
        """A stat's value with refs resolved (a ref names a stat metadata entry whose name is the text)."""
        return self.stat_names.get(int(value), "") if ref else value  # type: ignore[call-overload]


@dataclass
class Space:
    planes: list[Plane] = field(default_factory=list)
    hostnames: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _varint(b: bytes, i: int) -> tuple[int, int]:
    c = b[i]
    if c < 0x80:
        return c, i + 1
    r, s = c & 0x7F, 7
    while True:
        i += 1
        c = b[i]
        r |= (c & 0x7F) << s
        if c < 0x80:
            return r, i + 1
        s += 7
        if s > 63:
            raise WireError("varint longer than 10 bytes")


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _one(b: bytes, i: int) -> tuple[int, int, object, int]:
    """One field at ``i``: (number, wire type, value, next offset); LEN values come as (start, end)."""
    tag, i = _varint(b, i)
    f, wt = tag >> 3, tag & 7
    v: object
    if wt == 0:
        v, i = _varint(b, i)
    elif wt == 2:
        n, i = _varint(b, i)
        v = (i, i + n)
        i += n
    elif wt == 1:
        v = b[i : i + 8]
        i += 8
    elif wt == 5:
        v = b[i : i + 4]
        i += 4
    else:
        raise WireError(f"wire type {wt} (groups or garbage) at byte {i}")
    if f == 0:
        raise WireError(f"field number 0 at byte {i} (not a protobuf)")
    return f, wt, v, i


def _fields(b: bytes, i: int, end: int):
    """(field number, wire type, value) of one message; LEN values come as (start, end) byte offsets."""
    while i < end:
        f, wt, v, i = _one(b, i)
        if i > end:
            raise WireError(f"field {f} runs past its message (truncated or not a protobuf) at byte {i}")
        yield f, wt, v


def _text(b: bytes, v) -> str:
    if not isinstance(v, tuple):
        raise WireError("a string field with a numeric wire type")
    return b[v[0] : v[1]].decode("utf-8", "replace")


def _stat(b: bytes, a: int, e: int) -> tuple[int, object, bool]:
    sid, value, ref = 0, None, False
    for f, wt, v in _fields(b, a, e):
        if f == 1 and wt == 0:
            sid = v
        elif f == 2 and wt == 1:
            value = _DOUBLE.unpack(v)[0]
        elif f == 3 and wt == 0:
            value = v
        elif f == 4 and wt == 0:
            value = _signed(v)
        elif f == 5 and wt == 2:
            value = _text(b, v)
        elif f == 6 and wt == 2:
            value = b[v[0] : v[1]]
        elif f == 7 and wt == 0:
            value, ref = v, True
    return sid, value, ref


def _line(b: bytes, a: int, e: int, index: int, spans: list[int]) -> Line:
    """A line's own fields; its events' byte spans are appended to ``spans`` (line, start, end, ...)."""
    line = Line()
    varint = _varint
    i = a
    while i < e:
        if b[i] == 0x22:  # events (field 4, LEN): the hot path, only their spans here
            c = b[i + 1]
            if c < 0x80:
                n, i = c, i + 2
            else:
                n, i = varint(b, i + 1)
            spans += (index, i, i + n)
            i += n
            continue
        f, wt, v, i = _one(b, i)
        if f == 1 and wt == 0:
            line.id = v  # type: ignore[assignment]
        elif f == 10 and wt == 0:
            line.display_id = v  # type: ignore[assignment]
        elif f == 2:
            line.name = _text(b, v)
        elif f == 11:
            line.display_name = _text(b, v)
        elif f == 3 and wt == 0:
            line.timestamp_ns = _signed(v)  # type: ignore[arg-type]
        elif f == 9 and wt == 0:
            line.duration_ps = _signed(v)  # type: ignore[arg-type]
    if i > e:
        raise WireError(f"a field runs past its line at byte {i}")
    return line


def _map_entry(b: bytes, a: int, e: int) -> tuple[int, tuple[int, int] | None]:
    key, val = 0, None
    for f, wt, v in _fields(b, a, e):
        if f == 1 and wt == 0:
            key = _signed(v)
        elif f == 2 and wt == 2:
            val = v
    return key, val


def _plane(b: bytes, a: int, e: int, padded: np.ndarray) -> Plane:
    plane = Plane()
    spans: list[int] = []
    for f, wt, v in _fields(b, a, e):
        if f == 3 and wt == 2:
            a0, e0 = v  # type: ignore[misc]
            plane.lines.append(_line(b, a0, e0, len(plane.lines), spans))
        elif f == 4 and wt == 2:
            key, val = _map_entry(b, *v)  # type: ignore[misc]
            if val is None:
                continue
            name = display = ""
            stats = []
            for mf, mwt, mv in _fields(b, *val):
                if mf == 2:
                    name = _text(b, mv)
                elif mf == 4:
                    display = _text(b, mv)
                elif mf == 5 and mwt == 2:
                    stats.append(_stat(b, *mv))  # type: ignore[misc]
                elif mf == 1 and mwt == 0 and not key:
                    key = _signed(mv)  # type: ignore[arg-type]
            plane.event_names[key] = name
            if display:
                plane.event_display[key] = display
            if stats:
                plane.event_stats[key] = stats
        elif f == 5 and wt == 2:
            key, val = _map_entry(b, *v)  # type: ignore[misc]
            if val is None:
                continue
            for mf, _mwt, mv in _fields(b, *val):
                if mf == 2:
                    plane.stat_names[key] = _text(b, mv)
        elif f == 1 and wt == 0:
            plane.id = _signed(v)  # type: ignore[arg-type]
        elif f == 2:
            plane.name = _text(b, v)
        elif f == 6 and wt == 2:
            plane.stats.append(_stat(b, *v))  # type: ignore[misc]
    if spans:
        plane.events = event_columns(padded, np.asarray(spans, dtype=np.int64))
    return plane


def decode(data: bytes) -> Space:
    """An XSpace from its serialised bytes; malformed bytes raise ``WireError``."""
    space = Space()
    padded = np.zeros(len(data) + _PAD, np.uint8)
    padded[: len(data)] = np.frombuffer(data, np.uint8)
    try:
        for f, wt, v in _fields(data, 0, len(data)):
            if f == 1 and wt == 2:
                a0, e0 = v  # type: ignore[misc]
                space.planes.append(_plane(data, a0, e0, padded))
            elif f == 4 and wt == 2:
                space.hostnames.append(_text(data, v))
            elif f == 2 and wt == 2:
                space.errors.append(_text(data, v))
            elif f == 3 and wt == 2:
                space.warnings.append(_text(data, v))
    except IndexError:
        raise WireError("the message ends in the middle of a field (truncated)") from None
    return space


def text_of(data: bytes, start: np.ndarray, end: np.ndarray) -> list[str]:
    """The strings at byte spans of ``data`` (stat values), decoded once per distinct span."""
    out: list[str] = []
    seen: dict[bytes, str] = {}
    for a, b in zip(start.tolist(), end.tolist(), strict=True):
        raw = data[a:b]
        text = seen.get(raw)
        if text is None:
            text = seen[raw] = raw.decode("utf-8", "replace")
        out.append(text)
    return out


# ---- the events, decoded side by side --------------------------------------------------------
# Every event of a plane is a short message of a few fields; a Python loop over a million of them
# spends ~3 us each (README: Dependencies). Instead all events advance one field per numpy step:
# as many steps as the longest event has fields, each a handful of gathers over the events still
# open. Stats are nested messages walked the same way.

_PAD = 16  # zero bytes after the data, so a varint read near the end never indexes past it


def _varints(data: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Values (uint64) and lengths of the varints starting at each of ``pos``."""
    byte = data[pos]
    val = (byte & 0x7F).astype(np.uint64)
    size = np.ones(pos.size, np.int64)
    live = np.flatnonzero(byte >= 0x80)  # most varints are one byte: the rest go round the loop
    for k in range(1, 10):
        if not live.size:
            return val, size
        byte = data[pos[live] + k]
        val[live] |= (byte & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        size[live] = k + 1
        live = live[byte >= 0x80]
    if live.size:
        raise WireError("a varint longer than 10 bytes")
    return val, size


def _walk(data: np.ndarray, starts: np.ndarray, ends: np.ndarray):
    """Per step: (record, field, wire type, varint value, payload start, payload end) of one field of
    every record still open; LEN payloads and fixed64 values come as byte spans."""
    cur = starts.copy()
    act = np.flatnonzero(cur < ends)
    while act.size:
        p = cur[act]
        tag, tag_size = _varints(data, p)
        f = (tag >> np.uint64(3)).astype(np.int64)
        wt = (tag & np.uint64(7)).astype(np.int8)
        q = p + tag_size
        if (wt == 0).all():  # a step of varint fields only (metadata id, offset, duration)
            val, size = _varints(data, q)
            a, b = q, q + size
        else:
            val = np.zeros(act.size, np.uint64)
            a, b = q.copy(), q.copy()
            w0, w2 = np.flatnonzero(wt == 0), np.flatnonzero(wt == 2)
            if w0.size:
                v, size = _varints(data, q[w0])
                val[w0] = v
                b[w0] += size
            if w2.size:
                n, size = _varints(data, q[w2])
                if (n >= np.uint64(1 << 62)).any():
                    raise WireError("a field length beyond any file")
                a[w2] += size
                b[w2] = a[w2] + n.astype(np.int64)
            b[wt == 1] += 8
            b[wt == 5] += 4
            if ((wt == 3) | (wt == 4) | (wt > 5)).any():
                raise WireError("a field of wire type 3, 4, 6 or 7 inside an event (not an XSpace)")
        if (f == 0).any():
            raise WireError("field number 0 inside an event (not an XSpace)")
        end = ends[act]
        if (b > end).any():
            raise WireError("a field runs past its event (truncated or not an XSpace)")
        yield act, f, wt, val, a, b
        cur[act] = b
        act = act[b < end]


def _as_int64(v: np.ndarray) -> np.ndarray:
    return v.view(np.int64)


def event_columns(data: np.ndarray, spans: np.ndarray) -> Events:
    """The events whose byte spans (line, start, end triples) are given, and their stats."""
    spans = spans.reshape(-1, 3)
    n = spans.shape[0]
    ev = Events(
        line=spans[:, 0].astype(np.int32),
        metadata_id=np.zeros(n, np.int64),
        offset_ps=np.zeros(n, np.int64),
        duration_ps=np.zeros(n, np.int64),
        aggregate=np.zeros(n, bool),
    )
    s_rec, s_a, s_b = [], [], []
    for rec, f, wt, val, a, b in _walk(data, spans[:, 1], spans[:, 2]):
        v = wt == 0
        for num, col in ((1, ev.metadata_id), (2, ev.offset_ps), (3, ev.duration_ps)):
            m = v & (f == num)
            col[rec[m]] = _as_int64(val[m])
        ev.aggregate[rec[v & (f == 5)]] = True
        m = (wt == 2) & (f == 4)
        if m.any():
            s_rec.append(rec[m])
            s_a.append(a[m])
            s_b.append(b[m])
    if s_rec:
        stat_event = np.concatenate(s_rec)
        order = np.argsort(stat_event, kind="stable")  # by event, each event's stats in file order
        _stat_columns(data, ev, stat_event[order], np.concatenate(s_a)[order], np.concatenate(s_b)[order])
    return ev


def _stat_columns(data: np.ndarray, ev: Events, event: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
    n = event.size
    ev.stat_event = event
    ev.stat_id = np.zeros(n, np.int64)
    ev.stat_kind = np.zeros(n, np.int8)
    ev.stat_int = np.zeros(n, np.int64)
    ev.stat_float = np.zeros(n, np.float64)
    ev.stat_start = np.zeros(n, np.int64)
    ev.stat_end = np.zeros(n, np.int64)
    for rec, f, wt, val, a, b in _walk(data, starts, ends):
        v = wt == 0
        m = v & (f == 1)
        ev.stat_id[rec[m]] = _as_int64(val[m])
        for num, kind in ((3, UINT64), (4, INT64), (7, REF)):
            m = v & (f == num)
            ev.stat_int[rec[m]] = _as_int64(val[m])
            ev.stat_kind[rec[m]] = kind
        m = (wt == 1) & (f == 2)
        if m.any():
            at = a[m]
            raw = np.stack([data[at + k] for k in range(8)], axis=1).copy()
            ev.stat_float[rec[m]] = raw.view("<f8").reshape(-1)
            ev.stat_kind[rec[m]] = DOUBLE
        for num, kind in ((5, STR), (6, BYTES)):
            m = (wt == 2) & (f == num)
            ev.stat_start[rec[m]] = a[m]
            ev.stat_end[rec[m]] = b[m]
            ev.stat_kind[rec[m]] = kind
