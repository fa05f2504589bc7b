"""The cross-rank step, part two: who waited in each collective, and the rank that made them wait.

For one matched collective (``analysis.job.align``), on the job's clock:

    rank 0   ──arrive|▒▒▒▒▒▒▒▒▒ waits ▒▒▒▒▒▒▒▒▒|▒▒ transfer ▒▒|
    rank 2   ────────────arrive|▒▒▒▒ waits ▒▒▒▒|▒▒ transfer ▒▒|
    rank 1   ─────────────────────────── arrive|▒▒ transfer ▒▒|   <- last: the others waited for it
                                               ^ last arrival

each rank *arrives* when its collective kernel starts and *waits* from then to the last
arrival (never longer than its own kernel ran). The last rank *imposes* the others' mean wait.

The **straggler** is the rank that imposed the most waiting over the collectives inside steps,
provided that (a) it arrived last in at least ``LATE_SHARE`` of the collectives that kept
someone waiting (where the last arrival led the next by ``LEAD_SHARE`` of a step) and (b) the
waiting it imposed is at least ``STEP_SHARE`` of the step time, per step. Even ranks take turns
being last by microseconds, so neither holds and the job reads "no straggler".

*Why*: in the collectives it held up, its segment before arriving (``analysis.job.collectives``) is
compared with the other ranks' median: the part that grew most names the cause, the gap cause
of its idle time (``host``: a host island, ``sync``, ``launch``, ``copy``...) or ``compute`` (a
slower phase on the GPU; ``copy`` when copies make most of it), with the phase that held it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gaplens.analysis.job.align import Matched
from gaplens.analysis.units import fmt_ns

#: The waiting a straggler imposes, per step, is at least this share of the step time.
STEP_SHARE = 0.05
#: It arrived last in at least this share of the collectives that kept someone waiting.
LATE_SHARE = 0.5
#: A collective "kept someone waiting" when the last arrival led the next one by this share of a step.
LEAD_SHARE = 0.02
#: ...and by at least this much whatever the step. It binds only where 2% of a step is less (steps
#: under 0.5 ms) or there is no step (``step_ns`` 0, where the share alone would call a 1 ns lead
#: "kept waiting"): collective kernels of ranks that arrive together start microseconds apart (a
#: launch's latency, clocks aligned on collective ends), so a lead below ten of them names no one.
#: A judgement, not a measurement: on the bundled ddp jobs (20-41 ms steps) the share decides (its
#: 0.4-0.8 ms sits above even ranks' median lead, 0.11 ms on ddp_even).
LEAD_FLOOR_NS = 10_000

#: Human words for a straggler's cause.
CAUSE_WORDS = {
    "host": "busy on the host with no GPU work (a host island)",
    "sync": "blocked in a synchronising call",
    "alloc": "inside memory-management calls (cudaMalloc, cudaFree)",
    "launch": "issuing launch calls",
    "copy": "copying between host and device",
    "compute": "computing on its GPU: a slower phase",
    "comm": "in other communication",
    "profiler": "in the profiler's own overhead",
    "idle": "idle, nothing asked of the GPU",
    "unknown": "outside what the trace recorded",
}


@dataclass
class Waits:
    """Per collective: who arrived last and by how much; per rank and collective: the wait."""

    last_ns: np.ndarray  # (n,) last arrival
    last_row: np.ndarray  # (n,) int: the row that arrived last
    lead_ns: np.ndarray  # (n,) last arrival - the one before it
    imposed_ns: np.ndarray  # (n,) the others' mean wait
    wait_ns: np.ndarray  # (R, n)
    in_scope: np.ndarray  # (n,) bool: inside a step (all when the job has no steps)
    steps: int  # steps the scope spans

    def rank_wait(self) -> np.ndarray:
        return self.wait_ns.sum(axis=1)


@dataclass
class Straggler:
    row: int
    rank: int
    device: int
    late_share: float
    late: int  # collectives it held up
    held: int  # collectives that kept someone waiting
    wait_imposed_ns: int  # in total
    wait_imposed_per_step_ns: int
    cause: str
    evidence: list[str]
    moment_ns: tuple[int, int]  # the straggling moment on the job's clock: its segment to the collective's end
    arrival_ns: int  # its arrival at that collective (the last one), on the job's clock
    detail: dict = field(default_factory=dict)  # numbers behind the cause


def waits(m: Matched, step_ns: int) -> Waits:
    present = m.present
    n = len(m)
    big = np.iinfo(np.int64).min
    arr = np.where(present, m.start_ns, big)
    last_row = np.argmax(arr, axis=0) if n else np.empty(0, np.int64)
    last = arr[last_row, np.arange(n)] if n else np.empty(0, np.int64)
    second = np.sort(arr, axis=0)[-2] if n and arr.shape[0] >= 2 else np.full(n, big)
    lead = np.where(second > big, last - second, 0)
    dur = np.where(present, m.end_ns - m.start_ns, 0)
    wait = np.where(present, np.clip(last[None, :] - m.start_ns, 0, dur), 0)
    others = np.maximum(present.sum(axis=0) - 1, 1)
    imposed = wait.sum(axis=0) // others
    in_step = _in_step(m)
    steps = _steps(m, in_step)
    return Waits(last, last_row.astype(np.int64), lead, imposed, wait, in_step, steps)


def _in_step(m: Matched) -> np.ndarray:
    """Collectives that most ranks issued inside one of their steps; all of them without steps."""
    flags = np.zeros(m.row.shape, bool)
    for i, r in enumerate(m.readings):
        ok = m.row[i] >= 0
        flags[i, ok] = r.collectives.step[m.row[i, ok]] >= 0
    counted = flags.sum(axis=0) * 2 >= np.maximum(m.present.sum(axis=0), 1)
    return counted if counted.any() else np.ones(len(m), bool)


def _steps(m: Matched, in_step: np.ndarray) -> int:
    """How many steps the collectives in scope span (the most frequent count over the ranks)."""
    counts = []
    for i, r in enumerate(m.readings):
        ok = (m.row[i] >= 0) & in_step
        if r.steps and ok.any():
            counts.append(int(np.unique(r.collectives.step[m.row[i, ok]]).size))
    return max(1, int(np.median(counts))) if counts else 1


def held_up(w: Waits, step_ns: int) -> np.ndarray:
    """Per collective: True when its last arrival led the one before it by ``LEAD_SHARE`` of a step
    (at least ``LEAD_FLOOR_NS``): the collective kept someone waiting. Every scope (the straggler's
    steps, the job overview's marks) asks this one rule."""
    return w.lead_ns >= max(LEAD_FLOOR_NS, int(LEAD_SHARE * step_ns))


def find_straggler(m: Matched, w: Waits, step_ns: int) -> tuple[Straggler | None, Straggler | None]:
    """(the straggler or None, the strongest candidate whatever the thresholds)."""
    n_rows = m.row.shape[0]
    if n_rows < 2 or len(m) == 0:
        return None, None
    scope = w.in_scope
    held = scope & held_up(w, step_ns)
    late = np.bincount(w.last_row[held], minlength=n_rows)
    imposed = np.bincount(w.last_row[scope], weights=w.imposed_ns[scope], minlength=n_rows)
    row = int(np.argmax(imposed))
    n_held = int(held.sum())
    share = float(late[row] / n_held) if n_held else 0.0
    per_step = _per_step(m, w, row)
    mine = held & (w.last_row == row)
    cause, evidence, detail = explain(m, w, row, mine, step_ns)
    worst = _worst(m, w, row, mine)
    r = m.readings[row]
    seg = (
        r.collectives.seg_start_ns[m.row[row, worst]] + m.offsets_ns[row]
        if m.row[row, worst] >= 0
        else w.last_ns[worst]
    )
    moment = (int(seg), int(m.end_ns[:, worst][m.present[:, worst]].max()))
    evidence = [
        f"arrived last in {int(late[row])} of the {n_held} collectives that kept another rank waiting",
        f"imposed {fmt_ns(per_step)} of waiting per step on the others ({100 * per_step / step_ns:.0f}% of a "
        f"{fmt_ns(step_ns)} step)"
        if step_ns
        else f"imposed {fmt_ns(per_step)} of waiting per step on the others",
        *evidence,
    ]
    cand = Straggler(
        row,
        m.ranks[row],
        r.device,
        share,
        int(late[row]),
        n_held,
        int(imposed[row]),
        per_step,
        cause,
        evidence,
        moment,
        int(w.last_ns[worst]),
        detail,
    )
    found = share >= LATE_SHARE and step_ns > 0 and per_step >= STEP_SHARE * step_ns
    return (cand if found else None), cand


def _worst(m: Matched, w: Waits, row: int, mine: np.ndarray) -> int:
    """The collective it held up longest, preferring one whose segment (what it did before) is known."""
    rows = m.row[row]
    bounded = np.zeros(len(m), bool)
    ok = rows >= 0
    bounded[ok] = m.readings[row].collectives.bounded[rows[ok]]
    for pick in (mine & bounded, mine, w.last_row == row):
        k = np.flatnonzero(pick)
        if k.size:
            return int(k[np.argmax(w.imposed_ns[k])])
    return 0


def _per_step(m: Matched, w: Waits, row: int) -> int:
    """The waiting a rank imposed in a typical step: the median over its steady steps (warm-up
    steps set apart, ``analysis.steps``), so one slow warm-up step does not make a straggler of a
    rank that is on time in every other. The others' wait in one step is at most that step's
    span (synchronous ranks share their steps), so a step's share never passes 100%."""
    r = m.readings[row]
    mine = w.in_scope & (w.last_row == row) & (m.row[row] >= 0)
    own_step = np.full(len(m), -1, np.int64)
    ok = m.row[row] >= 0
    own_step[ok] = r.collectives.step[m.row[row, ok]]
    steps = _steady(r, np.unique(own_step[w.in_scope & ok]))
    if steps.size == 0:
        return int(w.imposed_ns[mine].sum())
    per = []
    for s in steps.tolist():
        total = int(w.imposed_ns[mine & (own_step == s)].sum())
        if s < len(r.step_spans_ns):
            a, b = r.step_spans_ns[s]
            total = min(total, int(b - a))
        per.append(total)
    return int(np.median(per))


def _steady(r, steps: np.ndarray) -> np.ndarray:
    """The step indices among ``steps`` that are steady steps of rank reading ``r`` (warm-up set apart);
    all of them when setting warm-up apart would leave none."""
    steps = steps[steps >= 0]
    warm = np.asarray(getattr(r, "step_warmup", []) or [], np.int64)
    steady = steps[~np.isin(steps, warm)]
    return steady if steady.size else steps


def explain(m: Matched, w: Waits, row: int, mine: np.ndarray, step_ns: int) -> tuple[str, list[str], dict]:
    """What the rank did before arriving, against the others, in the collectives it held up."""
    r = m.readings[row]
    t = r.collectives
    cols = np.flatnonzero(mine & (m.row[row] >= 0))
    # Warm-up steps are set apart (a 254 ms first step must not make a 15 ms range read 25 ms per step).
    steady = _steady(r, np.unique(t.step[m.row[row, cols]]))
    if steady.size:
        cols = cols[np.isin(t.step[m.row[row, cols]], steady)]
    # A step whose first collective has no previous one to measure from is read in part only: skip it.
    step = t.step[m.row[row, cols]]
    partial = np.unique(step[~t.bounded[m.row[row, cols]] & (step >= 0)])
    whole = cols[~np.isin(step, partial)]
    cols = whole if whole.size else cols
    cols = cols[t.bounded[m.row[row, cols]]]
    if cols.size == 0:
        return "unknown", ["no collective it held up has a previous one on its device to measure from"], {}
    causes = t.causes
    own_blank = t.blank_cause_ns[m.row[row, cols]].astype(np.float64)  # (k, causes)
    own_compute = t.compute_ns[m.row[row, cols]].astype(np.float64)
    own_copy = t.copy_ns[m.row[row, cols]].astype(np.float64)
    other_blank = np.zeros_like(own_blank)
    other_compute = np.zeros_like(own_compute)
    other_copy = np.zeros_like(own_copy)
    for j, c in enumerate(cols.tolist()):
        rows = [i for i in np.flatnonzero(m.present[:, c]).tolist() if i != row]
        vals_b, vals_c, vals_p = [], [], []
        for i in rows:
            ti = m.readings[i].collectives
            k = m.row[i, c]
            if not ti.bounded[k]:
                continue
            by_name = dict(zip(ti.causes, ti.blank_cause_ns[k].tolist(), strict=True))
            vals_b.append([by_name.get(name, 0) for name in causes])
            vals_c.append(ti.compute_ns[k])
            vals_p.append(ti.copy_ns[k])
        if vals_b:
            other_blank[j] = np.median(np.asarray(vals_b, np.float64), axis=0)
            other_compute[j] = float(np.median(vals_c))
            other_copy[j] = float(np.median(vals_p))
    n = cols.size
    # Per step: summed over the collectives it held up in each step, the median over those steps
    # (a segment reaching back into a slow step must not inflate the typical one); per collective
    # when the rank has no steps.
    col_step = t.step[m.row[row, cols]]
    steps = np.unique(col_step)
    per = max(int((steps >= 0).sum()) if (steps >= 0).any() else n, 1)
    own_blank, other_blank = _typical(own_blank, col_step), _typical(other_blank, col_step)
    own_compute_s, other_compute_s = float(_typical(own_compute, col_step)), float(_typical(other_compute, col_step))
    delta = {name: float(own_blank[k] - other_blank[k]) for k, name in enumerate(causes)}
    d_compute = float(own_compute_s - other_compute_s)
    d_copy = float(_typical(own_copy - other_copy, col_step))
    delta["compute"] = d_compute
    cause = max(delta, key=lambda c: delta[c])
    if delta[cause] <= 0:
        return "unknown", ["before arriving it did not spend longer than the others on anything the trace shows"], {}
    if cause == "compute" and d_copy >= 0.5 * d_compute:
        cause = "copy"
    detail = {
        "collectives": n,
        "steps": per,
        "delta_ns": {k: int(v) for k, v in delta.items()},
        "copy_delta_ns": int(d_copy),
    }
    if cause in ("compute", "copy") and cause not in causes:
        phase = _phase(t.compute_phase[m.row[row, cols]], t.phase_names, own_compute)
        own, others = own_compute_s, other_compute_s
        what = "copies" if cause == "copy" else "GPU compute"
        text = f"{fmt_ns(int(own))} of {what} per step before arriving" + (f", in {phase}" if phase else "")
    else:
        k = causes.index(cause)
        phase = _phase(t.blank_phase[m.row[row, cols]], t.phase_names, t.blank_cause_ns[m.row[row, cols], k])
        own, others = own_blank[k], other_blank[k]
        text = (
            # blank, not "idle": idle means nothing was asked (DESIGN), and this rank's host was working
            f"{'in ' + phase + ': ' if phase else ''}{fmt_ns(int(own))} per step before arriving with its GPU blank, "
            f"{CAUSE_WORDS.get(cause, cause)}"
        )
    detail.update({"phase": phase, "own_ns": int(own), "others_ns": int(others)})
    text += f"; the other ranks {fmt_ns(int(others))}"
    where = f"first at {fmt_ns(int(m.start_ns[row, cols[0]] - m.offsets_ns[row] - r.origin_ns))} in {r.name}"
    return cause, [text, where], detail


def _typical(values: np.ndarray, step: np.ndarray) -> np.ndarray:
    """Per-step sums of ``values`` (rows: collectives), the median over the steps; the mean per
    collective when no row has a step."""
    has = step >= 0
    if not has.any():
        return values.mean(axis=0)
    sums = [values[step == s].sum(axis=0) for s in np.unique(step[has]).tolist()]
    return np.median(np.asarray(sums, np.float64), axis=0)


def _phase(ids: np.ndarray, names: list[str], weight: np.ndarray) -> str:
    """The phase name that holds most of the weight over the collectives, or ""."""
    ok = ids >= 0
    if not ok.any():
        return ""
    tot = np.bincount(ids[ok], weights=weight[ok], minlength=len(names))
    return names[int(np.argmax(tot))]
