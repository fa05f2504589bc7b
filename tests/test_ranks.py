"""A job read as a job, on the 2-GPU DDP recordings (tests/data/README.md) and public multi-rank traces.

Ground truth is each rank's ``.meta.json``: CUDA-event timings per phase and step, and which
rank slept longer before forward (``straggling``).
"""

from __future__ import annotations

import functools
import gzip
import json
import pickle
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import orjson
import pytest

from gaplens.analysis.job.align import best_shift
from gaplens.analysis.job.reading import JobReading
from gaplens.analysis.job.run import open_job
from gaplens.analysis.job.straggler import STEP_SHARE
from gaplens.loaders.model import Trace
from tests.conftest import PUBLIC, missing_shared

DATA = Path(__file__).parent / "data"
CONTRACT_RANK = {
    "rank",
    "source",
    "pid",
    "device",
    "busy_pct",
    "compute_ns",
    "comm_ns",
    "exposed_comm_ns",
    "wait_ns",
    "step_ns",
}
CONTRACT_STRAGGLER = {"rank", "device", "late_share", "wait_imposed_ns", "cause", "evidence"}


def pair(name: str) -> list[str]:
    return [str(DATA / f"{name}_rank{r}.json.gz") for r in (0, 1)]


@functools.lru_cache(maxsize=8)
def job_of(*paths: str) -> JobReading:
    return open_job(list(paths), workers=0)


def profiled(meta_name: str, span: str) -> list[float]:
    """CUDA-event ms of one phase in the profiled steps (all steps for nsys, minus the first, warm-up)."""
    meta = json.loads((DATA / f"{meta_name}.meta.json").read_text())
    its = [it for it in meta["iterations"] if it.get("tag") == "profiled"]
    return [s["gpu_ms"] for it in its for s in it["spans"] if s["name"] == span]


def test_planted_straggler_is_named_with_its_cause():
    """Rank 1 sleeps 20 ms longer in data_wait; rank 0 waits inside the all_to_all each step."""
    job = job_of(*pair("ddp_straggler"))
    s = job.straggler
    assert s is not None and s.rank == 1 and s.device == 1
    assert s.cause == "host"
    assert s.late_share == 1.0
    assert any("data_wait" in e for e in s.evidence)
    # The waiting it imposes: rank 0's exchange (all_to_all + .item()) by CUDA events, ≈ 20.4 ms a step,
    # plus ~0.25 ms in each of rank 0's eight all-reduce buckets (rank 1's backward is a little slower).
    truth = float(np.median(profiled("ddp_straggler_rank0", "exchange")))
    assert s.wait_imposed_per_step_ns / 1e6 == pytest.approx(truth + 2.0, rel=0.1)
    # Its idle time before arriving sits in data_wait: 22.3 ms a step by CUDA events (the others' 2.2 ms).
    own = float(np.median(profiled("ddp_straggler_rank1", "data_wait")))
    other = float(np.median(profiled("ddp_straggler_rank0", "data_wait")))
    assert s.detail["phase"] == "data_wait"
    assert s.detail["own_ns"] / 1e6 == pytest.approx(own, rel=0.1)
    assert (s.detail["own_ns"] - s.detail["others_ns"]) / 1e6 == pytest.approx(own - other, rel=0.1)
    # The rank table is sorted by the waiting each rank imposes: the straggler first.
    assert [r.rank for r in job.rows] == [1, 0]
    waited = {r.rank: r.wait_ns for r in job.rows}
    assert waited[0] > 4 * 0.9 * truth * 1e6 and waited[1] < 1e6


def test_straggler_in_the_backward_all_reduce():
    """No all_to_all: rank 0 waits inside DDP's bucket all-reduces, which overlap its own backward."""
    job = job_of(*pair("ddp_allreduce_straggler"))
    s = job.straggler
    assert s is not None and s.rank == 1 and s.cause == "host" and s.detail["phase"] == "data_wait"
    slower = np.median(profiled("ddp_allreduce_straggler_rank0", "backward")) - np.median(
        profiled("ddp_allreduce_straggler_rank1", "backward")
    )
    # Waiting in collectives is at least what rank 0's backward lost (14.6 ms) and at most its whole backward.
    whole = np.median(profiled("ddp_allreduce_straggler_rank0", "backward"))
    assert slower <= s.wait_imposed_per_step_ns / 1e6 <= whole


def test_even_ranks_have_no_straggler():
    job = job_of(*pair("ddp_even"))
    assert job.straggler is None
    c = job.candidate
    assert c is not None and c.wait_imposed_per_step_ns < STEP_SHARE * job.step_ns
    assert job.to_json()["straggler"] is None
    assert job.collectives == 36


def test_json_is_the_contract():
    out = job_of(*pair("ddp_straggler")).to_json()
    assert set(out) == {"ranks", "straggler", "collectives", "clock_offsets_ns"}
    assert all(set(r) == CONTRACT_RANK for r in out["ranks"])
    assert set(out["straggler"]) == CONTRACT_STRAGGLER
    assert out["clock_offsets_ns"] == {"0": 0, "1": 0}  # one host, one clock
    json.dumps(out)  # plain JSON types only


def _union(intervals: list[tuple[int, int]]) -> int:
    total, reach = 0, None
    for s, e in sorted(intervals):
        if reach is None or s > reach:
            total += e - s
            reach = e
        elif e > reach:
            total += e - reach
            reach = e
    return total


@pytest.mark.parametrize("name", ["ddp_straggler", "ddp_even", "ddp_allreduce_straggler"])
def test_comm_is_the_union_of_the_ranks_collective_kernels(name):
    """Independent count: the raw JSON's NCCL kernels (µs decimals), merged by hand."""
    job = job_of(*pair(name))
    for row in job.rows:
        doc = json.loads(gzip.decompress(Path(row.reading.source).read_bytes()), parse_float=str)
        spans = []
        for ev in doc["traceEvents"]:
            if ev.get("cat") == "kernel" and ("nccl" in ev["name"] or "Collective name" in ev.get("args", {})):
                s = round(float(ev["ts"]) * 1000)
                spans.append((s, s + round(float(ev["dur"]) * 1000)))
        assert abs(row.reading.comm_ns - _union(spans)) <= len(spans)  # ns rounding per kernel


def test_one_nsys_report_holding_both_ranks(tmp_path):
    path = str(DATA / "nsys_ddp_straggler.sqlite.gz")
    job = job_of(path)
    assert sorted((r.rank, r.reading.device) for r in job.rows) == [(0, 0), (1, 1)]
    assert {r.reading.pid for r in job.rows} == {1494, 1495}
    s = job.straggler
    assert s is not None and s.rank == 1 and s.device == 1 and s.cause == "host"
    assert s.detail["phase"] == "data_wait"
    truth = float(np.median(profiled("nsys_ddp_straggler_rank0", "exchange")))
    assert s.wait_imposed_per_step_ns / 1e6 == pytest.approx(truth, rel=0.1)
    assert job.to_json()["clock_offsets_ns"] == {"0": 0, "1": 0}
    # Communication per rank against the report's own kernel table.
    db = tmp_path / "r.sqlite"
    with gzip.open(path) as src, open(db, "wb") as dst:
        shutil.copyfileobj(src, dst)
    con = sqlite3.connect(db)
    for row in job.rows:
        spans = con.execute(
            "SELECT k.start, k.end FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName "
            "WHERE s.value LIKE 'nccl%' AND k.deviceId = ?",
            (row.reading.device,),
        ).fetchall()
        assert row.reading.comm_ns == _union(spans)
    con.close()


def _with(path: str, out: Path, edit) -> str:
    doc = orjson.loads(gzip.decompress(Path(path).read_bytes()))
    edit(doc)
    out.write_bytes(gzip.compress(orjson.dumps(doc), 1))
    return str(out)


def test_clocks_three_seconds_apart_are_aligned_on_collectives(tmp_path):
    """Rank 1's clock moved 3 s later: the offset comes back from collective ends, the reading is unchanged."""
    r0, r1 = pair("ddp_straggler")

    def shift(doc):
        doc["baseTimeNanoseconds"] += 3_000_000_000

    moved = _with(r1, tmp_path / "rank1.json.gz", shift)
    job = open_job([r0, moved], workers=0)
    offset = job.to_json()["clock_offsets_ns"]["1"]
    assert offset == pytest.approx(-3_000_000_000, abs=50_000)
    s, ref = job.straggler, job_of(*pair("ddp_straggler")).straggler
    assert s is not None and ref is not None and s.rank == 1
    # Collective ends agree to tens of µs, not ns: nine collectives a step move the total by a few hundred µs.
    assert s.wait_imposed_per_step_ns == pytest.approx(ref.wait_imposed_per_step_ns, rel=0.02)


def test_clock_that_cannot_be_aligned_is_reported():
    """Two different runs do not end their collectives together: no offset fits, and the job says so."""
    job = open_job([pair("ddp_even")[0], pair("ddp_straggler")[1]], workers=0)
    assert any("clock is not aligned" in n and n.startswith("rank 1") for n in job.notes)
    assert job.to_json()["clock_offsets_ns"]["1"] is None
    assert job.collectives == 0 and job.straggler is None


def test_without_distributed_info_ranks_follow_file_order(tmp_path):
    r0, r1 = pair("ddp_straggler")

    def strip(doc):
        doc.pop("distributedInfo")

    a = _with(r1, tmp_path / "b.json.gz", strip)  # rank 1's trace given first
    b = _with(r0, tmp_path / "a.json.gz", strip)
    job = open_job([a, b], workers=0)
    assert any("no distributedInfo rank" in n and "file order" in n for n in job.notes)
    s = job.straggler
    assert s is not None and s.rank == 0 and job.matched.readings[s.row].source == a


def test_what_a_worker_sends_back_is_small():
    """Per rank: tables of ranks × collectives and a coarse profile, never the trace's events."""
    for row in job_of(*pair("ddp_straggler")).rows:
        reading = row.reading
        assert not any(isinstance(v, Trace) for v in vars(reading).values())
        size = len(pickle.dumps(reading))
        assert size < 40_000, size  # the trace: 7.3k events, 36 collectives


def test_best_shift_pairs_a_sequence_that_starts_later():
    """Three collectives missing at the start of one rank's trace (its profiler opened later)."""
    ref = np.asarray([0, 1, 1, 1, 2] * 3, np.int32)
    ends = np.arange(ref.size, dtype=np.int64) * 1_000_000
    # The pattern repeats every step: on signatures alone, a step off agrees as well (the smaller shift wins) ...
    assert best_shift(ref, ref[3:]) == (2, 1.0)
    # ... and the collective ends, on one clock, pick the right one.
    assert best_shift(ref, ref[3:], ends, ends[3:]) == (-3, 1.0)
    assert best_shift(ref[2:], ref, ends[2:], ends) == (2, 1.0)
    assert best_shift(ref, ref) == (0, 1.0)
    assert best_shift(ref, np.asarray([7, 7, 7, 7, 7, 7, 7, 7], np.int32))[1] == 0.0


@pytest.fixture
def needs_public_hta() -> None:
    if not (PUBLIC / "hta").is_dir():
        missing_shared("shared/public-samples/hta")


needs_public = pytest.mark.usefixtures("needs_public_hta")


@needs_public
def test_public_two_ranks_of_a_128_rank_job():
    """HTA's sampled ranks: NCCL kernels without collective args; ranks from distributedInfo."""
    job = open_job([str(PUBLIC / "hta" / f"sampled_rank-{r}.json.gz") for r in (0, 1)], workers=0)
    assert sorted(r.rank for r in job.rows) == [0, 1]
    assert {r.reading.device for r in job.rows} == {0, 1}
    out = job.to_json()
    assert set(out) == {"ranks", "straggler", "collectives", "clock_offsets_ns"}
    for r in job.rows:
        assert r.reading.comm_ns > 0 and r.reading.collectives.signatures  # SendRecv kernels, by kernel name


@needs_public
@pytest.mark.parametrize("name", ["nccl_data.json.gz", "large_216k_events.json.gz"])
def test_public_one_rank_is_a_job_without_a_straggler(name):
    job = open_job([str(PUBLIC / "hta" / name)], workers=0)
    assert len(job.rows) == 1 and job.straggler is None and job.collectives == 0
    assert job.rows[0].reading.comm_ns > 0
