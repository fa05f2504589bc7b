"""What-if: replay the critical-path graph with a change and predict window and step times.

The trace is a realised schedule: work that did not depend on the change does not move, and a
change off the critical path predicts no gain (the graph and the replay: ``analysis.replay``; what
each change selects: ``analysis.whatif_changes``; here, the changes, the steps and the notes).

    thread  [launch]──island──[launch]──[sync ······]──[launch]
    stream       ███ k1          ███ k2 ───────╯            ███ k3
    --remove host: the island is taken off the thread; k2, the sync's return, k3 and the
    thread's later points move earlier by as much as their other predecessors allow.

Changes (one per lever: ``analysis.lever_changes`` says which lever is which change):
- ``remove host``: the host islands (host-cause regions as wide as the host-island smell's bound),
  and the step thread's wait for its next batch (the input pipeline: a DataLoader's ``__next__``),
  are taken off their threads: from the region's start until the next op's launch handed it over
  (time blocked inside a call waiting for the device excepted: it follows the device). The launch
  loop's short gaps, a compiled or graphed call's own host overhead and warm-up stay.
- ``remove launch``: launch-cause regions and the shorter host gaps between launches, as above.
- ``remove sync``: every synchronising call stops waiting (it keeps its own cost); the host's own work
  stays but no longer waits for the device first, so it runs ahead (a sync per layer: the step tends
  to the longer of the host's and the device's work, not their sum).
- ``remove alloc``: memory-management calls cost what a caching allocator's reuse costs (nothing),
  and the waits inside them (``cudaFree`` synchronises) go with them.
- ``remove copy``: the copy-cause regions' host time as above; blocking copy calls stop waiting; and
  host<->device copies on a stream that also computes leave that stream's order, as if prefetched on
  a side stream ahead of their consumers.
- ``graph PHASE`` (``graph step``): every instance of the phase captured as one CUDA graph: the host's
  work inside it becomes one graph launch (``GRAPH_LAUNCH_NS_PER_NODE`` per op), its GPU ops keep
  their durations, order and dependencies and run back to back (``GRAPH_NODE_GAP_NS``). Refused
  where an instance synchronises (a graph cannot hold a blocking call).
- ``scale GLOB=FACTOR``: GPU ops (kernels, copies, memsets) whose name matches the glob
  take FACTOR times as long.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gaplens.analysis.busy import gpu_window
from gaplens.analysis.comm import comm_mask
from gaplens.analysis.phases import marker_clock
from gaplens.analysis.replay import Base, Deleted, Replay, exit_lookup, graph_base, run_replay, subtract
from gaplens.analysis.steps import Steps, steps
from gaplens.analysis.units import fmt_ns
from gaplens.analysis.whatif_changes import (
    GRAPH_LAUNCH_NS_PER_NODE,
    GRAPH_NODE_GAP_NS,
    graph_instances,
    match_glob,
    removal,
)
from gaplens.loaders.model import Kind, Trace, TraceError

#: Causes whose host-side time can be taken off a thread.
REMOVABLE = ("host", "launch", "sync", "alloc", "copy")
#: A predicted change of the median step below this share is "no gain": it is under the
#: step-to-step spread of real recordings (round-3 pairs: median absolute deviation 0.3-6% of the step).
NO_GAIN_SHARE = 0.01


@dataclass(frozen=True)
class Change:
    """One change: ``Change("remove", "host")``, ``Change("graph", "step")``, ``Change("scale", "Memcpy*", 0.12)``."""

    kind: str
    target: str
    factor: float = 1.0
    every: bool = False  # remove host: every host-cause region (no island / launch-loop split)

    def text(self) -> str:
        if self.kind == "scale":
            return f"--scale '{self.target}={self.factor:g}'"
        return f"--{self.kind} {self.target}"


def parse_graph(target: str) -> Change:
    """``--graph PHASE``: a phase name (or family, ``decode_step``) or ``step`` for the step owner's step."""
    if not target.strip():
        raise ValueError("--graph wants a phase name or 'step'")
    return Change("graph", target.strip())


def parse_scale(text: str) -> Change:
    """``GLOB=FACTOR`` (the last ``=`` splits: globs may hold one) -> a scale change; ValueError if malformed."""
    glob, sep, factor = text.rpartition("=")
    if not sep or not glob:
        raise ValueError(f"--scale wants GLOB=FACTOR, got {text!r}")
    try:
        f = float(factor)
    except ValueError:
        raise ValueError(f"--scale {text!r}: FACTOR must be a number") from None
    if not np.isfinite(f) or f < 0:
        raise ValueError(f"--scale {text!r}: FACTOR must be a finite number >= 0")
    return Change("scale", glob, f)


def parse_remove(cause: str) -> Change:
    if cause not in REMOVABLE:
        raise ValueError(f"--remove {cause!r}: one of {', '.join(REMOVABLE)} (host-side causes)")
    return Change("remove", cause)


def replay(trace: Trace, changes: list[Change]) -> tuple[Replay, list[dict]]:
    """Replay the trace's graph with ``changes``; also what each change touched (for ``changes``)."""
    b = graph_base(trace)
    t0 = int(trace.start_ns.min()) if len(trace) else 0
    span = (int(trace.end_ns.max()) - t0 + 2) if len(trace) else 2
    n_threads = max(int(b.thread_pid.size), 1)
    if n_threads * span >= (1 << 62):
        raise TraceError("trace too long for the what-if replay's time keys")
    d = b.e - b.s
    dnew = d.copy()
    rnew = b.r.copy()
    described: list[dict] = []
    notes: list[str] = []
    del_thread: list[np.ndarray] = []
    del_s: list[np.ndarray] = []
    del_e: list[np.ndarray] = []
    unblock = np.zeros(b.b_call.size, dtype=bool)
    for ch in changes:
        if ch.kind == "scale":
            hit = match_glob(trace, b.g, ch.target)
            dnew[hit] = np.round(d[hit] * ch.factor).astype(np.int64)
            described.append(
                {"kind": "scale", "glob": ch.target, "factor": ch.factor, "ops": int(hit.sum()),
                 "gpu_ns": int(d[hit].sum()), "gpu_ns_after": int(dnew[hit].sum())}
            )  # fmt: skip
        elif ch.kind == "graph":
            syncs_removed = any(c.kind == "remove" and c.target == "sync" for c in changes)
            th, s0, s1, desc, graphed = graph_instances(trace, b, ch.target, syncs_removed)
            del_thread.append(th)
            del_s.append(s0)
            del_e.append(s1)
            rnew[graphed] = np.minimum(rnew[graphed], GRAPH_NODE_GAP_NS)  # back to back, a node's gap apart
            described.append(desc)
        else:
            th, s0, s1, desc, ub, off_stream = removal(trace, b, ch.target, ch.every)
            del_thread.append(th)
            del_s.append(s0)
            del_e.append(s1)
            unblock |= ub
            dnew[off_stream] = 0  # prefetched on a side stream: no longer in this stream's order
            described.append(desc)
    cat = np.concatenate
    ds = cat(del_s) if del_s else np.empty(0, np.int64)
    de = cat(del_e) if del_e else np.empty(0, np.int64)
    dt = cat(del_thread) if del_thread else np.empty(0, np.int64)
    # time blocked in a call waiting for the device is not host work: never taken off
    bt = b.thread[b.b_call]
    keyed = Deleted(np.empty(0, np.int64), ds[:0], de[:0], t0, span)
    wait_s, wait_e = keyed.key(bt, b.b_start), keyed.key(bt, b.b_start + b.b_wait)
    lk = exit_lookup(b, span, t0)
    # One timeline per process: what a change takes off any of its threads, its driver gets too (the thread
    # that calls ``backward`` waits for autograd's; autograd's is set going by it), so every thread of the
    # process shifts by the union of what came off them (``_static_shift`` reads the driver's band).
    drv = lk[2]
    own_s, own_e = subtract(keyed.key(dt, ds), keyed.key(dt, de), wait_s, wait_e)
    own_t = own_s // span
    mapped = np.where(drv[own_t] >= 0, drv[own_t], own_t) if own_t.size else own_t
    ks = mapped * span + own_s % span
    ke = mapped * span + (own_e - own_t * span)
    deleted = Deleted(ks // span, ks % span + t0, ke % span + t0, t0, span)
    removes = [d for d in described if d["kind"] in ("remove", "graph")]
    for desc, th, s0, s1 in zip(removes, del_thread, del_s, del_e, strict=True):
        mine_s, mine_e = subtract(keyed.key(th, s0), keyed.key(th, s1), wait_s, wait_e)
        desc["host_ns"] = int((mine_e - mine_s).sum())  # this change's own; changes may overlap
    rp = Replay(
        b, np.empty(0, np.int64), np.empty(0, np.int64), np.zeros(b.b_call.size + 1, np.int64), deleted, lk, notes
    )
    run_replay(rp, dnew, rnew, unblock, span, t0)
    return rp, described


def _step_threads(trace: Trace, b: Base, st: Steps) -> np.ndarray:
    """The host thread each step range ran on (the busiest launching thread when not found)."""
    out = np.full(len(st.host_spans), -1, np.int64)
    want = set(st.names)
    ids = [i for i, nm in enumerate(trace.names) if nm in want]
    if ids:
        ev = np.flatnonzero(np.isin(trace.name_id, ids) & (b.thread >= 0))
        where = {
            (s, e): t
            for s, e, t in zip(
                trace.start_ns[ev].tolist(), trace.end_ns[ev].tolist(), b.thread[ev].tolist(), strict=True
            )
        }
        out[:] = [where.get(sp, -1) for sp in st.host_spans]
    if (out < 0).any():
        launchers = b.thread[b.call[b.call >= 0]]
        launchers = launchers[launchers >= 0]
        out[out < 0] = int(np.bincount(launchers).argmax()) if launchers.size else -1
    return out


def _marker_times(trace: Trace, rp: Replay, lane: int, t: np.ndarray, t_new: np.ndarray) -> tuple:
    """M(t) and the predicted M'(t'): a marker enqueued at t runs after the work queued on ``lane`` before t.

    The same ops count before and after the change (queued before t in the trace); their new ends
    and the marker's new enqueue time t' give M'. As ``analysis.phases.MarkerClock``, by launch call start.
    """
    b = rp.base
    if lane < 0:
        return t, t_new
    on = np.flatnonzero(trace.lane[b.g] == lane)
    if on.size == 0:
        return t, t_new
    raw = trace.launch[b.g[on]]
    queued = np.where(raw >= 0, trace.start_ns[np.maximum(raw, 0)], b.s[on])
    o = np.argsort(queued, kind="stable")
    q = queued[o]
    reach_old = np.maximum.accumulate(b.e[on][o])
    reach_new = np.maximum.accumulate(rp.enew[on][o])
    k = np.searchsorted(q, t, "left")
    last = np.maximum(k - 1, 0)
    m_old = np.where(k > 0, np.maximum(t, reach_old[last]), t)
    m_new = np.where(k > 0, np.maximum(t_new, reach_new[last]), t_new)
    return m_old, m_new


def whatif(trace: Trace, changes: list[Change]) -> dict:
    """The ``whatif --json`` object (DESIGN.md § What-if and the gate).

    Step times are the step owner's (``analysis.steps``: each step range as CUDA events recorded
    at its start and end time it); each step also carries its host span, before and after.
    """

    rp, described = replay(trace, changes)
    b = rp.base
    w0, w1 = gpu_window(trace)
    measured_window = w1 - w0
    if b.g.size:
        predicted_window = int(rp.enew.max()) - int(rp.snew.min())
    else:
        predicted_window = measured_window
    st = steps(trace)  # the step owner's steps, as every reading reads them
    per_step: list[dict] = []
    med: dict[str, int | None] = {"m": None, "p": None, "mh": None, "ph": None}
    if st.host_spans:
        th = _step_threads(trace, b, st)
        h0 = np.asarray([a for a, _ in st.host_spans], np.int64)
        h1 = np.asarray([z for _, z in st.host_spans], np.int64)
        n0 = h0 + rp.host_shift(th, h0)
        n1 = h1 + rp.host_shift(th, h1)
        clock = marker_clock(trace)
        m_old = np.zeros((2, h0.size), np.int64)
        m_new = np.zeros((2, h0.size), np.int64)
        lanes = np.asarray(
            [clock.stream_for(st.pid, int(a), int(z))[0] if st.pid is not None else -1 for a, z in st.host_spans],
            np.int64,
        )
        for lane in np.unique(lanes).tolist():  # per stream the steps were timed on (one or a few)
            k = np.flatnonzero(lanes == lane)
            mo, mn = _marker_times(trace, rp, lane, np.concatenate((h0[k], h1[k])), np.concatenate((n0[k], n1[k])))
            m_old[:, k], m_new[:, k] = mo.reshape(2, -1), mn.reshape(2, -1)
        measured = np.asarray([z - a for a, z in st.spans], np.int64)
        # the change moves the marker times; the owner's measured span stays the reference
        predicted = np.maximum(measured + (m_new[1] - m_old[1]) - (m_new[0] - m_old[0]), 0)
        host_pred = np.maximum(n1 - n0, 0)
        warm = set(range(len(st.host_spans))) - set(st.steady)
        per_step = [
            {
                "name": nm,
                "measured_ns": int(m),
                "predicted_ns": int(p),
                "measured_host_ns": int(z - a),
                "predicted_host_ns": int(hp),
                "warmup": k in warm,
            }
            for k, (nm, m, p, (a, z), hp) in enumerate(
                zip(st.names, measured.tolist(), predicted.tolist(), st.host_spans, host_pred.tolist(), strict=True)
            )
        ]
        use = st.steady or list(range(len(st.host_spans)))
        med = {
            "m": int(np.median(measured[use])),
            "p": int(np.median(predicted[use])),
            "mh": int(np.median((h1 - h0)[use])),
            "ph": int(np.median(host_pred[use])),
        }
    return {
        "origin_ns": int(trace.meta.origin_ns),
        "changes": described,
        "window_ns": {"measured": int(measured_window), "predicted": int(predicted_window)},
        "steps": {
            "label": st.label,
            "count": len(st.host_spans),
            "measured_median_ns": med["m"],
            "predicted_median_ns": med["p"],
            "measured_host_median_ns": med["mh"],
            "predicted_host_median_ns": med["ph"],
        },
        "per_step": per_step,
        "notes": _notes(rp, described, measured_window, predicted_window, med["m"], med["p"], st.label)
        + _comm_note(trace, rp),
    }


def _notes(rp, described, mw, pw, m_med, p_med, label) -> list[str]:

    notes = list(rp.notes)
    gain = (m_med - p_med) if m_med is not None and p_med is not None else mw - pw
    scale = m_med if m_med else mw
    no_gain = scale <= 0 or abs(gain) < NO_GAIN_SHARE * scale
    if not label:
        notes.append("the trace has no steps (no numbered user range family, no ProfilerStep#): window only")
    for d in described:
        notes += _assumed(d)
        if d["kind"] == "graph":
            if no_gain:
                notes.append(
                    f"no gain from --graph {d['target']}: the device, not the host, sets the pace inside "
                    f"{d['label']} ({d['ops']:,} ops in {d['instances']} instances)"
                )
            continue
        if d["kind"] == "remove":
            if d["regions"] == 0 and not (d.get("calls_unblocked") or d.get("calls_removed") or d.get("pipeline_ns")):
                if d["cause"] == "host" and d.get("island_min_ns"):
                    notes.append(
                        f"no host island (a host-cause blank region of at least {fmt_ns(d['island_min_ns'])}): "
                        "shorter host gaps between launches are the launch loop (--remove launch)"
                    )
                else:
                    notes.append(f"no blank region has cause {d['cause']}: nothing to remove")
                continue
            if d["untraced_regions"]:
                notes.append(
                    f"{d['untraced_regions']} of {d['regions']} {d['cause']} regions have no traced launching "
                    "thread: their host time stays"
                )
            if no_gain:
                if d["cause"] == "sync":
                    why = (
                        f"the {d['calls_unblocked']:,} synchronising calls no longer wait, but what follows them "
                        "still waits on the device: the host was not ahead of it"
                    )
                elif d["on_critical_path"] == 0:
                    why = (
                        f"none of the {d['regions']} {d['cause']} regions ({fmt_ns(d['blank_ns'])}) is on the "
                        "critical path: the device was waiting on other work, so the host time behind them "
                        "moves nothing that follows"
                    )
                elif not d.get("host_ns"):
                    # nothing came off a thread: "0 ns ... is absorbed" explained a gain that was never there
                    # (round-3 island_fault --remove copy)
                    why = f"no host time lies behind the {d['regions']} {d['cause']} regions: nothing came off a thread"
                else:
                    why = (
                        f"the {d['cause']} time taken off ({fmt_ns(d.get('host_ns') or 0)}) is absorbed before "
                        "the step ends: later work waits on the device or on a blocking call that did not move"
                    )
                if d["cause"] == "copy":  # the copies themselves run on the device: that is --scale's change
                    why += "; to model faster copies, scale them: --scale 'Memcpy*=F'"
                notes.append(f"no gain from --remove {d['cause']}: {why}")
        else:
            if d["ops"] == 0:
                notes.append(f"no GPU op matches {d['glob']!r}: nothing to scale")
            elif d["factor"] == 1:
                notes.append(f"--scale '{d['glob']}=1' changes nothing")
            elif no_gain:
                notes.append(
                    f"no gain from --scale '{d['glob']}={d['factor']:g}' ({d['ops']} ops, "
                    f"{fmt_ns(d['gpu_ns'])} -> {fmt_ns(d['gpu_ns_after'])}): they are off the critical path "
                    "(other streams carried the time, or the host set the pace)"
                )
    return notes


def _assumed(d: dict) -> list[str]:
    """What a change assumed, said once beside its prediction."""
    if d["kind"] == "graph":
        return [
            f"--graph {d['target']}: the {d['instances']} instances of {d['label']} run as {d['graphs']} graph "
            f"launches ({fmt_graph(d)}), captured between any read-back that stays eager; the {d['ops']:,} GPU ops "
            f"keep their durations and order, {GRAPH_NODE_GAP_NS} ns apart; assumes the capture holds no host-side "
            "branching and the inputs live in static buffers"
        ]
    if d["kind"] != "remove":
        return []
    cause = d["cause"]
    if cause == "host" and d.get("pipeline_ns"):
        return [
            "--remove host takes the step's wait for its next batch off too: assumes the input pipeline "
            "(more workers, prefetch) keeps up with the GPU"
        ]
    if cause == "sync":
        return [
            "--remove sync: the synchronising calls no longer wait and the host runs ahead; assumes nothing "
            "the host does next needs the value the sync read back"
        ]
    if cause == "alloc":
        return [
            f"--remove alloc: {d.get('calls_removed') or 0:,} memory-management calls cost what a caching "
            "allocator's reuse costs (nothing); assumes the memory is reused step to step"
        ]
    if cause == "copy" and d.get("copies_off_stream"):
        return [
            f"--remove copy: {d['copies_off_stream']:,} host<->device copies leave the compute stream, as if "
            "prefetched on a side stream a step ahead; assumes the copy engine and the host link are not shared"
        ]
    return []


def fmt_graph(d: dict) -> str:

    per = d["graph_launch_ns"] // max(d["graphs"], 1)
    return f"{fmt_ns(per)} of host time each, {GRAPH_LAUNCH_NS_PER_NODE} ns a node"


def _comm_note(trace: Trace, rp: Replay) -> list[str]:
    """Collectives moved by the change keep their recorded length: how long they waited is the peers' affair."""

    b = rp.base
    if b.g.size == 0:
        return []
    comm = comm_mask(trace)[b.g]
    if not (comm & (rp.enew != b.e)).any():
        return []
    return [
        "collectives moved by the change keep their recorded durations: a rank that arrives earlier may wait "
        "longer for its peers, which this trace does not show (read the job with gaplens ranks)"
    ]


def range_times(trace: Trace, changes: list[Change], pattern: str) -> list[tuple[str, int, int]]:
    """(name, measured, predicted) host span of every host range whose name matches ``pattern`` (a regex).

    For ranges other than the step owner's (``ProfilerStep#N`` inside ``train_step N``, say), timed on
    the host: the shift of their start and end on their own thread.
    """
    import re

    rx = re.compile(pattern)
    rp, _ = replay(trace, changes)
    b = rp.base
    ids = [i for i, nm in enumerate(trace.names) if rx.fullmatch(nm)]
    ev = np.flatnonzero(np.isin(trace.name_id, ids) & (b.thread >= 0) & (trace.kind != int(Kind.CUDA_API)))
    ev = ev[np.argsort(trace.start_ns[ev], kind="stable")]
    th = b.thread[ev]
    s0, s1 = trace.start_ns[ev].astype(np.int64), trace.end_ns[ev].astype(np.int64)
    p = (s1 + rp.host_shift(th, s1)) - (s0 + rp.host_shift(th, s0))
    return [
        (trace.name(int(i)), int(z - a), int(max(q, 0)))
        for i, a, z, q in zip(ev.tolist(), s0.tolist(), s1.tolist(), p.tolist(), strict=True)
    ]
