"""Rows × viewport → glyph and style runs, in numpy; no Textual here.

Per cell the raster never visits events: it binary-searches cell edges and reads
prefix sums of busy time, so one row costs O(cols × log n) whatever the trace size.

    B(t) = busy time on the row before t        cell c = [L, R)
    coverage(c) = (B(R) − B(L)) / (R − L)       events touching c = hi(R) − lo(L)

One event in a cell draws a bar edge in eighths (``▏▎▍▌▋▊▉█``); several draw a
density shade (`` ░▒▓█``) by coverage; a run of cells of one event carries its name.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from gaplens.analysis.calls import Call, api_class
from gaplens.analysis.comm import comm_mask
from gaplens.loaders.model import Kind, Trace


class Style(IntEnum):
    """Base style of a cell; each maps to the TCSS component class ``timeline--<name>``."""

    EMPTY = 0
    KERNEL = 1
    GEMM = 2
    ATTENTION = 3
    ELEMENTWISE = 4
    COMM = 5  # communication kernels: ``analysis.comm`` decides which
    HTOD = 6
    DTOH = 7
    DTOD = 8
    MEMSET = 9
    SYNC = 10
    LAUNCH = 11
    API = 12
    CPU = 13
    PYTHON = 14
    ANNOTATION = 15
    OSRT = 16
    GRAPH = 17
    OVERHEAD = 18
    BUSY = 19
    PHASE = 20
    GAP = 21
    GAP_LARGEST = 22


STYLE_CLASSES = tuple(f"timeline--{s.name.lower().replace('_', '-')}" for s in Style)

# Flags above the base style (5 bits); the widget resolves each combination once.
BASE_MASK = 31
REV = 1 << 5  # right-aligned edge: glyph drawn with fg/bg swapped
LABEL = 1 << 6  # a character of an event name inside its bar
MATCH = 1 << 7  # a search match touches the cell
SELECTED = 1 << 8  # the selected event covers the cell
CURSOR = 1 << 9  # the time cursor column
MARKER = 1 << 10  # the column of marker A or B

MIN_LABEL_CELLS = 6  # a bar shorter than this shows no name (``de…`` says nothing)
SHADES = " ░▒▓█"
EIGHTHS = " ▏▎▍▌▋▊▉█"  # left-aligned: index = eighths filled
FULL = ord("█")
_SPACE = ord(" ")
_SHADE_CODES = np.frombuffer(SHADES.encode("utf-32-le"), dtype=np.uint32).copy()
_EIGHTH_CODES = np.frombuffer(EIGHTHS.encode("utf-32-le"), dtype=np.uint32).copy()
# Right-aligned fill of g eighths: ▕ and ▐ exist as glyphs; the rest reverse a left eighth.
_HEAD_CODES = _EIGHTH_CODES[8 - np.arange(9)].copy()
_HEAD_CODES[[1, 4, 8]] = [ord("▕"), ord("▐"), FULL]
_HEAD_REV = np.ones(9, dtype=bool)
_HEAD_REV[[0, 1, 4, 8]] = False
GAP_GLYPH = ord("·")
GAP_LARGEST_GLYPH = ord("━")

# Monochrome: each kind keeps a distinct fill glyph so kinds stay apart without colour.
MONO_FILL = {
    Style.HTOD: ">",
    Style.DTOH: "<",
    Style.DTOD: "=",
    Style.MEMSET: "#",
    Style.SYNC: "~",
    Style.LAUNCH: "^",
    Style.API: "-",
    Style.CPU: "▀",
    Style.PYTHON: "▀",
    Style.ANNOTATION: "▔",
    Style.OSRT: ":",
    Style.OVERHEAD: ".",
    Style.PHASE: "▔",
}

_KIND_STYLE = {
    Kind.CPU_OP: Style.CPU,
    Kind.PYTHON: Style.PYTHON,
    Kind.ANNOTATION: Style.ANNOTATION,
    Kind.CUDA_API: Style.API,
    Kind.SYNC: Style.SYNC,
    Kind.KERNEL: Style.KERNEL,
    Kind.MEMCPY_HTOD: Style.HTOD,
    Kind.MEMCPY_DTOH: Style.DTOH,
    Kind.MEMCPY_DTOD: Style.DTOD,
    Kind.MEMCPY_PEER: Style.DTOD,
    Kind.MEMCPY_OTHER: Style.DTOD,
    Kind.MEMSET: Style.MEMSET,
    Kind.OSRT: Style.OSRT,
    Kind.GPU_ANNOTATION: Style.ANNOTATION,
    Kind.OVERHEAD: Style.OVERHEAD,
    Kind.MARK: Style.ANNOTATION,
    Kind.GRAPH: Style.GRAPH,
}
# Compute kernels by name, for colour only (no reading depends on these families).
_KERNEL_PATTERNS = (
    (Style.ATTENTION, re.compile(r"flash|attn|attention|fmha|sdpa|mha", re.I)),
    (Style.GEMM, re.compile(r"gemm|gemv|nvjet|cutlass|xmma|wgmma|matmul|cublas|sm\d+_.*_tn|_mm_", re.I)),
    (Style.ELEMENTWISE, re.compile(r"elementwise|vectorized|unrolled|reduce|fill|copy|index|cat|softmax|norm", re.I)),
)
_LAUNCH_NAME = re.compile(r"launch", re.I)


def event_styles(trace: Trace) -> np.ndarray:
    """Base style per event: kind first, then kernel and API names refine it (vectorised over names).

    Which kernels are communication is ``analysis.comm``'s rule (its family table, ``Collective name``,
    kernels under NCCL ranges) and which calls block the host is ``analysis.calls``'s: the viewer
    paints what the readings count.
    """
    kind, name_id, names = trace.kind, trace.name_id, trace.names
    table = np.full(max(int(k) for k in Kind) + 1, int(Style.KERNEL), dtype=np.int16)
    for k, s in _KIND_STYLE.items():
        table[int(k)] = int(s)
    style = table[kind.astype(np.int64)]
    kernel_by_name = np.full(len(names) + 1, int(Style.KERNEL), dtype=np.int16)
    launch_by_name = np.zeros(len(names) + 1, dtype=bool)
    for i, name in enumerate(names):  # once per distinct name, not per event
        kernel_by_name[i] = next((int(s) for s, p in _KERNEL_PATTERNS if p.search(name)), int(Style.KERNEL))
        launch_by_name[i] = _LAUNCH_NAME.search(name) is not None
    is_kernel = kind == int(Kind.KERNEL)
    style[is_kernel] = kernel_by_name[name_id[is_kernel]]
    style[comm_mask(trace)] = int(Style.COMM)
    is_api = kind == int(Kind.CUDA_API)
    calls = api_class(trace)
    style[is_api] = np.where(launch_by_name[name_id[is_api]], int(Style.LAUNCH), int(Style.API))
    style[is_api & (calls == int(Call.SYNC))] = int(Style.SYNC)
    return style


@dataclass(frozen=True)
class RowData:
    """Sorted, mostly disjoint intervals of one drawn row, with prefix sums of their lengths.

    ``cum[i]`` is the total length of intervals before ``i`` (``cum`` has n + 1 entries).
    For a trace row these are views into the trace columns and ``base`` is the global
    index of interval 0; synthetic rows (device busy, phases, gaps) have ``base`` −1.
    """

    start: np.ndarray
    end: np.ndarray
    maxend: np.ndarray
    cum: np.ndarray
    style: np.ndarray | int
    base: int = -1
    labels: list[str] | None = None  # names of a synthetic row's intervals

    @classmethod
    def of_spans(cls, start, end, style: int, labels: list[str] | None = None) -> RowData:
        """A synthetic row from sorted intervals (disjoint or nearly so)."""
        start = np.asarray(start, dtype=np.int64)
        end = np.asarray(end, dtype=np.int64)
        cum = np.concatenate(([0], np.cumsum(end - start)))
        maxend = np.maximum.accumulate(end) if end.size else end
        return cls(start, end, maxend, cum, int(style), labels=labels)

    def __len__(self) -> int:
        return int(self.start.size)

    def busy_before(self, t: np.ndarray, k: np.ndarray | None = None) -> np.ndarray:
        """B(t) for ascending times; ``k`` = number of intervals starting before each t, if known."""
        if self.start.size == 0:
            return np.zeros(t.size, dtype=np.int64)
        if k is None:
            k = np.searchsorted(self.start, t, "left")
        j = np.maximum(k - 1, 0)
        s = self.start[j]
        # Only the last interval starting before t can be cut by t (rows are disjoint).
        part = np.minimum(t - s, self.end[j] - s)
        return np.where(k > 0, self.cum[j] - self.cum[0] + part, 0)


@dataclass
class Raster:
    """One row rasterised: code points and style ids per cell, plus what touched each cell."""

    codes: np.ndarray  # uint32 code point per cell
    style: np.ndarray  # int16 base style | flags
    lo: np.ndarray  # first event (local index) touching the cell
    hi: np.ndarray  # one past the last event touching the cell
    coverage: np.ndarray

    @property
    def text(self) -> str:
        return self.codes.astype("<u4").tobytes().decode("utf-32-le")


def coverage(row: RowData, edges: np.ndarray) -> np.ndarray:
    """Busy fraction of each cell, in [0, 1]."""
    b = row.busy_before(edges)
    width = np.maximum(np.diff(edges), 1)
    return np.clip(np.diff(b) / width, 0.0, 1.0)


def raster_row(row: RowData, edges: np.ndarray, mono: bool = False) -> Raster:
    """Glyphs and base styles of one row over cell ``edges`` (cols + 1 ascending ns).

    Two binary searches per cell edge, then gathers of at most two events per cell.
    """
    if row.start.size == 0:
        return _blank(edges.size - 1)
    k = np.searchsorted(row.start, edges, "left")  # intervals starting before each edge
    lo = np.searchsorted(row.maxend, edges[:-1], "right")  # first interval ending after L
    return _cells(row.start, row.end, row.cum, row.style, k, lo, 0, row.start.size - 1, edges, mono)


def raster_rows(rows: list[RowData], columns: tuple, edges: np.ndarray, mono: bool = False) -> list[Raster]:
    """Rasters of several trace rows in one vectorised pass over a (rows × cols) grid.

    ``columns`` = (start, end, cum, style) of the whole trace; each row is a slice of
    them at ``row.base``, so after two searches per row every step runs once per frame.
    """
    start, end, cum, style = columns
    rows_n = len(rows)
    cols = edges.size - 1
    k = np.empty((rows_n, cols + 1), np.int64)
    lo = np.empty((rows_n, cols), np.int64)
    for r, row in enumerate(rows):  # per visible row: two binary searches
        k[r] = row.base + np.searchsorted(row.start, edges, "left")
        lo[r] = row.base + np.searchsorted(row.maxend, edges[:-1], "right")
    base = np.asarray([row.base for row in rows], np.int64)[:, None]
    last = base + np.asarray([max(len(row), 1) - 1 for row in rows], np.int64)[:, None]
    grid = _cells(start, end, cum, style, k, lo, base, last, edges, mono)
    return [
        Raster(grid.codes[r], grid.style[r], grid.lo[r] - base[r], grid.hi[r] - base[r], grid.coverage[r])
        for r in range(rows_n)
    ]


def _blank(cols: int) -> Raster:
    z = np.zeros(cols, np.int64)
    return Raster(np.full(cols, _SPACE, np.uint32), np.zeros(cols, np.int16), z, z, np.zeros(cols))


def _cells(start, end, cum, styles, k, lo, base, last, edges, mono: bool) -> Raster:
    """The per-cell rules, on one row (1-D) or a grid of rows (2-D); indices are positions in the columns.

    ``k``: intervals starting before each edge; ``lo``: first interval ending after each
    left edge; ``base``/``last``: each row's first and last position.
    """
    left, right = edges[:-1], edges[1:]
    # B(t): busy time before t; only the last interval starting before t can be cut by t.
    jb = np.maximum(k - 1, base)
    sb = start[jb]
    b = np.where(k > base, cum[jb] + np.minimum(edges - sb, end[jb] - sb), cum[base])
    width = np.maximum(right - left, 1)
    cov = np.clip((b[..., 1:] - b[..., :-1]) / width, 0.0, 1.0)
    hi = k[..., 1:]  # one past the last interval starting before R
    n = hi - lo
    shade = np.clip(np.ceil(cov * 4), 1, 4).astype(np.intp)
    # Several intervals: density shade by coverage; any touch shows at least ░.
    codes = np.where(n >= 2, _SHADE_CODES[shade], _SPACE).astype(np.uint32)

    one = n == 1
    j = np.minimum(lo, last)
    s, e = start[j], end[j]
    starts_before = s <= left
    runs_on = e >= right
    codes[one & starts_before & runs_on] = FULL
    # Bar ends inside the cell: left-aligned eighths.
    tail = one & starts_before & ~runs_on
    f = np.clip(np.rint((e - left) * 8 / width), 1, 8).astype(np.intp)
    codes[tail] = _EIGHTH_CODES[f[tail]]
    # Bar starts inside the cell and runs on: right-aligned, drawn as the reverse of the gap.
    head = one & ~starts_before & runs_on
    g = np.clip(np.rint((right - s) * 8 / width), 1, 8).astype(np.intp)
    codes[head] = _HEAD_CODES[g[head]]
    rev = head & _HEAD_REV[g]
    # A lone interval inside the cell: shade by how much of it it fills.
    inside = one & ~starts_before & ~runs_on
    codes[inside] = _SHADE_CODES[shade[inside]]

    touched = n >= 1
    if isinstance(styles, int):
        style = np.where(touched, styles, 0).astype(np.int16)
    else:
        # Colour of a busy cell: the longer of the first and last interval touching it.
        h = np.clip(hi - 1, base, last)
        longer = np.where((end[h] - start[h]) > (e - s), h, j)
        style = np.where(touched, styles[longer], 0).astype(np.int16)
    style[rev] |= REV
    if mono:
        _mono_fill(codes, style, touched & (n < 2))
    return Raster(codes, style, lo, hi, cov)


def _mono_fill(codes: np.ndarray, style: np.ndarray, where: np.ndarray) -> None:
    """Swap bar glyphs for the kind's own fill so kinds differ without colour."""
    fill = np.full(BASE_MASK + 1, 0, dtype=np.uint32)
    for s, ch in MONO_FILL.items():
        fill[int(s)] = ord(ch)
    f = fill[style & BASE_MASK]
    swap = where & (f > 0) & (codes != ord(" "))
    codes[swap] = f[swap]
    style[swap] &= ~REV


def mark_gaps(r: Raster, gaps: RowData, largest: tuple[int, int] | None, edges: np.ndarray) -> None:
    """Empty cells mostly inside a marked blank region get ``·``; the largest gets ``━``."""
    empty = r.hi - r.lo <= 0
    if len(gaps):
        inside = empty & (coverage(gaps, edges) >= 0.5)
        r.codes[inside] = GAP_GLYPH
        r.style[inside] = int(Style.GAP)
    if largest is not None:
        a, b = largest
        left, right = edges[:-1], edges[1:]
        overlap = np.minimum(right, b) - np.maximum(left, a)
        # The largest wins over the events sharing its cells, so it shows even zoomed out.
        hit = (overlap * 2 >= np.maximum(right - left, 1)) | (empty & (overlap > 0))
        # Zoomed far out it is narrower than a cell: its middle cell still shows it.
        mid = (a + b) // 2
        hit |= (left <= mid) & (mid < right)
        r.codes[hit] = GAP_LARGEST_GLYPH
        r.style[hit] = int(Style.GAP_LARGEST)


def mark_events(r: Raster, row: RowData, events: np.ndarray, flag: int) -> None:
    """Flag cells touched by any of ``events`` (sorted global indices), e.g. search matches."""
    if row.base < 0 or events.size == 0:
        return
    a = np.searchsorted(events, row.base + r.lo, "left")
    b = np.searchsorted(events, row.base + r.hi, "left")
    hit = (b > a) & (r.hi > r.lo)
    r.style[hit] |= flag


def mark_span(r: Raster, edges: np.ndarray, t0: int, t1: int, flag: int) -> None:
    """Flag the cells overlapping [t0, t1) (the selected event)."""
    left, right = edges[:-1], edges[1:]
    hit = (right > t0) & ((left < t1) | ((t0 == t1) & (left <= t0)))
    r.style[hit] |= flag


def put_labels(r: Raster, row: RowData, names: list[str], name_id: np.ndarray | None) -> None:
    """Write each event's name inside its bar where a run of its cells leaves room.

    Trace rows look names up through ``name_id`` (global); synthetic rows carry ``row.labels``.
    """
    if (row.base < 0 or name_id is None) and row.labels is None:
        return
    solid = (r.hi - r.lo == 1) & (r.coverage >= 1.0)  # whole cells of one event (any fill glyph)
    if int(solid.sum()) < MIN_LABEL_CELLS:
        return
    ev = np.where(solid, r.lo, -1)
    change = np.flatnonzero(np.diff(ev) != 0) + 1
    starts = np.concatenate(([0], change))
    stops = np.concatenate((change, [ev.size]))
    keep = (ev[starts] >= 0) & (stops - starts >= MIN_LABEL_CELLS)
    for a, b in zip(starts[keep].tolist(), stops[keep].tolist(), strict=True):  # per run of cells
        room = b - a - 2
        k = int(r.lo[a])
        if row.labels is not None:
            name = row.labels[k]
        else:
            assert name_id is not None  # the guard above: a row without labels is a trace row with name ids
            name = names[int(name_id[row.base + k])]
        text = _one_cell_chars(name if len(name) <= room else name[: max(room - 1, 1)] + "…")
        codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        r.codes[a + 1 : a + 1 + codes.size] = codes
        r.style[a + 1 : a + 1 + codes.size] |= LABEL


_ZERO_WIDTH = {"Mn", "Me", "Cf", "Cc", "Zl", "Zp"}


def _one_cell_chars(text: str) -> str:
    """Replace wide and zero-width characters so a label never shifts the columns after it."""
    if text.isascii():
        return text
    return "".join(
        "?" if unicodedata.east_asian_width(ch) in "WF" or unicodedata.category(ch) in _ZERO_WIDTH else ch
        for ch in text
    )


def runs(r: Raster) -> list[tuple[str, int]]:
    """(text, style id) runs of equal style, left to right."""
    text = r.text
    change = np.flatnonzero(np.diff(r.style)) + 1
    bounds = [0, *change.tolist(), r.style.size]
    styles = r.style[np.asarray(bounds[:-1], dtype=np.int64)].tolist()
    return [(text[a:b], s) for a, b, s in zip(bounds[:-1], bounds[1:], styles, strict=True)]
