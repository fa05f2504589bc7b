"""The cross-rank step, part one: number the ranks, match collectives across them, align clocks.

Input is only the ranks' small tables (``analysis.job.ranks.RankReading``), never traces.

*Matching.* Within one process group, NCCL runs collectives in the order they were issued,
the same order on every rank, so the k-th collective of a group on one rank is the k-th on
every other. Traces need not start at the same collective (a profiler window opened a little
later on one rank), so each rank's sequence of signatures is slid against the reference
rank's, and the shift that agrees best (the smallest on a tie) pairs them.

*Clocks.* One collective ends at nearly the same instant on every rank (the last byte
arrives everywhere within microseconds), whatever time each rank arrived:

    rank 0 (clock A)   |▒▒▒▒▒▒▒▒▒ all_to_all ▒▒▒▒▒▒▒▒▒|
    rank 1 (clock B)                      |▒▒▒▒▒▒▒▒▒▒|
                                                      ^ same instant: offset = end_A - end_B

so a rank's offset is the median of (reference end - own end) over the collectives they share.
Ranks of one nsys report share its clock by construction; ranks whose offset comes out under
``SHARED_CLOCK_NS`` are read as sharing a clock (one host) and get none. A rank with no
collective in common, or whose ends disagree by more than ``ALIGN_SPREAD_NS`` after the shift,
is reported: its clock could not be aligned.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gaplens.analysis.job.ranks import RankReading
from gaplens.analysis.units import fmt_ns

#: An offset smaller than this is the ranks' own skew, not two clocks: nothing is applied. Ranks on one
#: H200 host end DDP's all-reduce buckets ~0.1 ms apart; a straggler's lead is >= 2% of a step.
SHARED_CLOCK_NS = 200_000
#: After the shift, collective ends of two ranks should agree to within this (median absolute deviation).
ALIGN_SPREAD_NS = 200_000
#: How far two ranks' sequences of one group are slid against each other to find the pairing.
MAX_SHIFT = 64


@dataclass
class Matched:
    """Collectives matched across ranks: (ranks × collectives) arrays, row i is ``readings[i]``."""

    readings: list[RankReading]
    ranks: list[int]  # the job rank of each row
    groups: list[str]
    signatures: list[str]
    group: np.ndarray  # (n,) int32
    sig: np.ndarray  # (n,) int32
    row: np.ndarray  # (R, n) int32: index into that rank's collective table, -1 absent
    start_ns: np.ndarray  # (R, n) int64 arrival on the job's clock (offset applied); 0 where absent
    end_ns: np.ndarray  # (R, n) int64
    offsets_ns: np.ndarray  # (R,) int64 applied to each rank's clock
    aligned: np.ndarray  # (R,) bool: the clock is known (reference, shared or aligned)
    notes: list[str] = field(default_factory=list)

    @property
    def present(self) -> np.ndarray:
        return self.row >= 0

    def __len__(self) -> int:
        return int(self.group.size)


def number_ranks(readings: list[RankReading]) -> tuple[list[RankReading], list[int], list[str]]:
    """Readings in rank order, their ranks, and warnings: distributedInfo's rank, else file order."""
    notes: list[str] = []
    order = sorted(
        range(len(readings)), key=lambda i: (readings[i].file_index, readings[i].device, readings[i].pid or 0)
    )
    declared = [readings[i].declared_rank for i in order]
    if readings and all(d is not None for d in declared) and len(set(declared)) == len(declared):
        pairs = sorted(zip(declared, order, strict=True))
        return [readings[i] for _, i in pairs], [int(d) for d, _ in pairs], notes  # type: ignore[arg-type]
    kineto = [readings[i] for i in order if readings[i].format == "kineto"]
    missing = [r.source for r in kineto if r.declared_rank is None]
    if missing:
        notes.append(f"no distributedInfo rank in {', '.join(missing)}: ranks numbered by file order")
    elif kineto:
        dup = sorted({d for d in declared if declared.count(d) > 1 and d is not None})
        notes.append(f"rank {', '.join(map(str, dup))} declared by more than one file: ranks numbered by file order")
    if len({readings[i].source for i in order if readings[i].format == "nsys"}) > 1:
        notes.append("nsys reports carry no rank: ranks numbered by file order, then GPU")
    return [readings[i] for i in order], list(range(len(order))), notes


def match(readings: list[RankReading], ranks: list[int]) -> Matched:
    """Pair collectives across ranks by process group and position, then align the clocks."""
    notes: list[str] = []
    n_rows = len(readings)
    sig_ids: dict[str, int] = {}
    group_names = sorted({g for r in readings for g in r.collectives.groups})
    # Per rank and group: the rows of its table in sequence order, as global signature ids.
    seqs: list[dict[str, tuple[np.ndarray, np.ndarray]]] = []
    for r in readings:
        t = r.collectives
        lut = np.asarray([sig_ids.setdefault(s, len(sig_ids)) for s in t.signatures], np.int32)
        per: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for g, name in enumerate(t.groups):
            rows = np.flatnonzero(t.group_id == g)
            rows = rows[np.argsort(t.seq[rows], kind="stable")]
            per[name] = (rows.astype(np.int32), lut[t.sig_id[rows]] if lut.size else np.empty(0, np.int32))
        seqs.append(per)
    cols_group, cols_sig, cols_rows = [], [], []
    for gi, name in enumerate(group_names):
        holders = [i for i in range(n_rows) if name in seqs[i] and seqs[i][name][0].size]
        if len(holders) < 2:
            continue
        ref = max(holders, key=lambda i: (seqs[i][name][0].size, -i))
        ref_rows, ref_sig = seqs[ref][name]
        block = np.full((n_rows, ref_rows.size), -1, np.int32)
        block[ref] = ref_rows
        for i in holders:
            if i == ref:
                continue
            rows, sig = seqs[i][name]
            ends = (readings[ref].collectives.end_ns[ref_rows], readings[i].collectives.end_ns[rows])
            k, agree = best_shift(ref_sig, sig, *ends)
            if agree < 0.5:
                notes.append(
                    f"rank {ranks[i]}: its collectives in group {name or '(all)'} do not match rank {ranks[ref]}'s"
                )
                continue
            pos = np.arange(ref_rows.size) + k
            ok = (pos >= 0) & (pos < rows.size)
            ok[ok] &= sig[pos[ok]] == ref_sig[ok]
            block[i, ok] = rows[pos[ok]]
        cols_group.append(np.full(ref_rows.size, gi, np.int32))
        cols_sig.append(ref_sig)
        cols_rows.append(block)
    if cols_rows:
        row = np.concatenate(cols_rows, axis=1)
        group = np.concatenate(cols_group)
        sig = np.concatenate(cols_sig)
    else:
        row = np.full((n_rows, 0), -1, np.int32)
        group = sig = np.empty(0, np.int32)
    start = np.zeros(row.shape, np.int64)
    end = np.zeros(row.shape, np.int64)
    for i, r in enumerate(readings):
        m = row[i] >= 0
        start[i, m] = r.collectives.start_ns[row[i, m]]
        end[i, m] = r.collectives.end_ns[row[i, m]]
    offsets, aligned, clock_notes = clock_offsets(readings, ranks, row >= 0, end)
    notes += clock_notes
    present = row >= 0
    start = np.where(present, start + offsets[:, None], 0)
    end = np.where(present, end + offsets[:, None], 0)
    # Collectives in a rank whose clock is unknown cannot be compared: drop its cells.
    row = np.where(aligned[:, None], row, -1)
    keep = (row >= 0).sum(axis=0) >= 2
    return Matched(
        readings,
        ranks,
        group_names,
        list(sig_ids),
        group[keep],
        sig[keep],
        row[:, keep],
        start[:, keep],
        end[:, keep],
        offsets,
        aligned,
        notes,
    )


def best_shift(
    ref: np.ndarray,
    other: np.ndarray,
    ref_end: np.ndarray | None = None,
    other_end: np.ndarray | None = None,
    max_shift: int = MAX_SHIFT,
) -> tuple[int, float]:
    """(k, agreement): ``other[i + k]`` pairs with ``ref[i]``; agreement is the share of equal signatures.

    A repeating pattern (the same collectives every step) agrees as well one step off. Among the
    best shifts, the one that makes the collective ends coincide (the ranks share a clock) wins;
    failing that, the smallest: traces cut at the same step are the common case.
    """
    if ref.size == other.size and np.array_equal(ref, other):
        return 0, 1.0
    scored: list[tuple[int, float]] = []
    limit = min(max_shift, max(ref.size, other.size))
    for k in sorted(range(-limit, limit + 1), key=abs):
        lo, hi = max(0, -k), min(ref.size, other.size - k)
        if hi - lo < max(1, min(ref.size, other.size) // 2):
            continue
        scored.append((k, float(np.mean(ref[lo:hi] == other[lo + k : hi + k]))))
    if not scored:
        return 0, 0.0
    top = max(a for _, a in scored)
    tied = [k for k, a in scored if a == top]
    if ref_end is not None and other_end is not None and len(tied) > 1:
        for k in tied:
            lo, hi = max(0, -k), min(ref.size, other.size - k)
            if np.median(np.abs(ref_end[lo:hi] - other_end[lo + k : hi + k])) < SHARED_CLOCK_NS:
                return k, top
    return tied[0], top


def clock_offsets(
    readings: list[RankReading], ranks: list[int], present: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Offset per row onto the first rank's clock, whether it is known, and what could not be aligned.

    Each rank aligns on the first rank when they share collectives (one vectorised pass), else on
    the aligned rank it shares most with (ranks of other process groups only).
    """
    n = len(readings)
    offsets = np.zeros(n, np.int64)
    aligned = np.zeros(n, bool)
    notes: list[str] = []
    if n == 0:
        return offsets, aligned, notes
    aligned[0] = True
    failed: dict[int, str] = {}
    common0 = (present & present[0]).sum(axis=1)
    later, on_first = [], []
    for i in range(1, n):
        if readings[i].clock and readings[i].clock == readings[0].clock:
            _align(i, 0, readings, ranks, present, end, offsets, aligned, failed)
        elif common0[i]:
            on_first.append(i)
        else:
            later.append(i)
    _align_on_first(np.asarray(on_first, np.int64), ranks, present, end, offsets, aligned, failed)
    for i in later:
        rows = np.flatnonzero(aligned)
        common = (present[rows] & present[i]).sum(axis=1)
        same = [j for j in rows.tolist() if readings[i].clock and readings[j].clock == readings[i].clock]
        via = same[0] if same else int(rows[np.argmax(common)])
        _align(i, via, readings, ranks, present, end, offsets, aligned, failed)
    notes += [failed[i] for i in sorted(failed)]
    return offsets, aligned, notes


def _align_on_first(rows, ranks, present, end, offsets, aligned, failed) -> None:
    """``_align`` of each of ``rows`` on row 0, all at once: a job of 10,000 ranks is one pass, not 10,000.

    The medians are numpy's over the same differences (int64, exact in float64 below 2**53 ns, a
    hundred days), so every offset and spread is the one ``_align`` computes.
    """
    if rows.size == 0:
        return
    both = present[rows] & present[0]
    d = np.where(both, (end[0] - end[rows]).astype(np.float64), np.nan)
    off = np.trunc(np.nanmedian(d, axis=1)).astype(np.int64)
    spread = np.trunc(np.nanmedian(np.abs(d - off[:, None]), axis=1)).astype(np.int64)
    ok = spread <= ALIGN_SPREAD_NS
    offsets[rows[ok]] = offsets[0] + np.where(np.abs(off[ok]) < SHARED_CLOCK_NS, 0, off[ok])
    aligned[rows[ok]] = True
    for k in np.flatnonzero(~ok).tolist():
        failed[int(rows[k])] = (
            f"rank {ranks[rows[k]]}: collective ends disagree with rank {ranks[0]}'s by {fmt_ns(int(spread[k]))} "
            "after alignment: its clock is not aligned"
        )


def _align(i, a, readings, ranks, present, end, offsets, aligned, failed) -> None:
    """Put row ``i`` on row ``a``'s clock (already on the job's clock), or say why not."""
    r = readings[i]
    if r.clock and r.clock == readings[a].clock:
        offsets[i], aligned[i] = offsets[a], True  # one report, one clock
        return
    both = present[i] & present[a]
    if not both.any():
        failed[i] = f"rank {ranks[i]}: no collective in common with the other ranks: its clock is not aligned"
        return
    d = end[a, both] - end[i, both]
    off = int(np.median(d))
    spread = int(np.median(np.abs(d - off)))
    if spread > ALIGN_SPREAD_NS:
        failed[i] = (
            f"rank {ranks[i]}: collective ends disagree with rank {ranks[a]}'s by {fmt_ns(spread)} "
            "after alignment: its clock is not aligned"
        )
        return
    offsets[i] = offsets[a] + (0 if abs(off) < SHARED_CLOCK_NS else off)
    aligned[i] = True
