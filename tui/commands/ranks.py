"""`gaplens ranks PATH... [--json] [--dask ADDRESS]`: a job read as a job, headless.

Prints the rank table (sorted by the waiting each rank imposed on the others), the
collectives matched, the clock offsets applied, and the straggler with its cause, or
why there is none. Files that give no rank are one warning line each on stderr.
"""

from __future__ import annotations

import argparse
import os
import sys

from gaplens.analysis.job.reading import JobReading
from gaplens.analysis.job.straggler import LATE_SHARE, STEP_SHARE
from gaplens.analysis.units import fmt_ns
from gaplens.tui.commands.common import print_json


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


def warn(message: str) -> None:
    print(f"gaplens: warning: {message}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from gaplens.analysis.job.run import open_job

    job = open_job(args.paths, workers=args.workers, dask=args.dask, warn=warn)
    if args.json:
        print_json(job.to_json())
    else:
        print(render_text(job))
    return 0


def render_text(job: JobReading) -> str:
    rows = job.rows
    fmts = sorted({r.reading.format for r in rows})
    offsets = {r.rank: r.offset_ns for r in rows}
    applied = {k: v for k, v in offsets.items() if v}
    clock = (
        "clocks: " + ", ".join(f"rank {k} {fmt_ns(v)}" for k, v in sorted(applied.items()))
        if applied
        else "clocks: shared (no offset applied)"
    )
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
    for r in rows:
        x = r.reading
        lines.append(
            f"{'▶' if r.rank == mark else ' '} {r.rank:>4} {x.device:>3} {x.pid if x.pid is not None else '-':>7} "
            f"{x.busy_pct:>5.1f}% {fmt_ns(x.compute_ns):>9} {fmt_ns(x.comm_ns):>9} {fmt_ns(x.exposed_comm_ns):>9} "
            f"{fmt_ns(r.wait_ns):>9} {fmt_ns(r.imposed_ns):>9} {r.late:>4} {fmt_ns(x.step_ns) if x.step_ns else '-':>9}"
            f"  {os.path.basename(x.source)}"
        )
    lines += [
        "",
        "waited: time in collectives waiting for the last rank to arrive; imposed: the others' waiting in the "
        "collectives it arrived last to; last: how often it arrived last",
    ]
    return "\n".join(lines)


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
