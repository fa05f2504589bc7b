"""Human units for nanosecond durations and byte counts (shared by TUI, CLI and report)."""

from __future__ import annotations


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
