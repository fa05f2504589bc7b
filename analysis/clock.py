"""Clock sanity: do the host and device timestamps of a trace agree?

Every GPU op is queued by a launch call, so it cannot start before that call started, and an
op that waited for its launch (nothing ahead of it on its stream) starts within microseconds of
the call returning. When most ops break either rule, the two clocks disagree: the profiler
converted GPU time with a stale offset (seen on ROCm traces: every op 6 ms after the range that
launched it). Readings that join host and device still run, but say so.

    host   [launch]          [launch]
    device             ███              ███      <- every op ~6 ms late: an offset, not queueing
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gaplens.analysis.busy import gpu_work
from gaplens.analysis.critical_path import Edge, graph
from gaplens.analysis.memo import per_trace
from gaplens.analysis.units import fmt_ns
from gaplens.analysis.words import MOSTLY
from gaplens.loaders.model import Trace
from gaplens.loaders.rows import segmented_max

#: An op starting this long before its launch call did is impossible, not jitter.
NEGATIVE_TOLERANCE_NS = 20_000
#: Launch-to-start latency of an op with nothing ahead of it beyond this is implausible.
IMPLAUSIBLE_LAG_NS = 2_000_000
#: Clocks are called off when most of the ops a rule reads break it (``words.MOSTLY``)...
#: ...and only when the rule reads at least this many ops: a majority of a handful is two or three ops, and
#: a trace legitimately holds that many late starts (a first launch that loads a module, a graph replay
#: queued behind a copy). Twenty makes a majority eleven ops breaking the rule. Measured on the ~55 local
#: traces (bundled, public, round-3), none of them offset: the largest share breaking either rule is 3.6%
#: (HTA cuda_graph_launches, 6 of 168 idle-stream ops), and the floor is what decides on seven of them,
#: whose rule reads 1-18 ops (dependency 12, island_fault 16, HTA mi250_rocm 16, copy_fixed 18).
MIN_OPS = 20


@dataclass(frozen=True)
class ClockCheck:
    offset_ns: int  # typical device-minus-host disagreement (negative: the device clock runs early)
    share: float  # share of the ops the rule reads that break it
    ops: int  # the ops the rule reads: every launched op ("early"), those launched onto an idle stream ("idle")
    rule: str = "early"

    @property
    def message(self) -> str:
        side = "ahead of" if self.offset_ns < 0 else "behind"
        which = "launched ops" if self.rule == "early" else "ops launched onto an idle stream"
        return (
            f"likely clock offset: GPU times look {fmt_ns(abs(self.offset_ns))} {side} the host's on "
            f"{100 * self.share:.0f}% of {self.ops:,} {which}; host–device readings (gaps, causes) are approximate"
        )


@per_trace
def clock_check(trace: Trace) -> ClockCheck | None:
    """A likely host/device clock offset, or None when launches and GPU ops agree."""
    ops = gpu_work(trace)
    a = trace.launch[ops]
    ops, a = ops[a >= 0], a[a >= 0]
    if ops.size < MIN_OPS:
        return None
    start = trace.start_ns[ops]
    early = trace.start_ns[a] - start  # > 0: the op started before its launch call did
    neg = early > NEGATIVE_TOLERANCE_NS
    if neg.mean() > MOSTLY:
        return ClockCheck(-int(np.median(early[neg])), float(neg.mean()), int(ops.size))
    # Only an op launched onto an idle stream (everything queued ahead of it on its stream had ended
    # when its launch call returned) has nothing on the device to wait for, so only such an op
    # starting milliseconds late says the clocks disagree. An op queued behind others starts when
    # they end, however long ago it was launched: a host running 120 ms ahead of a busy device is
    # queueing, and the few-microsecond gaps a stream shows between a copy and a kernel do not
    # make those ops "launched onto an idle stream".

    binding = graph(trace).binding[ops]
    lane = trace.lane[ops]
    order = np.lexsort((start, lane))
    same = np.zeros(ops.size, dtype=bool)
    same[1:] = lane[order][1:] == lane[order][:-1]
    reach = segmented_max(trace.end_ns[ops][order], ~same)
    prev_end = np.full(ops.size, np.iinfo(np.int64).min)
    prev_end[order[1:]] = np.where(same[1:], reach[:-1], np.iinfo(np.int64).min)
    single = np.bincount(a, minlength=len(trace))[a] == 1  # graph launches queue many ops at once
    returned = trace.end_ns[a]
    cand = (prev_end <= returned) & (binding != Edge.WAIT) & single
    lag = start - returned
    late = cand & (lag > IMPLAUSIBLE_LAG_NS)
    if cand.sum() >= MIN_OPS and late.sum() > MOSTLY * cand.sum():
        return ClockCheck(int(np.median(lag[late])), float(late.sum() / cand.sum()), int(cand.sum()), "idle")
    return None
