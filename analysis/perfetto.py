"""Back to Perfetto: a trace and gaplens's own tracks as Chrome-trace JSON (what Perfetto and chrome://tracing open).

The trace's events keep their Kineto categories, processes, threads, streams and launch
links, so the file also opens again in gaplens (or HTA) as a Kineto trace. gaplens adds
one process, ``gaplens``, whose threads are its readings:

    gaplens            (pid: one above every pid and device of the trace)
      blank regions GPU 0   ·····[host]······[sync · critical path]····     one slice per gap
      smells: picket_fence  [────────── 140 short kernels ──────────]
      phases GPU            [decode_step]  [decode_step]                    GPU spans (CUDA-event semantics)
      critical path         [device][launch][queue][device][host]...        the longest dependency chain

Those slices are written as ``cpu_op`` so that every Kineto reader keeps them as rows
(an unknown category would be dropped); they sit in their own process, so no reading of
the trace's own threads changes when the file is read back.

Times: ``ts``/``dur`` in µs with three decimals (exact ns), relative to ``origin_ns``,
which is written as ``baseTimeNanoseconds``. Correlation ids are renumbered (an API call's
id is its event number + 1) so launches stay linked even where the source repeated ids
across processes (nsys).
"""

from __future__ import annotations

import ast
import contextlib
import re
from collections.abc import Iterator

import numpy as np
import orjson

from gaplens.loaders.model import Kind, LaneKind, Trace
from gaplens.loaders.syncs import parse_wait

#: Kineto category of each event kind; None: no Kineto category (written as an instant or a generic slice).
CATEGORY = {
    Kind.CPU_OP: "cpu_op",
    Kind.PYTHON: "python_function",
    Kind.ANNOTATION: "user_annotation",
    Kind.CUDA_API: "cuda_runtime",
    Kind.SYNC: "cuda_sync",
    Kind.KERNEL: "kernel",
    Kind.MEMCPY_HTOD: "gpu_memcpy",
    Kind.MEMCPY_DTOH: "gpu_memcpy",
    Kind.MEMCPY_DTOD: "gpu_memcpy",
    Kind.MEMCPY_PEER: "gpu_memcpy",
    Kind.MEMCPY_OTHER: "gpu_memcpy",
    Kind.MEMSET: "gpu_memset",
    Kind.OSRT: "os_runtime",  # no Kineto category: Perfetto shows it, a Kineto reader skips it
    Kind.GPU_ANNOTATION: "gpu_user_annotation",
    Kind.OVERHEAD: "overhead",
    Kind.MARK: "user_annotation",  # an instant (ph "i")
    Kind.GRAPH: "kernel",  # a whole CUDA-graph launch drawn as one box: GPU work either way
}
GAPLENS_CATEGORY = "cpu_op"


def _us(ns: np.ndarray) -> list[float]:
    """ns → µs floats whose shortest repr is the exact decimal (three places)."""
    return (np.asarray(ns, dtype=np.int64) / 1000.0).tolist()


def chrome_trace(trace: Trace) -> bytes:
    """The whole file: trace events, gaplens tracks, metadata (one JSON object, UTF-8)."""
    top = {
        "schemaVersion": 1,
        "displayTimeUnit": "ns",
        "baseTimeNanoseconds": trace.meta.origin_ns,
        "traceName": trace.meta.path,
        "gaplensSource": f"{trace.meta.source_format} {trace.meta.source_version}".strip(),
        "deviceProperties": [{**d.properties, "id": d.id, "name": d.name} for d in trace.meta.devices],
    }
    head = orjson.dumps(top, option=orjson.OPT_SERIALIZE_NUMPY)
    events = b",\n".join(orjson.dumps(e) for e in chrome_events(trace))
    return head[:-1] + b',"traceEvents":[\n' + events + b"\n]}\n"


def chrome_events(trace: Trace) -> Iterator[dict]:
    """Metadata, the trace's own events, launch flows, then the gaplens tracks."""
    yield from _metadata(trace)
    yield from _trace_events(trace)
    yield from _flows(trace)
    yield from gaplens_tracks(trace, gaplens_pid(trace))


def gaplens_pid(trace: Trace) -> int:
    used = [ln.pid for ln in trace.lanes] + [ln.device for ln in trace.lanes] + [0]
    return max(used) + 1


def _place(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """(pid, tid) of each lane as Kineto writes them: host pid/tid, or device/stream for GPU rows."""
    pid = np.asarray([ln.device if ln.is_gpu else ln.pid for ln in trace.lanes], np.int64)
    tid = np.asarray([(max(ln.stream, 0) if ln.is_gpu else ln.tid) for ln in trace.lanes], np.int64)
    return pid, tid


def _metadata(trace: Trace) -> Iterator[dict]:
    meta = trace.meta
    hosts = sorted({ln.pid for ln in trace.lanes if not ln.is_gpu and ln.pid >= 0})
    for pid in hosts:
        yield _m("process_name", pid, 0, name=meta.processes.get(pid, f"process {pid}"))
    for (pid, tid), name in sorted(meta.threads.items()):
        yield _m("thread_name", pid, tid, name=name)
    for d in meta.devices:
        yield _m("process_name", d.id, 0, name=f"GPU {d.id} {d.name}".strip())
        yield _m("process_sort_index", d.id, 0, sort_index=-1_000_000 + d.id)
    for ln in trace.lanes:
        if ln.kind == LaneKind.STREAM and (ln.device, ln.stream) not in meta.threads:
            yield _m("thread_name", ln.device, ln.stream, name=f"stream {ln.stream}")


def _m(what: str, pid: int, tid: int, **args) -> dict:
    return {"ph": "M", "name": what, "pid": int(pid), "tid": int(tid), "args": args}


def _trace_events(trace: Trace) -> Iterator[dict]:
    n = len(trace)
    if n == 0:
        return
    lane_pid, lane_tid = _place(trace)
    pid = lane_pid[trace.lane].tolist()
    tid = lane_tid[trace.lane].tolist()
    ts = _us(trace.start_ns)
    dur = _us(trace.end_ns - trace.start_ns)
    corr = _correlations(trace)
    is_gpu_lane = np.asarray([ln.is_gpu for ln in trace.lanes], bool)[trace.lane]
    device = np.asarray([ln.device for ln in trace.lanes], np.int64)[trace.lane].tolist()
    stream = np.asarray([ln.stream for ln in trace.lanes], np.int64)[trace.lane].tolist()
    sync_args = _sync_args(trace, corr)
    detail_args = _detail_args(trace)
    cats = [CATEGORY.get(k, "cpu_op") for k in sorted(Kind)]
    names, kinds, nbytes = trace.names, trace.kind.tolist(), trace.bytes.tolist()
    name_id, corr_l, gpu_l = trace.name_id.tolist(), corr.tolist(), is_gpu_lane.tolist()
    for i in range(n):  # one dict per event: the JSON writer needs them anyway
        k = kinds[i]
        ev: dict = {"ph": "X", "cat": cats[k], "name": names[name_id[i]], "pid": pid[i], "tid": tid[i]}
        ev["ts"], ev["dur"] = ts[i], dur[i]
        args: dict = {}
        if corr_l[i] >= 0:
            args["correlation"] = corr_l[i]
        if gpu_l[i]:
            args["device"] = device[i]
            if stream[i] >= 0:
                args["stream"] = stream[i]
        if nbytes[i]:
            args["bytes"] = nbytes[i]
        if k == Kind.SYNC:
            args.update(sync_args.get(i, {}))
        else:
            args.update(detail_args.get(int(trace.detail_id[i]), {}))
        if k == Kind.MARK:
            ev["ph"], ev["s"] = "i", "t"
            del ev["dur"]
        if args:
            ev["args"] = args
        yield ev


def _correlations(trace: Trace) -> np.ndarray:
    """New ids: an API call's is its event number + 1; GPU work and sync rows take their launch call's."""
    corr = np.full(len(trace), -1, np.int64)
    api = np.flatnonzero(trace.kind == int(Kind.CUDA_API))
    corr[api] = api + 1
    linked = np.flatnonzero(trace.launch >= 0)
    corr[linked] = trace.launch[linked] + 1
    return corr


_GRID = re.compile(r"\b(grid|block) (\d+)×(\d+)×(\d+)")
_INTS = (("registers per thread", re.compile(r"\bregs (\d+)")), ("shared memory", re.compile(r"\bsmem (\d+)")))
_OCCUPANCY = re.compile(r"\boccupancy % ([0-9.]+)")
_DIMS = re.compile(r"^Input Dims (\[.*\])$")


def _detail_args(trace: Trace) -> dict[int, dict]:
    """Kineto args read back from each distinct details text (kernel launch shape, input dims)."""
    out: dict[int, dict] = {}
    for d, text in enumerate(trace.details):
        args: dict = {}
        for m in _GRID.finditer(text):
            args[m.group(1)] = [int(m.group(2)), int(m.group(3)), int(m.group(4))]
        for key, pattern in _INTS:
            if found := pattern.search(text):
                args[key] = int(found.group(1))
        if occupancy := _OCCUPANCY.search(text):
            args["est. achieved occupancy %"] = float(occupancy.group(1))
        if dims := _DIMS.match(text):
            with contextlib.suppress(ValueError, SyntaxError):  # not Python-literal text: leave it out
                args["Input Dims"] = ast.literal_eval(dims.group(1))
        if args:
            out[d] = args
    return out


def _sync_args(trace: Trace, corr: np.ndarray) -> dict[int, dict]:
    """Kineto ``cuda_sync`` args of each sync row, the record call's correlation renumbered like the rest."""
    rows = np.flatnonzero(trace.kind == int(Kind.SYNC))
    if rows.size == 0:
        return {}
    pid_of_lane = np.asarray([ln.pid for ln in trace.lanes], np.int64)
    api = np.flatnonzero(trace.kind == int(Kind.CUDA_API))
    first: dict[tuple[int, int], int] = {}  # (pid, source correlation) -> the earliest call with it
    for i, p, c in zip(api.tolist(), pid_of_lane[trace.lane[api]].tolist(), trace.corr[api].tolist(), strict=True):
        j = first.get((p, c))
        if j is None or trace.start_ns[i] < trace.start_ns[j]:
            first[(p, c)] = i
    out: dict[int, dict] = {}
    for i in rows.tolist():
        detail = trace.details[int(trace.detail_id[i])]
        wait = parse_wait(detail)
        args: dict = {"cuda_sync_kind": detail.split("  ")[0]}
        if wait.stream >= 0:
            args["stream"] = wait.stream
        if wait.on_stream >= 0:
            args["wait_on_stream"] = wait.on_stream
        if wait.record_corr >= 0:
            call = int(trace.launch[i])
            p = int(pid_of_lane[trace.lane[call]]) if call >= 0 else -1
            rec = first.get((p, wait.record_corr))
            if rec is not None:
                args["wait_on_cuda_event_record_corr_id"] = int(corr[rec])
        out[i] = args
    return out


def _flows(trace: Trace) -> Iterator[dict]:
    """Launch call → GPU op arrows (Kineto's ``ac2g`` flow pairs)."""
    src, dst = trace.flows
    if src.size == 0:
        return
    lane_pid, lane_tid = _place(trace)
    for s, d in zip(src.tolist(), dst.tolist(), strict=True):
        common = {"cat": "ac2g", "name": "ac2g", "id": s + 1}
        yield {
            **common,
            "ph": "s",
            "pid": int(lane_pid[trace.lane[s]]),
            "tid": int(lane_tid[trace.lane[s]]),
            "ts": float(trace.start_ns[s]) / 1000,
        }
        yield {
            **common,
            "ph": "f",
            "bp": "e",
            "pid": int(lane_pid[trace.lane[d]]),
            "tid": int(lane_tid[trace.lane[d]]),
            "ts": float(trace.start_ns[d]) / 1000,
        }


# ---- gaplens's own tracks -----------------------------------------------------------


def gaplens_tracks(trace: Trace, pid: int) -> Iterator[dict]:
    """Blank regions (per device), smells (per kind), phases and the critical path, one thread each."""
    from gaplens.analysis.causes import CAUSE_NAMES, CLASS_ORDER
    from gaplens.analysis.critical_path import Seg, critical_path
    from gaplens.analysis.gaps import gap_columns
    from gaplens.analysis.phases import phases
    from gaplens.analysis.smells import smells

    yield _m("process_name", pid, 0, name="gaplens")
    yield _m("process_sort_index", pid, 0, sort_index=-2_000_000)
    tids = iter(range(1, 1 << 30))

    cols = gap_columns(trace)
    largest = cols.largest_on_path()
    for dev in sorted({int(d) for d in cols.device.tolist()}):
        t = next(tids)
        yield _m("thread_name", pid, t, name=f"blank regions GPU {dev}")
        for k in np.flatnonzero(cols.device == dev).tolist():
            cause = CAUSE_NAMES[int(cols.cause[k])]
            on = bool(cols.on_path[k])
            label = f"blank: {cause}" + (" · critical path" if on else "") + (" · LARGEST" if k == largest else "")
            args = {"cause": cause, "on_critical_path": on, "dur_ns": int(cols.end_ns[k] - cols.start_ns[k])}
            shares = zip(CLASS_ORDER, cols.shares[k].tolist(), strict=True)
            args.update({f"share_{c}": round(float(v), 4) for c, v in shares})
            if cols.message[k]:
                args["message"] = cols.message[k]
            yield _slice(pid, t, int(cols.start_ns[k]), int(cols.end_ns[k]), label, args)

    found = smells(trace)
    for kind in dict.fromkeys(f.kind for f in found):
        t = next(tids)
        yield _m("thread_name", pid, t, name=f"smells: {kind}")
        for f in (f for f in found if f.kind == kind):
            yield _slice(pid, t, f.start_ns, f.end_ns, kind, {"summary": f.summary, "lever": f.lever})

    plist = phases(trace)
    if plist:
        t = next(tids)
        yield _m("thread_name", pid, t, name="phases (GPU span)")
        for p in sorted(plist, key=lambda p: (p.start_ns, -p.end_ns)):
            yield _slice(pid, t, p.start_ns, p.end_ns, p.name, {"host_start_ns": p.host_start_ns})

    path = critical_path(trace)
    if path.seg_start_ns.size:
        t = next(tids)
        yield _m("thread_name", pid, t, name="critical path")
        names = {int(s): s.name.lower() for s in Seg}
        for s, e, k, ev in zip(
            path.seg_start_ns.tolist(),
            path.seg_end_ns.tolist(),
            path.seg_kind.tolist(),
            path.seg_event.tolist(),
            strict=True,
        ):
            args = {"event": trace.name(ev)} if ev >= 0 else {}
            yield _slice(pid, t, s, e, names[k], args)


def _slice(pid: int, tid: int, start_ns: int, end_ns: int, name: str, args: dict) -> dict:
    return {
        "ph": "X",
        "cat": GAPLENS_CATEGORY,
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": start_ns / 1000,
        "dur": (end_ns - start_ns) / 1000,
        "args": args,
    }
