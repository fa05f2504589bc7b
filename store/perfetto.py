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
import os
import re
from collections.abc import Iterator

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from gaplens.loaders.model import Kind, LaneKind, Trace
from gaplens.loaders.syncs import parse_wait
from gaplens.loaders.text import clean_text

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
        # the file's name only (a full path tells the reader of a shared file about the writer's disk), cleaned as
        # terminal output is: a path can carry bidi overrides and C1 controls like any trace text
        "traceName": clean_text(os.path.basename(trace.meta.path)),
        "gaplensSource": clean_text(f"{trace.meta.source_format} {trace.meta.source_version}".strip()),
        "deviceProperties": [{**d.properties, "id": d.id, "name": d.name} for d in trace.meta.devices],
    }
    head = orjson.dumps(top, option=orjson.OPT_SERIALIZE_NUMPY)
    events = ",\n".join(chrome_lines(trace)).encode()
    return head[:-1] + b',"traceEvents":[\n' + events + b"\n]}\n"


def chrome_lines(trace: Trace) -> Iterator[str]:
    """One JSON object per line: metadata, the trace's own events, launch flows, then the gaplens tracks."""
    for ev in _metadata(trace):
        yield orjson.dumps(ev).decode()
    yield from _trace_lines(trace)
    yield from _flow_lines(trace)
    for ev in gaplens_tracks(trace, gaplens_pid(trace)):
        yield orjson.dumps(ev).decode()


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


def _trace_lines(trace: Trace) -> list[str]:
    """The trace's events as JSON lines, built column-wise by Arrow's string kernels (no per-event Python).

    Every optional ``args`` member is a fragment that starts with a comma or is empty; fragments
    are concatenated without nulls (``binary_join_element_wise`` with ``skip`` drops all-null rows
    in pyarrow 26), then the leading comma goes.
    """
    n = len(trace)
    if n == 0:
        return []
    lane_pid, lane_tid = _place(trace)
    lane = trace.lane
    corr = _correlations(trace)
    gpu = np.asarray([ln.is_gpu for ln in trace.lanes], bool)[lane]
    device = np.asarray([ln.device for ln in trace.lanes], np.int64)[lane]
    stream = np.asarray([ln.stream for ln in trace.lanes], np.int64)[lane]
    kind = trace.kind.astype(np.int64)

    def text(values: np.ndarray) -> pa.Array:
        return pc.cast(pa.array(values), pa.string())

    def member(key: str, values: np.ndarray, present: np.ndarray) -> pa.Array:
        return pc.if_else(pa.array(present), pc.binary_join_element_wise(f',"{key}":', text(values), ""), "")

    # Fragments encoded once per distinct name, kind and detail, then gathered per event.
    names = pa.array([orjson.dumps(name).decode() for name in trace.names], pa.string())
    heads = [f'{{"ph":"X","cat":"{CATEGORY.get(k, "cpu_op")}","name":' for k in sorted(Kind)]
    heads[Kind.MARK] = f'{{"ph":"i","s":"t","cat":"{CATEGORY[Kind.MARK]}","name":'
    detail = _detail_args(trace)
    details = pa.array(
        ["," + orjson.dumps(detail[d]).decode()[1:-1] if d in detail else "" for d in range(len(trace.details))]
    )
    extra = pc.take(details, pa.array(trace.detail_id))
    syncs = _sync_args(trace, corr)
    if syncs:
        rows = np.fromiter(syncs, np.int64, len(syncs))
        texts = ["," + orjson.dumps(syncs[i]).decode()[1:-1] for i in rows.tolist()]
        full = np.asarray(extra.to_pylist(), dtype=object)
        full[kind == int(Kind.SYNC)] = ""
        full[rows] = texts
        extra = pa.array(full.tolist(), pa.string())
    args = pc.binary_join_element_wise(
        member("correlation", corr, corr >= 0),
        member("device", device, gpu),
        member("stream", stream, gpu & (stream >= 0)),
        member("bytes", trace.bytes, trace.bytes != 0),
        extra,
        "",
    )
    has_args = pc.greater(pc.utf8_length(args), 0)
    tail = pc.if_else(
        has_args, pc.binary_join_element_wise(',"args":{', pc.utf8_slice_codeunits(args, 1), "}}", ""), "}"
    )
    ts = _us_text(trace.start_ns)
    when = pc.if_else(
        pa.array(kind == int(Kind.MARK)),
        pc.binary_join_element_wise('"ts":', ts, ""),
        pc.binary_join_element_wise('"ts":', ts, ',"dur":', _us_text(trace.end_ns - trace.start_ns), ""),
    )
    lines = pc.binary_join_element_wise(
        pc.take(pa.array(heads), pa.array(kind)),
        pc.take(names, pa.array(trace.name_id)),
        ',"pid":',
        text(lane_pid[lane]),
        ',"tid":',
        text(lane_tid[lane]),
        ",",
        when,
        tail,
        "",
    )
    return lines.to_pylist()


def _us_text(ns: np.ndarray) -> pa.Array:
    """Non-negative ns as exact µs decimals with three places: 12345678 → ``12345.678``."""
    ns = np.asarray(ns, dtype=np.int64)
    whole = pc.cast(pa.array(ns // 1000), pa.string())
    frac = pc.utf8_lpad(pc.cast(pa.array(ns % 1000), pa.string()), width=3, padding="0")
    return pc.binary_join_element_wise(whole, ".", frac, "")


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
    waits = {int(d): parse_wait(trace.details[int(d)]) for d in np.unique(trace.detail_id[rows]).tolist()}
    asked = [w.record_corr for w in waits.values() if w.record_corr >= 0]
    api = np.flatnonzero((trace.kind == int(Kind.CUDA_API)) & np.isin(trace.corr, asked))
    api = api[np.argsort(trace.start_ns[api], kind="stable")[::-1]]  # the earliest call with an id wins
    first = dict(
        zip(
            zip(pid_of_lane[trace.lane[api]].tolist(), trace.corr[api].tolist(), strict=True), api.tolist(), strict=True
        )
    )
    out: dict[int, dict] = {}
    for i in rows.tolist():
        detail = trace.details[int(trace.detail_id[i])]
        wait = waits[int(trace.detail_id[i])]
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


def _flow_lines(trace: Trace) -> list[str]:
    """Launch call → GPU op arrows (Kineto's ``ac2g`` flow pairs): every start, then every end."""
    src, dst = trace.flows
    if src.size == 0:
        return []
    lane_pid, lane_tid = _place(trace)
    ids = pc.cast(pa.array(src + 1), pa.string())

    def ends(events: np.ndarray, phase: str) -> list[str]:
        return pc.binary_join_element_wise(
            '{"cat":"ac2g","name":"ac2g","id":',
            ids,
            f',"ph":{phase},"pid":',
            pc.cast(pa.array(lane_pid[trace.lane[events]]), pa.string()),
            ',"tid":',
            pc.cast(pa.array(lane_tid[trace.lane[events]]), pa.string()),
            ',"ts":',
            _us_text(trace.start_ns[events]),
            "}",
            "",
        ).to_pylist()

    return ends(src, '"s"') + ends(dst, '"f","bp":"e"')


# ---- gaplens's own tracks -----------------------------------------------------------


def gaplens_tracks(trace: Trace, pid: int) -> Iterator[dict]:
    """Blank regions (per device), smells (per kind), phases and the critical path, one thread each."""
    from gaplens.analysis.critical_path import Seg, critical_path
    from gaplens.analysis.gaps import CAUSES, gap_columns
    from gaplens.analysis.phases import phases
    from gaplens.analysis.smells import smells

    yield _m("process_name", pid, 0, name="gaplens")
    yield _m("process_sort_index", pid, 0, sort_index=-2_000_000)
    tids = iter(range(1, 1 << 30))

    cols = gap_columns(trace)
    largest = cols.the_index()
    causes = [CAUSES[c] for c in cols.cause.tolist()]
    on_path, message = cols.on_path.tolist(), cols.message
    starts, ends = cols.start_ns.tolist(), cols.end_ns.tolist()
    shares = np.round(cols.shares, 4).tolist()  # per gap, in CAUSES order; rounded once, vectorised
    keys = [f"share_{c}" for c in CAUSES]
    for dev in sorted({int(d) for d in cols.device.tolist()}):
        t = next(tids)
        yield _m("thread_name", pid, t, name=f"blank regions GPU {dev}")
        for k in np.flatnonzero(cols.device == dev).tolist():
            cause, on = causes[k], on_path[k]
            label = f"blank: {cause}" + (" · critical path" if on else "") + (" · LARGEST" if k == largest else "")
            args = {
                "cause": cause,
                "on_critical_path": on,
                "dur_ns": ends[k] - starts[k],
                **dict(zip(keys, shares[k], strict=True)),
            }
            if message[k]:
                args["message"] = message[k]
            yield _slice(pid, t, starts[k], ends[k], label, args)

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
