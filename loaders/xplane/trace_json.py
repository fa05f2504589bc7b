"""JAX's Chrome-trace JSON (``perfetto_trace.json.gz`` from ``jax.profiler.trace(create_perfetto_trace=True)``,
``*.trace.json.gz`` from the TensorBoard profile plugin): an XSpace rendered as trace events.

Recognised by its own markers, never by a PyTorch trace's: process names that are XSpace plane names
(``/device:GPU:0``, ``/host:CPU``) and, from TSL's writer, ``"metadata": {"highres-ticks": true}``. The
shapes are Kineto's (pid per plane, tid per line, ``X`` events in us), but there is no ``cat``, so the
kinds come from the plane and line the event sits on, exactly as for the protobuf (``xplane.build``):
a device process's ``Stream #N(Kind)`` threads are streams, its events kernels, copies or memsets; the
host's events are Python frames, runtime calls and launches (``correlation_id``), step ranges, CPU ops.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import numpy as np
import orjson

from gaplens.loaders.errors import TraceError
from gaplens.loaders.events import EventColumns
from gaplens.loaders.files import Progress, Source
from gaplens.loaders.kinds import Kind, LaneKind
from gaplens.loaders.meta import Device, Meta
from gaplens.loaders.trace import Trace
from gaplens.loaders.xplane.build import (
    _DEVICE,
    _RUNTIME,
    _SIZE,
    _STREAM,
    DETAIL_STATS,
    MODULE_SPAN,
    _direction,
    _op_kind,
)

_MARKER = re.compile(rb'"name"\s*:\s*"/(?:device|host):|"highres-ticks"')
_PROCESS = re.compile(r"^(/device:[A-Z_]+:\d+|/host:[A-Za-z]+)")
#: The one host process every host event is drawn under.
_HOST_PID = 1


def is_jax_trace_json(body: bytes) -> bool:
    """JAX's trace JSON by its first bytes: plane names as process names, or TSL's highres-ticks flag."""
    return bool(_MARKER.search(body)) and b'"schemaVersion"' not in body and b'"deviceProperties"' not in body


def _ns(value) -> int:
    return int(Decimal(str(value)) * 1000) if value is not None else 0


def load_jax_trace_json(path: str, progress: Progress | None = None) -> Trace:
    """Read a JAX trace JSON (plain or gzip); anything else is a one-line TraceError."""
    try:
        doc = orjson.loads(b"".join(Source(path).chunks()))
    except orjson.JSONDecodeError as exc:
        raise TraceError(f"{path}: a damaged JAX trace JSON ({str(exc).splitlines()[0][:120]})") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise TraceError(f"{path}: not a JAX trace JSON (no traceEvents array)")
    processes, threads = _names(events)
    cols = EventColumns()
    meta = Meta(source_format="jax-trace-json", path=path, source_version="JAX trace JSON (jax.profiler / XProf)")
    devices: dict[int, Device] = {}
    for ev in events:
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue
        pid, tid = ev.get("pid"), ev.get("tid")
        pname = _PROCESS.match(processes.get(pid, ""))
        plane = pname.group(1) if pname else ""
        fields = _fields(ev)
        m = _DEVICE.match(plane)
        if m:
            dev = int(m.group("n"))
            _device_event(fields, dev, processes.get(pid) or plane, threads.get((pid, tid), ""), cols, devices)
        elif plane == "/host:CPU":
            _host_event(fields, threads.get((pid, tid)), cols, meta)
    if not cols.start:
        raise TraceError(f"{path}: a JAX trace JSON with no device or host events")
    meta.processes[_HOST_PID] = "host"
    meta.devices = sorted(devices.values(), key=lambda d: d.id)
    kinds = set(cols.kind)
    if int(Kind.CUDA_API) not in kinds:
        meta.lacks.append("cuda_api")
    if not kinds & {int(Kind.CPU_OP), int(Kind.PYTHON), int(Kind.ANNOTATION), int(Kind.CUDA_API)}:
        meta.lacks.append("cpu")
    if not devices:
        meta.lacks.append("gpu")
    meta.lacks.append("shapes")
    return cols.finish(meta, None if not cols.corr else np.zeros(len(cols.corr), np.int64))


def _names(events: list) -> tuple[dict[Any, str], dict[tuple[Any, Any], str]]:
    """Process and thread names from the metadata (``ph`` M) events."""
    processes: dict[Any, str] = {}
    threads: dict[tuple[Any, Any], str] = {}
    for ev in events:
        if isinstance(ev, dict) and ev.get("ph") == "M":
            margs: dict[str, Any] = ev["args"] if isinstance(ev.get("args"), dict) else {}
            if ev.get("name") == "process_name":
                processes[ev.get("pid")] = str(margs.get("name", ""))
            elif ev.get("name") == "thread_name":
                threads[(ev.get("pid"), ev.get("tid"))] = str(margs.get("name", ""))
    return processes, threads


Fields = tuple[int, int, str, dict[str, Any], int, int, str]


def _fields(ev: dict) -> Fields:
    """(start ns, end ns, name, args, correlation or -1, thread key, detail) of an ``X`` event."""
    start = _ns(ev.get("ts"))
    end = start + max(_ns(ev.get("dur")), 0)
    args: dict[str, Any] = ev["args"] if isinstance(ev.get("args"), dict) else {}
    corr = args.get("correlation_id")
    corr = int(corr) if isinstance(corr, int | str) and str(corr).isdigit() else -1
    tid = ev.get("tid")
    tid_key = int(tid) if isinstance(tid, int) else abs(hash(str(tid))) & 0x7FFFFFFF
    detail = "  ".join(f"{k} {args[k]}" for k in DETAIL_STATS if k in args)
    return start, end, str(ev.get("name", "")), args, corr, tid_key, detail


def _device_event(
    fields: Fields, dev: int, device_name: str, thread: str, cols: EventColumns, devices: dict[int, Device]
) -> None:
    """An event of a device plane: on a ``Stream #N(Kind)`` line a kernel, copy or memset; on a derived
    line (XLA Modules, Steps, ...) an annotation drawn on the device, never busy."""
    start, end, name, args, corr, tid_key, detail = fields
    sm = _STREAM.match(thread)
    if not sm:
        cols.add((LaneKind.GPU_ANNOTATIONS, dev, tid_key & 0x7FFFFFFF), start, end, name, Kind.GPU_ANNOTATION)
        return
    devices.setdefault(dev, Device(dev, device_name.lstrip("/")))
    kind = _op_kind(name)
    lkind = sm.group("kind") or ""
    if kind == int(Kind.KERNEL) and re.search("memset", lkind, re.IGNORECASE):
        kind = int(Kind.MEMSET)
    elif kind == int(Kind.KERNEL) and re.search("memcpy|copy", lkind, re.IGNORECASE):
        kind = int(_direction(lkind))
    size = _SIZE.search(str(args.get("memcpy_details", "")))
    nbytes = int(size.group(1)) if size else 0
    cols.add((LaneKind.STREAM, dev, int(sm.group("n"))), start, end, name, kind, corr, nbytes, detail)


def _host_event(fields: Fields, thread: str | None, cols: EventColumns, meta: Meta) -> None:
    """An event of the host plane: a Python frame, a runtime call or launch, a step, a module run, a CPU op."""
    start, end, name, args, corr, t, detail = fields
    meta.threads[(_HOST_PID, t)] = thread if thread is not None else f"thread {t}"
    step = args.get("step_num")
    lane = (LaneKind.CPU_OPS, _HOST_PID, t)
    if name.startswith("$"):
        cols.add(lane, start, end, name, Kind.PYTHON, -1, 0, detail)
    elif _RUNTIME.match(name) or corr >= 0:
        cols.add((LaneKind.CUDA_API, _HOST_PID, t), start, end, name, Kind.CUDA_API, corr, 0, detail)
    elif step is not None and str(step).isdigit():
        cols.add((LaneKind.ANNOTATIONS, _HOST_PID, t), start, end, f"{name} {step}", Kind.ANNOTATION, -1, 0, detail)
    elif mm := MODULE_SPAN.match(name):  # one execution of a jitted computation: a phase family
        cols.add((LaneKind.ANNOTATIONS, _HOST_PID, t), start, end, mm.group("module"), Kind.ANNOTATION, -1, 0, detail)
    else:
        cols.add(lane, start, end, name, Kind.CPU_OP, -1, 0, detail)
