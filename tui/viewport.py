"""The visible time span mapped onto terminal columns, and the ruler drawn above it.

A Viewport is an immutable value: every zoom or pan returns a new one, so the
widget can compare old and new to decide whether its cached strips are stale.

    t0_ns                                              t0_ns + span_ns
    |  col 0  |  col 1  |  ...                 | col cols-1 |
    edges[0]  edges[1]                                    edges[cols]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

#: Deepest zoom: one nanosecond per column (the trace clock's resolution).
MIN_NS_PER_COL = 1.0


@dataclass(frozen=True)
class Viewport:
    """``span_ns`` of time starting at ``t0_ns`` drawn over ``cols`` character cells."""

    t0_ns: float
    span_ns: float
    cols: int
    lo_ns: int = 0  # the pannable extent (trace or phase)
    hi_ns: int = 1

    @classmethod
    def fit(
        cls, lo_ns: int, hi_ns: int, cols: int, margin: float = 0.01, extent: tuple[int, int] | None = None
    ) -> Viewport:
        """The whole [lo, hi) with a small margin so edge events are not cut; pannable over ``extent``."""
        span = max(float(hi_ns - lo_ns), max(cols, 1) * MIN_NS_PER_COL)
        pad = span * margin
        e_lo, e_hi = extent if extent is not None else (lo_ns, hi_ns)
        e_lo, e_hi = min(e_lo, lo_ns), max(e_hi, hi_ns)
        return cls(lo_ns - pad, span + 2 * pad, max(cols, 1), e_lo, max(e_hi, e_lo + 1))

    # ---- mapping ----------------------------------------------------------
    @property
    def t1_ns(self) -> float:
        return self.t0_ns + self.span_ns

    @property
    def ns_per_col(self) -> float:
        return self.span_ns / self.cols

    def edges(self) -> np.ndarray:
        """Integer cell boundaries (cols + 1) in ns; cell c is [edges[c], edges[c+1])."""
        e = self.t0_ns + self.span_ns * (np.arange(self.cols + 1, dtype=np.float64) / self.cols)
        return np.floor(e).astype(np.int64)

    def col_of(self, t_ns: float) -> int:
        return math.floor((t_ns - self.t0_ns) / self.ns_per_col)

    def time_of(self, col: float) -> float:
        return self.t0_ns + col * self.ns_per_col

    def contains(self, t0_ns: float, t1_ns: float) -> bool:
        return t0_ns >= self.t0_ns and t1_ns <= self.t1_ns

    # ---- moves (each returns a clamped new viewport) ----------------------
    def with_cols(self, cols: int) -> Viewport:
        """Same time span over a new width (terminal resize)."""
        return self._clamped(self.t0_ns, self.span_ns, max(cols, 1))

    def zoom(self, factor: float, anchor_ns: float | None = None) -> Viewport:
        """Scale the span by ``factor`` (< 1 zooms in) keeping ``anchor_ns`` on its column."""
        anchor = self.t0_ns + self.span_ns / 2 if anchor_ns is None else anchor_ns
        span = self.span_ns * factor
        frac = (anchor - self.t0_ns) / self.span_ns
        return self._clamped(anchor - frac * span, span, self.cols)

    def pan(self, cols: float) -> Viewport:
        return self._clamped(self.t0_ns + cols * self.ns_per_col, self.span_ns, self.cols)

    def show(self, t0_ns: float, t1_ns: float, fill: float = 0.6) -> Viewport:
        """Frame [t0, t1) so it takes ``fill`` of the width, centred."""
        span = max(t1_ns - t0_ns, 1) / fill
        mid = (t0_ns + t1_ns) / 2
        return self._clamped(mid - span / 2, span, self.cols)

    def reveal(self, t0_ns: float, t1_ns: float) -> Viewport:
        """Pan (zooming out only if needed) so [t0, t1) is in view; keep zoom otherwise."""
        if self.contains(t0_ns, t1_ns):
            return self
        if t1_ns - t0_ns > self.span_ns * 0.9:
            return self.show(t0_ns, t1_ns)
        mid = (t0_ns + t1_ns) / 2
        return self._clamped(mid - self.span_ns / 2, self.span_ns, self.cols)

    def with_extent(self, lo_ns: int, hi_ns: int) -> Viewport:
        return replace(self, lo_ns=lo_ns, hi_ns=max(hi_ns, lo_ns + 1))

    def _clamped(self, t0: float, span: float, cols: int) -> Viewport:
        extent = float(self.hi_ns - self.lo_ns)
        max_span = max(extent * 1.5, cols * MIN_NS_PER_COL)
        span = min(max(span, cols * MIN_NS_PER_COL), max_span)
        # Allow a little overscroll past either end, never a screen of nothing.
        slack = span * 0.25
        t0 = min(max(t0, self.lo_ns - slack), self.hi_ns + slack - span)
        if span >= extent:
            t0 = min(t0, float(self.lo_ns))
            t0 = max(t0, self.hi_ns - span)
        return Viewport(t0, span, cols, self.lo_ns, self.hi_ns)


# ---- the ruler ----------------------------------------------------------------

_UNITS = ((1e9, "s"), (1e6, "ms"), (1e3, "µs"), (1.0, "ns"))


def tick_step_ns(ns_per_col: float, min_cols: int = 12) -> float:
    """A 1/2/5 × 10^k step at least ``min_cols`` columns wide."""
    want = max(ns_per_col * min_cols, 1.0)
    exp = 10 ** math.floor(math.log10(want))
    for m in (1, 2, 5, 10):
        if m * exp >= want:
            return float(m * exp)
    return float(10 * exp)


def fmt_tick(t_ns: float, step_ns: float) -> str:
    """A tick label in the unit of the larger of value and step, with the decimals the step needs."""
    mag = max(abs(t_ns), step_ns)
    for scale, unit in _UNITS:
        if mag >= scale or unit == "ns":
            decimals = max(0, -math.floor(math.log10(step_ns / scale) + 1e-9))
            return f"{t_ns / scale:.{decimals}f}{unit}"
    return f"{t_ns:.0f}ns"  # pragma: no cover


def ruler_text(vp: Viewport, min_cols: int = 12) -> str:
    """One line of ``cols`` characters: ``▏`` at each tick followed by its label.

    Deep zoom far from the origin would need long absolute labels (``467.562381ms``);
    then the first tick carries the absolute time and the others an offset (``+20ns``).
    """
    step = tick_step_ns(vp.ns_per_col, min_cols)
    chars = [" "] * vp.cols
    first = math.ceil(vp.t0_ns / step) * step
    relative = len(fmt_tick(first, step)) > min_cols - 3
    t = first
    while t < vp.t1_ns:
        col = vp.col_of(t)
        if relative and t != first:
            text = "+" + fmt_tick(t - first, step)
        else:
            text = fmt_tick(t, step)
        if 0 <= col < vp.cols:
            for i, ch in enumerate("▏" + text):
                if col + i < vp.cols:
                    chars[col + i] = ch
        t += step
    return "".join(chars)
