"""`gaplens ranks` at scale (issue 31): above a screenful the text prints the straggler and the outliers and
groups the rest; ``--all`` every row; ``--json`` every rank. Jobs of synthetic ranks: copies of the bundled DDP
ranks' small tables (``RankReading``), no trace per rank."""

from __future__ import annotations

import dataclasses
import functools
import json
import re

import pytest

import gaplens.analysis.job.run
from gaplens.analysis.job.reading import JobReading, read_job
from gaplens.tui.cli import main
from gaplens.tui.commands.ranks import OUTLIER_ROWS, SCREEN_ROWS, rank_ranges, render_text
from tests.test_ranks import job_of, pair

STRAGGLER = 512
SLOW_STEP = 3  # its step 10% over the others'
LOW_BUSY = 700  # its busy share 10 points under the others'
ROW = re.compile(r"^[▶ ] +(\d+) +\d+ +(?:\d+|-) +[\d.]+%")


@functools.lru_cache(maxsize=4)
def synthetic(n: int = 1024, straggler: int = STRAGGLER, slow: tuple[int, ...] = (SLOW_STEP,), low=(LOW_BUSY,)):
    """``n`` ranks: copies of the bundled run's on-time rank 0, its straggling rank 1 at ``straggler``."""
    real = {r.rank: r.reading for r in job_of(*pair("ddp_straggler")).rows}
    readings = []
    for i in range(n):
        base = real[1] if i == straggler else real[0]
        edit = {}
        if i in slow:  # 10% slower, the next one 5% more: each unlike the others
            edit["step_ns"] = int(base.step_ns * (1.1 + 0.05 * slow.index(i)))
        if i in low:
            edit["busy_pct"] = base.busy_pct - 10
        readings.append(
            dataclasses.replace(
                base, declared_rank=i, world_size=n, source=f"/job/rank{i}.json.gz", file_index=i, **edit
            )
        )
    return read_job(readings)


def _rows(text: str) -> list[int]:
    return [int(m.group(1)) for line in text.splitlines() if (m := ROW.match(line))]


def _group_ranks(line: str) -> list[int]:
    spans = line.split(": ranks ", 1)[1].split(", ")
    out = []
    for s in spans:
        a, _, b = s.partition("-")
        out += range(int(a), int(b or a) + 1)
    return out


def test_1024_ranks_fit_a_screen_with_the_straggler_the_outliers_and_one_group():
    job = synthetic()
    assert job.straggler is not None and job.straggler.rank == STRAGGLER
    text = render_text(job)
    lines = text.splitlines()
    assert len(lines) <= SCREEN_ROWS, text
    rows = _rows(text)
    assert sorted(rows) == sorted([STRAGGLER, SLOW_STEP, LOW_BUSY])
    assert any(line.startswith(f"▶  {STRAGGLER} ") for line in lines)
    groups = [line for line in lines if ": ranks " in line and "within 2% of the median" in line]
    assert len(groups) == 1
    count = int(groups[0].split()[0].replace(",", ""))
    grouped = _group_ranks(groups[0])
    assert count == len(grouped) and count + len(rows) == 1024
    assert sorted(grouped + rows) == list(range(1024))
    assert "ranks 0-2, 4-511, 513-699, 701-1023" in groups[0]
    assert "--all" in text


def test_all_prints_every_rank_and_json_lists_every_rank(monkeypatch, capsys):
    job = synthetic()
    monkeypatch.setattr(gaplens.analysis.job.run, "open_job", lambda paths, **kw: job)
    assert main(["ranks", "/job", "--all"]) == 0
    out = capsys.readouterr().out
    assert sorted(_rows(out)) == list(range(1024))
    assert len(out.splitlines()) == 1024 + 10  # the job, straggler (4), table header and legend lines
    assert "more than a screen" not in out
    assert main(["ranks", "/job", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc == json.loads(json.dumps(job.to_json()))
    assert sorted(r["rank"] for r in doc["ranks"]) == list(range(1024))


def test_outliers_past_the_screen_are_one_more_group():
    slow = tuple(range(100, 100 + OUTLIER_ROWS + 10))
    job = synthetic(200, straggler=7, slow=slow, low=())
    text = render_text(job)
    rows = _rows(text)
    assert len(text.splitlines()) <= SCREEN_ROWS
    assert 7 in rows and len(rows) == 1 + OUTLIER_ROWS
    assert set(rows) - {7} <= set(slow)
    more = [line for line in text.splitlines() if "more outside those groups" in line]
    assert "alike, off the median" not in text
    assert len(more) == 1 and len(_group_ranks(more[0])) == 10
    within = [line for line in text.splitlines() if "within 2% of the median" in line]
    assert sorted(_group_ranks(within[0]) + _group_ranks(more[0]) + rows) == list(range(200))


@pytest.mark.parametrize("n, folded", [(SCREEN_ROWS, False), (SCREEN_ROWS + 1, True)])
def test_the_threshold_is_a_screen(n, folded):
    job = synthetic(n, straggler=5)
    assert (render_text(job) != render_text(job, every=True)) is folded
    assert len(_rows(render_text(job))) == (2 if folded else n)  # the straggler and rank 3 (slow step)


@pytest.mark.parametrize("name", ["ddp_straggler", "ddp_even"])
def test_few_ranks_print_as_before(name):
    """Two ranks: every row, no group line, no fold note (the text before issue 31)."""
    job: JobReading = job_of(*pair(name))
    text = render_text(job)
    assert text == render_text(job, every=True)
    assert sorted(_rows(text)) == [0, 1]
    assert "within 2% of the median" not in text and "more than a screen" not in text
    assert text.splitlines()[-1].startswith("waited: time in collectives")


def test_rank_ranges():
    assert rank_ranges([4]) == "rank 4"
    assert rank_ranges([0, 1, 2, 5, 7, 8]) == "ranks 0-2, 5, 7-8"
    assert rank_ranges(list(range(0, 40, 2)), most=3) == "ranks 0, 2, 4, and 17 more (--all or --json lists them)"


def test_clock_offsets_of_many_ranks_are_one_short_line():
    """Hosts seconds apart: every rank's offset would be one line of thousands of characters."""
    job = synthetic.__wrapped__(64)  # a fresh job: its rows are edited below
    for r in job.rows:
        r.offset_ns = (r.rank // 8) * 1_700_000_000
    clock = render_text(job).splitlines()[0]
    assert "clocks: offsets applied to 56 ranks, 1.7 s to 11.9 s (--all or --json lists them)" in clock
    assert render_text(job, every=True).splitlines()[0].count("rank ") == 56


def test_ranks_alike_off_the_median_are_a_group_of_their_own():
    """A second mode (every fourth rank's step 10% longer): one group within the median, one of the 64 alike."""
    real = job_of(*pair("ddp_even")).rows[0].reading
    readings = [
        dataclasses.replace(
            real,
            declared_rank=i,
            world_size=256,
            source=f"/job/rank{i}.json.gz",
            file_index=i,
            step_ns=int(real.step_ns * (1.1 if i % 4 == 1 else 1)),
        )
        for i in range(256)
    ]
    text = render_text(read_job(readings))
    lines = text.splitlines()
    assert len(lines) <= SCREEN_ROWS, text
    within = [line for line in lines if "within 2% of the median" in line]
    alike = [line for line in lines if " alike, off the median" in line]
    assert len(within) == 1 and len(alike) == 1
    rows = _rows(text)
    assert sorted(_group_ranks(alike[0].split(", and ")[0])[:4]) == [1, 5, 9, 13]
    assert alike[0].startswith("  64 ranks") and "and 48 more (--all or --json lists them)" in alike[0]
    assert int(within[0].split()[0]) + 64 + len(rows) == 256


def test_the_job_view_keeps_its_overview_with_many_offset_ranks():
    """1,024 ranks on hosts seconds apart: the viewer's header summarises the offsets in one line instead of
    listing every rank's (123 header lines at 1,024 ranks left the overview one row), so rows stay on screen."""
    import asyncio

    from gaplens.tui.screens.job import HEADER_OFFSETS, JobApp
    from tests.pilot import screen_lines

    job = synthetic.__wrapped__(1024)
    for r in job.rows:
        r.offset_ns = (r.rank // 8) * 1_700_000_000

    async def run() -> list[str]:
        app = JobApp(job)
        async with app.run_test(size=(140, 45)) as pilot:
            await pilot.pause()
            return screen_lines(app)

    lines = asyncio.run(run())
    text = "\n".join(lines)
    assert len([r for r in job.rows if r.offset_ns]) > HEADER_OFFSETS
    assert "offsets applied to 1,016 ranks" in text
    assert sum(1 for ln in lines if "rank 8 " in ln or "rank 9 " in ln) == 0  # no per-rank offset list
    rows = [ln for ln in lines if re.search(r"^\s*[▶ ]?\s*\d+\s", ln)]
    assert len(rows) >= 10, lines
