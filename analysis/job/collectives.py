"""One rank's collectives in issue order, and what the rank did before each one arrived.

A job is read collective by collective (``analysis.job.align``), and the cross-rank step needs
only this small table per rank, never the trace: for every collective kernel of the rank's
device, its process group, its position in that group's sequence, a signature to check the
match (Kineto's ``Collective name``, nsys's NCCL NVTX range, else the kernel's name), and when
it started (the rank *arrived*) and ended, on the trace's absolute clock.

Each row also keeps the *segment* before the arrival, from the end of the rank's previous
collective, split into what the device did in it:

    device   ▒allreduce▒|optimizer██|       (device idle)        |forward███|▒all_to_all▒
    host                            |-------- data_wait ---------|
    segment              [ compute  |  blank: host, "data_wait"  | compute  )
                         ^ end of the previous collective                   ^ arrival

so the straggler's "why" is a difference of segments (``analysis.job.straggler``): blank time by
the rank's own gap cause (``analysis.gaps``), with the phase that covered it, compute time
with the phase that ran it, and copies.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from gaplens.analysis.busy import BusySpans, device_splits
from gaplens.analysis.comm import comm_mask
from gaplens.analysis.phases import Phase
from gaplens.analysis.steps import Steps, step_of
from gaplens.loaders.model import MEMCPY_KINDS, Kind, Trace

_ARG = re.compile(r"(Collective name|Process Group Name|In msg nelems|Out msg nelems) (\S+)")
_KERNEL_FAMILY = re.compile(r"^(?:void\s+)?([\w:]+)")
#: Point-to-point operations pair two ranks, not the group: counted as communication, never matched.
P2P = frozenset({"send", "recv", "isend", "irecv", "ncclsend", "ncclrecv"})
NCCL_RANGE = "NCCL:"


def collective_args(detail: str) -> dict[str, str]:
    """The collective fields the Kineto loader keeps in a kernel's detail string."""
    return dict(_ARG.findall(detail))


@dataclass
class CollectiveTable:
    """Collectives of one rank in issue order (columns); times are absolute ns on the rank's clock."""

    groups: list[str]  # process group names ("" : the device's whole NCCL sequence)
    signatures: list[str]
    causes: list[str]  # gap cause names, the columns of ``blank_cause_ns``
    phase_names: list[str]
    group_id: np.ndarray  # int32
    seq: np.ndarray  # int32: position in its group's sequence
    sig_id: np.ndarray  # int32
    size: np.ndarray  # int64: In msg nelems (-1 unknown)
    start_ns: np.ndarray  # int64: arrival
    end_ns: np.ndarray  # int64
    step: np.ndarray  # int32: step it was issued in (-1: outside every step)
    bounded: np.ndarray  # bool: a previous collective bounds the segment
    seg_start_ns: np.ndarray  # int64
    compute_ns: np.ndarray  # int64: compute busy in the segment (copies included)
    copy_ns: np.ndarray  # int64: copy/memset busy in the segment
    blank_ns: np.ndarray  # int64: device idle in the segment
    blank_cause_ns: np.ndarray  # (n, len(causes)) int64
    blank_phase: np.ndarray  # int32 into phase_names: the phase covering most of the blank time, -1 none
    compute_phase: np.ndarray  # int32: the phase that ran most of the compute, -1 none

    def __len__(self) -> int:
        return int(self.start_ns.size)

    @property
    def nbytes(self) -> int:
        return sum(v.nbytes for v in vars(self).values() if isinstance(v, np.ndarray))


def comm_kernels(trace: Trace, device: int) -> np.ndarray:
    """Indices of the communication kernels of one device (the union of these is the rank's comm)."""
    m = comm_mask(trace) & (trace.kind == int(Kind.KERNEL))
    return np.flatnonzero(m & (trace.device_of_event() == device))


def issue_order(trace: Trace, idx: np.ndarray) -> np.ndarray:
    """``idx`` sorted by when each op was queued (its launch call), else by its start."""
    launch = trace.launch[idx]
    queued = np.where(launch >= 0, trace.start_ns[np.maximum(launch, 0)], trace.start_ns[idx])
    return idx[np.lexsort((trace.start_ns[idx], queued))]


def collective_table(
    trace: Trace,
    device: int,
    phases: list[Phase],
    st: Steps | None = None,
    gaps: tuple[np.ndarray, np.ndarray, np.ndarray, list[str]] | None = None,
) -> CollectiveTable:
    """The table of one rank: its device's collective kernels, the phases of its own process.

    ``st``: the rank's steps (``analysis.steps``); ``gaps``: (start, end, cause index,
    cause names) of the device's blank regions, from the rank's gap reading.
    """
    idx = issue_order(trace, comm_kernels(trace, device))
    if st is not None and st.family and idx.size:
        steps = step_of(trace, idx, st).astype(np.int32)
    else:
        steps = np.full(idx.size, -1, np.int32)
    labels = _labels(trace, idx)
    groups: dict[str, int] = {}
    sigs: dict[str, int] = {}
    keep, g_ids, s_ids, sizes = [], [], [], []
    arg_cache: dict[int, dict[str, str]] = {}
    for k, i in enumerate(idx.tolist()):
        did = int(trace.detail_id[i])
        args = arg_cache.get(did)
        if args is None:
            args = arg_cache[did] = collective_args(trace.details[did])
        sig = args.get("Collective name") or labels[k] or _family(trace.name(i))
        if sig.lower().removeprefix("nccl") in P2P or sig.lower() in P2P:
            continue
        keep.append(k)
        g_ids.append(groups.setdefault(args.get("Process Group Name", ""), len(groups)))
        s_ids.append(sigs.setdefault(sig, len(sigs)))
        sizes.append(int(args["In msg nelems"]) if args.get("In msg nelems", "").isdigit() else -1)
    sel = idx[np.asarray(keep, np.int64)] if keep else np.empty(0, np.int64)
    group_id = np.asarray(g_ids, np.int32)
    seq = np.zeros(sel.size, np.int32)
    for g in range(len(groups)):
        m = group_id == g
        seq[m] = np.arange(int(m.sum()), dtype=np.int32)
    origin = trace.meta.origin_ns
    start = trace.start_ns[sel].astype(np.int64)
    end = trace.end_ns[sel].astype(np.int64)
    # The previous collective of any group bounds the segment: the rank was free from its end.
    prev_end = _previous_end(trace.start_ns[idx], trace.end_ns[idx], start)  # point-to-point ones too
    bounded = prev_end > np.iinfo(np.int64).min
    seg0 = np.where(bounded, np.minimum(prev_end, start), start)
    split = device_splits(trace).get(device)
    prof = _segments(trace, device, seg0, start, split, phases, gaps)
    return CollectiveTable(
        groups=list(groups),
        signatures=list(sigs),
        causes=prof["causes"],
        phase_names=prof["phase_names"],
        group_id=group_id,
        seq=seq,
        sig_id=np.asarray(s_ids, np.int32),
        size=np.asarray(sizes, np.int64),
        start_ns=start + origin,
        end_ns=end + origin,
        step=steps[np.asarray(keep, np.int64)] if keep else np.empty(0, np.int32),
        bounded=bounded,
        seg_start_ns=seg0 + origin,
        compute_ns=prof["compute"],
        copy_ns=prof["copy"],
        blank_ns=prof["blank"],
        blank_cause_ns=prof["blank_cause"],
        blank_phase=prof["blank_phase"],
        compute_phase=prof["compute_phase"],
    )


def _family(name: str) -> str:
    m = _KERNEL_FAMILY.match(name)
    return m.group(1) if m else name


def _previous_end(all_start: np.ndarray, all_end: np.ndarray, start: np.ndarray) -> np.ndarray:
    """For each arrival, the latest end of a collective that started before it (int64 min if none)."""
    lo = np.iinfo(np.int64).min
    if all_start.size == 0 or start.size == 0:
        return np.full(start.size, lo, np.int64)
    order = np.argsort(all_start, kind="stable")
    s, reach = all_start[order], np.maximum.accumulate(all_end[order])
    k = np.searchsorted(s, start, "left")  # collectives that started strictly before this one
    return np.where(k > 0, reach[np.maximum(k - 1, 0)], lo).astype(np.int64)


def _labels(trace: Trace, idx: np.ndarray) -> list[str]:
    """The NCCL NVTX range (nsys: ``NCCL:ncclAllReduce``) around each kernel's launch call, or ""."""
    out = [""] * idx.size
    ann = np.flatnonzero(trace.kind == int(Kind.ANNOTATION))
    launch = trace.launch[idx] if idx.size else np.empty(0, np.int64)
    if ann.size == 0 or not (launch >= 0).any():
        return out
    nccl = np.asarray([n.startswith(NCCL_RANGE) for n in trace.names], bool)
    ann = ann[nccl[trace.name_id[ann]]]
    by_thread: dict[tuple[int, int], list[int]] = {}
    for i in ann.tolist():
        ln = trace.lanes[int(trace.lane[i])]
        by_thread.setdefault((ln.pid, ln.tid), []).append(i)
    ranges = {}
    for key, evs in by_thread.items():
        ev = np.asarray(evs, np.int64)
        ev = ev[np.argsort(trace.start_ns[ev], kind="stable")]
        ranges[key] = (trace.start_ns[ev], trace.end_ns[ev], trace.name_id[ev])
    for k, li in enumerate(launch.tolist()):
        if li < 0:
            continue
        ln = trace.lanes[int(trace.lane[li])]
        hit = ranges.get((ln.pid, ln.tid))
        if hit is None:
            continue
        # NCCL's ranges do not nest within one thread: the last one opened before the call holds it.
        t = int(trace.start_ns[li])
        j = int(np.searchsorted(hit[0], t, "right")) - 1
        if j >= 0 and hit[1][j] >= t:
            out[k] = trace.names[int(hit[2][j])][len(NCCL_RANGE) :]
    return out


def _segments(
    trace: Trace,
    device: int,
    seg0: np.ndarray,
    seg1: np.ndarray,
    split,
    phases: list[Phase],
    gaps: tuple[np.ndarray, np.ndarray, np.ndarray, list[str]] | None,
) -> dict:
    """Compute, copy, blank (by cause) and the phases behind them in each segment [seg0, seg1)."""
    n = seg0.size
    empty = BusySpans(np.empty(0, np.int64), np.empty(0, np.int64))
    busy = split.busy if split is not None else empty
    compute = split.compute if split is not None else empty
    on = (trace.device_of_event() == device) & np.isin(
        trace.kind, np.asarray([int(k) for k in (*MEMCPY_KINDS, Kind.MEMSET)], np.int8)
    )
    copies = BusySpans(trace.start_ns[on], trace.end_ns[on])
    length = seg1 - seg0
    busy_ns = _between(busy, seg0, seg1)
    blank = length - busy_ns
    causes = list(gaps[3]) if gaps is not None else ["unknown"]
    blank_cause = np.zeros((n, len(causes)), np.int64)
    if gaps is not None and gaps[0].size:
        g0, g1, gc = gaps[0], gaps[1], np.asarray(gaps[2])
        for c in np.unique(gc).tolist():
            m = gc == c
            blank_cause[:, c] = _between(BusySpans(g0[m], g1[m]), seg0, seg1)
    else:
        blank_cause[:, 0] = blank
    compute_ns = _between(compute, seg0, seg1)
    names: dict[str, int] = {}
    blank_phase = np.full(n, -1, np.int32)
    compute_phase = np.full(n, -1, np.int32)
    if phases and n:
        hs = np.asarray([p.host_start_ns for p in phases], np.int64)
        he = np.asarray([p.host_end_ns for p in phases], np.int64)
        gs = np.asarray([p.start_ns for p in phases], np.int64)
        ge = np.asarray([p.end_ns for p in phases], np.int64)
        depth = np.asarray([p.depth for p in phases], np.int64)
        for k in range(n):
            a, b = int(seg0[k]), int(seg1[k])
            if b <= a:
                continue
            if blank[k] > 0:
                j = _best_phase(hs, he, depth, a, b, busy, blank[k], idle=True)
                if j >= 0:
                    blank_phase[k] = names.setdefault(phases[j].name, len(names))
            if compute_ns[k] > 0:
                j = _best_phase(gs, ge, depth, a, b, compute, compute_ns[k], idle=False)
                if j >= 0:
                    compute_phase[k] = names.setdefault(phases[j].name, len(names))
    return {
        "causes": causes,
        "phase_names": list(names),
        "compute": compute_ns,
        "copy": _between(copies, seg0, seg1),
        "blank": blank,
        "blank_cause": blank_cause,
        "blank_phase": blank_phase,
        "compute_phase": compute_phase,
    }


def _between(spans: BusySpans, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if spans.start.size == 0 or a.size == 0:
        return np.zeros(a.size, np.int64)
    return (spans.busy_before(b) - spans.busy_before(a)).astype(np.int64)


def _best_phase(
    s: np.ndarray, e: np.ndarray, depth: np.ndarray, a: int, b: int, busy: BusySpans, total: int, idle: bool
) -> int:
    """The deepest phase holding at least half of the segment's idle (or busy) time; else the largest share."""
    cand = np.flatnonzero((s < b) & (e > a))
    if cand.size == 0:
        return -1
    lo, hi = np.maximum(s[cand], a), np.minimum(e[cand], b)
    inside = _between(busy, lo, hi)
    share = (hi - lo) - inside if idle else inside
    good = cand[share >= 0.5 * total]
    if good.size:
        return int(good[np.argmax(depth[good] * (1 << 40) + share[share >= 0.5 * total])])
    best = int(np.argmax(share))
    return int(cand[best]) if share[best] > 0 else -1
