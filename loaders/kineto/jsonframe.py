"""Re-frame the ``traceEvents`` array of a Chrome-trace document as newline-delimited JSON.

The scan rests on the JSON structure, not on one writer's layout: unescaped quotes
(found with numpy, backslash runs resolved) mark strings; braces outside strings give
the depth; an event is one top-level object of the array, and the bytes between two
events must be whitespace around exactly one comma. Blocks are cut at event
boundaries, so each block starts outside any string and needs no carried state.
"""

from __future__ import annotations

import numpy as np

from gaplens.loaders.model import TraceError
from gaplens.loaders.validate import TooDeep, loose_json

_WS = np.zeros(256, dtype=bool)
_WS[[9, 10, 13, 32]] = True
# Copy-and-blank in one pass: raw newlines can only be whitespace in valid JSON.
_NL_TO_SPACE = np.arange(256, dtype=np.uint8)
_NL_TO_SPACE[[10, 13]] = 32
_QUOTE, _BACKSLASH, _OPEN, _CLOSE, _COMMA, _RBRACKET = 34, 92, 123, 125, 44, 93


_SCAN = 1 << 18  # bytes compared at a time by ``find_byte``


def find_byte(text: np.ndarray, byte: int) -> np.ndarray:
    """Positions of ``byte`` in ``text``, compared 256 KB at a time: a whole block's mask
    would add its size again to every block in flight (each parse thread keeps its peak)."""
    parts = [np.flatnonzero(text[a : a + _SCAN] == byte) + a for a in range(0, text.size, _SCAN)]
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts) if parts else np.empty(0, np.int64)


def string_quotes(arr: np.ndarray) -> np.ndarray:
    """Positions of the quotes that open or close strings (escaped quotes removed)."""
    q = find_byte(arr, _QUOTE)
    bs = find_byte(arr, _BACKSLASH)
    if bs.size:
        # In a run of backslashes, the 1st, 3rd, ... escape the following byte.
        run_start = np.concatenate(([True], np.diff(bs) != 1))
        first = np.maximum.accumulate(np.where(run_start, np.arange(bs.size), 0))
        escaping = ((np.arange(bs.size) - first) % 2) == 0
        escaped = bs[escaping] + 1
        q = q[~np.isin(q, escaped, assume_unique=True)]
    return q


def _structural_braces(arr: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Quote positions, brace positions outside strings, and the depth after each brace."""
    q = string_quotes(arr)
    # '{' and '}' are the bytes b with b & 0xF9 == 0x79, along with 'y' and DEL: one pass.
    br = np.flatnonzero(np.bitwise_and(arr, 0xF9) == 0x79)
    br = br[(arr[br] == _OPEN) | (arr[br] == _CLOSE)]
    if q.size:
        br = br[(np.searchsorted(q, br) & 1) == 0]
    step = np.where(arr[br] == _OPEN, 1, -1).astype(np.int32)
    return q, br, np.cumsum(step, dtype=np.int32)


def _gap_bytes(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All byte positions in the half-open gaps [start, end), and which gap each is in."""
    lens = ends - starts
    total = int(lens.sum())
    gap_id = np.repeat(np.arange(starts.size), lens)
    offsets = np.arange(total) - np.repeat(np.cumsum(lens) - lens, lens)
    return starts[gap_id] + offsets, gap_id


class _Split:
    """One block cut into complete events; the result of ``split_block``."""

    def __init__(self) -> None:
        self.ndjson: np.ndarray = np.empty(0, np.uint8)
        self.count = 0
        self.consumed = 0  # bytes of the block used (events and separators)
        self.array_end: int | None = None  # position just after the closing ``]``
        self.damage: int | None = None  # position where the array stops making sense
        self.gap: bytes | None = None  # the bytes between every two events, when they are all the same


def _rename_string_ids(frame: np.ndarray, q: np.ndarray) -> None:
    """``"pid": "x"`` -> ``"pis": "x"`` (same for tid), in place: Arrow wants one type per field.

    Strings come in quote pairs; a key string ``pid``/``tid`` whose next string starts
    after only ``:`` and whitespace has a string value.
    """
    if q.size < 4:
        return
    opens, closes = q[0::2], q[1::2]
    key = np.flatnonzero((closes[:-1] - opens[:-1]) == 4)
    if key.size == 0:
        return
    o = opens[key]
    key = key[((frame[o + 1] == 112) | (frame[o + 1] == 116)) & (frame[o + 2] == 105) & (frame[o + 3] == 100)]
    if key.size == 0:
        return
    pos, gap_id = _gap_bytes(closes[key] + 1, opens[key + 1])
    vals = frame[pos]
    other = np.bincount(gap_id[~_WS[vals] & (vals != 58)], minlength=key.size)
    colons = np.bincount(gap_id[vals == 58], minlength=key.size)
    hit = key[(other == 0) & (colons == 1)]
    frame[opens[hit] + 3] = 115  # 'd' -> 's'


def split_block(buf: bytes) -> _Split:
    """Complete events of ``buf`` as NDJSON; ``buf`` starts between two events."""
    out = _Split()
    arr = np.frombuffer(buf, dtype=np.uint8)
    q, br, depth = _structural_braces(arr)
    is_open = arr[br] == _OPEN
    opens = br[is_open & (depth == 1)]
    closes = br[~is_open & (depth == 0)]
    n = closes.size
    bad_depth = np.flatnonzero(depth < 0)
    # Everything before the first event: whitespace, maybe the comma after the last block.
    lead_end = int(opens[0]) if opens.size else arr.size
    lead = arr[:lead_end]
    lead_text = lead[~_WS[lead]]
    if lead_text.size and not (lead_text.size == 1 and lead_text[0] == _COMMA):
        return _end_or_damage(out, arr, 0)
    if bad_depth.size:
        n = min(n, int(np.searchsorted(closes, br[bad_depth[0]])))
    if n == 0:
        return out
    opens_n = opens[: n + 1]
    # Between close i and open i+1: whitespace around exactly one comma.
    if opens_n.size > n:
        g_start, g_end = closes[:n] + 1, opens_n[1:]
    else:
        g_start, g_end = closes[: n - 1] + 1, opens_n[1:n]
    pos, gap_id = _gap_bytes(g_start, g_end)
    vals = arr[pos]
    text = ~_WS[vals]
    per_gap = np.bincount(gap_id[text], minlength=g_start.size)
    commas = np.bincount(gap_id[text & (vals == _COMMA)], minlength=g_start.size)
    bad = np.flatnonzero((per_gap != 1) | (commas != 1))
    if bad.size:
        n = int(bad[0]) + 1
        out.damage = int(closes[n - 1]) + 1
    start, stop = int(opens[0]), int(closes[n - 1]) + 1
    frame = _NL_TO_SPACE[arr[start:stop]]
    _rename_string_ids(frame, q[(q >= start) & (q < stop)] - start)
    keep = gap_id < n - 1
    out.gap = _uniform_gap(arr, g_start[: n - 1], g_end[: n - 1])
    frame[pos[keep] - start] = 32
    frame[g_start[: n - 1] - start] = 10
    out.ndjson = frame
    out.count = n
    out.consumed = stop
    if out.damage is not None:
        return _end_or_damage(out, arr, out.damage)
    if opens.size <= n:
        # No event open after the last complete one: the array may end here.
        _end_or_damage(out, arr, stop, quiet=True)
    return out


def _uniform_gap(arr: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> bytes | None:
    """The separator text when every gap between two events is the same bytes, else None."""
    if starts.size == 0:
        return None
    width = int(ends[0] - starts[0])
    if not np.all(ends - starts == width):
        return None
    gaps = arr[starts[:, None] + np.arange(width)]
    if not np.all(gaps == gaps[0]):
        return None
    return gaps[0].tobytes()


def _end_or_damage(out: _Split, arr: np.ndarray, at: int, quiet: bool = False) -> _Split:
    """After the last good event: ``]`` ends the array; other text is damage."""
    rest = arr[at:]
    text = np.flatnonzero(~_WS[rest])
    out.damage = None
    if text.size == 0:
        return out  # only whitespace so far: wait for more bytes
    first = int(text[0])
    if rest[first] == _COMMA and quiet:
        return out  # the separator before an event that starts in the next block
    if rest[first] == _RBRACKET:
        out.array_end = at + first + 1
        out.consumed = at
        return out
    if not quiet:
        out.damage = at
    return out


def array_start(buf: bytes, final: bool) -> tuple[int, bool] | None:
    """(index just after the events' ``[``, bare array?) or None when more bytes are needed."""
    body = buf.lstrip()
    if not body:
        if final:
            raise TraceError("the file is empty")
        return None
    skipped = len(buf) - len(body)
    if body[:1] == b"[":
        return skipped + 1, True
    if body[:1] != b"{":
        raise TraceError("not a trace (neither Kineto JSON nor an nsys SQLite export)")
    arr = np.frombuffer(buf, dtype=np.uint8)
    q = string_quotes(arr)
    key = b'"traceEvents"'
    at = buf.find(key)
    while at >= 0:
        inside = np.searchsorted(q, at) & 1
        if not inside:
            # Depth 1 means a key of the top-level object (brackets count here too).
            head = arr[:at]
            opens = np.flatnonzero((head == _OPEN) | (head == 91))
            closes = np.flatnonzero((head == _CLOSE) | (head == _RBRACKET))
            if q.size:
                opens = opens[(np.searchsorted(q, opens) & 1) == 0]
                closes = closes[(np.searchsorted(q, closes) & 1) == 0]
            if opens.size - closes.size == 1:
                rest = buf[at + len(key) :].lstrip()
                if rest[:1] == b":":
                    value = rest[1:].lstrip()
                    if value[:1] == b"[":
                        return len(buf) - len(value) + 1, False
                    if value:
                        raise TraceError("traceEvents is not an array")
                    if not final:
                        return None
                if not rest or (rest == b":" and not final):
                    if final:
                        raise TraceError("JSON without a traceEvents array: not a Chrome/Kineto trace")
                    return None
        at = buf.find(key, at + 1)
    if final:
        raise TraceError("JSON without a traceEvents array: not a Chrome/Kineto trace")
    return None


def top_level(prefix: bytes, trailer: bytes, bare: bool, warnings: list[str], truncated: bool = False) -> dict:
    """Top-level keys: the document with an empty event array, parsed by orjson."""
    if bare:
        return {"__bare_array__": True}
    try:
        doc = loose_json(prefix + b"[" + (b"" if truncated else b"]") + trailer)
    except ValueError as exc:
        try:
            doc = loose_json(prefix + b"[]}")
        except TooDeep as deep:
            # The events themselves are fine: keep them, without the document's other keys.
            warnings.append(f"{deep} before traceEvents: the trace's top-level keys are ignored")
            return {}
        except ValueError:
            raise TraceError("not valid JSON before traceEvents: not a readable trace") from None
        if not truncated:
            why = f"{exc} after traceEvents" if isinstance(exc, TooDeep) else "damaged JSON after traceEvents"
            warnings.append(f"{why}: keys written after the events are ignored")
    return doc if isinstance(doc, dict) else {}
