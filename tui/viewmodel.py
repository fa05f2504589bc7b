"""What the timeline draws, precomputed once per trace: prefix sums, styles, device rows, readings.

Everything here is vectorised and built in the loading worker; the widget only
slices it per frame.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field

import numpy as np

from gaplens.analysis.busy import BusyShare, BusySpans, busy_share, device_busy, gpu_window
from gaplens.analysis.gaps import Gap
from gaplens.analysis.phases import Phase, phase_busy_pct
from gaplens.analysis.units import fmt_ns
from gaplens.loaders.model import CPU_KINDS, FORMAT_NAMES, Kind, Trace, clean_name
from gaplens.tui.lanetree import Node, Row, RowKind, build_tree
from gaplens.tui.raster import RowData, Style, event_styles
from gaplens.tui.readings import Readings


@dataclass
class TimelineModel:
    trace: Trace
    cum: np.ndarray  # prefix sums of event durations over the whole (row-sorted) trace
    style: np.ndarray  # base Style per event
    busy: dict[int, BusySpans]
    extent: tuple[int, int]  # everything drawn
    window: tuple[int, int]  # first to last GPU activity
    readings: Readings = field(default_factory=Readings)
    share: BusyShare | None = None  # the header's busy numbers, computed with the model (off the UI thread)
    tree: list[Node] = field(default_factory=list)
    busy_rows: dict[int, RowData] = field(default_factory=dict)
    gap_rows: dict[int, RowData] = field(default_factory=dict)
    phase_rows: list[RowData] = field(default_factory=list)
    phase_list: list[Phase] = field(default_factory=list)
    phase_depths: list[int] = field(default_factory=list)
    _gap_arrays: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    _flows: tuple[np.ndarray, np.ndarray] | None = None
    _rows: dict[int, RowData] = field(default_factory=dict)

    @property
    def title(self) -> str:
        return clean_name(os.path.basename(self.trace.meta.path) or "trace")

    @property
    def device_label(self) -> str:
        devices = self.trace.meta.devices
        names = sorted({clean_name(d.name) for d in devices if d.name})
        return ", ".join(names) or (f"{len(devices)} GPU" if devices else "no GPU")

    def header(self, phase: Phase | None = None) -> str:
        return " · ".join(text for _, text in self.header_parts(phase))

    def header_parts(self, phase: Phase | None = None) -> list[tuple[int, str]]:
        """(keep priority, text) of each header item in display order; the lowest goes first when narrow.

        The busy numbers are the ones ``gaplens summary`` prints (``analysis.busy.busy_share``); a
        phase shows its compute share, as the phase table does.
        """
        if phase is not None:
            where = f"phase {clean_name(phase.name)} {fmt_ns(phase.dur_ns)}"
            busy = [(5, f"GPU busy {phase_busy_pct(self.trace, phase):.1f}%")]
        else:
            share = self.share if self.share is not None else busy_share(self.trace)
            where = f"window {fmt_ns(self.window[1] - self.window[0])}"
            busy = [(5, f"GPU busy {share.busy_pct:.1f}%")]
            if share.comm_ns:
                busy.append((4, f"compute {share.compute_pct:.1f}%"))
            if share.profiler_pct >= 0.5:
                busy.append((2, f"profiler {share.profiler_pct:.1f}%"))
        fmt = FORMAT_NAMES.get(self.trace.meta.source_format, self.trace.meta.source_format)
        parts = [
            (3, self.title),
            (1, self.device_label),
            (4, where),
            *busy,
            (0, f"{len(self.trace):,} events"),
            (-1, fmt),
        ]
        if self.readings.clock_offset:  # a reading: it comes with the blank regions, after the first frame
            parts.insert(1, (6, "clock offset?"))
        return parts

    @property
    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(start, end, prefix sums, style) over the whole trace, for batched rasters."""
        return self.trace.start_ns, self.trace.end_ns, self.cum, self.style

    # ---- rows ---------------------------------------------------------------
    def row_data(self, row: Row) -> RowData | None:
        if row.kind == RowKind.EVENTS:
            return self.events_data(row.trace_row)
        if row.kind == RowKind.BUSY:
            return self.busy_rows.get(row.device)
        if row.kind == RowKind.PHASES and row.depth < len(self.phase_rows):
            return self.phase_rows[row.depth]
        return None

    def events_data(self, trace_row: int) -> RowData:
        """The events of one trace row: views into the columns, made once per row."""
        data = self._rows.get(trace_row)
        if data is None:
            t = self.trace
            b, e = int(t.row_offsets[trace_row]), int(t.row_offsets[trace_row + 1])
            cum = self.cum[b : e + 1]
            data = RowData(t.start_ns[b:e], t.end_ns[b:e], t.row_maxend[b:e], cum, self.style[b:e], b)
            self._rows[trace_row] = data
        return data

    def set_readings(self, readings: Readings) -> None:
        """Attach gaps and phases (computed after the first frame) and rebuild what depends on them."""
        self.readings = readings
        self._gap_arrays = None
        table = readings.gaps
        marked = readings.marked()
        self.gap_rows = {}
        for dev in self.busy:
            mine = marked[table.device[marked] == dev]
            self.gap_rows[dev] = RowData.of_spans(table.start[mine], table.end[mine], Style.GAP)
        self.phase_list = sorted(readings.phases, key=lambda p: (p.depth, p.start_ns))
        self.phase_depths = sorted({p.depth for p in self.phase_list})[:4]
        self.phase_rows = []
        for d in self.phase_depths:
            ps = sorted((p for p in self.phase_list if p.depth == d), key=lambda p: p.start_ns)
            self.phase_rows.append(
                RowData.of_spans(
                    np.asarray([p.start_ns for p in ps], np.int64),
                    np.asarray([p.end_ns for p in ps], np.int64),
                    Style.PHASE,
                    labels=[clean_name(p.name) for p in ps],
                )
            )
        self.tree = build_tree(self.trace, phase_depths=len(self.phase_rows))

    def phase_depth(self, phase: Phase) -> int:
        """The phases sub-row a phase is drawn on."""
        return self.phase_depths.index(phase.depth) if phase.depth in self.phase_depths else -1

    def phase_at(self, row_depth: int, t_ns: float) -> Phase | None:
        if row_depth >= len(self.phase_depths):
            return None
        depth = self.phase_depths[row_depth]
        return next((p for p in self.phase_list if p.depth == depth and p.start_ns <= t_ns < p.end_ns), None)

    def gap_at(self, device: int, t_ns: float) -> Gap | None:
        k = self.readings.gaps.index_at(device, t_ns)
        return self.readings.gaps[k] if k >= 0 else None

    # ---- queries ------------------------------------------------------------
    def gap_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Indices into ``readings.gaps``, starts and ends of the marked gaps, in time order (cached)."""
        if self._gap_arrays is None:
            marked = self.readings.marked()
            table = self.readings.gaps
            self._gap_arrays = (marked, table.start[marked], table.end[marked])
        return self._gap_arrays

    def launched_by(self, api_index: int) -> np.ndarray:
        """GPU ops queued by one launch call; the flow index is built once, on first use."""
        if self._flows is None:
            self._flows = self.trace.flows
        src, dst = self._flows
        return dst[np.searchsorted(src, api_index, "left") : np.searchsorted(src, api_index, "right")]

    def event_at(self, row: Row, t_ns: float, tol_ns: float) -> int | None:
        """The event on ``row`` under ``t_ns`` or, failing that, the nearest within ``tol_ns``."""
        if row.kind != RowKind.EVENTS:
            return None
        return self._nearest(row.trace_row, t_ns, tol_ns)[0]

    def gpu_op_at(self, device: int, t_ns: float, tol_ns: float) -> int | None:
        """The GPU op under ``t_ns`` on any stream of ``device``: what its busy row draws there."""
        t = self.trace
        found = [self._nearest(r, t_ns, tol_ns) for ln in t.gpu_lanes(device) for r in t.rows_of(ln.id)]
        found = [f for f in found if f[0] is not None]
        return min(found, key=lambda f: f[1])[0] if found else None

    def _nearest(self, trace_row: int, t_ns: float, tol_ns: float) -> tuple[int | None, float]:
        t = self.trace
        idx = t.window(trace_row, int(t_ns - tol_ns), int(t_ns + tol_ns) + 1)
        if idx.size == 0:
            return None, 0.0
        s, e = t.start_ns[idx], t.end_ns[idx]
        dist = np.where((s <= t_ns) & (e > t_ns), 0, np.minimum(np.abs(s - t_ns), np.abs(e - t_ns)))
        k = int(np.argmin(dist))
        return int(idx[k]), float(dist[k])

    def search(self, text: str) -> np.ndarray:
        """Sorted global indices of events whose name contains ``text`` (case-insensitive)."""
        needle = text.casefold()
        if not needle:
            return np.empty(0, np.int64)
        ids = [i for i, name in enumerate(self.trace.names) if needle in name.casefold()]
        if not ids:
            return np.empty(0, np.int64)
        return np.flatnonzero(np.isin(self.trace.name_id, np.asarray(ids, dtype=self.trace.name_id.dtype)))


def with_readings(model: TimelineModel, readings: Readings) -> TimelineModel:
    """A copy of ``model`` with readings attached; built off the UI thread, swapped in whole."""
    out = copy.copy(model)
    out.set_readings(readings)
    out.gap_arrays()  # built here, off the UI thread
    return out


def build_model(trace: Trace) -> TimelineModel:
    """The per-trace precomputation the first frame needs (O(n) numpy, no readings yet)."""
    dur = (trace.end_ns - trace.start_ns).astype(np.int64)
    cum = np.zeros(dur.size + 1, dtype=np.int64)
    np.cumsum(dur, out=cum[1:])
    style = event_styles(trace)
    busy = {d.id: device_busy(trace, d.id) for d in trace.meta.devices}
    busy = {d: b for d, b in busy.items() if b.start.size}
    window = gpu_window(trace) if len(trace) else (0, 1)
    extent = (int(trace.start_ns.min()), int(trace.end_ns.max())) if len(trace) else (0, 1)
    model = TimelineModel(trace, cum, style, busy, extent, window)
    model.busy_rows = {d: RowData(b.start, b.end, b.end, b.cum, int(Style.BUSY)) for d, b in busy.items()}
    model.tree = build_tree(trace)
    # The header's numbers, here in the worker: computed by the first header draw, they held the UI
    # thread (and the first frame) for ~60 ms at 1.19M events.
    model.share = busy_share(trace)
    return model


def is_host(kind: int) -> bool:
    return kind in {int(k) for k in CPU_KINDS}


def is_api(kind: int) -> bool:
    return kind == int(Kind.CUDA_API)
