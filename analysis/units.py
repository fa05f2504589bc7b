"""Human units for nanosecond durations and byte counts (shared by TUI, CLI and report)."""

from __future__ import annotations

import re


def fmt_ns(ns: float, digits: int = 3) -> str:
    """``1234567`` -> ``1.23 ms``: the largest unit that keeps the number >= 1."""
    v = float(ns)
    sign = "-" if v < 0 else ""
    v = abs(v)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if v >= scale:
            return f"{sign}{_sig(v / scale, digits)} {unit}"
    return f"{sign}{_sig(v, digits)} ns"


def fmt_bytes(n: float) -> str:
    v = float(n)
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if v >= scale:
            return f"{_sig(v / scale, 3)} {unit}"
    return f"{int(v)} B"


def _sig(v: float, digits: int) -> str:
    if v >= 10**digits:
        return f"{v:.0f}"
    text = f"{v:.{digits}g}"
    return text


_UNIT_NS = {"s": 1e9, "ms": 1e6, "us": 1e3, "µs": 1e3, "μs": 1e3, "ns": 1.0}
_TIME = re.compile(r"^\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[-+]?\d+)?)\s*(s|ms|us|µs|μs|ns)?\s*$", re.IGNORECASE)


def parse_ns(text: str, default_unit: str = "ms") -> int:
    """``"12.5ms"`` -> ``12500000``: a time typed with an optional unit (s, ms, µs/us, ns; ``default_unit`` if none).

    Raises ``ValueError`` with a one-line message for anything else.
    """
    m = _TIME.match(text)
    if m is None:
        raise ValueError(f"not a time: {text.strip()!r} (try 12.5ms, 300us, 1.2s)")
    unit = (m.group(2) or default_unit).lower()
    return round(float(m.group(1)) * _UNIT_NS[unit])
