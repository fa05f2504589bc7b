"""The lane tree: process → thread → lanes and GPU → streams, flattened into drawn rows.

Pure data: the widget asks ``visible_rows(collapsed)`` for the rows to draw and
draws each row's label in its left gutter, so tree and bars can never scroll apart.

    ▾ python3 499
      ▾ thread 499 (python3)
          annotations        <- a lane; deeper nesting adds sub-rows, capped, "+N"
          CPU ops
          CUDA API
    ▾ GPU 0 NVIDIA H200      <- the device row draws the busy union and blank regions
        phases               <- host annotations placed on the GPU (CUDA-event semantics)
        stream 7
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import IntEnum

from gaplens.loaders.model import GPU_LANE_KINDS, Lane, Trace, clean_name

#: Sub-rows drawn per lane before the rest collapse into a "+N" marker.
DEPTH_CAP = 4


class RowKind(IntEnum):
    GROUP = 0  # process or thread header (no bars)
    EVENTS = 1  # one (lane, depth) row of the trace
    BUSY = 2  # a device: union of its streams, with blank regions marked
    PHASES = 3  # phases projected on a device, one sub-row per nesting depth


@dataclass(frozen=True)
class Row:
    """One drawn line: what it shows, its gutter label, and the tree node it belongs to."""

    kind: RowKind
    label: str
    indent: int
    node: str  # key of the collapsible node this row heads or belongs to
    trace_row: int = -1  # EVENTS: index into trace.row_offsets
    lane: int = -1
    device: int = -1
    depth: int = 0
    more: int = 0  # hidden deeper sub-rows ("+N")
    heads: bool = False  # this row is the header of ``node`` (shows ▾/▸)


@dataclass
class Node:
    key: str
    rows: list[Row] = field(default_factory=list)  # the header row first
    children: list[Node] = field(default_factory=list)
    extra: list[Row] = field(default_factory=list)  # sub-rows beyond the cap, drawn when the lane is expanded


def build_tree(trace: Trace, phase_depths: int = 0, depth_cap: int = DEPTH_CAP) -> list[Node]:
    """Top-level nodes (processes, then devices) with their rows and children."""
    procs: dict[int, Node] = {}
    threads: dict[tuple[int, int], Node] = {}
    devices: dict[int, Node] = {}
    top: list[Node] = []
    meta = trace.meta
    for lane in sorted(trace.lanes, key=lambda ln: ln.sort_key):
        rows = list(trace.rows_of(lane.id))
        if lane.kind in GPU_LANE_KINDS:
            dev = devices.get(lane.device)
            if dev is None:
                name = next((d.name for d in meta.devices if d.id == lane.device), "")
                key = f"gpu:{lane.device}"
                label = clean_name(f"GPU {lane.device} {name}".strip())
                dev = Node(key, [Row(RowKind.BUSY, label, 0, key, device=lane.device, heads=True)])
                if phase_depths and not devices:
                    for d in range(phase_depths):
                        dev.rows.append(
                            Row(RowKind.PHASES, "phases" if d == 0 else "", 2, key, device=lane.device, depth=d)
                        )
                devices[lane.device] = dev
            parent = dev
            indent = 2
        else:
            proc = procs.get(lane.pid)
            if proc is None:
                pname = meta.processes.get(lane.pid, "process") if lane.pid >= 0 else "host"
                key = f"p:{lane.pid}"
                label = clean_name(f"{pname} {lane.pid}" if lane.pid >= 0 else pname)
                proc = Node(key, [Row(RowKind.GROUP, label, 0, key, heads=True)])
                procs[lane.pid] = proc
                top.append(proc)
            th = threads.get((lane.pid, lane.tid))
            if th is None:
                tname = meta.threads.get((lane.pid, lane.tid), f"thread {lane.tid}")
                key = f"t:{lane.pid}:{lane.tid}"
                th = Node(key, [Row(RowKind.GROUP, clean_name(tname).strip(), 2, key, heads=True)])
                threads[(lane.pid, lane.tid)] = th
                proc.children.append(th)
            parent = th
            indent = 4
        key = f"l:{lane.id}"
        node = Node(key)
        shown = rows[:depth_cap]
        for d, r in enumerate(shown):
            more = len(rows) - len(shown) if d == len(shown) - 1 else 0
            label = clean_name(lane.name) if d == 0 else ""
            node.rows.append(
                Row(
                    RowKind.EVENTS,
                    label,
                    indent,
                    key,
                    trace_row=r,
                    lane=lane.id,
                    device=lane.device,
                    depth=d,
                    more=more,
                    heads=d == 0 and len(rows) > 1,
                )
            )
        node.extra = [
            Row(RowKind.EVENTS, "", indent, key, trace_row=r, lane=lane.id, device=lane.device, depth=d)
            for d, r in enumerate(rows[depth_cap:], start=depth_cap)
        ]
        parent.children.append(node)
    # Devices first: "is the GPU busy?" is the first question, so its rows lead.
    return [devices[d] for d in sorted(devices)] + top


def ancestors(lane: Lane) -> list[str]:
    """Keys of the nodes that hold a lane's rows, innermost first (the key formats of ``build_tree``)."""
    if lane.kind in GPU_LANE_KINDS:
        return [f"l:{lane.id}", f"gpu:{lane.device}"]
    return [f"l:{lane.id}", f"t:{lane.pid}:{lane.tid}", f"p:{lane.pid}"]


def group_of(row: Row, trace: Trace) -> str:
    """The node ``space`` folds on this row: its own, or for a one-row lane (nothing to fold) its parent's."""
    if row.kind == RowKind.EVENTS and row.depth == 0 and not row.heads:
        return ancestors(trace.lanes[row.lane])[1]
    return row.node


def visible_rows(
    nodes: list[Node],
    collapsed: set[str],
    deep: Mapping[int, int] | None = None,
    expanded: set[str] | frozenset[str] = frozenset(),
) -> list[Row]:
    """Rows in display order; a collapsed node keeps only its header row.

    ``deep`` maps a lane to a depth below the cap that its "+N" row shows instead of
    the cap's own depth, so a selected event nested deeper than the drawn sub-rows
    still has a row (its label says which depth it is). An ``expanded`` lane draws
    every sub-row of its stack instead.
    """
    out: list[Row] = []

    def walk(node: Node) -> None:
        if node.key in collapsed:
            out.extend(node.rows[:1])
            return
        if node.key in expanded and node.extra:
            out.extend([*node.rows[:-1], replace(node.rows[-1], more=0), *node.extra])
        else:
            out.extend(node.rows if not deep else (_deeper(r, deep) for r in node.rows))
        for child in node.children:
            walk(child)

    for node in nodes:
        walk(node)
    return out


def _deeper(row: Row, deep: Mapping[int, int]) -> Row:
    d = deep.get(row.lane, -1)
    if not row.more or not row.depth < d <= row.depth + row.more:
        return row
    # A lane's rows are consecutive trace rows, shallowest first.
    return replace(row, trace_row=row.trace_row + d - row.depth, depth=d, label=f"d{d}", heads=False)


def gutter_label(row: Row, collapsed: set[str], width: int) -> str:
    """The row's tree label fitted to ``width`` cells: marker, indent, name, "+N"."""
    mark = ""
    if row.heads:
        mark = "▸ " if row.node in collapsed else "▾ "
    more = f" +{row.more}" if row.more else ""
    if row.kind == RowKind.EVENTS and row.depth > 0 and row.label:
        text = " " * row.indent + "  ┆" + row.label  # a deeper level shown in the "+N" row
    elif row.kind == RowKind.EVENTS and row.depth > 0 and not more:
        text = " " * row.indent + "  ┆"
    else:
        text = " " * row.indent + mark + row.label
    if len(text) + len(more) > width:
        text = text[: max(width - len(more) - 1, 0)] + "…"
    return (text + more).ljust(width)[:width]
