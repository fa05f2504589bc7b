"""``Input Dims`` and ``Input Strides`` read from the event text, since their JSON type has no fixed depth.

``record_shapes`` writes ``"Input Dims": [[64, 2048], [], [[1, 2], [3]]]``: a list
whose items are shapes, scalars' empty lists, or lists of shapes (TensorList
inputs), so no one Arrow type fits and the key stays out of the schema. The value
is taken from the bytes instead, vectorised over a block: find the key, take the run
of bytes a list of integers can hold (``[]0-9, -``), and end at its last ``]``; the
text is the value exactly when its brackets balance. The rare value that does not
(floats, strings) is decoded from its own event with orjson. The detail reads like
Python prints the list, ``Input Dims [[64, 2048], []]``, on either path. ``Input Strides``
(same layout) are read alike, their text JSON (``list_text``); the op's detail gets both
(``opdetail``).
"""

from __future__ import annotations

import json
import re
from decimal import Decimal

import numpy as np
import orjson

from gaplens.loaders.columns import encode_slices
from gaplens.loaders.kineto.jsonframe import find_byte

_LIST_BYTES = np.zeros(256, dtype=bool)
_LIST_BYTES[list(b"[]0123456789, -\t\n\r")] = True
_KEY = b'"Input '  # then 'Dims"' or, in 2020 traces, 'dims"'
_BLANK = np.zeros(256, dtype=np.int64)
_BLANK[[9, 10, 13, 32]] = 1
_SPACE = re.compile(rb"\s+")


#: Nesting of an Input Dims value worth printing: shapes are 2 deep, TensorList inputs 3; deeper is
#: no shape, and printing it (Python's repr recurses) must not reach the interpreter's frame limit.
DIMS_DEPTH_LIMIT = 32


def dims_text(value) -> str:
    """The detail for a decoded value: Python's print of it, decimals as floats (orjson's reading)."""
    if _depth(value) > DIMS_DEPTH_LIMIT:
        return f"Input Dims [nested deeper than {DIMS_DEPTH_LIMIT} levels]"
    return f"Input Dims {_plain(value)}"


def _depth(value) -> int:
    """How deep lists nest in ``value``, level by level without recursion (stops past the limit)."""
    depth, level = 0, [value]
    while depth <= DIMS_DEPTH_LIMIT:
        lists = [v for v in level if isinstance(v, list)]
        if not lists:
            break
        depth += 1
        level = [item for v in lists for item in v]
    return depth


def _plain(value):
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, Decimal):
        return float(value)
    return value


#: One key's values in a block: (event index, code, texts).
Found = tuple[np.ndarray, np.ndarray, list[str]]


def find_dims(text: np.ndarray, ends: np.ndarray) -> tuple[Found, Found]:
    """The ``Input Dims`` and ``Input Strides`` values in a block's text, each as (event index, code, texts).

    ``ends`` holds the position that ends each event but the last (a newline or a
    blanked separator comma), so an event's index is the number of ends before it.
    Both keys start ``"Input ``: one look for their ``I`` serves the two.
    """
    n = text.size
    quote = find_byte(text, 73) - 1  # the 'I' of "Input
    quote = quote[(quote >= 0) & (quote + 16 < n)]
    for j, byte in enumerate(_KEY):
        if j == 1:
            continue  # the 'I' itself
        quote = quote[text[quote + j] == byte]
    is_dims = (text[quote + 7] == 68) | (text[quote + 7] == 100)  # Dims or dims
    dims, strides = quote[is_dims], quote[~is_dims]
    for j, byte in enumerate(b'ims"', start=8):
        dims = dims[text[dims + j] == byte]
    for j, byte in enumerate(b'Strides"', start=7):
        strides = strides[text[strides + j] == byte]
    return (
        _find_values(text, ends, dims, 12, "Input Dims", _decode_dims),
        _find_values(text, ends, strides, 15, "Input Strides", _decode_strides),
    )


def _find_values(text: np.ndarray, ends: np.ndarray, quote: np.ndarray, key_len: int, label: str, decode) -> Found:
    """(event index, code, texts) of the list values after the keys at ``quote`` (``key_len`` bytes each)."""
    empty = np.empty(0, np.int64)
    if quote.size == 0:
        return empty, empty, []
    n = text.size
    # After the key: optional blanks, a colon, optional blanks, then the value.
    last = n - 1
    value = quote + key_len
    for _ in range(2):
        value += _BLANK[text[np.minimum(value, last)]]
    has_colon = text[np.minimum(value, last)] == 58
    value += has_colon
    for _ in range(2):
        value += _BLANK[text[np.minimum(value, last)]]
    is_list = has_colon & (text[np.minimum(value, last)] == 91)
    quote, value = quote[is_list], value[is_list]
    if quote.size == 0:
        return empty, empty, []
    rows, first_key = np.unique(np.searchsorted(ends, quote), return_index=True)  # one value per event
    value = value[first_key]
    close = np.full(rows.size, -1, np.int64)
    unsettled = np.arange(rows.size)
    for width in (64, 1024):  # most values are short; the long ones get a second, wider look
        if unsettled.size == 0:
            break
        close[unsettled] = _value_ends(text, value[unsettled], width)
        unsettled = unsettled[close[unsettled] == -2]
    balanced = close >= 0
    codes = np.zeros(rows.size, np.int64)
    keep = np.ones(rows.size, bool)
    texts: list[str] = []
    head = label + " "
    if balanced.any():
        good = np.flatnonzero(balanced)
        got, first, data, offsets = encode_slices(text, value[good], close[good] + 1)
        for i in first.tolist():
            raw = _SPACE.sub(b"", data[offsets[i] : offsets[i + 1]].tobytes()).replace(b",", b", ")
            texts.append(head + raw.decode("ascii"))
        codes[good] = got
        keep[good] = np.asarray([t != head + "[]" for t in texts], bool)[got]  # an empty list says nothing
    seen = {t: i for i, t in enumerate(texts)}
    for i in np.flatnonzero(~balanced).tolist():
        detail = _decode_one(text, ends, int(rows[i]), decode)
        if detail is None:
            keep[i] = False
            continue
        codes[i] = seen.setdefault(detail, len(seen))
        if codes[i] == len(texts):
            texts.append(detail)
    return rows[keep], codes[keep], texts


def _value_ends(text: np.ndarray, value: np.ndarray, width: int) -> np.ndarray:
    """Position of each list value's last ``]``; -1 when its bytes do not make a list of integers, -2 when
    it runs past ``width`` bytes. Rows go ~32k bytes at a time: the (rows x width) temporaries
    of a whole block would weigh more than its text."""
    step = max(1, (1 << 15) // width)
    if value.size > step:
        return np.concatenate([_value_ends(text, value[a : a + step], width) for a in range(0, value.size, step)])
    col = np.arange(width)
    at = value[:, None] + col
    chars = text[np.minimum(at, text.size - 1)]
    inside = _LIST_BYTES[chars] & (at < text.size)
    run = np.where(inside.all(axis=1), width, np.argmin(inside, axis=1))
    last = np.where((chars == 93) & (col < run[:, None]), col, -1).max(axis=1)
    within = col <= last[:, None]
    opened = ((chars == 91) & within).sum(axis=1)
    closed = ((chars == 93) & within).sum(axis=1)
    out = np.where((last > 0) & (opened == closed), value + last, -1)
    return np.where(run >= width, -2, out)


def _decode_one(text: np.ndarray, ends: np.ndarray, row: int, decode) -> str | None:
    """The detail of one event whose value the byte scan could not settle, or None."""
    lo = int(ends[row - 1]) + 1 if row > 0 else 0
    hi = int(ends[row]) if row < ends.size else text.size
    try:
        event = orjson.loads(text[lo:hi].tobytes())
    except orjson.JSONDecodeError:
        return None
    args = event.get("args") if isinstance(event, dict) else None
    if not isinstance(args, dict):
        return None
    return decode(args)


def _decode_dims(args: dict) -> str | None:
    value = args.get("Input Dims", args.get("Input dims"))
    return dims_text(value) if value else None


def _decode_strides(args: dict) -> str | None:
    return list_text("Input Strides", args.get("Input Strides"))


def list_text(key: str, value) -> str | None:
    """``Input Strides [[2048, 1], []]``: a non-empty list argument as JSON, which is the byte scan's text
    for lists of integers; None when empty, not a list, or nested past ``DIMS_DEPTH_LIMIT``."""
    if not isinstance(value, list) or not value or _depth(value) > DIMS_DEPTH_LIMIT:
        return None
    try:
        return f"{key} {json.dumps(_plain(value))}"
    except (TypeError, ValueError):
        return None
