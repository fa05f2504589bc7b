"""``F``: the roofline. Op families by arithmetic intensity (FLOP/B) against achieved FLOP/s, on log axes.

    achieved   ┤                  ───────── bf16 roof
    FLOP/s     ┤           ╱ ●1
               ┤      ╱ ●2           memory slope: bandwidth × intensity
               ┤  ╱   ·3
               └──────────────── FLOP per byte

Each point is one op family (name and dtype) with FLOPs; its glyph grows with its share of the
sized time (· • ●) and carries its rank in the table below. Memory-only families (no FLOPs:
elementwise, norms, copies) have no intensity and sit in the table only. Enter on a row: the
family's longest instance on the timeline; ``v`` hides the chart (the table alone). On a short
terminal the chart gives up rows to the table (``plot_height``). Numbers come from ``analysis.floor``
(``floors``, ``windows``), the ones ``gaplens floor`` prints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from gaplens.analysis.floor.floors import floors
from gaplens.analysis.floor.gpuspecs import DTYPES, GpuSpec
from gaplens.analysis.floor.roof import intensity, per_second
from gaplens.analysis.floor.windows import op_rows
from gaplens.analysis.units import fmt_ns
from gaplens.loaders.model import Trace, clean_name
from gaplens.tui.screens.tables import cell, fill

#: Plot area in character cells (fixed width, so it fits 80 columns; the height is PLOT_H where the screen allows).
PLOT_W, PLOT_H = 60, 14
#: Fewest plot rows drawn: two per decade of a 3-decade range still puts each roof on a line of its own.
PLOT_MIN_H = 6
#: Table rows kept on screen before the plot takes its full height: at 80x24 the table had room for 2 of them.
TABLE_MIN_ROWS = 8
#: Screen rows besides the title, the plot with its axes and the table's rows: the table's header, the footer.
TABLE_CHROME_ROWS = 2
#: Points drawn with a rank label; the rest are only in the table.
MAX_POINTS = 9
#: Glyph by share of the sized time: at least 20% ●, at least 5% •, else ·.
GLYPHS = ((0.20, "●"), (0.05, "•"), (0.0, "·"))
#: Rows of the table.
MAX_TABLE = 200


@dataclass
class RooflineReady(Message):
    rows: list[dict]
    spec: GpuSpec | None
    device_name: str
    why: str


def plot_height(free_rows: int) -> int:
    """Plot rows where ``free_rows`` are left below the title and beside the plot's axes: PLOT_H, less where the
    table would keep fewer than TABLE_MIN_ROWS rows, never under PLOT_MIN_H."""
    return max(PLOT_MIN_H, min(PLOT_H, free_rows - TABLE_CHROME_ROWS - TABLE_MIN_ROWS))


def _log(v: float) -> float:
    return math.log10(max(v, 1e-30))


def plot(rows: list[dict], spec: GpuSpec | None, width: int = PLOT_W, height: int = PLOT_H) -> Text:
    """The roofline in character cells: roofs per dtype, the memory slope, the families as ranked points."""
    pts = [(k, r) for k, r in enumerate(rows, 1) if r["flops"] and r["bytes"] and r["sized_ns"] > 0][:MAX_POINTS]
    peaks = sorted(spec.peak_flops.items(), key=lambda kv: -kv[1]) if spec else []
    xs = [_log(intensity(r["flops"], r["bytes"])) for _, r in pts]
    ys = [_log(per_second(r["flops"], r["sized_ns"]) or 0.0) for _, r in pts]
    if spec:
        xs += [_log(p / spec.mem_bytes_per_s) for _, p in peaks]
        ys += [_log(p) for _, p in peaks]
    if not xs:
        return Text("no op family with FLOPs to place (memory-only work, or no sizes recorded)")
    x0, x1 = math.floor(min(xs) - 0.5), math.ceil(max(xs) + 0.5)
    y1 = max(ys) + 0.15
    y0 = min(min(ys) - 0.5, y1 - 3)
    grid = [[" "] * width for _ in range(height)]
    style = [[""] * width for _ in range(height)]

    def col(x: float) -> int:
        return min(width - 1, max(0, round((x - x0) / (x1 - x0) * (width - 1))))

    def row(y: float) -> int:
        return min(height - 1, max(0, round((y1 - y) / (y1 - y0) * (height - 1))))

    labels: list[tuple[int, int, str]] = []
    if spec:
        bw = _log(spec.mem_bytes_per_s)
        top = peaks[0][1]
        for c in range(width):  # memory slope: log y = log bw + log x, up to the highest roof
            x = x0 + c / (width - 1) * (x1 - x0)
            y = bw + x
            if y <= _log(top) and y >= y0:
                grid[row(y)][c], style[row(y)][c] = "╱", "cyan"
        names: dict[int, dict[float, list[str]]] = {}
        for dt, p in peaks:  # dtypes that share a peak (bf16/fp16, fp32/fp64) share a roof
            names.setdefault(row(_log(p)), {}).setdefault(p, []).append(dt)
        for r, roofs in names.items():  # a short plot can put two roofs on one line: both are named
            start = min(col(_log(p) - bw) for p in roofs)
            for c in range(start, width):
                grid[r][c], style[r][c] = "─", "yellow"
            named = [f"{'/'.join(dts)} {p / 1e12:,.0f}T" for p, dts in roofs.items()]
            while len(named) > 1 and len(" · ".join(named)) + 2 > width - start - 1:
                named.pop()  # a whole name or none: the title lists every peak
            labels.append((r, max(start, 0), f" {' · '.join(named)} "))
    taken: set[tuple[int, int]] = set()  # cells holding a roof's name, a point or its rank
    for r_, c0, text in labels:  # roof names on their line, from its knee, where they fit
        for j, ch in enumerate(text[: max(0, width - c0 - 1)]):
            grid[r_][c0 + 1 + j], style[r_][c0 + 1 + j] = ch, "bold yellow"
            taken.add((r_, c0 + 1 + j))
    total = sum(r["sized_ns"] for r in rows) or 1
    for (k, fam), x, y in zip(pts, xs, ys, strict=False):
        share = fam["sized_ns"] / total
        glyph = next(g for t, g in GLYPHS if share >= t)
        mark = glyph + str(k)
        rr, cc = _free(taken, row(y), col(x), len(mark), width, height)
        for j, ch in enumerate(mark):
            if cc + j < width:
                grid[rr][cc + j], style[rr][cc + j] = ch, "bold magenta"
                taken.add((rr, cc + j))
    decades = {row(d): f"{_si(10.0**d)}FLOP/s " for d in range(math.ceil(y0), math.floor(y1) + 1)}
    out = Text()
    for i in range(height):
        out.append(f"{decades.get(i, ''):>13}┤")
        for c in range(width):
            out.append(grid[i][c], style=style[i][c] or None)
        out.append("\n")
    out.append(" " * 13 + "└" + "─" * width + "\n")
    ticks = [" "] * (width + 20)
    for d in range(x0, x1 + 1):
        lab = _si(10**d)
        c = 14 + col(d)
        for j, ch in enumerate(lab):
            if c + j < len(ticks):
                ticks[c + j] = ch
    out.append("".join(ticks).rstrip() + "   FLOP per byte (arithmetic intensity)")
    return out


def _free(taken: set[tuple[int, int]], r: int, c: int, n: int, width: int, height: int) -> tuple[int, int]:
    """The nearest cell run (same row first, then the rows next to it) where a point's mark clashes with none:
    points that fall in one cell (three GEMMs at ~790 TFLOP/s) stay readable side by side."""
    for dr in (0, 1, -1, 2, -2):
        for dc in (0, n + 1, -(n + 1), 2 * (n + 1), -2 * (n + 1)):
            rr, cc = r + dr, c + dc
            if 0 <= rr < height and 0 <= cc <= width - n and all((rr, cc + j) not in taken for j in range(n + 1)):
                return rr, cc
    return r, c


def _si(v: float) -> str:
    for unit, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if v >= scale:
            return f"{v / scale:g}{unit}"
    return f"{v:g}"


class RooflineScreen(Screen[int | None]):
    """The roofline of the trace's op families; dismisses with the event to show (or None)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "close", "close"),
        Binding("v", "toggle_chart", "chart on/off"),
    ]

    def __init__(self, trace: Trace) -> None:
        super().__init__()
        self.trace = trace
        self.rows: list[dict] = []
        self.spec: GpuSpec | None = None
        self._plotted = 0  # the plot height drawn (0: not yet)
        self._head = Text()

    def compose(self) -> ComposeResult:
        yield Static("Roofline: computing the floor…", id="roofline-title")
        yield Static(id="roofline-plot")
        yield DataTable(id="roofline-table", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        # Fixed widths: the layout does not depend on when the rows arrive.
        for key, label, width in (
            ("k", "#", 3),
            ("name", "op", 40),
            ("dtype", "dtype", 5),
            ("time", "time", 9),
            ("floor", "floor %", 8),
            ("bound", "bound", 7),
            ("ai", "FLOP/B", 8),
            ("tflops", "TFLOP/s", 8),
            ("gbs", "GB/s", 9),
        ):
            table.add_column(label, key=key, width=width)
        self.compute()

    @work(thread=True, exclusive=True)
    def compute(self) -> None:
        f = floors(self.trace)
        rows = op_rows(self.trace)
        spec, name, why = None, "", f.why or ""
        for m in f.matches.values():
            name = m.device_name
            if m.spec is not None:
                spec = m.spec
                break
            why = why or m.why
        self.post_message(RooflineReady(rows, spec, name, why))

    def on_roofline_ready(self, msg: RooflineReady) -> None:
        self.rows = msg.rows
        spec = msg.spec
        if spec is not None:
            peaks = ", ".join(f"{d} {spec.peak_flops[d] / 1e12:,.0f}" for d in DTYPES if d in spec.peak_flops)
            head = (
                f"Roofline · {clean_name(msg.device_name)} → {spec.name}: {peaks} TFLOP/s dense, "
                f"memory {spec.mem_bytes_per_s / 1e12:.2f} TB/s · enter: the family's longest instance"
            )
        else:
            head = f"Roofline · {clean_name(msg.device_name) or 'no GPU'}: no peak to draw ({msg.why})"
        if msg.why and spec is not None:
            head += f" · {msg.why}"
        self._head = cell(head)
        self.query_one("#roofline-title", Static).update(self._head)
        self.spec = spec
        self._draw_plot()
        out = []
        for k, r in enumerate(self.rows[:MAX_TABLE], 1):
            sized = r["sized_ns"]
            ai = f"{intensity(r['flops'], r['bytes']):,.1f}" if r["flops"] and r["bytes"] else "—"
            flops_s, bytes_s = per_second(r["flops"], sized), per_second(r["bytes"], sized)
            tf = f"{flops_s / 1e12:,.1f}" if flops_s else "—"
            gbs = f"{bytes_s / 1e9:,.1f}" if bytes_s else "—"
            eff = f"{r['efficiency']:.0%}" if r["efficiency"] is not None else "unsized"
            out.append(
                (
                    str(k - 1),
                    [
                        cell(str(k), right=True),
                        cell(clean_name(r["name"])[:40]),
                        cell(r["dtype"] or "—"),
                        cell(fmt_ns(r["time_ns"]), right=True),
                        cell(eff, right=True),
                        cell(r["bound"] or "—"),
                        cell(ai, right=True),
                        cell(tf, right=True),
                        cell(gbs, right=True),
                    ],
                )
            )
        fill(self.query_one(DataTable), out)
        self.query_one(DataTable).focus()

    def _draw_plot(self) -> None:
        """The plot at the height the screen leaves it (the title's and the axes' wrapped lines counted)."""
        width, rows = self.size.width or self.app.size.width, self.size.height or self.app.size.height
        console = self.app.console
        axes = len(plot(self.rows, self.spec, height=PLOT_MIN_H).wrap(console, width)) - PLOT_MIN_H
        title = len(Text(self._head.plain).wrap(console, width))  # as the Static wraps it
        height = plot_height(rows - title - axes)
        if height != self._plotted:
            self._plotted = height
            self.query_one("#roofline-plot", Static).update(plot(self.rows, self.spec, height=height))

    def on_resize(self) -> None:
        if self._plotted:
            self._draw_plot()

    def action_toggle_chart(self) -> None:
        chart = self.query_one("#roofline-plot", Static)
        chart.display = not chart.display

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is None:
            return
        r = self.rows[int(event.row_key.value)]
        self.dismiss(r.get("longest"))

    def action_close(self) -> None:
        self.dismiss(None)
