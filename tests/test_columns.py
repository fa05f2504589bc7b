"""The string dictionary encoding every Kineto block goes through, against a Python dict."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from gaplens.loaders.columns import Strings, encode, encode_slices

# Few distinct values among many rows (names repeat), empty and long ones, bytes that are not UTF-8.
_VALUES = st.one_of(st.sampled_from([b"", b"a", b"aa", b"\xff\xfe", b"x" * 300]), st.binary(max_size=90))


def _reference(values: list[bytes | None]) -> tuple[list[int], list[bytes]]:
    """Codes in order of first appearance (nulls: the next code after the values), and the values."""
    seen: dict[bytes, int] = {}
    for v in values:
        if v is not None:
            seen.setdefault(v, len(seen))
    return [seen[v] if v is not None else len(seen) for v in values], list(seen)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), _VALUES), max_size=60), st.integers(0, 3))
def test_strings_number_values_in_order_of_first_appearance(values, offset):
    """Codes, values and text as a dict gives them, for string columns with nulls, and sliced ones."""
    arr = pa.array([b"pad"] * offset + values, pa.binary()).cast(pa.string(), safe=False)[offset:]
    s = Strings(arr)
    codes, uniques = _reference(values)
    assert s.uniques == uniques
    assert s.codes.tolist() == codes
    assert s.null_code == (len(uniques) if None in values else -1)
    assert s.texts("null") == [u.decode("utf-8", "replace") for u in uniques] + (["null"] if None in values else [])


@settings(max_examples=200, deadline=None)
@given(st.lists(_VALUES, min_size=1, max_size=60))
def test_encode_gives_codes_and_first_rows(values):
    data = np.frombuffer(b"".join(values), np.uint8)
    offsets = np.concatenate(([0], np.cumsum([len(v) for v in values]))).astype(np.int64)
    codes, first = encode(data, offsets)
    expected, uniques = _reference(values)
    assert codes.tolist() == expected
    assert [values[i] for i in first.tolist()] == uniques
    assert first.tolist() == sorted(first.tolist())


def test_encode_slices_joins_the_ranges_it_encodes():
    text = np.frombuffer(b"[1, 2] x [3] y [1, 2] z [3]", np.uint8)
    starts, ends = np.array([0, 9, 15, 24]), np.array([6, 12, 21, 27])
    codes, first, joined, offsets = encode_slices(text, starts, ends)
    assert codes.tolist() == [0, 1, 0, 1]
    assert first.tolist() == [0, 1]
    assert joined.tobytes() == b"[1, 2][3][1, 2][3]"
    assert offsets.tolist() == [0, 6, 9, 15, 18]


@settings(max_examples=80, deadline=None)
@given(
    st.binary(min_size=1, max_size=400),
    st.lists(st.tuples(st.integers(0, 399), st.integers(0, 30)), max_size=60),
    st.integers(1, 64),
)
def test_encode_slices_gathers_any_ranges_in_pieces(data, ranges, gather):
    """Gathered ``GATHER`` bytes at a time, the ranges come out joined and numbered whatever the piece size."""
    from gaplens.loaders import columns

    text = np.frombuffer(data, np.uint8)
    starts = np.asarray([min(s, text.size - 1) for s, _ in ranges], np.int64)
    ends = np.asarray([min(s + n, text.size) for s, (_, n) in zip(starts.tolist(), ranges, strict=True)], np.int64)
    before, columns.GATHER = columns.GATHER, gather
    try:
        codes, first, joined, offsets = encode_slices(text, starts, ends)
    finally:
        columns.GATHER = before
    values = [data[s:e] for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]
    assert joined.tobytes() == b"".join(values)
    assert offsets.tolist() == [0, *np.cumsum([len(v) for v in values]).tolist()]
    assert [values[i] for i in first.tolist()] == list(dict.fromkeys(values))
    assert [values[i] for i in first[codes].tolist()] == values
