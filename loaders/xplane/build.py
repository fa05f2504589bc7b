"""An XSpace (decoded by ``wire``) into the lane model: devices and streams, host threads, flows, steps.

    /device:GPU:N, /device:TPU:N   a device; each ``Stream #S(Kind)`` line a stream (TPU: ``XLA Ops``);
                                   other lines of a device plane (``XLA Modules``, ``Steps`` ...) are
                                   annotations drawn on the device, never busy time
    /host:CPU                      one process; each line a thread: ``$…`` Python frames, runtime calls
                                   and every event carrying ``correlation_id`` (the launch of a GPU op)
                                   as API calls, ``step_num`` ranges as numbered annotations (the step),
                                   ``<module>:XLA GPU module`` spans as annotations named after the HLO
                                   module (one per execution: a phase family), the rest as CPU ops
    /host:metadata, Task Environment, anything else   not events: skipped (their names kept in metadata)

Time: line ``timestamp_ns`` + event ``offset_ps`` (integer ns, floored), an event ending at its offset
plus ``duration_ps``. Events with ``num_occurrences`` are aggregates, not points on the timeline: counted
and skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from gaplens.loaders.build import build_columns
from gaplens.loaders.events import ordered_lanes
from gaplens.loaders.kinds import Kind, LaneKind
from gaplens.loaders.meta import Device, Meta
from gaplens.loaders.trace import Trace
from gaplens.loaders.validate import Repairs
from gaplens.loaders.xplane.wire import BYTES, DOUBLE, INT64, REF, STR, UINT64, Plane, Space

_DEVICE = re.compile(r"^/device:(?P<kind>GPU|TPU|[A-Z_]+):(?P<n>\d+)$")
_STREAM = re.compile(r"^Stream #(?P<n>\d+)(?:\((?P<kind>[^)]*)\))?")
#: Runtime and driver calls the host makes (CUDA, HIP): API calls even when they carry no correlation id.
_RUNTIME = re.compile(r"^(?:cu[A-Z]|cuda[A-Z]|hip[A-Z]|hsa_)")
_MEMSET = re.compile(r"memset", re.IGNORECASE)
_COPY = re.compile(r"memcpy|copy", re.IGNORECASE)
_DIRECTIONS = (
    (re.compile(r"H2D|HtoD|HostToDevice", re.IGNORECASE), Kind.MEMCPY_HTOD),
    (re.compile(r"D2H|DtoH|DeviceToHost", re.IGNORECASE), Kind.MEMCPY_DTOH),
    (re.compile(r"D2D|DtoD|DeviceToDevice", re.IGNORECASE), Kind.MEMCPY_DTOD),
    (re.compile(r"P2P|PtoP|Peer", re.IGNORECASE), Kind.MEMCPY_PEER),
)
_SIZE = re.compile(r"(?:^|\s)size:(\d+)")
#: The host span in which XLA runs one execution of a jitted computation (``jit_train_step:XLA GPU module``,
#: inside PjRt's ExecuteHelper): it launches that module's kernels. Read as an annotation named after the
#: module, one per execution, so ``phases`` rows the HLO module as a family (``jit_train_step`` ×6). Left
#: unnumbered on purpose: a module's executions never outrank the user's numbered steps (``train 3``).
MODULE_SPAN = re.compile(r"^(?P<module>\S.*?):XLA (?:[A-Z]+ )?[Mm]odule$")
#: Stats shown as an event's details, in this order (correlation ids live in their own column).
DETAIL_STATS = ("hlo_op", "hlo_module", "tf_op", "kernel_details", "memcpy_details", "bytes_transferred", "step_num")
#: Lines of a TPU plane that hold the ops themselves; its other lines are derived groupings.
TPU_OP_LINES = ("XLA Ops",)


@dataclass
class _Out:
    """Columns of every event kept, and the lane keys they point at."""

    lane_keys: dict[tuple, int] = field(default_factory=dict)
    lane_names: dict[tuple, str] = field(default_factory=dict)
    names: dict[str, int] = field(default_factory=dict)
    details: dict[str, int] = field(default_factory=lambda: {"": 0})
    cols: dict[str, list[np.ndarray]] = field(default_factory=dict)
    host_modules: int = 0  # module executions read from the host's ``XLA GPU module`` spans
    #: per device: (start, end, module) of its GPU work carrying ``hlo_module``, for traces with no host spans
    device_modules: dict[int, list[tuple[np.ndarray, np.ndarray, list[str]]]] = field(default_factory=dict)

    def lane(self, key: tuple, name: str = "") -> int:
        if name:
            self.lane_names.setdefault(key, name)
        return self.lane_keys.setdefault(key, len(self.lane_keys))

    def code(self, table: dict[str, int], values: list[str]) -> np.ndarray:
        return np.asarray([table.setdefault(v, len(table)) for v in values], dtype=np.int32)

    def add(self, **cols: np.ndarray) -> None:
        for k, v in cols.items():
            self.cols.setdefault(k, []).append(v)

    def take(self, key: str, dtype) -> np.ndarray:
        parts = self.cols.get(key, [])
        return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)


def build(space: Space, data: bytes, path: str, repairs: Repairs) -> Trace:
    out = _Out()
    meta = Meta(source_format="xplane", path=path)
    devices: list[Device] = []
    skipped: list[str] = []
    aggregates = 0
    host_pid = 1
    for plane in space.planes:
        m = _DEVICE.match(plane.name)
        n = len(plane.events.metadata_id)
        if m:
            dev = int(m.group("n")) if m.group("kind") == "GPU" else 1000 * (1 + len(devices)) + int(m.group("n"))
            if n:
                devices.append(
                    Device(dev, _device_name(plane, m.group("kind"), int(m.group("n"))), _props(plane, data))
                )
            aggregates += _device_plane(out, plane, data, dev, m.group("kind"))
        elif plane.name == "/host:CPU":
            aggregates += _host_plane(out, plane, data, host_pid)
            meta.processes[host_pid] = space.hostnames[0] if space.hostnames else "host"
            for i, line in enumerate(plane.lines):
                meta.threads[(host_pid, i + 1)] = line.display_name or line.name or f"line {line.id}"
        else:
            if plane.name != "/host:metadata" or n:
                skipped.append(plane.name)
            if plane.name == "Task Environment":
                meta.extra["task_environment"] = {
                    plane.stat_names.get(s, str(s)): _scalar(plane.stat_value(s, v, r)) for s, v, r in plane.stats
                }
    recorded = sum(part.size for part in out.cols.get("kind", []))
    if not out.host_modules and out.device_modules:
        _module_runs(out, meta, host_pid, space)
    if aggregates:
        repairs.add("aggregate events (num_occurrences, no time of their own) left off the timeline", aggregates)
    keys = list(out.lane_keys)
    lanes, remap = ordered_lanes(keys)
    if out.lane_names:
        meta.extra["line_names"] = {f"{k[1]}:{k[2]}": v for k, v in out.lane_names.items()}
    meta.devices = sorted(devices, key=lambda d: d.id)
    kind = out.take("kind", np.int8)
    meta.lacks = _lacks(kind[:recorded])  # the modules' rows drawn from GPU work are no host side
    meta.extra["planes_skipped"] = skipped
    meta.extra["hostnames"] = list(space.hostnames)
    meta.source_version = "XSpace protobuf (jax.profiler / XProf)"
    if space.errors:
        meta.warnings.append("the profiler reported: " + "; ".join(space.errors[:3]))
    lane = out.take("lane", np.int64)
    cols = {
        "lane": remap[lane] if lane.size else np.zeros(0, np.int32),
        "start": out.take("start", np.int64),
        "end": out.take("end", np.int64),
        "name_id": out.take("name", np.int32),
        "kind": kind,
        "corr": out.take("corr", np.int64),
        "bytes": out.take("bytes", np.int64),
        "detail_id": out.take("detail", np.int32),
        "scope": None,
    }
    return build_columns(meta, lanes, list(out.names), list(out.details), cols, repairs)


def _scalar(value: object) -> object:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _device_name(plane: Plane, kind: str, n: int) -> str:
    stats = {plane.stat_names.get(s, ""): plane.stat_value(s, v, r) for s, v, r in plane.stats}
    vendor = str(_scalar(stats.get("device_vendor") or ""))
    major, minor = stats.get("compute_cap_major"), stats.get("compute_cap_minor")
    cap = f" (compute {major}.{minor})" if major is not None else ""
    return f"{vendor + ' ' if vendor else ''}{kind} {n}{cap}"


def _props(plane: Plane, data: bytes) -> dict:
    props = {}
    for s, v, r in plane.stats:
        value = _scalar(plane.stat_value(s, v, r))
        if isinstance(value, int | float | str):
            props[plane.stat_names.get(s, str(s))] = value
    if "core_count" in props:
        props.setdefault("multiProcessorCount", props["core_count"])
    if "memory_size" in props:
        props.setdefault("totalGlobalMem", props["memory_size"])
    return props


def _times(plane: Plane) -> tuple[np.ndarray, np.ndarray]:
    ev = plane.events
    ts = np.asarray([ln.timestamp_ns for ln in plane.lines], dtype=np.int64)[ev.line]
    return ts + ev.offset_ps // 1000, ts + (ev.offset_ps + np.maximum(ev.duration_ps, 0)) // 1000


def _stat_rows(plane: Plane, name: str) -> np.ndarray:
    """Indices of the stat rows named ``name`` in this plane (stat ids are per plane)."""
    ids = [k for k, v in plane.stat_names.items() if v == name]
    if not ids:
        return np.zeros(0, np.int64)
    return np.flatnonzero(np.isin(plane.events.stat_id, ids))


def _int_stat(plane: Plane, name: str, default: int) -> np.ndarray:
    """One integer per event from the stat ``name`` (the last one an event carries), else ``default``."""
    ev = plane.events
    out = np.full(ev.metadata_id.size, default, np.int64)
    rows = _stat_rows(plane, name)
    rows = rows[np.isin(ev.stat_kind[rows], (UINT64, INT64))]
    out[ev.stat_event[rows]] = ev.stat_int[rows]
    return out


def _texts(plane: Plane, data: bytes, rows: np.ndarray) -> list[str]:
    """Each stat row's value as text: refs through the plane's stat names, strings from the file."""
    ev = plane.events
    kind, ints = ev.stat_kind[rows], ev.stat_int[rows]
    out: list[str] = []
    seen: dict[bytes, str] = {}
    for k, i, a, b, f in zip(
        kind.tolist(),
        ints.tolist(),
        ev.stat_start[rows].tolist(),
        ev.stat_end[rows].tolist(),
        ev.stat_float[rows].tolist(),
        strict=True,
    ):
        if k == REF:
            out.append(plane.stat_names.get(i, ""))
        elif k in (STR, BYTES):
            raw = data[a:b]
            text = seen.get(raw)
            if text is None:
                text = seen[raw] = raw.decode("utf-8", "replace")
            out.append(text)
        elif k == UINT64:
            out.append(str(i & ((1 << 64) - 1)))
        elif k == DOUBLE:
            out.append(repr(f))
        else:
            out.append(str(i))
    return out


def _details(out: _Out, plane: Plane, data: bytes, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per event: a detail id (``hlo_op fusion.3  hlo_module jit_step …``) and the bytes a copy names."""
    ev = plane.events
    n = ev.metadata_id.size
    nbytes = np.zeros(n, np.int64)
    codes = []
    for name in DETAIL_STATS:
        rows = _stat_rows(plane, name)
        rows = rows[keep[ev.stat_event[rows]]]
        code = np.full(n, -1, np.int64)
        if rows.size:
            texts = _texts(plane, data, rows)
            table: dict[str, int] = {}
            code[ev.stat_event[rows]] = [table.setdefault(t, len(table)) for t in texts]
            values = list(table)
            codes.append((name, code, values))
            if name == "memcpy_details":
                sizes = np.asarray([int(m.group(1)) if (m := _SIZE.search(v)) else 0 for v in values], np.int64)
                has = code >= 0
                nbytes[has] = sizes[code[has]]
            elif name == "bytes_transferred":
                has = code >= 0
                nbytes[has] = np.asarray([int(v) if v.isdigit() else 0 for v in values], np.int64)[code[has]]
    detail = np.zeros(n, np.int32)
    if not codes:
        return detail, nbytes
    stacked = np.stack([c for _, c, _ in codes], axis=1)
    uniq, inverse = np.unique(stacked, axis=0, return_inverse=True)
    texts = []
    for row in uniq.tolist():
        parts = [f"{name} {values[c]}" for (name, _, values), c in zip(codes, row, strict=True) if c >= 0]
        texts.append("  ".join(parts))
    detail[:] = out.code(out.details, texts)[inverse.reshape(-1)]
    return detail, nbytes


def _names(out: _Out, plane: Plane) -> tuple[np.ndarray, list[str]]:
    """Per event: its name id in the trace, and the plane's metadata names by metadata index."""
    ev = plane.events
    mids, inverse = np.unique(ev.metadata_id, return_inverse=True)
    names = [plane.event_display.get(m) or plane.event_names.get(m, "") or f"event {m}" for m in mids.tolist()]
    return out.code(out.names, names)[inverse.reshape(-1)], names


def _device_plane(out: _Out, plane: Plane, data: bytes, dev: int, kind_word: str) -> int:
    ev = plane.events
    n = ev.metadata_id.size
    if not n:
        return 0
    keep = ~ev.aggregate
    line_lane = np.zeros(len(plane.lines), np.int64)
    line_copy = np.zeros(len(plane.lines), np.int8)  # the copy kind a line's own kind implies, 0 when none
    is_stream = np.zeros(len(plane.lines), bool)
    for i, line in enumerate(plane.lines):
        m = _STREAM.match(line.name)
        if m:
            stream, lkind = int(m.group("n")), m.group("kind") or ""
            line_lane[i] = out.lane((LaneKind.STREAM, dev, stream), line.name)
            is_stream[i] = True
            if _MEMSET.search(lkind):
                line_copy[i] = int(Kind.MEMSET)
            elif _COPY.search(lkind):
                line_copy[i] = int(_direction(lkind))
        elif kind_word != "GPU" and line.name in TPU_OP_LINES:
            line_lane[i] = out.lane((LaneKind.STREAM, dev, line.id & 0x7FFFFFFF), line.name)
            is_stream[i] = True
        else:
            line_lane[i] = out.lane((LaneKind.GPU_ANNOTATIONS, dev, line.id & 0x7FFFFFFF), line.name)
    name_id, names = _names(out, plane)
    _mids, inverse = np.unique(ev.metadata_id, return_inverse=True)
    by_name = np.asarray([_op_kind(nm) for nm in names], np.int8)[inverse.reshape(-1)]
    kind = np.where(line_copy[ev.line] > 0, line_copy[ev.line], by_name)
    kind = np.where(by_name != int(Kind.KERNEL), by_name, kind)  # a name that says copy/memset wins
    kind = np.where(is_stream[ev.line], kind, int(Kind.GPU_ANNOTATION)).astype(np.int8)
    start, end = _times(plane)
    detail, nbytes = _details(out, plane, data, keep)
    corr = _int_stat(plane, "correlation_id", -1)
    rows = _stat_rows(plane, "hlo_module")
    rows = rows[keep[ev.stat_event[rows]] & is_stream[ev.line[ev.stat_event[rows]]]]
    if rows.size:
        at = ev.stat_event[rows]
        out.device_modules.setdefault(dev, []).append((start[at], end[at], _texts(plane, data, rows)))
    out.add(
        lane=line_lane[ev.line][keep],
        start=start[keep],
        end=end[keep],
        name=name_id[keep],
        kind=kind[keep],
        corr=np.where(kind == int(Kind.GPU_ANNOTATION), -1, corr)[keep],
        bytes=nbytes[keep],
        detail=detail[keep],
    )
    return int(n - keep.sum())


def _op_kind(name: str) -> int:
    if _MEMSET.search(name):
        return int(Kind.MEMSET)
    if _COPY.search(name) and not name.startswith(("fusion", "loop_", "input_")):
        return int(_direction(name))
    return int(Kind.KERNEL)


def _direction(text: str) -> Kind:
    for pattern, kind in _DIRECTIONS:
        if pattern.search(text):
            return kind
    return Kind.MEMCPY_OTHER


def _host_plane(out: _Out, plane: Plane, data: bytes, pid: int) -> int:
    ev = plane.events
    n = ev.metadata_id.size
    if not n:
        return 0
    keep = ~ev.aggregate
    name_id, names = _names(out, plane)
    _mids, inverse = np.unique(ev.metadata_id, return_inverse=True)
    inverse = inverse.reshape(-1)
    python = np.asarray([nm.startswith("$") for nm in names], bool)[inverse]
    runtime = np.asarray([bool(_RUNTIME.match(nm)) for nm in names], bool)[inverse]
    corr = _int_stat(plane, "correlation_id", -1)
    step = _int_stat(plane, "step_num", -1)
    kind = np.full(n, int(Kind.CPU_OP), np.int8)
    kind[python] = int(Kind.PYTHON)
    kind[(runtime | (corr >= 0)) & ~python] = int(Kind.CUDA_API)
    stepped = (step >= 0) & ~python & (kind != int(Kind.CUDA_API))
    kind[stepped] = int(Kind.ANNOTATION)
    module_of = [m.group("module") if (m := MODULE_SPAN.match(nm)) else "" for nm in names]
    module = np.asarray([bool(m) for m in module_of], bool)[inverse] & (kind == int(Kind.CPU_OP))
    if module.any():
        kind[module] = int(Kind.ANNOTATION)
        out.host_modules += int((module & keep).sum())
        name_id = name_id.copy()
        idx = np.flatnonzero(module)
        name_id[idx] = out.code(out.names, [module_of[int(inverse[i])] for i in idx.tolist()])
    if stepped.any():
        # A step range (StepTraceAnnotation) is named by its number, as a numbered family (``train 3``).
        idx = np.flatnonzero(stepped)
        labels = [f"{names[int(inverse[i])]} {int(step[i])}" for i in idx.tolist()]
        name_id = name_id.copy()
        name_id[idx] = out.code(out.names, labels)
    lane_kind = np.where(
        kind == int(Kind.CUDA_API),
        int(LaneKind.CUDA_API),
        np.where(kind == int(Kind.ANNOTATION), int(LaneKind.ANNOTATIONS), int(LaneKind.CPU_OPS)),
    )
    codes = np.zeros(n, np.int64)
    for lk in np.unique(lane_kind).tolist():
        for li in np.unique(ev.line[lane_kind == lk]).tolist():
            m = (lane_kind == lk) & (ev.line == li)
            codes[m] = out.lane((LaneKind(lk), pid, li + 1))
    start, end = _times(plane)
    detail, _nbytes = _details(out, plane, data, keep)
    out.add(
        lane=codes[keep],
        start=start[keep],
        end=end[keep],
        name=name_id[keep],
        kind=kind[keep],
        corr=np.where(kind == int(Kind.CUDA_API), corr, -1)[keep],
        bytes=np.zeros(int(keep.sum()), np.int64),
        detail=detail[keep],
    )
    return int(n - keep.sum())


def _module_runs(out: _Out, meta: Meta, pid: int, space: Space) -> None:
    """No host span names the executions: each run of a device's consecutive GPU work of one HLO module
    (in start order, across its streams) is one execution, an annotation on a thread of its own
    (``XLA modules (GPU N)``). Two executions of one module back to back, with no other module's work
    between them, read as one."""
    for dev, parts in sorted(out.device_modules.items()):
        start = np.concatenate([p[0] for p in parts])
        end = np.concatenate([p[1] for p in parts])
        mods = [m for p in parts for m in p[2]]
        order = np.argsort(start, kind="stable")
        code = out.code({}, mods)[order]
        start, end = start[order], end[order]
        head = np.r_[True, code[1:] != code[:-1]]
        first = np.flatnonzero(head)
        run_end = np.maximum.reduceat(end, first)
        names = [mods[int(order[i])] for i in first.tolist()]
        tid = 1_000_000 + dev
        lane = out.lane((LaneKind.ANNOTATIONS, pid, tid))
        meta.threads[(pid, tid)] = f"XLA modules (GPU {dev})"
        meta.processes.setdefault(pid, space.hostnames[0] if space.hostnames else "host")
        n = first.size
        out.add(
            lane=np.full(n, lane, np.int64),
            start=start[first],
            end=run_end,
            name=out.code(out.names, names),
            kind=np.full(n, int(Kind.ANNOTATION), np.int8),
            corr=np.full(n, -1, np.int64),
            bytes=np.zeros(n, np.int64),
            detail=np.zeros(n, np.int32),
        )


def _lacks(kind: np.ndarray) -> list[str]:
    present = set(np.unique(kind).tolist())
    lacks = []
    host = {int(Kind.CPU_OP), int(Kind.PYTHON), int(Kind.ANNOTATION), int(Kind.CUDA_API)}
    if not present & host:
        lacks.append("cpu")
    if int(Kind.CUDA_API) not in present:
        lacks.append("cuda_api")
    gpu = {int(k) for k in (Kind.KERNEL, Kind.MEMSET, *range(int(Kind.MEMCPY_HTOD), int(Kind.MEMCPY_OTHER) + 1))}
    if not present & gpu:
        lacks.append("gpu")
    lacks.append("shapes")  # XLA records no operand shapes per kernel launch: no floor
    return lacks
