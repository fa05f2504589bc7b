"""numpy views of Arrow arrays, and first-seen factorisation.

Columns are read from the arrays' buffers directly (validity bitmaps, offsets,
values): ``Array.to_numpy`` would import pandas. Strings are dictionary-encoded by
Arrow's C++ hash table, which releases the GIL, so blocks classify in parallel; its
allocations go to the system allocator (``POOL``): Arrow's own pool keeps what it
frees (+50 MB at 1M events), where malloc hands it to the numpy work that follows.
"""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa

POOL = pa.system_memory_pool()
# Arrow's primitive types as numpy dtypes. ``DataType.to_pandas_dtype`` imports pandas in
# pyarrow <= 25 (~0.5 s and ~40 MB on a load that never shows a DataFrame).
_NUMPY = {
    t: np.dtype(d)
    for t, d in [
        (pa.int8(), np.int8),
        (pa.int16(), np.int16),
        (pa.int32(), np.int32),
        (pa.int64(), np.int64),
        (pa.uint8(), np.uint8),
        (pa.uint16(), np.uint16),
        (pa.uint32(), np.uint32),
        (pa.uint64(), np.uint64),
        (pa.float32(), np.float32),
        (pa.float64(), np.float64),
    ]
}
_P = np.uint64(0x9E3779B97F4A7C15)  # odd: multiplying by it mixes the words of a row
GATHER = 1 << 16  # bytes gathered at a time by ``encode_slices``


def factorize(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes, uniques) with uniques in order of first appearance, like ``pandas.factorize``."""
    if values.size == 0:
        return np.empty(0, np.int64), values[:0]
    codes, first = _first_seen(values)
    return codes, values[first]


def numpy_dtype(arrow_type: pa.DataType) -> np.dtype:
    """The numpy dtype of a primitive Arrow type (integers and floats)."""
    try:
        return _NUMPY[arrow_type]
    except KeyError:
        raise TypeError(f"no numpy view of Arrow type {arrow_type}") from None


def valid(arr: pa.Array) -> np.ndarray:
    """True where ``arr`` holds a value."""
    n = len(arr)
    if arr.null_count == 0:
        return np.ones(n, bool)
    if arr.null_count == n:
        return np.zeros(n, bool)
    bits = arr.buffers()[0]
    assert bits is not None
    raw = np.frombuffer(bits, np.uint8)
    return np.unpackbits(raw, bitorder="little")[arr.offset : arr.offset + n].astype(bool)


def view(arr: pa.Array) -> np.ndarray:
    """A read-only numpy view of a primitive column without nulls (``Array.to_numpy`` imports pandas)."""
    dtype = numpy_dtype(arr.type)
    data = arr.buffers()[1]
    if data is None:
        return np.empty(0, dtype)
    return np.frombuffer(data, dtype)[arr.offset : arr.offset + len(arr)]


def ints(arr: pa.Array, fill: int) -> np.ndarray:
    """An integer column as int64, ``fill`` where null."""
    n = len(arr)
    if arr.null_count == n:
        return np.full(n, fill, np.int64)
    dtype = numpy_dtype(arr.type)
    data = arr.buffers()[1]
    assert data is not None
    out = np.frombuffer(data, dtype)[arr.offset : arr.offset + n].astype(np.int64)
    if arr.null_count:
        out[~valid(arr)] = fill
    return out


def floats(arr: pa.Array) -> np.ndarray:
    """A float column as float64, NaN where null."""
    n = len(arr)
    if arr.null_count == n:
        return np.full(n, np.nan)
    data = arr.buffers()[1]
    assert data is not None
    out = np.frombuffer(data, np.float64)[arr.offset : arr.offset + n].copy()
    if arr.null_count:
        out[~valid(arr)] = np.nan
    return out


def decimal_units(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(unscaled int64 values, fits) of a decimal128 column: 1.234 at scale 3 is 1234.

    ``fits`` is False where the value is null or needs more than 64 bits.
    """
    n = len(arr)
    data = arr.buffers()[1]
    if n == 0 or data is None:
        return np.zeros(n, np.int64), np.zeros(n, bool)
    words = np.frombuffer(data, np.int64)[2 * arr.offset : 2 * (arr.offset + n)]
    low, high = words[0::2].copy(), words[1::2]
    fits = high == (low >> 63)  # the high word only extends the sign
    if arr.null_count:
        fits &= valid(arr)
    low[~fits] = 0
    return low, fits


def list_matrix(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A list-of-integers column as a (rows x longest) int64 matrix padded with 0, and each row's length.

    Null lists have length -1.
    """
    n = len(arr)
    off_buf = arr.buffers()[1]
    if n == 0 or off_buf is None or arr.null_count == n:
        return np.zeros((n, 0), np.int64), np.full(n, -1, np.int64)
    offsets = np.frombuffer(off_buf, np.int32)[arr.offset : arr.offset + n + 1].astype(np.int64)
    lengths = np.diff(offsets)
    ok = valid(arr)
    lengths[~ok] = 0
    width = int(lengths.max()) if n else 0
    out = np.zeros((n, width), np.int64)
    if width:
        values = ints(arr.values, 0)  # the whole child array; the offsets index into it
        row = np.repeat(np.arange(n), lengths)
        col = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        out[row, col] = values[offsets[row] + col]
    lengths[~ok] = -1
    return out, lengths


class Strings:
    """A string column's dictionary encoding: ``codes`` number the distinct values in order of
    first appearance, ``uniques`` holds them as ``bytes``; nulls get the code ``null_code``
    (-1 when there are none)."""

    def __init__(self, arr: pa.Array) -> None:
        n = len(arr)
        self.valid = valid(arr)
        if n == 0 or arr.null_count == n:
            self.codes, self.uniques = np.zeros(n, np.int64), []
        else:
            self.codes, values = _dictionary(arr)
            self.uniques = _binaries(values)
        self.null_code = -1
        if not self.valid.all():
            self.null_code = len(self.uniques)
            self.codes[~self.valid] = self.null_code

    @staticmethod
    def at(arr: pa.Array, rows: list[int]) -> list[str | None]:
        """The values of a few rows as text (None where null), without encoding the column."""
        ok = valid(arr)
        bufs = arr.buffers()
        if bufs[1] is None or bufs[2] is None:
            return [None] * len(rows)
        off_dtype = np.int64 if pa.types.is_large_string(arr.type) else np.int32
        offsets = np.frombuffer(bufs[1], off_dtype)[arr.offset :]
        data = memoryview(bufs[2])
        out: list[str | None] = []
        for i in rows:
            out.append(bytes(data[offsets[i] : offsets[i + 1]]).decode("utf-8", "replace") if ok[i] else None)
        return out

    def texts(self, null: str = "") -> list[str]:
        """The distinct values as text (invalid UTF-8 replaced), and ``null`` for the null code."""
        out = [b.decode("utf-8", "replace") for b in self.uniques]
        return [*out, null] if self.null_code >= 0 else out


def _dictionary(arr: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """(int64 codes in order of first appearance, the distinct values) of a string or binary column.

    Arrow's hash table in C++, with the GIL released: the parse threads classify their
    blocks side by side. Null rows get an unspecified code.
    """
    import pyarrow.compute as pc  # here, not at the top: its import (~45 ms) would delay every warm open

    enc = pc.dictionary_encode(arr, memory_pool=POOL)
    indices = enc.indices
    codes = np.frombuffer(indices.buffers()[1], np.int32)[indices.offset : indices.offset + len(indices)]
    return codes.astype(np.int64), enc.dictionary


def _binaries(values: pa.Array) -> list[bytes]:
    """The values of a (few-valued) string or binary array without nulls, as bytes."""
    bufs = values.buffers()
    if bufs[2] is None:
        return [b""] * len(values)
    large = pa.types.is_large_string(values.type) or pa.types.is_large_binary(values.type)
    offsets = np.frombuffer(bufs[1], np.int64 if large else np.int32)[values.offset : values.offset + len(values) + 1]
    data = bufs[2].to_pybytes()
    bounds = offsets.tolist()
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def encode(data: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes in order of first appearance, first row of each code) of strings ``data[offsets[i]:offsets[i+1]]``."""
    n = offsets.size - 1
    if n <= 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    arr = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), n, [None, pa.py_buffer(np.ascontiguousarray(offsets, np.int64)), pa.py_buffer(data)]
    )
    codes, values = _dictionary(arr)
    first = np.empty(len(values), np.int64)
    first[codes[::-1]] = np.arange(n - 1, -1, -1)  # the last write wins: each code's first row
    return codes, first


def encode_slices(
    data: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``encode`` for the byte ranges [starts, ends) of ``data``: (codes, first, the ranges joined, row offsets).

    The bytes are gathered ``GATHER`` at a time: each byte's source index is an int64, so a
    whole block's would weigh 16 times what is gathered (the parse threads keep their peaks).
    """
    lengths = ends - starts
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    joined = np.empty(int(offsets[-1]), data.dtype)
    bounds = np.searchsorted(offsets, np.arange(0, joined.size, GATHER), "right") - 1
    for a, b in itertools.pairwise([*bounds.tolist(), starts.size]):
        lo, hi = int(offsets[a]), int(offsets[b])
        if hi > lo:
            src = np.repeat(starts[a:b] - offsets[a:b], lengths[a:b])
            src += np.arange(lo, hi)
            joined[lo:hi] = data[src]
    codes, first = encode(joined, offsets)
    return codes, first, joined, offsets


def _first_seen(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Codes in order of first appearance, and the index of each code's first row."""
    n = key.size
    if n and key.dtype.kind in "iu":
        lo, hi = int(key.min()), int(key.max())
        if hi - lo <= 4 * n + 1024:  # small range (bytes, codes): a table instead of a sort
            present = np.zeros(hi - lo + 1, bool)
            present[key - lo] = True
            inverse = np.cumsum(present, dtype=np.int64)[key - lo] - 1
            return _ranked(inverse, n)
    if n > 100_000:
        # Few distinct values among many (lanes, names, ids of an nsys table): numpy's hashed
        # unique plus a binary search into it beats sorting all n (3x at 10M); a strided
        # sample decides, the result is exact either way.
        sample = key[:: n // 10_000]
        if np.unique(sample).size * 20 < sample.size:
            uniq = np.unique(key)
            return _ranked(np.searchsorted(uniq, key), n)
    _, inverse = np.unique(key, return_inverse=True)  # no return_index: that asks for a slower stable sort
    return _ranked(inverse.reshape(-1), n)


def _ranked(inverse: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Codes 0..k-1 renumbered in order of first appearance, and each one's first row."""
    first = np.full(int(inverse.max()) + 1 if n else 0, n, np.int64)
    first[inverse[::-1]] = np.arange(n - 1, -1, -1)  # the last write wins: each code's first row
    order = np.argsort(first)
    rank = np.empty(order.size, np.int64)
    rank[order] = np.arange(order.size)
    return rank[inverse], first[order]


def encode_rows(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``_first_seen`` for the rows of an int64 matrix: hashed to one key, then confirmed row for row."""
    n = matrix.shape[0]
    if n == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    words = matrix.view(np.uint64)
    codes, first = _first_seen(_row_hash(words, np.zeros(n, np.uint64)))
    if np.array_equal(matrix, matrix[first[codes]]):
        return codes, first
    _, first, inverse = np.unique(matrix, axis=0, return_index=True, return_inverse=True)  # a collision
    return _first_seen(first[inverse.reshape(-1)])


def _row_hash(words: np.ndarray, h: np.ndarray) -> np.ndarray:
    """A multiplicative hash of each row of 64-bit words, seeded with ``h`` (updated in place)."""
    with np.errstate(over="ignore"):
        for j in range(words.shape[1]):
            h *= _P
            h += words[:, j]
    return h
