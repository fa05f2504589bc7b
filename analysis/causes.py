"""Why the device waited: split each blank region by what filled it and what the launching thread did.

First what the device itself shows: time covered by communication kernels is ``comm`` (the
device waited on a peer or the network), time covered by the profiler's own overhead rows is
``profiler``. When the op that ends the region was queued before the region began, the host was not
late: ``dependency`` (``analysis.wait_calls`` says on what). The rest is split by the thread that
launched the next compute op, the one the device waited for (``analysis.thread_time``): every instant
of it falls in the strongest class that covers it, sync, alloc, copy, launch or host:

    thread  ──py──[aten::mul [cudaLaunchKernel]]──py──[aten::item [memcpy][sync....]]──py──[launch]
    class     host  launch                       host  sync (the op inherits its call)  sync (run-ahead)

The run-ahead: host work after a synchronising call that waited for the device (the device drained
while the host sat in it), up to the end of the next call that queues work, is ``sync`` as well, for at most as
long as the call waited: without the sync the host would have done that work while the device ran
what it was waiting for (DESIGN.md § Gap cause). The same after a memory-management call that waited
for the device (``cudaFree`` synchronises) is ``alloc``. Time inside the input pipeline (a DataLoader's
``__next__``) stays ``host``: feeding the GPU ahead is that time's own lever.

``unknown`` is left for gaps whose next op has no recorded launch (the trace lacks the host side).
Each region's sentence is ``analysis.cause_messages``'.
"""

from __future__ import annotations

import numpy as np

from gaplens.analysis.busy import BusySpans, compute_mask, device_splits, gpu_work, overhead_spans
from gaplens.analysis.cause_messages import GapMessages
from gaplens.analysis.critical_path import QUEUE_AS_LAUNCH_NS
from gaplens.analysis.regions import Regions
from gaplens.analysis.thread_time import THREAD_CLASSES, split_gaps
from gaplens.loaders.model import Trace

#: Every cause a blank region can have (DESIGN.md § Gap cause).
CAUSES = ("dependency", "sync", "alloc", "copy", "launch", "host", "comm", "profiler", "idle", "unknown")
#: Causes that are no finding: nothing was asked, or the profiler measured itself.
NOT_WORK = (CAUSES.index("idle"), CAUSES.index("profiler"))


def next_compute_ops(trace: Trace, devices: np.ndarray, gap_end: np.ndarray) -> np.ndarray:
    """For each gap end, the compute op of that device starting first at or after it (-1 if none).

    A region at the window's end has no compute after it; the GPU op that ends it (a copy, a
    collective) stands in, so its launching thread still explains it.
    """
    out = _first_at_or_after(trace, compute_mask(trace), devices, gap_end)
    none = out < 0
    if none.any():
        work = np.zeros(len(trace), bool)
        work[gpu_work(trace)] = True
        out[none] = _first_at_or_after(trace, work, devices[none], gap_end[none], before=True)
    return out


def _first_at_or_after(
    trace: Trace, mask: np.ndarray, devices: np.ndarray, t: np.ndarray, before: bool = False
) -> np.ndarray:
    """Per (device, t): the op of ``mask`` starting first at or after t; with ``before``, else the last one
    starting before t (the op running at a trailing region's end)."""
    out = np.full(t.size, -1, dtype=np.int64)
    dev_of = trace.device_of_event()
    for dev in np.unique(devices).tolist():
        ops = np.flatnonzero(mask & (dev_of == dev))
        m = devices == dev
        starts = trace.start_ns[ops]
        order = np.lexsort((trace.end_ns[ops], starts))
        s_sorted = starts[order]
        k = np.searchsorted(s_sorted, t[m], "left")
        ok = k < s_sorted.size
        got = np.full(int(m.sum()), -1, dtype=np.int64)
        got[ok] = ops[order[k[ok]]]
        if before:
            back = ~ok & (s_sorted.size > 0)
            got[back] = ops[order[np.maximum(k[back] - 1, 0)]] if s_sorted.size else -1
        out[m] = got
    return out


def classify(
    trace: Trace, reg: Regions, nxt: np.ndarray, warm: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, GapMessages]:
    """Per gap: cause code (index into ``CAUSES``), (k, len(CAUSES)) shares, and a message (written when read).

    What the device shows first: communication, then copies, then the profiler's own rows. The rest:
    ``dependency`` when the op that ends the gap was launched (its call ended) before the gap began, the
    host was not late; otherwise the launching thread's split into sync, copy, launch and host. ``warm``:
    the one-off module loads (``calls.module_load_regions``), whose message says what loaded.
    """
    starts, ends, devs = reg.start_ns, reg.end_ns, reg.device
    n = starts.size
    dur = np.maximum(ends - starts, 1).astype(np.float64)
    out = np.zeros((n, len(CAUSES)))
    col = {c: k for k, c in enumerate(CAUSES)}
    # What the device shows: communication first, then copies, then the profiler's own work.
    comm_ns = np.zeros(n)
    comm_copy_ns = np.zeros(n)
    either_ns = np.zeros(n)
    prof = overhead_spans(trace)
    splits = device_splits(trace)
    for dev in np.unique(devs).tolist():
        m = devs == dev
        sp = splits[dev]
        s_m, e_m = starts[m], ends[m]
        comm_ns[m] = sp.comm.busy_before(e_m) - sp.comm.busy_before(s_m)
        cc = BusySpans(np.concatenate((sp.comm.start, sp.copy.start)), np.concatenate((sp.comm.end, sp.copy.end)))
        comm_copy_ns[m] = cc.busy_before(e_m) - cc.busy_before(s_m)
        both = BusySpans(np.concatenate((cc.start, prof.start)), np.concatenate((cc.end, prof.end)))
        either_ns[m] = both.busy_before(e_m) - both.busy_before(s_m)
    out[:, col["comm"]] = comm_ns / dur
    out[:, col["copy"]] = (comm_copy_ns - comm_ns) / dur
    out[:, col["profiler"]] = (either_ns - comm_copy_ns) / dur
    rest = np.clip(1.0 - either_ns / dur, 0.0, 1.0)
    queued = queued_before(trace, nxt, starts)
    # Launched during the region: the host was late until its call returned; what the op waited after that,
    # beyond the launch path's own latency, it waited queued (a dependency), not for the host.
    a = np.where(nxt >= 0, trace.launch[np.maximum(nxt, 0)], -1)
    launch_end = np.where(a >= 0, trace.end_ns[np.maximum(a, 0)], ends)
    waited = np.clip(ends - launch_end - QUEUE_AS_LAUNCH_NS, 0, ends - starts)
    waited = np.where(queued | (a < 0), 0, waited)
    split, known = split_gaps(trace, starts, ends - waited, nxt)
    queued &= known
    frac = split / dur[:, None]
    total = np.maximum(frac.sum(axis=1), 1e-12)
    late = rest * (1.0 - waited / dur)
    thread_cols = [col[c] for c in THREAD_CLASSES]
    out[:, thread_cols] += np.where((known & ~queued)[:, None], late[:, None] * frac / total[:, None], 0.0)
    out[:, col["dependency"]] = np.where(queued, rest, np.where(known, rest * waited / dur, 0.0))
    out[:, col["unknown"]] = np.where(known, 0.0, rest)
    out[reg.idle] = 0.0
    out[reg.idle, col["idle"]] = 1.0
    out = np.round(out, 4)
    cause = np.argmax(out, axis=1).astype(np.int8)
    warm = np.zeros(n, bool) if warm is None else warm
    return cause, out, GapMessages(trace, reg, nxt, cause, CAUSES, known, warm)


def queued_before(trace: Trace, nxt: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per gap: the op that ends it had been launched (its launch call ended) at or before the gap began."""
    a = np.where(nxt >= 0, trace.launch[np.maximum(nxt, 0)], -1)
    return (a >= 0) & (trace.end_ns[np.maximum(a, 0)] <= starts)
