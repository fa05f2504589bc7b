"""`gaplens ranks PATH... [--json] [--all] [--dask ADDRESS]`: a job read as a job, headless.

Prints the rank table (sorted by the waiting each rank imposed on the others), the
collectives matched, the clock offsets applied, and the straggler with its cause, or
why there is none. Files that give no rank are one warning line each on stderr.

A job of more ranks than fit a screen (``SCREEN_ROWS``) prints the straggler (or the candidate),
the outliers (``OUTLIER_SHARE``) and one line per group of the rest, rank numbers as ranges;
``--all`` prints every row. ``--json`` always lists every rank.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

from gaplens.analysis.job.reading import JobReading, RankRow
from gaplens.analysis.job.straggler import LATE_SHARE, STEP_SHARE
from gaplens.analysis.units import fmt_ns
from gaplens.tui.commands.common import print_json

#: More ranks than this and the table is folded: ~50 terminal lines less the job, straggler, header
#: and legend lines leave about 40 for rank rows.
SCREEN_ROWS = 40
#: A rank is an outlier when its step or its time waiting in collectives differs from the ranks'
#: median by more than this share of the job's step, or its busy share by more than this many
#: points (of 100) from the median busy share.
OUTLIER_SHARE = 0.02
#: Outlier rows printed at most when folded, the most deviant first; the others join a group line.
OUTLIER_ROWS = 20
#: A bucket of ranks alike (see ``fold_rows``) off the median is a group line above this many ranks, else rows.
SMALL_GROUP = 3
#: Group lines at most (the median's first, then the largest).
GROUPS = 6
#: Ranges printed at most in one group line; ``--all`` or ``--json`` lists the rest.
GROUP_RANGES = 16


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "ranks",
        help="a job: per-rank table, collectives matched across ranks, the straggler and why",
        description=(
            "Read several rank traces as one job: Kineto files (one per rank), a folder of them, nsys "
            "reports, or one nsys report holding several ranks' processes."
        ),
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="rank traces or folders of them")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--dask",
        metavar="ADDRESS",
        default=None,
        help="run the per-rank work on a Dask cluster: a scheduler address (tcp://host:8786) or local:N",
    )
    p.add_argument(
        "--workers", type=int, default=None, help="local worker processes (default: one per core; 0: in this process)"
    )
    p.add_argument(
        "--all",
        action="store_true",
        help=f"every rank's row (above {SCREEN_ROWS} ranks the text shows the outliers and groups the rest)",
    )


def warn(message: str) -> None:
    print(f"gaplens: warning: {message}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from gaplens.analysis.job.run import open_job

    job = open_job(args.paths, workers=args.workers, dask=args.dask, warn=warn)
    if args.json:
        print_json(job.to_json())
    else:
        print(render_text(job, every=args.all))
    return 0


def offsets_text(applied: dict[int, int], limit: int | None) -> str:
    """The clock offsets applied per rank, in words; more than ``limit`` ranks are summarised as a count and a
    range (a multi-host job of 10,000 ranks has an offset for nearly every rank: a line, not a screenful)."""
    if not applied:
        return "shared (no offset applied)"
    if limit is not None and len(applied) > limit:
        lo, hi = min(applied.values()), max(applied.values())
        return f"offsets applied to {len(applied):,} ranks, {fmt_ns(lo)} to {fmt_ns(hi)}"
    return ", ".join(f"rank {k} {fmt_ns(v)}" for k, v in sorted(applied.items()))


def render_text(job: JobReading, every: bool = False) -> str:
    rows = job.rows
    fold = not every and len(rows) > SCREEN_ROWS
    fmts = sorted({r.reading.format for r in rows})
    applied = {r.rank: r.offset_ns for r in rows if r.offset_ns}
    clock = "clocks: " + offsets_text(applied, GROUP_RANGES if fold else None)
    if fold and len(applied) > GROUP_RANGES:
        clock += " (--all or --json lists them)"
    lines = [
        f"job: {len(rows)} ranks ({', '.join(fmts)}), {job.collectives} collectives matched, "
        f"step {fmt_ns(job.step_ns)}; {clock}",
        "",
    ]
    lines += _straggler_lines(job)
    lines += [
        "",
        f"  {'rank':>4} {'GPU':>3} {'pid':>7} {'busy':>6} {'compute':>9} {'comm':>9} {'exposed':>9} "
        f"{'waited':>9} {'imposed':>9} {'last':>4} {'step':>9}  source",
    ]
    mark = job.straggler.rank if job.straggler else None
    shown, groups = fold_rows(job) if fold else (rows, [])
    for r in shown:
        x = r.reading
        lines.append(
            f"{'▶' if r.rank == mark else ' '} {r.rank:>4} {x.device:>3} {x.pid if x.pid is not None else '-':>7} "
            f"{x.busy_pct:>5.1f}% {fmt_ns(x.compute_ns):>9} {fmt_ns(x.comm_ns):>9} {fmt_ns(x.exposed_comm_ns):>9} "
            f"{fmt_ns(r.wait_ns):>9} {fmt_ns(r.imposed_ns):>9} {r.late:>4} {fmt_ns(x.step_ns) if x.step_ns else '-':>9}"
            f"  {os.path.basename(x.source)}"
        )
    lines += groups
    lines += [
        "",
        "waited: time in collectives waiting for the last rank to arrive; imposed: the others' waiting in the "
        "collectives it arrived last to; last: how often it arrived last",
    ]
    if fold:
        lines.append(
            f"{len(rows):,} ranks are more than a screen ({SCREEN_ROWS}): the straggler and the ranks whose step or "
            f"waiting is off the median by more than {100 * OUTLIER_SHARE:.0f}% of the step (per step), or busy by "
            f"more than {100 * OUTLIER_SHARE:.0f} points, are printed, more than {SMALL_GROUP} alike as one line; "
            "--all prints every rank"
        )
    return "\n".join(lines)


def _median(values: list[float]) -> float:
    v = sorted(values)
    n = len(v)
    return 0.0 if n == 0 else (v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2)


def fold_rows(job: JobReading) -> tuple[list[RankRow], list[str]]:
    """The rows to print (the straggler or candidate, then the outliers) and a line per group of the rest.

    Each rank's step, waiting and busy share are measured from the ranks' medians in tolerances
    (``OUTLIER_SHARE`` of the job's step, per step for the waiting, a total over the steps;
    ``OUTLIER_SHARE`` × 100 points of busy) and bucketed two
    tolerances wide, the median's bucket spanning ±1: the ranks within the median's tolerance are
    one group; a bucket of more than ``SMALL_GROUP`` ranks elsewhere (a second mode: half the ranks
    on other GPUs) is a group too; the ranks of smaller buckets are the outliers, printed as rows,
    the ``OUTLIER_ROWS`` furthest out. Past ``GROUPS`` groups or ``OUTLIER_ROWS`` rows, the rest are
    one line of ranks not printed.
    """
    rows = job.rows
    scale = float(job.step_ns) or 1.0
    step_med = _median([float(r.reading.step_ns) for r in rows if r.reading.step_ns])
    busy_med = _median([r.reading.busy_pct for r in rows])
    wait_med = _median([float(r.wait_ns) for r in rows])
    tol_ns = OUTLIER_SHARE * scale
    tol_pts = 100 * OUTLIER_SHARE
    # The waited column is the total over the collectives of the steps: 2% of the step per step.
    tol_wait = tol_ns * max(job.waits.steps if job.collectives else 1, 1)

    def offs(r: RankRow) -> tuple[float, float, float]:
        """How far from the medians, in tolerances: step (0 without a step column), busy, waited."""
        x = r.reading
        step = 0.0 if not step_med else (x.step_ns - step_med) / tol_ns if x.step_ns else 1e9
        return step, (x.busy_pct - busy_med) / tol_pts, (r.wait_ns - wait_med) / tol_wait

    off = {r.rank: offs(r) for r in rows}
    dev = {k: max(abs(d) for d in v) for k, v in off.items()}
    named = {c.rank for c in (job.straggler, job.candidate) if c is not None}
    buckets: dict[tuple[int, ...], list[RankRow]] = {}
    for r in rows:
        if r.rank not in named:
            buckets.setdefault(tuple(math.floor((d + 1) / 2) for d in off[r.rank]), []).append(r)
    median_key = (0, 0, 0)
    big = sorted(
        (k for k, v in buckets.items() if k == median_key or len(v) > SMALL_GROUP),
        key=lambda k: (k != median_key, -len(buckets[k]), k),
    )
    shown_groups = big[:GROUPS]  # the members of any further group join the outliers
    outliers = sorted(
        (r for k, v in buckets.items() if k not in shown_groups for r in v), key=lambda r: (-dev[r.rank], r.rank)
    )
    printed = named | {r.rank for r in outliers[:OUTLIER_ROWS]}
    shown = [r for r in rows if r.rank in printed]  # the table's own order
    beyond = sorted(r.rank for r in outliers[OUTLIER_ROWS:])
    tol, tolw = fmt_ns(int(tol_ns)), fmt_ns(int(tol_wait))
    groups = []
    for k in shown_groups:
        members = buckets[k]
        ranks = sorted(r.rank for r in members)
        if k == median_key:
            what = (
                f"within {100 * OUTLIER_SHARE:.0f}% of the median: "
                + (f"step {fmt_ns(int(step_med))} ±{tol}, " if step_med else "")
                + f"waited {fmt_ns(int(wait_med))} ±{tolw}, busy {busy_med:.1f}% ±{tol_pts:.0f} points"
            )
        else:
            st = _median([float(r.reading.step_ns) for r in members if r.reading.step_ns])
            what = (
                "alike, off the median: "
                + (f"step {fmt_ns(int(st))}, " if step_med and st else "")
                + f"waited {fmt_ns(int(_median([float(r.wait_ns) for r in members])))}, "
                f"busy {_median([r.reading.busy_pct for r in members]):.1f}% "
                f"(each ±{tol}, ±{tolw} waited, ±{tol_pts:.0f} points)"
            )
        groups.append(f"  {_count(ranks)} {what}: {rank_ranges(ranks)}")
    if beyond:
        groups.append(f"  {_count(beyond)} more outside those groups, not printed: {rank_ranges(beyond)}")
    return shown, groups


def _count(ranks: list[int]) -> str:
    return f"{len(ranks):,} rank{'s' if len(ranks) != 1 else ''}"


def rank_ranges(ranks: list[int], most: int = GROUP_RANGES) -> str:
    """Sorted rank numbers as ranges: ``ranks 0-511, 513-1023``; past ``most`` ranges, the count left."""
    spans: list[tuple[int, int]] = []
    for k in ranks:
        if spans and k == spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], k)
        else:
            spans.append((k, k))
    text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans[:most])
    if len(spans) > most:
        left = sum(b - a + 1 for a, b in spans[most:])
        text += f", and {left:,} more (--all or --json lists them)"
    return ("rank " if len(ranks) == 1 else "ranks ") + text


def _straggler_lines(job: JobReading) -> list[str]:
    s = job.straggler
    if s is not None:
        return [
            f"straggler: rank {s.rank} (GPU {s.device}) — arrived last in {s.late} of {s.held} collectives that kept "
            f"another rank waiting ({100 * s.late_share:.0f}%), imposing {fmt_ns(s.wait_imposed_per_step_ns)} of "
            f"waiting per step",
            f"  why: {s.cause} — {s.evidence[2] if len(s.evidence) > 2 else ''}",
            *(f"  {e}" for e in s.evidence[3:]),
            f"  start here: its timeline, gaplens {job.matched.readings[s.row].source}",
        ]
    c = job.candidate
    if c is None:
        return ["no straggler: no collective was matched across ranks"]
    step = job.step_ns
    return [
        f"no straggler: in a typical step the rank that made the others wait most (rank {c.rank}) imposed "
        f"{fmt_ns(c.wait_imposed_per_step_ns)} ({100 * c.wait_imposed_per_step_ns / step if step else 0:.0f}% of a "
        f"step; a straggler imposes at least {100 * STEP_SHARE:.0f}%), and it arrived last in {c.late} of {c.held} "
        f"collectives that kept another rank waiting (a straggler: at least {100 * LATE_SHARE:.0f}%)"
    ]
