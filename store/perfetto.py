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

Memory is bounded by the events, not by name length × uses: the events are turned into text
``CHUNK_EVENTS`` at a time and written as they come, and each event carries at most
``NAME_LIMIT`` characters of its name; a name that was cut is written whole once, as an
instant on the gaplens row ``cut names (full text)``, and the export says in one line what it cut.

Times: ``ts``/``dur`` in µs with three decimals (exact ns), relative to ``origin_ns``,
which is written as ``baseTimeNanoseconds``. Correlation ids are renumbered (an API call's
id is its event number + 1) so launches stay linked even where the source repeated ids
across processes (nsys).
"""

from __future__ import annotations

import ast
import contextlib
import io
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from gaplens.loaders.kineto.opdetail import dims_part
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
#: Characters of a name each exported event carries. Demangled C++ kernel names run to tens of KB, and one
#: nsys export used a 1 MiB name for 1,296 kernels: 1.27 GiB of JSON and a 6.9 GB peak. A slice title shows
#: far less than 1 KiB (the namespace, the function and its first template arguments), and the full name is
#: written once beside the events, so nothing is lost.
NAME_LIMIT = 1024
#: Events turned into text per chunk: the text in flight is at most CHUNK_EVENTS x (NAME_LIMIT + ~400 B of
#: ids, times and args), ~45 MB, whatever the trace's size.
CHUNK_EVENTS = 32_768


def cut_name(name: str) -> str:
    """``name`` as one exported event carries it: whole up to ``NAME_LIMIT`` characters, else its head and
    a marker saying how long it was."""
    return name if len(name) <= NAME_LIMIT else f"{name[:NAME_LIMIT]}… [cut from {len(name):,} characters]"


def cut_note(texts: list[str], ids: np.ndarray, what: str) -> str:
    """What ``cut_name`` cuts of one dictionary column, in words ("" when nothing): "1 name longer than 1,024
    characters (the longest 1,048,594) cut in the 1,296 events that use it"."""
    long = [k for k, text in enumerate(texts) if len(text) > NAME_LIMIT]
    if not long:
        return ""
    uses = int(np.isin(ids, np.asarray(long, ids.dtype)).sum())
    longest = max(len(texts[k]) for k in long)
    many = len(long) > 1
    return (
        f"{len(long):,} {what}{'s' if many else ''} longer than {NAME_LIMIT:,} characters (the longest {longest:,}) "
        f"cut in the {uses:,} events that use {'them' if many else 'it'}"
    )


def _us(ns: np.ndarray) -> list[float]:
    """ns → µs floats whose shortest repr is the exact decimal (three places)."""
    return (np.asarray(ns, dtype=np.int64) / 1000.0).tolist()


def chrome_trace(trace: Trace) -> bytes:
    """The whole file: trace events, gaplens tracks, metadata (one JSON object, UTF-8)."""
    out = io.BytesIO()
    write_chrome_trace(trace, out)
    return out.getvalue()


class Sink(Protocol):
    """Where the file goes: anything with a binary ``write`` (a file, a GzipFile, a BytesIO)."""

    def write(self, data: bytes, /) -> object: ...


def write_chrome_trace(trace: Trace, fh: Sink) -> None:
    """The whole file, written to ``fh`` a chunk of events at a time (see ``CHUNK_EVENTS``)."""
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
    fh.write(orjson.dumps(top, option=orjson.OPT_SERIALIZE_NUMPY)[:-1] + b',"traceEvents":[\n')
    first = True
    for lines in _line_chunks(trace):
        if lines:
            fh.write((("" if first else ",\n") + ",\n".join(lines)).encode())
            first = False
    fh.write(b"\n]}\n")


def chrome_lines(trace: Trace) -> Iterator[str]:
    """One JSON object per line: metadata, the trace's own events, launch flows, then the gaplens tracks."""
    for lines in _line_chunks(trace):
        yield from lines


def _line_chunks(trace: Trace) -> Iterator[list[str]]:
    """``chrome_lines`` in chunks of at most ``CHUNK_EVENTS`` events' lines."""
    yield [orjson.dumps(ev).decode() for ev in _metadata(trace)]
    yield from _trace_lines(trace)
    yield _flow_lines(trace)
    pid = gaplens_pid(trace)
    yield [orjson.dumps(ev).decode() for ev in gaplens_tracks(trace, pid)]
    yield [orjson.dumps(ev).decode() for ev in _full_names(trace, pid)]


def _full_names(trace: Trace, pid: int) -> Iterator[dict]:
    """Each name that events carry cut, written whole once: an instant at its first use, on a row of its own."""
    long = [k for k, name in enumerate(trace.names) if len(name) > NAME_LIMIT]
    if not long:
        return
    tid = 1 << 30  # after every reading's row (gaplens_tracks numbers them from 1)
    yield _m("thread_name", pid, tid, name="cut names (full text)")
    for k in long:
        first = int(np.argmax(trace.name_id == k))
        yield {
            "ph": "i",
            "s": "t",
            "cat": GAPLENS_CATEGORY,
            "name": cut_name(trace.names[k]),
            "pid": pid,
            "tid": tid,
            "ts": int(trace.start_ns[first]) / 1000,
            "args": {"full_name": trace.names[k], "characters": len(trace.names[k])},
        }


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


def _trace_lines(trace: Trace) -> Iterator[list[str]]:
    """The trace's events as JSON lines, built column-wise by Arrow's string kernels (no per-event Python),
    ``CHUNK_EVENTS`` at a time; names cut to ``NAME_LIMIT`` once per distinct name.

    Every optional ``args`` member is a fragment that starts with a comma or is empty; fragments
    are concatenated without nulls (``binary_join_element_wise`` with ``skip`` drops all-null rows
    in pyarrow 26), then the leading comma goes.
    """
    n = len(trace)
    if n == 0:
        return
    lane_pid, lane_tid = _place(trace)
    lane = trace.lane
    corr = _correlations(trace)
    gpu = np.asarray([ln.is_gpu for ln in trace.lanes], bool)[lane]
    device = np.asarray([ln.device for ln in trace.lanes], np.int64)[lane]
    stream = np.asarray([ln.stream for ln in trace.lanes], np.int64)[lane]
    kind = trace.kind.astype(np.int64)
    # Fragments encoded once per distinct name, kind and detail, then gathered per event.
    names = pa.array([orjson.dumps(cut_name(name)).decode() for name in trace.names], pa.string())
    heads = [f'{{"ph":"X","cat":"{CATEGORY.get(k, "cpu_op")}","name":' for k in sorted(Kind)]
    heads[Kind.MARK] = f'{{"ph":"i","s":"t","cat":"{CATEGORY[Kind.MARK]}","name":'
    detail = _detail_args(trace)
    details = pa.array(
        ["," + orjson.dumps(detail[d]).decode()[1:-1] if d in detail else "" for d in range(len(trace.details))]
    )
    syncs = _sync_args(trace, corr)
    enc = _Encoded(names, pa.array(heads), details, syncs, np.fromiter(syncs, np.int64, len(syncs)), corr,
                   lane_pid[lane], lane_tid[lane], gpu, device, stream, kind)  # fmt: skip
    for lo in range(0, n, CHUNK_EVENTS):
        yield _chunk_lines(trace, enc, slice(lo, min(lo + CHUNK_EVENTS, n)))


@dataclass(frozen=True)
class _Encoded:
    """What every chunk of events shares: fragments per distinct name, kind and detail; columns per event."""

    names: pa.Array
    heads: pa.Array
    details: pa.Array
    syncs: dict[int, dict]
    sync_rows: np.ndarray
    corr: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    gpu: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    kind: np.ndarray


def _chunk_lines(trace: Trace, enc: _Encoded, sl: slice) -> list[str]:
    """Events ``sl`` (a run of event numbers) as JSON lines."""
    lo, hi = sl.start, sl.stop
    corr, gpu, device, stream, kind = enc.corr[sl], enc.gpu[sl], enc.device[sl], enc.stream[sl], enc.kind[sl]
    nbytes = trace.bytes[sl]
    names, heads, details, syncs, sync_rows = enc.names, enc.heads, enc.details, enc.syncs, enc.sync_rows

    def text(values: np.ndarray) -> pa.Array:
        return pc.cast(pa.array(values), pa.string())

    def member(key: str, values: np.ndarray, present: np.ndarray) -> pa.Array:
        return pc.if_else(pa.array(present), pc.binary_join_element_wise(f',"{key}":', text(values), ""), "")

    extra = pc.take(details, pa.array(trace.detail_id[sl]))
    rows = sync_rows[(sync_rows >= lo) & (sync_rows < hi)]
    if rows.size or bool((kind == int(Kind.SYNC)).any()):
        full = np.asarray(extra.to_pylist(), dtype=object)
        full[kind == int(Kind.SYNC)] = ""
        full[rows - lo] = ["," + orjson.dumps(syncs[i]).decode()[1:-1] for i in rows.tolist()]
        extra = pa.array(full.tolist(), pa.string())
    args = pc.binary_join_element_wise(
        member("correlation", corr, corr >= 0),
        member("device", device, gpu),
        member("stream", stream, gpu & (stream >= 0)),
        member("bytes", nbytes, nbytes != 0),
        extra,
        "",
    )
    has_args = pc.greater(pc.utf8_length(args), 0)
    tail = pc.if_else(
        has_args, pc.binary_join_element_wise(',"args":{', pc.utf8_slice_codeunits(args, 1), "}}", ""), "}"
    )
    start, end = trace.start_ns[sl], trace.end_ns[sl]
    ts = _us_text(start)
    when = pc.if_else(
        pa.array(kind == int(Kind.MARK)),
        pc.binary_join_element_wise('"ts":', ts, ""),
        pc.binary_join_element_wise('"ts":', ts, ',"dur":', _us_text(end - start), ""),
    )
    lines = pc.binary_join_element_wise(
        pc.take(heads, pa.array(kind)),
        pc.take(names, pa.array(trace.name_id[sl])),
        ',"pid":',
        text(enc.pid[sl]),
        ',"tid":',
        text(enc.tid[sl]),
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
        if dims := _DIMS.match(dims_part(text)):  # the dims alone: the op's other args follow them (opdetail)
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
    args = {k: cut_name(v) if isinstance(v, str) else v for k, v in args.items()}  # event names, sentences
    return {
        "ph": "X",
        "cat": GAPLENS_CATEGORY,
        "name": cut_name(name),
        "pid": pid,
        "tid": tid,
        "ts": start_ns / 1000,
        "dur": (end_ns - start_ns) / 1000,
        "args": args,
    }
