"""rocprofv3 (ROCprofiler-SDK) JSON results (``<pid>_results.json[.gz]``) into the lane model.

    rocprofiler-sdk-tool[i]        one process each (``metadata.pid``)
    agents (type 2: GPU)           devices, numbered by ``logical_node_type_id`` (the HIP ordinal)
    kernel_dispatch                kernels on their HIP stream (``stream_id``; the HSA queue kept as a detail),
                                   named through ``kernel_symbols``
    memory_copy                    copies by direction (``strings.buffer_records`` names the operation)
    hip_api                        API calls on their host thread, linked to GPU work by ``correlation_id.internal``
    marker_api                     roctx ranges: annotations (the phases), marks

Times are ns as stored. The document is read whole (orjson): its records are per-event objects
already, and a results file of 44k dispatches is 30 MB. HSA API records sit below the HIP calls
(each HIP call makes several) and are left out; rocpd SQLite (ROCm 7) is not read yet.
"""

from __future__ import annotations

import numpy as np
import orjson

from gaplens.loaders.errors import TraceError
from gaplens.loaders.events import EventColumns
from gaplens.loaders.files import Progress, Source
from gaplens.loaders.kinds import Kind, LaneKind
from gaplens.loaders.meta import Device, Meta
from gaplens.loaders.trace import Trace

_COPY_KINDS = {
    "MEMORY_COPY_HOST_TO_DEVICE": Kind.MEMCPY_HTOD,
    "MEMORY_COPY_DEVICE_TO_HOST": Kind.MEMCPY_DTOH,
    "MEMORY_COPY_DEVICE_TO_DEVICE": Kind.MEMCPY_DTOD,
    "MEMORY_COPY_HOST_TO_HOST": Kind.MEMCPY_OTHER,
}
#: Copies that name no HIP stream are drawn on one row per device, under this stream number.
COPY_ROW = 1 << 30
_MARKS = ("roctxMarkA", "roctxMark")


def load_rocprof(path: str, progress: Progress | None = None) -> Trace:
    """Read a rocprofv3 results JSON (plain or gzip); anything else is a one-line TraceError."""
    if progress is not None:
        progress("reading", 0.0)
    try:
        doc = orjson.loads(b"".join(Source(path).chunks()))
    except orjson.JSONDecodeError as exc:
        raise TraceError(f"{path}: a damaged rocprofv3 results JSON ({str(exc).splitlines()[0][:120]})") from None
    tools = doc.get("rocprofiler-sdk-tool") if isinstance(doc, dict) else None
    if not isinstance(tools, list) or not tools or not all(isinstance(t, dict) for t in tools):
        raise TraceError(f"{path}: not a rocprofv3 results JSON (no rocprofiler-sdk-tool records)")
    if progress is not None:
        progress("building", 0.6)
    cols = EventColumns()
    meta = Meta(source_format="rocprof", path=path)
    devices: dict[int, Device] = {}
    counts = {"kernel_dispatch": 0, "memory_copy": 0, "hip_api": 0, "marker_api": 0, "hsa_api": 0}
    scopes: list[int] = []
    for index, tool in enumerate(tools):
        try:
            _read_tool(tool, index, cols, meta, devices, counts, scopes)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise TraceError(
                f"{path}: a rocprofv3 record without the fields it needs ({type(exc).__name__}: {exc})"
            ) from None
    trace = cols.finish(meta, np.asarray(scopes, dtype=np.int64) if scopes else None)
    used = {ln.device for ln in trace.lanes if ln.is_gpu}
    meta.devices = sorted((d for d in devices.values() if d.id in used), key=lambda d: d.id)
    meta.source_version = "rocprofv3 (ROCprofiler-SDK) results JSON"
    meta.extra["records"] = counts
    if not counts["hip_api"] and not counts["marker_api"]:
        meta.lacks += ["cpu", "cuda_api"]
        meta.warnings.append(
            "GPU rows only: the file has no HIP API or marker records (record with rocprofv3 --hip-trace"
            " --marker-trace, or --runtime-trace, to see what the host was doing)"
        )
    elif not counts["hip_api"]:
        meta.lacks.append("cuda_api")
    if not counts["kernel_dispatch"] and not counts["memory_copy"]:
        meta.lacks.append("gpu")
    meta.lacks.append("shapes")
    return trace


def _handle(value) -> int:
    return int(value["handle"]) if isinstance(value, dict) else int(value or 0)


def _corr(record: dict) -> int:
    c = record.get("correlation_id")
    if isinstance(c, dict):
        return int(c.get("internal", -1))
    return int(c) if c is not None else -1


def _read_tool(
    tool: dict,
    index: int,
    cols: EventColumns,
    meta: Meta,
    devices: dict[int, Device],
    counts: dict[str, int],
    scopes: list[int],
) -> None:
    """One process's records: its GPUs, then its kernels, copies, HIP calls and roctx ranges, in that order."""
    md = tool.get("metadata") or {}
    pid = int(md.get("pid") or index + 1)
    command = md.get("command") or []
    meta.processes[pid] = " ".join(map(str, command))[:200] if command else f"process {pid}"
    node = md.get("node") or {}
    meta.extra.setdefault("hosts", []).append(node.get("hostname", ""))
    agents = _agents(tool, devices)
    kernel_names = _kernel_names(tool)
    strings = tool.get("strings") or {}
    operations = [k.get("operations", []) for k in strings.get("buffer_records", [])]
    kind_names = [k.get("kind", "") for k in strings.get("buffer_records", [])]
    markers = {}
    for entry in strings.get("marker_api") or []:
        if isinstance(entry, dict) and "key" in entry:
            markers[int(entry["key"])] = str(entry.get("value", ""))
    buffers = tool.get("buffer_records") or {}
    kernels, copies = buffers.get("kernel_dispatch") or [], buffers.get("memory_copy") or []
    calls, ranges = buffers.get("hip_api") or [], buffers.get("marker_api") or []
    _kernels(kernels, kernel_names, agents, cols)
    _copies(copies, operations, agents, cols)
    _host_calls(calls, operations, pid, cols, meta)
    _ranges(ranges, operations, markers, pid, cols, meta)
    for key, records in (
        ("kernel_dispatch", kernels),
        ("memory_copy", copies),
        ("hip_api", calls),
        ("marker_api", ranges),
    ):
        scopes.extend([pid] * len(records))  # one event per record, added in this order
        counts[key] += len(records)
    counts["hsa_api"] += len(buffers.get("hsa_api") or [])
    if kind_names:
        meta.extra.setdefault("buffer_kinds", kind_names)


def _agents(tool: dict, devices: dict[int, Device]) -> dict[int, int]:
    """Agent handle -> device number of the process's GPUs; each GPU joins ``devices`` once."""
    agents = {}
    gpus = [a for a in tool.get("agents") or [] if int(a.get("type", 0)) == 2]
    for n, agent in enumerate(gpus):
        ordinal = agent.get("logical_node_type_id")
        dev = int(ordinal) if isinstance(ordinal, int) else n
        agents[_handle(agent.get("id"))] = dev
        name = agent.get("product_name") or agent.get("name") or f"GPU {dev}"
        props = {k: v for k, v in agent.items() if isinstance(v, int | float | str)}
        props.setdefault("multiProcessorCount", agent.get("cu_count", 0))
        devices.setdefault(dev, Device(dev, f"{name} ({agent.get('name', '')})".replace(" ()", ""), props))
    return agents


def _kernel_names(tool: dict) -> dict[int, str]:
    symbols = tool.get("kernel_symbols") or []
    items = symbols.items() if isinstance(symbols, dict) else enumerate(symbols)
    names = {}
    for key, sym in items:
        if isinstance(sym, dict):
            kid = int(sym.get("kernel_id", key) or 0)
            names[kid] = sym.get("formatted_kernel_name") or sym.get("kernel_name") or f"kernel {kid}"
    return names


def _op_name(operations: list[list[str]], record: dict) -> str:
    """A record's operation by its (kind, operation) numbers, through ``strings.buffer_records``."""
    k, op = int(record.get("kind", 0)), int(record.get("operation", 0))
    return operations[k][op] if 0 <= k < len(operations) and 0 <= op < len(operations[k]) else f"operation {k}:{op}"


def _kernels(records: list, kernel_names: dict[int, str], agents: dict[int, int], cols: EventColumns) -> None:
    for rec in records:
        info = rec["dispatch_info"]
        dev = agents.get(_handle(info.get("agent_id")), -1)
        stream = _handle(rec.get("stream_id"))
        grid, block = info.get("grid_size") or {}, info.get("workgroup_size") or {}
        detail = (
            f"grid {grid.get('x', 0)}×{grid.get('y', 0)}×{grid.get('z', 0)}  "
            f"block {block.get('x', 0)}×{block.get('y', 0)}×{block.get('z', 0)}  "
            f"lds {info.get('group_segment_size', 0)}  scratch {info.get('private_segment_size', 0)}  "
            f"queue {_handle(info.get('queue_id'))}"
        )
        cols.add(
            (LaneKind.STREAM, dev, stream),
            int(rec["start_timestamp"]),
            int(rec["end_timestamp"]),
            kernel_names.get(int(info.get("kernel_id", -1)), f"kernel {info.get('kernel_id')}"),
            Kind.KERNEL,
            _corr(rec),
            0,
            detail,
        )


def _copies(records: list, operations: list[list[str]], agents: dict[int, int], cols: EventColumns) -> None:
    for rec in records:
        op = _op_name(operations, rec)
        kind = _COPY_KINDS.get(op, Kind.MEMCPY_OTHER)
        src, dst = agents.get(_handle(rec.get("src_agent_id")), -1), agents.get(_handle(rec.get("dst_agent_id")), -1)
        dev = src if kind == Kind.MEMCPY_DTOH or dst < 0 else dst
        if kind == Kind.MEMCPY_DTOD and src >= 0 and dst >= 0 and src != dst:
            kind = Kind.MEMCPY_PEER
        stream = _handle(rec.get("stream_id")) if rec.get("stream_id") else COPY_ROW
        nbytes = int(rec.get("bytes", 0) or 0)
        cols.add(
            (LaneKind.STREAM, dev, stream),
            int(rec["start_timestamp"]),
            int(rec["end_timestamp"]),
            op.replace("MEMORY_COPY_", "Memcpy ").replace("_", " ").title().replace("Memcpy", "Memcpy"),
            kind,
            _corr(rec),
            nbytes,
            f"bytes {nbytes}",
        )


def _host_calls(records: list, operations: list[list[str]], pid: int, cols: EventColumns, meta: Meta) -> None:
    for rec in records:
        tid = int(rec.get("thread_id", 0))
        cols.add(
            (LaneKind.CUDA_API, pid, tid),
            int(rec["start_timestamp"]),
            int(rec["end_timestamp"]),
            _op_name(operations, rec),
            Kind.CUDA_API,
            _corr(rec),
        )
        meta.threads.setdefault((pid, tid), f"thread {tid}")


def _ranges(
    records: list, operations: list[list[str]], markers: dict[int, str], pid: int, cols: EventColumns, meta: Meta
) -> None:
    for rec in records:
        tid = int(rec.get("thread_id", 0))
        op = _op_name(operations, rec)
        name = markers.get(_corr(rec)) or op
        mark = op in _MARKS
        start = int(rec["start_timestamp"])
        cols.add(
            (LaneKind.ANNOTATIONS, pid, tid),
            start,
            start if mark else int(rec["end_timestamp"]),
            name,
            Kind.MARK if mark else Kind.ANNOTATION,
        )
        meta.threads.setdefault((pid, tid), f"thread {tid}")
