"""The four smells as findings with place, size, evidence and the lever to try.

Every threshold scales with the trace's own step time (``analysis.steps``:
the median GPU span of the repeated step annotation, else the whole GPU window),
so a healthy dense region never crosses them:

  picket_fence  runs of at least ``FENCE_MIN_OPS`` kernels, each started by its launch
                call (not by the previous op) and shorter than that call, with at
                most ``FENCE_TOLERANCE`` other ops in between, no pause longer than a
                host island, inside one step; the device is busy less than half the run
                and such kernels are at least ``FENCE_MIN_SHARE`` of the run's ops.
                Device-paced ops (graph replays, queued GEMMs) never qualify.
  host_island   a blank region on the critical path, caused by ``host`` work, at least
                ``ISLAND_STEP_SHARE`` of a step and ``ISLAND_MIN_NS`` long, and (when the
                trace marks phases) at least half inside one: start-up is not a smell.
  copy_on_path  a host<->device copy whose op or call lies on the critical path for at
                least ``COPY_STEP_SHARE`` of a step (or that long per step, summed over a
                copy repeated every step); copies launched outside every marked phase
                (model loading) are set-up, not a smell. A finding spans the copy as the
                device ran it, never the wait between its call and its start.
  sync_cliff    a blocking call on the critical path (the host waited for the device),
                then a blank region starting when the awaited op ended, at least
                max(``CLIFF_MIN_NS``, ``CLIFF_STEP_SHARE`` of a step) long; cliffs closer
                than max(``CLIFF_MERGE_NS``, ``CLIFF_MERGE_SHARE`` of a step) merge; with
                phases marked, a cliff must lie at least half inside one.

Findings roll up per phase family (``rollup``: "sync cliff in 31 of 32 decode_step"), and a
trace whose critical path is mostly blank always yields a named finding: when no smell crossed
its threshold but starved gaps on the path fill at least ``MOSTLY_BLANK`` of the window, the
dominant cause names one (``mostly_blank``). Levers come from ``analysis.words`` for the kind of
workload seen, fitted to what the trace already does (``analysis.levers``: no CUDA-graph advice
for a trace that replays graphs, the copy's own direction and memory kind).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from gaplens.analysis.busy import BusySpans, device_splits, gpu_window, gpu_work
from gaplens.analysis.calls import module_load_words
from gaplens.analysis.critical_path import CriticalPath, Edge, Seg, critical_path, graph
from gaplens.analysis.gaps import CAUSES, GapColumns, gap_columns
from gaplens.analysis.levers import fitted_lever, per_step
from gaplens.analysis.memo import per_trace
from gaplens.analysis.memory import HOST_DEVICE, memory_rows
from gaplens.analysis.phases import family, holding_share_each, innermost_each, int_column, phases
from gaplens.analysis.regions import device_phases
from gaplens.analysis.steps import Steps, step_of, steps
from gaplens.analysis.units import fmt_bytes, fmt_ns
from gaplens.analysis.words import CAUSE_SMELL, CAUSE_WORDS, SMELL_NAMES, SMELLS, WARMUP_LEVER
from gaplens.analysis.workload import kind as workload_kind
from gaplens.loaders.model import Kind, Trace

#: Fewer launch-bound kernels in a row are a few slow launches, not a fence (a decode step of a small
#: model launches hundreds; a training step's optimizer tail a few dozen).
FENCE_MIN_OPS = 32
#: Other ops tolerated inside a run (a device-paced GEMM between launch-bound elementwise ops).
FENCE_TOLERANCE = 3
#: A run the device keeps busy half its time or more is not starved by its launches.
FENCE_MAX_BUSY = 0.5
#: Share of a run's ops that must be short launch-bound kernels (a prefill mixing GEMMs is launch-heavy, not a fence).
FENCE_MIN_SHARE = 0.9
#: A host island fills at least this share of its step: a twentieth of a step is worth moving.
ISLAND_STEP_SHARE = 0.05
#: ...and lasts at least this long: shorter host work is Python dispatch, not an island to move.
ISLAND_MIN_NS = 250_000
#: A copy on the path for a hundredth of a step (or that long per step, repeated) is worth removing.
COPY_STEP_SHARE = 0.01
#: A sync cliff's idle half lasts at least this long (a stream sync's own round trip is ~10-20 µs)...
CLIFF_MIN_NS = 50_000
#: ...or this share of a step, whichever is longer.
CLIFF_STEP_SHARE = 0.001
#: Cliffs closer than this (or ``CLIFF_MERGE_SHARE`` of a step) are one pattern: a per-token
#: ``.item()`` loop is one finding, not hundreds.
CLIFF_MERGE_NS = 1_000_000
CLIFF_MERGE_SHARE = 0.02
#: Starved gaps on the path filling a quarter of the window are a finding even when none crosses a threshold.
MOSTLY_BLANK = 0.25
#: A blank region is reported as the sync cliff before it (not also as a host island) when the idle
#: after the awaited op holds at least this share of it.
CLIFF_CLAIMS_SHARE = 0.5
#: A finding lies in a phase when this share of it does (start-up and set-up outside every phase are no smell).
IN_PHASE_SHARE = 0.5
#: A sync cliff says the device was waiting in communication when a quarter of the blocked time was.
CLIFF_COMM_SHARE = 0.25
#: Largest gaps whose evidence a mostly-blank finding quotes.
BLANK_EVIDENCE_GAPS = 3

KINDS = SMELLS


@dataclass
class Finding:
    kind: str
    start_ns: int
    end_ns: int
    device: int
    evidence: list[int]
    summary: str
    numbers: dict = field(default_factory=dict)
    lever: str = ""
    family: str = ""  # the phase family it lies in ("decode_step"), "" outside every phase
    phase: int = -1  # the annotation event of the innermost phase it lies in

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "family": self.family,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "dur_ns": self.dur_ns,
            "device": self.device,
            "evidence": self.evidence,
            "lever": self.lever,
            "summary": self.summary,
            **{k: v for k, v in self.numbers.items() if not k.startswith("_")},
        }


def smells(trace: Trace, gaps: GapColumns | None = None, st: Steps | None = None) -> list[Finding]:
    """All four smells over the default window, in time order (the default reading is cached).

    ``gaps`` are analysed blank regions as columns (``gaps.gap_columns``): a 1M-event trace has
    10^5 of them, and only the few a smell names become ``Gap`` objects.
    """
    if gaps is None and st is None:
        return _default_smells(trace)
    return _smells(trace, gaps, st)


@per_trace
def _default_smells(trace: Trace) -> list[Finding]:
    return _smells(trace, None, None)


def _smells(trace: Trace, gaps: GapColumns | None, st: Steps | None) -> list[Finding]:
    st = steps(trace) if st is None else st
    step_ns = max(st.step_ns, 1)
    gaps = gap_columns(trace) if gaps is None else gaps
    path = critical_path(trace)
    cliffs = sync_cliffs(trace, path, gaps, step_ns)
    # A gap that is the idle half of a sync cliff is reported once, as the cliff.
    claimed = {(f.device, s) for f in cliffs for s in f.numbers.pop("_claims")}
    for f in cliffs:
        f.numbers.pop("_gap_starts")
    islands = [f for f in host_islands(trace, gaps, st) if (f.device, f.start_ns) not in claimed]
    out = picket_fences(trace, st) + islands + copies_on_path(trace, path, st) + cliffs
    if not out:
        out = mostly_blank(trace, gaps)
    work = workload_kind(trace)
    for f in out:
        f.lever = fitted_lever(trace, f.kind, work, f.evidence if f.kind == "copy_on_path" else None)
        if f.numbers.get("warmup"):
            f.lever = WARMUP_LEVER
    for dev in sorted({f.device for f in out}):
        mine = [f for f in out if f.device == dev]
        found = device_phases(trace, dev)
        at = innermost_each(found, np.asarray([f.start_ns for f in mine]), np.asarray([f.end_ns for f in mine]))
        for f, k in zip(mine, at.tolist(), strict=True):
            if k >= 0:
                f.family, f.phase = family(found[k].name), found[k].event
    out.sort(key=lambda f: (f.start_ns, KINDS.index(f.kind)))
    return out


def mostly_blank(trace: Trace, gaps: GapColumns) -> list[Finding]:
    """One named finding for a trace whose critical path is mostly blank yet crossed no threshold.

    Many small gaps add up: 854 critical gaps idling 86% of the window are a finding even when
    none of them alone is an island or a fence. The dominant cause among them names the smell.
    """
    on = np.flatnonzero(gaps.on_path & np.isin(gaps.cause, [CAUSES.index(c) for c in CAUSE_SMELL]))
    if on.size == 0:
        return []
    w0, w1 = gpu_window(trace)
    dur = gaps.end_ns[on] - gaps.start_ns[on]
    blank = int(dur.sum())
    if blank < MOSTLY_BLANK * max(w1 - w0, 1):
        return []
    codes = gaps.cause[on]
    got = np.bincount(codes, weights=dur, minlength=len(CAUSES))
    _, first = np.unique(codes, return_index=True)
    # Causes in order of first appearance: a tie goes to the earlier one.
    by_cause = {CAUSES[int(codes[i])]: int(got[codes[i]]) for i in np.sort(first).tolist()}
    cause = max(by_cause, key=lambda c: by_cause[c])
    kind = CAUSE_SMELL[cause]
    biggest = on[np.argsort(-dur, kind="stable")[:BLANK_EVIDENCE_GAPS]]
    # The ops around the largest regions, each once (adjacent regions share the op between them).
    ev = list(dict.fromkeys(i for k in biggest.tolist() for i in gaps.gap(trace, k).evidence[:2]))
    return [
        Finding(
            kind,
            int(gaps.start_ns[on].min()),
            int(gaps.end_ns[on].max()),
            int(gaps.device[on[0]]),
            ev,
            f"{on.size:,} blank regions on the critical path: the device computed nothing for {fmt_ns(blank)} "
            f"({100 * blank / max(w1 - w0, 1):.0f}% of the window), {100 * by_cause[cause] / blank:.0f}% of it "
            # the sentence already says the device computed nothing (saxpy: "... while the device computed nothing")
            f"because {CAUSE_WORDS[cause].removesuffix(' while the device computed nothing')}; none alone crosses "
            f"the {SMELL_NAMES[kind]} threshold",
            {"gaps": int(on.size), "blank_ns": blank, "cause": cause},
        )
    ]


@dataclass
class SmellGroup:
    """Findings of one kind in one phase family: one line, instances underneath."""

    kind: str
    family: str
    device: int
    findings: list[Finding]
    of: int  # phases in the family (0 outside every phase)

    @property
    def median_ns(self) -> int:
        return int(np.median([f.dur_ns for f in self.findings]))

    @property
    def total_ns(self) -> int:
        return sum(f.dur_ns for f in self.findings)

    @property
    def line(self) -> str:
        name = SMELL_NAMES[self.kind]
        n = len(self.findings)
        if n == 1:
            return self.findings[0].summary
        hit = len({f.phase for f in self.findings})
        times = f" ({n} times)" if n != hit else ""
        where = f"in {hit} of {self.of} {self.family}{times}" if self.of else f"{n} times"
        return f"{name} {where}, median {fmt_ns(self.median_ns)} (total {fmt_ns(self.total_ns)})"

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "family": self.family,
            "device": self.device,
            "count": len(self.findings),
            "of": self.of,
            "median_ns": self.median_ns,
            "total_ns": self.total_ns,
            "summary": self.line,
            "lever": self.findings[0].lever,
        }


def rollup(trace: Trace, findings: list[Finding]) -> list[SmellGroup]:
    """Findings grouped by (kind, phase family, device), largest total first."""
    counts: dict[str, int] = {}
    for name, n in Counter(p.name for p in phases(trace)).items():  # each distinct name folded once
        counts[family(name)] = counts.get(family(name), 0) + n
    groups: dict[tuple[str, str, int, bool], list[Finding]] = {}
    for f in findings:  # a one-off warm-up finding is its own group: its lever is not the steady one's
        groups.setdefault((f.kind, f.family, f.device, bool(f.numbers.get("warmup"))), []).append(f)
    out = [SmellGroup(k, fam, dev, fs, counts.get(fam, 0) if fam else 0) for (k, fam, dev, _), fs in groups.items()]
    out.sort(key=lambda g: -g.total_ns)
    return out


def picket_fences(trace: Trace, st: Steps) -> list[Finding]:
    gr = graph(trace)
    out: list[Finding] = []
    island_ns = max(int(ISLAND_STEP_SHARE * st.step_ns), ISLAND_MIN_NS)
    for dev in [d.id for d in trace.meta.devices]:
        ops = gpu_work(trace, dev)
        ops = ops[np.isin(trace.kind[ops], (int(Kind.KERNEL), int(Kind.MEMSET)))]
        if ops.size < FENCE_MIN_OPS:
            continue
        ops = ops[np.argsort(trace.start_ns[ops], kind="stable")]
        a = trace.launch[ops]
        a0 = np.maximum(a, 0)
        dur = trace.end_ns[ops] - trace.start_ns[ops]
        call = trace.end_ns[a0] - trace.start_ns[a0]
        flag = (a >= 0) & (gr.binding[ops] == Edge.LAUNCH) & (dur < call)
        pos = np.flatnonzero(flag)
        if pos.size < FENCE_MIN_OPS:
            continue
        f_ops = ops[pos]
        step = step_of(trace, f_ops, st)
        pause = trace.start_ns[f_ops][1:] - trace.end_ns[f_ops][:-1]
        brk = (np.diff(pos) > FENCE_TOLERANCE + 1) | (step[1:] != step[:-1]) | (pause > island_ns)
        bounds = np.concatenate(([0], np.flatnonzero(brk) + 1, [pos.size]))
        busy = BusySpans(trace.start_ns[ops], trace.end_ns[ops])
        for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            if hi - lo < FENCE_MIN_OPS:
                continue
            run = f_ops[lo:hi]
            t0, t1 = int(trace.start_ns[run[0]]), int(trace.end_ns[run].max())
            share = busy.busy_in(t0, t1) / max(t1 - t0, 1)
            # Mostly idle, and nearly every op in the run is a short launch-bound one
            # (a prefill mixing GEMMs with small ops is launch-heavy, not a fence).
            if share >= FENCE_MAX_BUSY or (hi - lo) < FENCE_MIN_SHARE * (pos[hi - 1] - pos[lo] + 1):
                continue
            k_med = int(np.median(dur[pos[lo:hi]]))
            c_med = int(np.median(call[pos[lo:hi]]))
            out.append(
                Finding(
                    "picket_fence",
                    t0,
                    t1,
                    dev,
                    [int(run[0]), int(a[pos[lo]]), int(run[-1])],
                    f"{hi - lo} short kernels (median {fmt_ns(k_med)}) each waiting for its launch "
                    f"(median call {fmt_ns(c_med)}); device busy {100 * share:.0f}% of {fmt_ns(t1 - t0)}",
                    {
                        "ops": hi - lo,
                        "busy_pct": round(100 * share, 1),
                        "median_op_ns": k_med,
                        "median_launch_ns": c_med,
                    },
                )
            )
    return out


def host_islands(trace: Trace, gaps: GapColumns, st: Steps) -> list[Finding]:
    limit = max(int(ISLAND_STEP_SHARE * st.step_ns), ISLAND_MIN_NS)
    dur = gaps.end_ns - gaps.start_ns
    pick = np.flatnonzero(gaps.on_path & (gaps.cause == CAUSES.index("host")) & (dur >= limit))
    pick = pick[in_phases_each(trace, gaps.start_ns[pick], gaps.end_ns[pick])]
    out = []
    for k in pick.tolist():
        g = gaps.gap(trace, k)
        nxt = int(gaps.next_op[k])  # the compute op that ended the region
        ev = g.evidence
        host = g.shares.get("host", 0.0)
        share = step_share(st, g.start_ns, g.end_ns)
        of_step = f" ({_share_text(share)} of its step)" if share is not None else ""
        numbers = {"host_share": host, "step_share": None if share is None else round(share, 3)}
        what = f"while the host ran CPU work outside any CUDA call ({100 * host:.0f}% of the gap)"
        if gaps.warmup[k]:
            # A launch that loaded its kernel's module (``calls.module_load_regions``): warm-up, not a steady cost.
            what = f"while {module_load_words(trace, nxt)}: a one-off warm-up cost"
            numbers["warmup"] = True
        out.append(
            Finding(
                "host_island",
                g.start_ns,
                g.end_ns,
                g.device,
                ev,
                f"device starved {fmt_ns(g.dur_ns)}{of_step} {what}",  # idle means nothing was asked (DESIGN)
                numbers,
            )
        )
    return out


def _share_text(share: float) -> str:
    return "<1%" if share < 0.01 else f"{100 * share:.0f}%"  # a share under 1% prints as "<1%"


def step_share(st: Steps, t0: int, t1: int) -> float | None:
    """The share of its step that [t0, t1) fills, never over 1 (None outside every step)."""
    for spans in (st.spans, st.host_spans):
        for a, b in spans:
            if a <= t0 < b or a < t1 <= b:
                return min(1.0, (t1 - t0) / max(b - a, 1))
    return None


def _copy_on_path_ns(trace: Trace, path: CriticalPath, idx: np.ndarray) -> np.ndarray:
    """Per host<->device copy of ``idx``: its critical-path time, on the device and in its call.

    Host-side path time inside the copy call counts on the call's own thread: a pageable copy keeps its
    thread staging chunks, so the path runs through the call, not the op. With phases marked, a copy
    outside all of them (model loading, warm-up set-up) is set-up cost, not a transfer between a request
    and its next kernel: 0.
    """
    seg_len = path.seg_end_ns - path.seg_start_ns
    on_dev = np.bincount(path.seg_event[path.seg_kind == Seg.DEVICE], seg_len[path.seg_kind == Seg.DEVICE], len(trace))
    a = trace.launch[idx]
    on_call = np.zeros(idx.size, dtype=np.int64)
    host_side = path.host_side()
    seg_thread = _thread_of(trace, path.seg_event)
    call_thread = _thread_of(trace, a)
    for th in np.unique(call_thread[a >= 0]).tolist():
        m = (a >= 0) & (call_thread == th)
        c = a[m]
        on_call[m] = path.time_in(trace.start_ns[c], trace.end_ns[c], host_side & (seg_thread == th))
    on = on_dev[idx] + on_call
    found = phases(trace)
    if found:
        # Inside some phase's host span [h0, h1): the latest end among the spans opened by t lies past t
        # (one binary search per copy; a pass per phase was 0.35 s with 92k NVTX ranges).
        h0, h1 = int_column(found, "host_start_ns"), int_column(found, "host_end_ns")
        order = np.argsort(h0, kind="stable")
        reach = np.maximum.accumulate(h1[order])
        t = np.where(a >= 0, trace.start_ns[np.maximum(a, 0)], trace.start_ns[idx])
        k = np.searchsorted(h0[order], t, "right") - 1
        inside = (k >= 0) & (reach[np.maximum(k, 0)] > t)
        on = np.where(inside, on, 0)
    return on


def copies_on_path(trace: Trace, path: CriticalPath, st: Steps) -> list[Finding]:
    step_ns = max(st.step_ns, 1)
    kinds = np.asarray([int(k) for k in HOST_DEVICE], np.int8)
    idx = np.flatnonzero(np.isin(trace.kind, kinds))
    if idx.size == 0:
        return []
    a = trace.launch[idx]
    on = _copy_on_path_ns(trace, path, idx)
    rows = {r["direction"]: r for r in memory_rows(trace, st)}
    k = step_of(trace, idx, st)
    limit = COPY_STEP_SHARE * step_ns
    dur = trace.end_ns[idx] - trace.start_ns[idx]
    out = []
    n_steps = max(len(st.spans), 1)
    # Copies of one direction and size form a group; a group seen in every step repeats.
    group = np.unique(np.stack((trace.kind[idx].astype(np.int64), trace.bytes[idx])), axis=1, return_inverse=True)[1]
    group = np.asarray(group).reshape(-1)
    n_groups = int(group.max()) + 1
    seen = np.zeros((n_groups, n_steps + 1), dtype=bool)
    seen[group, np.where(k >= 0, k, n_steps)] = True
    every_group = np.asarray(seen[:, :n_steps].all(axis=1)) & bool(st.family)
    on_group = np.bincount(group, weights=on, minlength=n_groups)
    for j in np.flatnonzero(on > 0).tolist():
        i = int(idx[j])
        direction = "HtoD" if trace.kind[i] == int(Kind.MEMCPY_HTOD) else "DtoH"
        row = rows.get(direction, {})
        every = bool(every_group[group[j]])
        # Small copies count when, repeated every step, their on-path time adds up.
        if on[j] < limit and not (every and on_group[group[j]] / n_steps >= limit):
            continue
        name = trace.name(i)
        ev = [i] + ([int(a[j])] if a[j] >= 0 else [])
        # The finding is the copy as the device ran it: a copy queued 120 ms ahead behind a busy
        # stream is a 4.85 ms copy, not a 125 ms one (the call stays in the evidence).
        out.append(
            Finding(
                "copy_on_path",
                int(trace.start_ns[i]),
                int(trace.end_ns[i]),
                trace.lanes[int(trace.lane[i])].device,
                ev,
                f"{name}: {fmt_bytes(trace.bytes[i])} in {fmt_ns(dur[j])}, "
                + (
                    f"{fmt_ns(on[j])} of it on the critical path"
                    if on[j] <= dur[j]
                    # the call staging a pageable copy holds the path longer than the copy runs (round-3
                    # copy_bound read "692 MiB in 86.2 ms, 98.8 ms of it on the critical path")
                    else f"on the critical path {fmt_ns(on[j])} with the call that issued it"
                )
                + (
                    f"; repeats every step ({fmt_bytes(row.get('bytes_per_step') or 0)} {direction} per step)"
                    if every
                    else ""
                ),
                {
                    "bytes": int(trace.bytes[i]),
                    "direction": direction,
                    "pageable": "pageable" in name.lower(),
                    "on_path_ns": int(on[j]),
                    "every_step": every,
                    "bytes_per_step": row.get("bytes_per_step"),
                    "copies_per_step": row.get("copies_per_step"),
                },
            )
        )
    return out


def sync_cliffs(trace: Trace, path: CriticalPath, gaps: GapColumns, step_ns: int) -> list[Finding]:
    gr = graph(trace)
    if gr.blocking.size == 0 or len(gaps) == 0:
        return []
    on_path = np.isin(gr.blocking, path.nodes)
    calls, waited = gr.blocking[on_path], gr.awaited[on_path]
    order = np.argsort(trace.end_ns[waited], kind="stable")
    calls, waited = calls[order], waited[order]
    g_start, g_end, g_on, g_dev = gaps.start_ns, gaps.end_ns, gaps.on_path, gaps.device
    # Per awaited op, the last region starting at or before it ended (one search for all of them).
    first = np.searchsorted(g_start, trace.end_ns[waited], "right") - 1
    limit = max(CLIFF_MIN_NS, int(CLIFF_STEP_SHARE * step_ns))
    merge = max(CLIFF_MERGE_NS, int(CLIFF_MERGE_SHARE * step_ns))
    raw: list[tuple[int, int, int, int, int, int]] = []  # (start, end, call, op, gap idx, device)
    for c, w, k in zip(calls.tolist(), waited.tolist(), first.tolist(), strict=True):
        t = int(trace.end_ns[w])
        # The device drained when the awaited op ended; the gap starts then (or before the call returns),
        # or already holds that moment: a read-back copy is not compute, so the blank region after
        # ``.item()`` begins before the awaited copy ends.
        if k < 0 or g_end[k] <= t:
            k += 1
        call_end = int(trace.end_ns[c])
        while k < g_start.size and g_start[k] <= call_end:
            # Only the part after the device drained is the device waiting for the host: a pageable
            # copy's own blank region (copies are not compute) ran before it (round-3 copy_bound).
            if int(g_end[k]) - max(int(g_start[k]), t) >= limit and g_on[k]:
                raw.append((t, int(g_end[k]), c, w, k, int(g_dev[k])))
                break
            k += 1
    out: list[Finding] = []
    splits = device_splits(trace)
    for t0, t1, c, w, k, dev in raw:
        block = int(trace.end_ns[c] - trace.start_ns[c])
        # Blocked while the device only communicated is waiting for a peer, not this sync's cost.
        in_comm = splits[dev].comm.busy_in(int(trace.start_ns[c]), int(trace.end_ns[c])) if dev in splits else 0
        g0 = int(g_start[k])
        idle = int(g_end[k]) - max(g0, t0)  # after the awaited op ended
        # The cliff is the region's story only when it holds most of it: resnet50's 64.7 ms regions are
        # 62 ms of DataLoader work ending in a 0.1 ms sync and 0.45 ms of idle, an island with a cliff at its tail.
        claims = [g0] if CLIFF_CLAIMS_SHARE * (int(g_end[k]) - g0) <= idle else []
        if out and t0 - out[-1].end_ns < merge and out[-1].device == dev:
            f = out[-1]
            f.end_ns = max(f.end_ns, t1)
            f.evidence += [c, w]
            f.numbers["syncs"] += 1
            f.numbers["blocked_ns"] += block
            f.numbers["blocked_in_comm_ns"] += in_comm
            if g0 not in f.numbers["_gap_starts"]:  # several syncs before one region count it once
                f.numbers["idle_after_ns"] += idle
                f.numbers["_gap_starts"].append(g0)
                f.numbers["_claims"] += claims
        else:
            numbers = {
                "syncs": 1,
                "blocked_ns": block,
                "blocked_in_comm_ns": in_comm,
                "idle_after_ns": idle,
                "_gap_starts": [g0],
                "_claims": claims,
            }
            out.append(Finding("sync_cliff", t0, t1, dev, [c, w], "", numbers))
    inside = in_phases_each(
        trace, np.asarray([f.start_ns for f in out], np.int64), np.asarray([f.end_ns for f in out], np.int64)
    )
    out = [f for f, ok in zip(out, inside.tolist(), strict=True) if ok]
    how_often = _calls_per_step(trace, {trace.name(f.evidence[0]) for f in out})
    for f in out:
        n = f.numbers
        first = f.evidence[0]
        comm = (
            f" ({fmt_ns(n['blocked_in_comm_ns'])} of it while the device waited in communication)"
            if n["blocked_in_comm_ns"] >= CLIFF_COMM_SHARE * n["blocked_ns"]
            else ""
        )
        f.summary = (
            f"{trace.name(first)} ×{n['syncs']}{how_often.get(trace.name(first), '')}: host blocked "
            f"{fmt_ns(n['blocked_ns'])}{comm}, then the device waited {fmt_ns(n['idle_after_ns'])} for the host"
        )
    return out


def _calls_per_step(trace: Trace, names: set[str]) -> dict[str, str]:
    """`` (33 per step)``: how often each named synchronising call runs per steady step, for the cliff's words."""
    out = {}
    for name in names:
        ids = [i for i, nm in enumerate(trace.names) if nm == name]
        n, unit = per_step(trace, np.flatnonzero(np.isin(trace.name_id, ids) & (trace.kind == int(Kind.CUDA_API))))
        out[name] = f" ({n:.3g} {unit})"
    return out


def _thread_of(trace: Trace, events: np.ndarray) -> np.ndarray:
    """A dense code per (pid, tid) of each host event (-1 for GPU events or -1 indices)."""
    codes: dict[tuple[int, int], int] = {}
    lane_code = np.asarray(
        [codes.setdefault((ln.pid, ln.tid), len(codes)) if ln.pid >= 0 else -1 for ln in trace.lanes], dtype=np.int64
    )
    ev = np.asarray(events, dtype=np.int64)
    return np.where(ev >= 0, lane_code[trace.lane[np.maximum(ev, 0)]], -1)


def in_phases_each(trace: Trace, t0: np.ndarray, t1: np.ndarray) -> np.ndarray:
    """For each [t0, t1): no phase is marked, or half of it lies in one phase's host or GPU span.

    Start-up outside every marked phase (imports, model loading) is set-up, not a smell.
    """
    found = phases(trace)
    if not found:
        return np.ones(np.asarray(t0).size, bool)
    return holding_share_each(found, t0, t1, IN_PHASE_SHARE)
