"""The typed boundary and the one sanitiser, value by value (``loaders.validate``, ``loaders.text``)."""

from __future__ import annotations

import time
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gaplens.loaders.model import Meta, TraceError
from gaplens.loaders.text import clean_text, shorten
from gaplens.loaders.validate import (
    MAX_SPAN_NS,
    TIME_LIMIT_NS,
    Repairs,
    as_int,
    check_events,
    clean_meta,
    clean_top,
    int_or_none,
    loose_json,
    saturating_end,
    time_ns,
)

_UNSAFE = set(range(0x20)) | set(range(0x7F, 0xA0)) | set(range(0xD800, 0xE000)) | {0x202E, 0x2066, 0x2028}


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("\x1b]0;title\x07name", "name"),  # OSC with its parameters, BEL-terminated
        ("\x1b]52;c;b3duZWQ=\x1b\\name", "name"),  # OSC 52 clipboard write, ST-terminated
        ("\x1b[2Jname\x1b[31m", "name"),  # CSI
        ("\x9b31mname", "name"),  # 8-bit CSI
        ("a\x00b\x7fc\x85d", "abcd"),  # C0, DEL, C1
        ("lone\ud800surrogate", "lone\ufffdsurrogate"),
        ("gemm\u202eevil", "gemmevil"),  # bidi override
        ("two\nlines\tand\rtab", "two lines and tab"),
        ("[bold red]x[/] [link=x]y", "[bold red]x[/] [link=x]y"),  # markup is text: sinks show it literally
        ("plain name<4>", "plain name<4>"),
    ],
)
def test_clean_text(raw: str, clean: str) -> None:
    assert clean_text(raw) == clean


def test_clean_text_keeps_newlines_on_request() -> None:
    assert clean_text("one\r\ntwo\x1b[2J\nthree", keep_newlines=True) == "one\ntwo\nthree"


@given(st.text())
def test_clean_text_leaves_nothing_a_terminal_acts_on(text: str) -> None:
    out = clean_text(text)
    assert not {ord(c) for c in out} & _UNSAFE
    out.encode("utf-8")  # printable: no lone surrogate left
    assert clean_text(out) == out


def test_trace_error_is_one_clean_short_line() -> None:
    msg = str(TraceError("file \x1b]0;x\x07name\nsecond line " + "y" * 5000))
    assert "\n" not in msg and "\x1b" not in msg and len(msg) <= 600
    assert shorten("abcdef", 4) == "abc…"


@pytest.mark.parametrize(
    ("value", "ns"),
    [
        (5, 5000),
        (Decimal("1.5"), 1500),
        ("12.25", 12250),
        (" 7 ", 7000),
        (Decimal("1712195495406752.8"), 1712195495406752800),
        (float("nan"), None),
        (float("inf"), None),
        ("Infinity", None),
        ("NaN", None),
        (Decimal("1e40"), None),
        (2**70, None),
        (True, None),
        ("abc", None),
        (None, None),
        ([], None),
    ],
)
def test_time_ns(value: object, ns: int | None) -> None:
    assert time_ns(value) == ns


def test_absurd_exponents_cost_nothing() -> None:
    t0 = time.perf_counter()
    assert time_ns(Decimal("1e999000")) is None
    assert time_ns("1e999000") is None
    assert time_ns(Decimal("1e-999000")) == 0
    assert int_or_none("9" * 5000) is None
    assert time.perf_counter() - t0 < 0.1


def test_ints_stay_int64() -> None:
    assert as_int(2**63 - 1, -1) == 2**63 - 1
    assert as_int(2**63, -1) == -1
    assert as_int("-12", 0) == -12 and as_int(3.9, 0) == 3 and as_int(float("nan"), 0) == 0
    assert int_or_none("1.5", floats=False) is None and int_or_none("1.5") == 1


def test_decimal_column_past_int64_is_unusable_not_wrapped() -> None:
    from gaplens.loaders.kineto.cols import _time

    arr = pa.array([Decimal("1.5"), Decimal("9300000000000000.5"), None, Decimal("-2")], pa.decimal128(38, 9))
    ns, ok = _time(arr, 9)
    assert ok.tolist() == [True, False, False, True]
    assert ns[ok].tolist() == [1500, -2000]


def test_ends_saturate() -> None:
    start = np.array([0, 2**63 - 10], np.int64)
    assert saturating_end(start, np.array([5, 2**62], np.int64)).tolist() == [5, 2**63 - 1]


def test_check_events_bounds_times_and_span() -> None:
    base = 1_751_410_836_000_000_000
    start = np.array([base, base + 10, base + 20, base + 3 * MAX_SPAN_NS, -(2**63) + 1], np.int64)
    end = np.array([base + 5, base, 2**63 - 1, base + 3 * MAX_SPAN_NS + 1, 0], np.int64)
    repairs = Repairs()
    keep = check_events(start, end, repairs)
    assert keep.tolist() == [True, True, True, False, False]
    assert end[1] == start[1]  # ended before it started: length 0
    assert end[2] <= base + 2 * MAX_SPAN_NS  # a 26-day-plus event is clamped
    assert all(abs(int(x)) <= TIME_LIMIT_NS for x in end[keep])
    line = repairs.line()
    assert "1 events with a time beyond int64" in line and "1 events more than 13 days" in line
    assert "\n" not in line


def test_repairs_say_everything_in_one_line() -> None:
    r = Repairs()
    assert not r and r.line() == ""
    r.note("the file is truncated")
    r.add("malformed events skipped", 3)
    r.add("malformed events skipped", 2)
    r.add("nothing", 0)
    assert r.line() == "the file is truncated; 5 malformed events skipped"


def test_clean_top_and_meta() -> None:
    repairs = Repairs()
    top = clean_top(
        {"deviceProperties": 5, "baseTimeNanoseconds": 2**70, "distributedInfo": [1], "schemaVersion": 1}, repairs
    )
    assert "deviceProperties" not in top and top["baseTimeNanoseconds"] == 0 and "distributedInfo" not in top
    assert "deviceProperties is not a list" in repairs.line() and "baseTimeNanoseconds" in repairs.line()
    meta = Meta("kineto", source_version="1\x1b[2J\nx", extra={"k\x1b]0;x\x07": [float("nan"), 2**70, {"a": "\x9b"}]})
    meta.warnings = ["two\nlines"]
    clean_meta(meta)
    assert meta.source_version == "1 x" and meta.warnings == ["two lines"]
    assert meta.extra == {"k": [None, str(2**70), {"a": ""}]}


def test_loose_json_reads_what_orjson_refuses() -> None:
    assert loose_json(b'{"a": 1}') == {"a": 1}
    big = loose_json(b'{"a": ' + str(2**70).encode() + b', "b": NaN, "c": 1e999000}')
    assert isinstance(big, dict) and big["b"] is None and big["c"] is None
    with pytest.raises(ValueError):
        loose_json(b"{nope")
