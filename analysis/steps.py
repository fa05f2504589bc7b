"""The step: one definition that every screen, share, comparison, job reading and JSON reads.

DESIGN.md, *Step*: the outermost *numbered* user range family, else the profiler's
``ProfilerStep#N``. Each step is a host range (it decides which step an op belongs to, by its
launch call); its *time* is that range as CUDA events recorded at its start and end measure it
(``analysis.phases.marker_span``: M(start)..M(end)), which is the host span itself for a process
that queues no GPU work. Not the bare host span: a host that runs ahead ends ``train_step`` long
before its GPU does (rank 0 of ``tests/data/ddp_allreduce_straggler``: host 13.6 ms, CUDA events
33.8 ms, ``ProfilerStep#`` 34.1 ms), and synchronous ranks would then disagree on their step.

- A *numbered* name carries a trailing count separated from the name (``step 3``,
  ``decode_step 12``, ``iteration 4``, ``train_step#7``): ``compile2`` is not step 2 of
  ``compile``, and ``layer3`` is a layer, not a repeat. ``NUMBERED`` (``analysis.step_names``) is the
  one pattern for counts; ``family`` (display folding in ``analysis.phases``) uses it too.
- A *family* is the phases of one process sharing the name before the count, not overlapping
  on the host, with at least ``MIN_MEMBERS`` distinct counts and none missing between them (a
  count may restart: ``decode_step 0..23`` once per request; ``gemm_bf16_8192`` ×6 is one size).
  The outermost (shallowest) family wins; more members, then the earlier one, break ties.
- Step time is the median span of the steady steps. Warm-up steps (the first one, and any
  at least ``WARMUP_FACTOR`` × the median) are named and set apart: a 254 ms first step must not
  make a 15 ms range read 25 ms "per step".
- Several processes (one nsys report of a job, a front end and a worker): each has its own
  steps (``steps(trace, pid)``); ``steps(trace)`` is the step of the process that launches the
  most GPU work, and ``common_step`` is a job's step from its ranks' steps.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from gaplens.analysis.busy import gpu_window, gpu_work
from gaplens.analysis.memo import per_trace
from gaplens.analysis.phases import Phase, by_process, marker_span, phases
from gaplens.analysis.step_names import PROFILER_STEP, family, numbered
from gaplens.loaders.model import Kind, Trace

#: Fewer repeats than this are not a loop: two ranges named ``x 1`` and ``x 2`` can be a coincidence.
MIN_MEMBERS = 3
#: A step at least this many times the median of the others is warm-up (first-call loading,
#: allocator growth, compilation), not the loop's steady state.
WARMUP_FACTOR = 2.0


@dataclass(frozen=True)
class Steps:
    """The steps of one process: members in time order, the steady median, warm-up set apart."""

    label: str = ""  # the family ("train_step", "ProfilerStep"); "" when there is no step
    source: str = ""  # "ranges" | "profiler" | ""
    pid: int | None = None
    names: list[str] = field(default_factory=list)
    host_spans: list[tuple[int, int]] = field(default_factory=list)  # host ranges, trace-relative ns
    spans: list[tuple[int, int]] = field(default_factory=list)  # the same steps timed as CUDA events would
    warmup_idx: tuple[int, ...] = ()
    depth: int = 0
    window_ns: int = 0  # the GPU window: the threshold scale when there is no step

    def __bool__(self) -> bool:
        return bool(self.label)

    @property
    def family(self) -> str:
        """``label``, under the name older callers used."""
        return self.label

    @property
    def count(self) -> int:
        return len(self.names)

    @property
    def warmup(self) -> list[str]:
        return [self.names[k] for k in self.warmup_idx]

    @property
    def steady(self) -> list[int]:
        skip = set(self.warmup_idx)
        return [k for k in range(self.count) if k not in skip]

    @property
    def median_ns(self) -> int:
        d = [self.spans[k][1] - self.spans[k][0] for k in self.steady]
        return int(np.median(d)) if d else 0

    @property
    def step_ns(self) -> int:
        """The step time; without a step, the GPU window (what thresholds scale by)."""
        return self.median_ns if self.label else self.window_ns

    def warmup_text(self, shown: int = 3) -> str:
        """The warm-up steps in words. When they are the first N, say so: a count that restarts per
        request repeats the names, and "warm-up decode_step 0 ... and 29 more" beside 32 steady steps
        also named decode_step 0..31 (nsys_decode_eager) does not say which ones were set apart."""
        idx = self.warmup_idx
        if len(idx) > shown and idx == tuple(range(len(idx))):
            return f"{self.names[0]} … {self.names[len(idx) - 1]}, the first {len(idx)}"
        again = {self.names[k] for k in self.steady}
        # a name that a steady step shares gets its position: "decode_step 0 (#1 of 64)"
        named = [
            f"{self.names[k]} (#{k + 1} of {self.count})" if self.names[k] in again else self.names[k] for k in idx
        ]
        return ", ".join(named[:shown]) + (f" and {len(named) - shown} more" if len(named) > shown else "")

    def steady_mask(self) -> np.ndarray:
        m = np.ones(self.count, dtype=bool)
        m[list(self.warmup_idx)] = False
        return m

    def to_json(self) -> dict | None:
        """``summary --json``'s ``step``: {label, count, median_ns, warmup}; None without a step."""
        if not self.label:
            return None
        return {"label": self.label, "count": self.count, "median_ns": self.median_ns, "warmup": self.warmup}


def warmup_of(durations: list[int]) -> tuple[int, ...]:
    """Indices of warm-up steps: the first, and any >= ``WARMUP_FACTOR`` x the median of the rest.

    With fewer than ``MIN_MEMBERS`` steps nothing is set apart (no steady pair would be left).
    """
    if len(durations) < MIN_MEMBERS:
        return ()
    rest = np.asarray(durations[1:], dtype=np.float64)
    med = float(np.median(rest))
    return (0, *[k + 1 for k, d in enumerate(rest.tolist()) if med > 0 and d >= WARMUP_FACTOR * med])


def _consecutive(counts: list[int]) -> bool:
    """A loop counter: at least ``MIN_MEMBERS`` distinct counts with none missing between them
    (``gemm_bf16_8192`` six times is one size, not six steps)."""
    distinct = sorted(set(counts))
    return len(distinct) >= MIN_MEMBERS and distinct[-1] - distinct[0] + 1 == len(distinct)


def _disjoint(members: list[Phase]) -> bool:
    return all(b.host_start_ns >= a.host_end_ns for a, b in itertools.pairwise(members))


def range_family(found: list[Phase]) -> list[Phase]:
    """The members of the outermost numbered family among ``found`` (one process's phases), or [].

    Outermost is first about nesting: a family with a member running inside a member of another (and none
    holding one of that other's) sits below it, whatever depths its other members have. A framework's
    ``layers.N`` per forward lies inside ``decode_step N`` but also in prefill, where no step range is open, at
    the step's own depth: by depth alone, with more members, the layers read as 11,500 "steps". Among the
    families that no other holds: the shallowest, then the most members, then the earliest.
    """
    groups: dict[str, list[tuple[int, Phase]]] = {}
    for p in found:
        hit = numbered(p.name)
        if hit is not None:
            groups.setdefault(hit[0], []).append((hit[1], p))
    families: list[tuple[tuple, list[Phase]]] = []
    for label, items in groups.items():
        if len(items) < MIN_MEMBERS:
            continue
        items.sort(key=lambda cp: cp[1].host_start_ns)
        members = [p for _, p in items]
        if not _consecutive([c for c, _ in items]) or not _disjoint(members):
            continue
        families.append(((min(p.depth for p in members), -len(members), members[0].host_start_ns, label), members))
    if not families:
        return []
    spans = [_host_columns(members) for _, members in families]
    held = [any(_holds(b, a) and not _holds(a, b) for j, b in enumerate(spans) if j != i) for i, a in enumerate(spans)]
    outer = [f for f, h in zip(families, held, strict=True) if not h] or families  # a cycle: depth decides
    return min(outer, key=lambda f: f[0])[1]


def _host_columns(members: list[Phase]) -> tuple[np.ndarray, np.ndarray]:
    """(host starts, host ends) of a family's members, in start order (disjoint: the ends are sorted too)."""
    return (
        np.fromiter((p.host_start_ns for p in members), np.int64, len(members)),
        np.fromiter((p.host_end_ns for p in members), np.int64, len(members)),
    )


def _holds(outer: tuple[np.ndarray, np.ndarray], inner: tuple[np.ndarray, np.ndarray]) -> bool:
    """Whether some member of ``inner`` lies within a member of ``outer`` (host spans; ``outer``'s are disjoint,
    so the only candidate is the last one starting at or before it)."""
    s, e = outer
    k = np.searchsorted(s, inner[0], "right") - 1
    return bool(((k >= 0) & (inner[1] <= e[np.maximum(k, 0)])).any())


def _profiler_steps(trace: Trace, pid: int | None) -> list[tuple[str, int, int, int, int]]:
    """(name, start, end, pid, tid) of the host events named ``ProfilerStep#N`` (of ``pid`` if given)."""
    host = np.flatnonzero(np.isin(trace.kind, np.asarray([int(Kind.ANNOTATION), int(Kind.CPU_OP)], np.int8)))
    if host.size == 0:
        return []
    ids = np.unique(trace.name_id[host])
    wanted = [int(i) for i in ids.tolist() if PROFILER_STEP.match(trace.names[int(i)].strip())]
    if not wanted:
        return []
    idx = host[np.isin(trace.name_id[host], np.asarray(wanted, np.int64))]
    out = []
    for i in idx[np.argsort(trace.start_ns[idx], kind="stable")].tolist():
        ln = trace.lanes[int(trace.lane[i])]
        if pid is not None and ln.pid != pid:
            continue
        out.append((trace.names[int(trace.name_id[i])], int(trace.start_ns[i]), int(trace.end_ns[i]), ln.pid, ln.tid))
    return out


def _window(trace: Trace) -> int:
    w0, w1 = gpu_window(trace)
    return max(int(w1 - w0), 0)


def steps_of_process(trace: Trace, pid: int | None, found: list[Phase] | None = None) -> Steps:
    """The steps of one process (``pid`` None: of the whole trace, read as one process).

    ``found``: that process's phases when the caller has them (default: ``analysis.phases``).
    """
    if found is None:
        found = [p for p in phases(trace) if pid is None or p.pid == pid]
    members = range_family(found)
    if members:
        host = [(p.host_start_ns, p.host_end_ns) for p in members]
        return Steps(
            label=family(members[0].name),
            source="ranges",
            pid=members[0].pid,
            names=[p.name for p in members],
            host_spans=host,
            spans=[(p.start_ns, p.end_ns) for p in members],
            warmup_idx=warmup_of([p.dur_ns for p in members]),
            depth=min(p.depth for p in members),
            window_ns=_window(trace),
        )
    marks = _profiler_steps(trace, pid)
    if pid is None and marks:
        first = marks[0][3]
        marks = [m for m in marks if m[3] == first]  # one process's markers
    if not marks:
        return Steps(window_ns=_window(trace))
    host = [(s, e) for _, s, e, _, _ in marks]
    gpu = [marker_span(trace, p, s, e)[:2] for _, s, e, p, _ in marks]
    return Steps(
        label="ProfilerStep",
        source="profiler",
        pid=marks[0][3],
        names=[n for n, *_ in marks],
        host_spans=host,
        spans=gpu,
        warmup_idx=warmup_of([b - a for a, b in gpu]),
        window_ns=_window(trace),
    )


@per_trace
def steps_by_process(trace: Trace) -> dict[int, Steps]:
    """Each process's steps, for the processes that have one (several in a multi-process nsys report)."""
    out: dict[int, Steps] = {}
    pids = list(by_process(phases(trace)))
    pids += [m[3] for m in _profiler_steps(trace, None) if m[3] not in pids]
    for pid in dict.fromkeys(pids):
        st = steps_of_process(trace, pid)
        if st:
            out[pid] = st
    return out


@per_trace
def _main_steps(trace: Trace) -> Steps:
    found = steps_by_process(trace)
    if not found:
        return Steps(window_ns=_window(trace))
    if len(found) == 1:
        return next(iter(found.values()))
    work = _launches_by_pid(trace)
    order = {pid: k for k, pid in enumerate(found)}

    # The process that launches most GPU work (the first one on a tie): a front end is not the step.
    def rank(st: Steps) -> tuple[int, int]:
        pid = -1 if st.pid is None else st.pid
        return work.get(pid, 0), -order.get(pid, 0)

    return max(found.values(), key=rank)


def _launches_by_pid(trace: Trace) -> dict[int, int]:
    """GPU ops each process launched (by the process of the launch call)."""
    idx = gpu_work(trace)
    launch = trace.launch[idx]
    launch = launch[launch >= 0]
    if launch.size == 0:
        return {}
    pid_of_lane = np.asarray([ln.pid for ln in trace.lanes], dtype=np.int64)
    pids, counts = np.unique(pid_of_lane[trace.lane[launch]], return_counts=True)
    return dict(zip(pids.tolist(), counts.tolist(), strict=True))


def steps(trace: Trace, pid: int | None = None) -> Steps:
    """The step of a trace: of process ``pid``, else of the process that launches most GPU work.

    Cached while the trace lives (callers must not modify it).
    """
    if pid is None:
        return _main_steps(trace)
    return steps_by_process(trace).get(pid) or Steps(window_ns=_window(trace))


def step_of(trace: Trace, idx: np.ndarray, st: Steps) -> np.ndarray:
    """Step index of each GPU op in ``idx`` (into ``st.names``), -1 outside every step.

    An op belongs to the step whose host span holds its launch call's start; an op with no
    traced launch, to the step whose GPU span holds its start.
    """
    out = np.full(idx.size, -1, dtype=np.int64)
    if not st.host_spans or idx.size == 0:
        return out
    launched = trace.launch[idx] >= 0
    t = np.where(launched, trace.start_ns[np.maximum(trace.launch[idx], 0)], trace.start_ns[idx])
    for spans, use in ((st.host_spans, launched), (st.spans, ~launched)):
        lo = np.asarray([a for a, _ in spans], np.int64)
        hi = np.asarray([b for _, b in spans], np.int64)
        order = np.argsort(lo, kind="stable")
        lo, hi = lo[order], hi[order]
        k = np.searchsorted(lo, t, "right") - 1
        ok = use & (k >= 0) & (t < hi[np.maximum(k, 0)])
        out[ok] = order[k[ok]]
    return out


@dataclass(frozen=True)
class JobStep:
    """A job's step: the label its ranks share and the median of their steady medians."""

    label: str
    median_ns: int
    ranks: int  # ranks that have this step

    def __bool__(self) -> bool:
        return bool(self.label)


def common_step(labels: list[str], medians: list[int]) -> JobStep:
    """The ranks' common step (synchronous ranks share one): the label most ranks have, and the
    median of those ranks' step times; a rank without a step (label "") does not vote."""
    votes: dict[str, list[int]] = {}
    for label, med in zip(labels, medians, strict=True):
        if label and med > 0:
            votes.setdefault(label, []).append(med)
    if not votes:
        return JobStep("", 0, 0)
    label = max(votes, key=lambda k: (len(votes[k]), -list(votes).index(k)))
    return JobStep(label, int(np.median(votes[label])), len(votes[label]))
