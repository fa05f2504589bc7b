"""Kineto / PyTorch-profiler Chrome-trace JSON (.json, .json.gz) into the lane model.

Covers every era in FORMATS.md Part 1: bare arrays (2020), old category names,
string pids/tids and ``"stream 7"``, the three time encodings, duplicate or
missing ``M`` metadata, truncated files. Launch links come from
``args.correlation`` within the file, never from flow events alone.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from loaders.events import EventColumns
from loaders.jsonio import read_events
from loaders.model import Device, Kind, LaneKind, Meta, Trace, TraceError

Progress = Callable[[str, float], None]

# cat (lower case) -> (event kind, lane kind). Memcpy direction comes from the name.
CATEGORIES: dict[str, tuple[Kind, LaneKind]] = {
    "cpu_op": (Kind.CPU_OP, LaneKind.CPU_OPS),
    "operator": (Kind.CPU_OP, LaneKind.CPU_OPS),
    "python_function": (Kind.PYTHON, LaneKind.CPU_OPS),
    "user_annotation": (Kind.ANNOTATION, LaneKind.ANNOTATIONS),
    "user": (Kind.ANNOTATION, LaneKind.ANNOTATIONS),
    "cuda_runtime": (Kind.CUDA_API, LaneKind.CUDA_API),
    "cuda_driver": (Kind.CUDA_API, LaneKind.CUDA_API),
    "runtime": (Kind.CUDA_API, LaneKind.CUDA_API),
    "privateuse1_runtime": (Kind.CUDA_API, LaneKind.CUDA_API),
    "privateuse1_driver": (Kind.CUDA_API, LaneKind.CUDA_API),
    "xpu_runtime": (Kind.CUDA_API, LaneKind.CUDA_API),
    "xpu_driver": (Kind.CUDA_API, LaneKind.CUDA_API),
    "mtia_runtime": (Kind.CUDA_API, LaneKind.CUDA_API),
    "kernel": (Kind.KERNEL, LaneKind.STREAM),
    "gpu_memcpy": (Kind.MEMCPY_OTHER, LaneKind.STREAM),
    "memcpy": (Kind.MEMCPY_OTHER, LaneKind.STREAM),
    "gpu_memset": (Kind.MEMSET, LaneKind.STREAM),
    "memset": (Kind.MEMSET, LaneKind.STREAM),
    "gpu_user_annotation": (Kind.GPU_ANNOTATION, LaneKind.GPU_ANNOTATIONS),
    "cuda_profiler_range": (Kind.GPU_ANNOTATION, LaneKind.GPU_ANNOTATIONS),
    "cuda_sync": (Kind.SYNC, LaneKind.GPU_SYNC),
    "xpu_sync": (Kind.SYNC, LaneKind.GPU_SYNC),
    "overhead": (Kind.OVERHEAD, LaneKind.OVERHEAD),
}
IGNORED = {"trace", "cpu_instant_event", "external_correlation"}

_DIGITS = re.compile(r"-?\d+")


def memcpy_kind(name: str) -> Kind:
    """Direction from the writer's name: ``Memcpy HtoD (Pageable -> Device)``."""
    if "HtoD" in name or "HostToDevice" in name:
        return Kind.MEMCPY_HTOD
    if "DtoH" in name or "DeviceToHost" in name:
        return Kind.MEMCPY_DTOH
    if "DtoD" in name or "DeviceToDevice" in name:
        return Kind.MEMCPY_DTOD
    if "PtoP" in name or "Peer" in name:
        return Kind.MEMCPY_PEER
    return Kind.MEMCPY_OTHER


def load_kineto(data: bytes, path: str = "", progress: Progress | None = None) -> Trace:
    """Parse decompressed Kineto JSON bytes into a Trace."""
    top, events, warnings = read_events(data, progress)
    meta = Meta(source_format="kineto", path=path, warnings=warnings)
    for key, value in top.items():
        if key not in ("traceEvents", "deviceProperties") and not isinstance(value, dict | list):
            meta.extra[key] = value
    if "distributedInfo" in top:
        meta.extra["distributedInfo"] = top["distributedInfo"]
    meta.source_version = _fingerprint(top, events)
    props = {}
    for dev in top.get("deviceProperties") or top.get("computeProperties") or []:
        if isinstance(dev, dict) and "id" in dev:
            props[_as_int(dev["id"], -1)] = dev
    return _build(events, meta, props, progress)


def _fingerprint(top: dict, events: list) -> str:
    if top.get("__bare_array__"):
        return "kineto (bare array, <=2020-12)"
    schema = top.get("schemaVersion")
    base = "baseTimeNanoseconds" in top
    return f"kineto schema {schema if schema is not None else '?'}" + (
        ", relative ts + baseTimeNanoseconds" if base else ""
    )


def _as_int(value, default: int) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    if isinstance(value, str):
        m = _DIGITS.search(value)
        if m and m.group(0) == value.strip():
            return int(value.strip())
    return default


class _Ids:
    """Stable ints for pids/tids that may be ints, numeric strings or names."""

    def __init__(self) -> None:
        self.named: dict[str, int] = {}

    def __call__(self, value) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        text = str(value)
        try:
            return int(text.strip())
        except ValueError:
            return self.named.setdefault(text, -1000 - len(self.named))


def _stream_of(tid) -> int:
    if isinstance(tid, int):
        return tid
    m = _DIGITS.search(str(tid))
    return int(m.group(0)) if m else 0


def _time_ns(value, base: int) -> int | None:
    """µs number (int, float or decimal string) to integer ns, exact for decimal text."""
    if isinstance(value, int) and not isinstance(value, bool):
        return base + value * 1000
    if isinstance(value, str):
        text = value.strip()
        whole, _, frac = text.partition(".")
        try:
            neg = whole.startswith("-")
            w = int(whole) if whole not in ("", "-") else 0
            f = int((frac + "000")[:3]) if frac else 0
        except ValueError:
            return None
        return base + (w * 1000 - f if neg else w * 1000 + f)
    if isinstance(value, float):
        return base + round(value * 1000)
    return None


def _build(events: list, meta: Meta, props: dict, progress: Progress | None) -> Trace:
    base = int(meta.extra.get("baseTimeNanoseconds") or 0)
    ids = _Ids()
    cols = EventColumns()
    thread_names: dict[tuple[int, int], str] = {}
    process_names: dict[int, str] = {}
    unknown: dict[str, int] = {}
    bad_dur = 0
    gpu_pids: set[int] = set()
    n = len(events)
    step = max(n // 20, 1)
    for i, ev in enumerate(events):
        if progress is not None and i % step == 0:
            progress("building", i / max(n, 1))
        if not isinstance(ev, dict):
            continue
        ph = ev.get("ph")
        if ph == "M":
            args = ev.get("args") or {}
            if ev.get("name") == "process_name" and isinstance(args.get("name"), str):
                process_names.setdefault(ids(ev.get("pid", 0)), args["name"])
            elif ev.get("name") == "thread_name" and isinstance(args.get("name"), str):
                thread_names.setdefault((ids(ev.get("pid", 0)), ids(ev.get("tid", 0))), args["name"])
            continue
        if ph != "X":
            continue
        cat = str(ev.get("cat", "")).lower()
        spec = CATEGORIES.get(cat)
        if spec is None:
            if cat not in IGNORED:
                unknown[cat] = unknown.get(cat, 0) + 1
            continue
        kind, lane_kind = spec
        start = _time_ns(ev.get("ts"), base)
        if start is None:
            bad_dur += 1
            continue
        dur = _time_ns(ev.get("dur"), 0)
        if dur is None or dur < 0:
            bad_dur += 1
            dur = 0
        name = ev.get("name")
        name = name if isinstance(name, str) else str(name)
        args = ev.get("args")
        args = args if isinstance(args, dict) else {}
        corr = _as_int(args.get("correlation", -1), -1)
        nbytes = 0
        detail = ""
        if lane_kind in (LaneKind.STREAM, LaneKind.GPU_ANNOTATIONS, LaneKind.GPU_SYNC):
            device = _as_int(args.get("device", ev.get("pid", 0)), 0)
            if not isinstance(ev.get("pid"), str) or _as_int(ev.get("pid"), -1) >= 0:
                device = _as_int(ev.get("pid", device), device)
            stream = _as_int(args.get("stream", _stream_of(ev.get("tid", 0))), 0)
            gpu_pids.add(device)
            if kind == Kind.MEMCPY_OTHER:
                kind = memcpy_kind(name)
            if kind in (Kind.MEMSET,) or (kind >= Kind.MEMCPY_HTOD and kind <= Kind.MEMCPY_OTHER):
                nbytes = _as_int(args.get("bytes", 0), 0)
                detail = f"bytes {nbytes}"
            elif kind == Kind.KERNEL:
                detail = _kernel_detail(args)
            elif kind == Kind.SYNC:
                detail = _sync_detail(args)
                if lane_kind == LaneKind.GPU_SYNC:
                    stream = -1
            lane_key = (lane_kind, device, stream if lane_kind != LaneKind.GPU_SYNC else -1)
        else:
            pid, tid = ids(ev.get("pid", 0)), ids(ev.get("tid", 0))
            lane_key = (lane_kind, pid, tid)
            dims = args.get("Input Dims", args.get("Input dims"))
            if dims:
                detail = f"Input Dims {dims}"
        cols.add(lane_key, start, start + dur, name, kind, corr, nbytes, detail)
    if bad_dur:
        meta.warnings.append(f"{bad_dur} events with missing or negative ts/dur clamped to 0")
    if unknown:
        meta.extra["unknown_categories"] = unknown
    meta.processes = process_names
    meta.threads = thread_names
    meta.devices = [
        Device(d, str(props.get(d, {}).get("name", f"GPU {d}")), props.get(d, {})) for d in sorted(gpu_pids)
    ]
    return cols.finish(meta, corr_scope=None)


def _kernel_detail(args: dict) -> str:
    parts = []
    for key, label in (
        ("grid", "grid"),
        ("block", "block"),
        ("registers per thread", "regs"),
        ("shared memory", "smem"),
        ("est. achieved occupancy %", "occupancy %"),
    ):
        if key in args:
            value = args[key]
            if isinstance(value, list):
                value = "×".join(str(v) for v in value)
            parts.append(f"{label} {value}")
    return "  ".join(parts)


def _sync_detail(args: dict) -> str:
    parts = [str(args.get("cuda_sync_kind", ""))]
    if "wait_on_stream" in args:
        parts.append(f"waits on stream {args['wait_on_stream']}")
    return "  ".join(p for p in parts if p)


def require_events(trace: Trace) -> Trace:
    if len(trace) == 0:
        raise TraceError("the trace holds no duration events (empty traceEvents)")
    return trace
