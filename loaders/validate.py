"""The typed boundary: every number, id and piece of metadata a loader reads passes here into the model.

Rules, the same for both formats:

- A number is read as an exact int64, or it is unusable: non-finite values (``NaN``,
  ``Infinity``, ``"Infinity"``), non-numbers, text longer than a number can be, and
  absurd exponents (``1e999000``, rejected before any big-number arithmetic) are all
  unusable; so is an integer outside int64.
- A time is integer ns within ``±TIME_LIMIT_NS`` (about 146 years around the clock's
  zero). An event whose start is unusable is skipped; an unusable duration becomes 0.
  Start plus duration never wraps: ends saturate.
- One trace spans at most ``MAX_SPAN_NS`` around its median start (about 13 days):
  events outside are skipped and longer events clamped, so every difference and sum
  of durations the readings take stays far inside int64.
- Everything skipped, clamped or repaired is counted in a ``Repairs`` tally that
  becomes one warning line with counts.
- Metadata (versions, GPU names, process and thread names, facts) is sanitised by
  ``loaders.text.clean_text`` and cut to a sane length, recursively and with a
  bounded depth, before any reading or screen sees it.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from gaplens.loaders.text import clean_text, shorten

if TYPE_CHECKING:
    from gaplens.loaders.meta import Meta

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
TIME_LIMIT_NS = 2**62 - 1  # any kept time; a start plus a base stays inside int64
MAX_SPAN_NS = 2**50  # ~13 days either side of the median start
MAX_BYTES = 2**50  # a copy of a petabyte is damage, and sums of bytes stay exact
_MAX_NUMBER_TEXT = 64  # characters of a numeric string worth parsing
_MAX_DIGITS = 40  # significant digits of a decimal worth multiplying
_MAX_ADJUSTED = 20  # decimal exponent beyond which µs cannot be int64 ns
_NUMBER = re.compile(r"\s*[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d{1,4})?\s*")
_TEXT_LIMIT = 1000  # characters of one metadata string
_ITEMS_LIMIT = 1000  # entries of one metadata list or dict
_DEPTH_LIMIT = 6
#: Nesting the stdlib JSON fallback may decode: it recurses once per level inside Python's 1,000-frame
#: limit (orjson refuses past 1,024 itself), so half of that leaves room for the caller's frames.
JSON_DEPTH_LIMIT = 500
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)


@dataclass
class Repairs:
    """What a load skipped, clamped or repaired, by reason; ``line()`` says it in one warning."""

    counts: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # uncounted repairs ("the file is truncated…")

    def add(self, reason: str, n: int = 1) -> None:
        if n:
            self.counts[reason] = self.counts.get(reason, 0) + int(n)

    def note(self, text: str) -> None:
        if text and text not in self.notes:
            self.notes.append(text)

    def __bool__(self) -> bool:
        return bool(self.counts or self.notes)

    def line(self) -> str:
        """One line with every count (empty when nothing was repaired)."""
        counted = ", ".join(f"{n:,} {reason}" for reason, n in self.counts.items())
        return "; ".join([*self.notes, *([counted] if counted else [])])


# ---- numbers ----------------------------------------------------------------------


def _in_int64(v: int) -> bool:
    return INT64_MIN <= v <= INT64_MAX


def _decimal(value: object) -> Decimal | None:
    """A finite, reasonably sized Decimal from a number or numeric text; None otherwise."""
    if isinstance(value, Decimal):
        d = value
    elif isinstance(value, float):
        if not math.isfinite(value):
            return None
        d = Decimal(repr(value))  # the shortest text that reads back as this float, as written
    elif isinstance(value, str | bytes):
        text = value.decode("ascii", "replace") if isinstance(value, bytes) else value
        text = text.strip().strip('"')
        if len(text) > _MAX_NUMBER_TEXT or not _NUMBER.fullmatch(text):
            return None  # checked before Decimal: "1e999999" must not become a million digits
        try:
            d = Decimal(text)
        except (InvalidOperation, ValueError):
            return None
    else:
        return None
    if not d.is_finite() or len(d.as_tuple().digits) > _MAX_DIGITS or d.adjusted() > _MAX_ADJUSTED:
        return None
    return d


def int_or_none(value: object, floats: bool = True) -> int | None:
    """An exact int64 from an int, a numeric string (``" 7 "``) or, with ``floats``, a finite number."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value if _in_int64(value) else None
    if isinstance(value, str | bytes):
        text = value.decode("ascii", "replace") if isinstance(value, bytes) else value
        text = text.strip()
        if len(text) > 24:
            return None
        v: int | None
        try:
            v = int(text)
        except ValueError:
            if not floats:
                return None
            d = _decimal(text)
            v = int(d) if d is not None else None
        return v if v is not None and _in_int64(v) else None
    if floats and isinstance(value, float | Decimal):
        d = _decimal(value)
        if d is None:
            return None
        v = int(d)
        return v if _in_int64(v) else None
    return None


def as_int(value: object, default: int) -> int:
    """An int64 from a JSON or SQL value (int, float, Decimal, numeric string); ``default`` when unusable."""
    v = int_or_none(value)
    return default if v is None else v


def time_ns(value: object) -> int | None:
    """µs (int, Decimal, float or numeric string) to integer ns, truncated; None when unusable."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        ns = value * 1000 if abs(value) <= TIME_LIMIT_NS else None
    else:
        d = _decimal(value)
        ns = None if d is None else int(d * 1000)
    return ns if ns is not None and -TIME_LIMIT_NS <= ns <= TIME_LIMIT_NS else None


def saturating_end(start: np.ndarray, dur: np.ndarray, in_place: bool = False) -> np.ndarray:
    """``start + max(dur, 0)`` without wrapping past int64 (``in_place``: into ``dur``, an int64 column)."""
    end = dur if in_place else np.array(dur, np.int64)
    np.maximum(end, 0, out=end)
    room = np.maximum(start, 0)
    np.subtract(INT64_MAX, room, out=room)
    np.minimum(end, room, out=end)
    del room
    end += start
    return end


# ---- events -----------------------------------------------------------------------


def check_events(
    start: np.ndarray,
    end: np.ndarray,
    repairs: Repairs,
    open_end: np.ndarray | None = None,
) -> np.ndarray:
    """The events to keep; ``end`` is clamped in place so every kept interval is sane.

    ``start``/``end`` are absolute int64 ns. ``open_end`` marks ends still to be filled
    (NVTX ranges never closed): those are left alone.
    """
    n = start.size
    keep = (start >= -TIME_LIMIT_NS) & (start <= TIME_LIMIT_NS)
    repairs.add("events with a time beyond int64 ns (±146 years) skipped", n - int(keep.sum()))
    free = np.zeros(n, bool) if open_end is None else np.asarray(open_end, bool)
    fixed = keep & ~free
    if fixed.any():
        back = fixed & (end < start)
        repairs.add("events ending before they start set to length 0", int(back.sum()))
        end[back] = start[back]
        far = fixed & (end > TIME_LIMIT_NS)
        repairs.add("ends beyond int64 ns clamped", int(far.sum()))
        end[far] = TIME_LIMIT_NS
    if keep.any():
        kept = start if keep.all() else start[keep]
        lo, hi = int(kept.min()), int(kept.max())
        if hi - lo > MAX_SPAN_NS:
            mid = int(np.median(kept))
            outside = keep & ((start < mid - MAX_SPAN_NS) | (start > mid + MAX_SPAN_NS))
            repairs.add("events more than 13 days from the rest of the trace skipped", int(outside.sum()))
            keep &= ~outside
            lo = int(start[keep].min())
        cap = lo + 2 * MAX_SPAN_NS
        long = keep & ~free & (end > cap)
        repairs.add("events longer than the trace's 26-day limit clamped", int(long.sum()))
        end[long] = cap
    return keep


def check_columns(nbytes: np.ndarray, corr: np.ndarray, repairs: Repairs) -> None:
    """Byte counts in [0, MAX_BYTES] and correlation ids >= 0 or -1, in place."""
    bad = (nbytes < 0) | (nbytes > MAX_BYTES)
    if bad.any():
        repairs.add("byte counts out of range set to 0", int(bad.sum()))
        nbytes[bad] = 0
    corr[corr < 0] = -1


def clean_texts(texts: list[str], repairs: Repairs) -> list[str]:
    """Every text through ``clean_text``; how many it had to change is counted."""
    out = [clean_text(t) for t in texts]
    changed = sum(a != b for a, b in zip(texts, out, strict=True))
    repairs.add("names or details with control characters, escapes or invalid text cleaned", changed)
    return out


# ---- metadata ---------------------------------------------------------------------


def clean_value(value: object, depth: int = 0) -> Any:
    """A JSON-safe copy of a metadata value: clean text, int64 ints, finite floats, bounded size."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if _in_int64(value) else shorten(str(value)[:40], 40)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Decimal):
        return float(value) if value.is_finite() and abs(value.adjusted()) < 300 else None
    if isinstance(value, str):
        return shorten(value, _TEXT_LIMIT)
    if depth >= _DEPTH_LIMIT:
        return "…"
    if isinstance(value, dict):
        items = list(value.items())[:_ITEMS_LIMIT]
        return {shorten(k, 200): clean_value(v, depth + 1) for k, v in items}
    if isinstance(value, list | tuple):
        return [clean_value(v, depth + 1) for v in list(value)[:_ITEMS_LIMIT]]
    return shorten(str(value)[:_TEXT_LIMIT], _TEXT_LIMIT)


def clean_meta(meta: Meta) -> None:
    """Sanitise every text field of ``meta`` in place (the path stays as the user gave it)."""
    meta.source_version = shorten(meta.source_version, 200)
    for dev in meta.devices:
        dev.name = shorten(dev.name, 200)
        props = clean_value(dev.properties)
        dev.properties = props if isinstance(props, dict) else {}
    meta.processes = {int(k): shorten(v, 200) for k, v in meta.processes.items()}
    meta.threads = {(int(p), int(t)): shorten(v, 200) for (p, t), v in meta.threads.items()}
    extra = clean_value(meta.extra)
    meta.extra = extra if isinstance(extra, dict) else {}
    meta.warnings = [shorten(w, 2000) for w in meta.warnings if w]
    meta.lacks = [shorten(x, 40) for x in meta.lacks]


def clean_top(top: dict, repairs: Repairs) -> dict:
    """The top-level keys of a Kineto document with the ones the loader uses made safe to use."""
    out = dict(top)
    for key in ("deviceProperties", "computeProperties"):
        if key not in out:
            continue
        devs = out[key]
        if not isinstance(devs, list):
            repairs.note(f"{key} is not a list: ignored")
            del out[key]
            continue
        good = []
        for dev in devs:
            if isinstance(dev, dict) and int_or_none(dev.get("id"), floats=False) is not None:
                good.append({**dev, "id": int_or_none(dev["id"], floats=False)})
        repairs.add(f"unusable {key} entries ignored", len(devs) - len(good))
        out[key] = good
    if "baseTimeNanoseconds" in out:
        base = int_or_none(out["baseTimeNanoseconds"], floats=False)
        if base is None or abs(base) > TIME_LIMIT_NS:
            repairs.note(
                f"baseTimeNanoseconds {shorten(out['baseTimeNanoseconds'], 40)!r} is unusable: times kept relative"
            )
            out["baseTimeNanoseconds"] = 0
        else:
            out["baseTimeNanoseconds"] = base
    if "distributedInfo" in out and not isinstance(out["distributedInfo"], dict):
        repairs.note("distributedInfo is not an object: ignored")
        del out["distributedInfo"]
    return out


def _bounded_int(text: str) -> int | None:
    return int(text) if len(text.lstrip("-")) <= 30 else None


def _bounded_float(text: str) -> Decimal | None:
    return _decimal(text)


class TooDeep(ValueError):
    """JSON nested deeper than ``JSON_DEPTH_LIMIT``: refused before any recursive decoder sees it."""

    def __init__(self) -> None:
        super().__init__(f"JSON nested deeper than {JSON_DEPTH_LIMIT} levels")


def json_depth(raw: bytes) -> int:
    """The deepest nesting of ``[``/``{`` outside strings, in one pass (no recursion)."""
    bare = np.frombuffer(_JSON_STRING.sub(b'""', raw), np.uint8)
    step = (bare == 91).astype(np.int32) + (bare == 123) - (bare == 93) - (bare == 125)
    return int(np.cumsum(step).max(initial=0))


def loose_json(raw: bytes) -> object:
    """orjson, else the stdlib with bounded numbers (ints past 64 bits, NaN); raises ValueError when not JSON.

    Nesting deeper than ``JSON_DEPTH_LIMIT`` raises ``TooDeep`` (a ValueError), never RecursionError.
    """
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    if json_depth(raw) > JSON_DEPTH_LIMIT:
        raise TooDeep
    try:
        return json.loads(
            raw.decode("utf-8", "replace"),
            parse_int=_bounded_int,
            parse_float=_bounded_float,
            parse_constant=lambda _: None,
        )
    except RecursionError:  # a caller already deep in its own frames
        raise TooDeep from None


def kineto_repairs(damage: str, malformed: int, bad_start: int, bad_dur: int) -> Repairs:
    """The Kineto reader's counts as a tally (``damage``: what the framer and gunzip said)."""
    repairs = Repairs()
    repairs.note(damage)
    repairs.add("malformed events skipped", malformed)
    repairs.add("events with a missing or unusable ts skipped", bad_start)
    repairs.add("events with a missing, negative or unusable dur set to 0", bad_dur)
    return repairs
