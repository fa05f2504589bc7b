"""Lazy module loads on a recorded nsys trace, checked against the raw SQLite.

nsys records the driver loading a kernel's module (``cuLibraryLoadData``) on the launching thread,
just before the ``cudaLaunchKernel`` that needed it. The blank region the device sat in while that
thread loaded is one-off warm-up: one cause (host work, the load is), one message naming the load,
never THE blank region (steps 4 and 5), and set apart in step 6; a long stretch with a short load in
it is the host's other work. The expectations come from the SQLite's own rows: the load calls' times,
the launch they preceded (correlation id) and its kernel; and, for the first-launch rule, from HTA's
MI250 JSON.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from gaplens.analysis.calls import FIRST_CALL_MIN_NS, MODULE_LOAD_SHARE
from gaplens.analysis.gaps import CAUSES, gap_columns
from gaplens.analysis.protocol.experiment import experiment
from gaplens.analysis.protocol.walk import Walkthrough
from gaplens.analysis.units import fmt_ns
from gaplens.loaders import load
from tests.conftest import public

TRACE = Path(__file__).parent / "data" / "nsys_ddp_straggler.sqlite.gz"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> sqlite3.Connection:
    db = tmp_path_factory.mktemp("nsys-raw") / "ddp.sqlite"
    with gzip.open(TRACE) as fin, open(db, "wb") as fout:
        shutil.copyfileobj(fin, fout)
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    yield con
    con.close()


@pytest.fixture(scope="module")
def cols():
    trace = load(str(TRACE))
    return trace, gap_columns(trace)


def _loading_regions(con: sqlite3.Connection, origin: int) -> list[dict]:
    """From the raw rows: each kernel launch that its thread preceded, since its previous launch, with at
    least ``FIRST_CALL_MIN_NS`` of ``cuLibraryLoadData``; the device's blank stretch before that kernel
    (from the last other non-NCCL kernel's end on the device), kept when the load overlaps it. Times as
    the trace holds them: the export's nanoseconds less the trace's origin."""
    launches = con.execute(
        f"SELECT r.start, r.end, r.globalTid, k.start, k.deviceId, r.correlationId FROM {RUNTIME} r "
        f"JOIN {KERNEL} k ON k.correlationId = r.correlationId AND k.globalPid / 16777216 = r.globalTid / 16777216 "
        "ORDER BY r.globalTid, r.start"
    ).fetchall()
    loads = con.execute(
        f"SELECT r.start, r.end, r.globalTid FROM {RUNTIME} r JOIN StringIds s ON s.id = r.nameId "
        "WHERE s.value = 'cuLibraryLoadData'"
    ).fetchall()
    kernels = con.execute(
        f"SELECT k.start, k.end, k.deviceId, s.value FROM {KERNEL} k JOIN StringIds s ON s.id = k.demangledName"
    ).fetchall()
    out = []
    prev_end: dict[int, int] = {}
    for c0, c1, tid, k0, dev, corr in launches:
        since = prev_end.get(tid, -(2**62))
        prev_end[tid] = c1
        mine = [(a, b) for a, b, t in loads if t == tid and since <= a < c1]
        loaded = sum(b - a for a, b in mine)
        if loaded < FIRST_CALL_MIN_NS:
            continue
        before = [e for s, e, d, name in kernels if d == dev and s < k0 and "nccl" not in name.lower()]
        start = max(before, default=None)
        if start is None or not (min(a for a, _ in mine) < k0 and c1 > start):
            continue
        out.append(
            {"device": dev, "start": start - origin, "end": k0 - origin, "loads": len(mine), "load_ns": loaded}
            | {"corr": corr, "raw_end": k0, "host": [(a - origin, b - origin) for a, b in [*mine, (c0, c1)]]}
        )
    return out


def test_the_raw_trace_has_module_loads_that_the_old_rule_missed(raw, cols):
    """The ground this file stands on: launches after a cuLibraryLoadData whose kernel name ran before (not
    the first launch of its name), so only the driver's own rows tell they loaded a module."""
    regions = _loading_regions(raw, cols[0].meta.origin_ns)
    assert len(regions) >= 5
    repeat = 0
    for r in regions:
        name, start = raw.execute(
            f"SELECT s.value, k.start FROM {KERNEL} k JOIN StringIds s ON s.id = k.shortName WHERE k.correlationId = ?"
            " AND k.start = ?",
            (r["corr"], r["raw_end"]),
        ).fetchone()
        first = raw.execute(
            f"SELECT min(k.start) FROM {KERNEL} k JOIN StringIds s ON s.id = k.shortName WHERE s.value = ?", (name,)
        ).fetchone()[0]
        repeat += first < start
    assert repeat >= 1


def _covered(r: dict, s: int, e: int) -> int:
    """How much of [s, e) the thread spent loading: its load calls and the launch that needed them (raw)."""
    return sum(max(0, min(b, e) - max(a, s)) for a, b in r["host"])


def test_a_module_load_region_has_one_cause_and_says_what_loaded(raw, cols):
    """Each blank region a raw launch-after-load ends is a module load exactly when the raw load and launch
    calls cover ``MODULE_LOAD_SHARE`` of it; then its cause is host and its message quotes the raw loads."""
    trace, c = cols
    flagged = plain = 0
    for r in _loading_regions(raw, trace.meta.origin_ns):
        at = np.flatnonzero((c.device == r["device"]) & (c.end_ns == r["end"]) & (c.start_ns >= r["start"]))
        if at.size == 0:  # the stretch holds communication or copies: cut or owned by another cause
            continue
        k = int(at[0])
        s, e = int(c.start_ns[k]), int(c.end_ns[k])
        want = _covered(r, s, e) >= MODULE_LOAD_SHARE * (e - s)
        assert bool(c.warmup[k]) == want, (r, s, e)
        if not want:
            plain += 1
            continue
        if CAUSES[int(c.cause[k])] not in ("host", "launch"):
            continue
        flagged += 1
        shares = c.shares_of(k)
        assert CAUSES[int(c.cause[k])] == "host", (r, shares)  # the load is host work, not launch overhead
        # at least the loading's share is host, less what the device itself shows there first
        shown = sum(shares.get(x, 0.0) for x in ("comm", "copy", "profiler"))
        assert shares["host"] >= _covered(r, s, e) / (e - s) - shown - 1e-3, (r, shares)
        assert f"cuLibraryLoadData ×{r['loads']} {fmt_ns(r['load_ns'])}" in c.message[k]
        assert "one-off warm-up cost" in c.message[k]
    assert flagged >= 5 and plain >= 1  # both kinds occur: a short load inside a long host stretch is not one


def test_a_module_load_is_never_the_gap_of_steps_4_and_5(raw, cols):
    trace, c = cols
    the = c.the_index()
    assert the >= 0 and not c.warmup[the]
    walk = Walkthrough(trace)
    g = walk.gap
    assert g is not None and (g.start_ns, g.end_ns) == (int(c.start_ns[the]), int(c.end_ns[the]))
    assert not any("module" in f for f in walk.step(5).facts)


def test_the_largest_region_a_first_launch_loads_is_passed_over_for_the_gap():
    """HTA's MI250 trace: its first ``hipLaunchKernel`` runs 6.5 ms (the runtime loading the module; from the raw
    JSON), the largest blank region on the path. It is warm-up: THE gap is the largest of the rest, and the
    region's message says what loaded, in the raw call's time."""
    path = public("hta/mi250_rocm.json.gz")
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    call = max((e for e in events if e.get("name") == "hipLaunchKernel"), key=lambda e: e.get("dur", 0))
    assert call["dur"] >= FIRST_CALL_MIN_NS / 1000
    trace = load(str(path))
    c = gap_columns(trace)
    ended = np.flatnonzero((c.next_op >= 0) & (trace.corr[np.maximum(c.next_op, 0)] == call["args"]["correlation"]))
    k = int(ended[np.argmax(c.end_ns[ended] - c.start_ns[ended])])
    dur = c.end_ns - c.start_ns
    assert c.on_path[k] and c.warmup[k] and CAUSES[int(c.cause[k])] == "host"
    assert f"ran {fmt_ns(round(call['dur'] * 1000))} (module load)" in c.message[k]
    the = c.the_index()
    assert the != k and not c.warmup[the] and dur[the] < dur[k]
    assert Walkthrough(trace).gap.dur_ns == dur[the]


def test_step_6_sets_the_module_loads_apart(cols):
    trace, c = cols
    exp = experiment(trace)
    assert "module load) set apart" in exp.because
    if exp.highlight_ns is not None:
        a, b = exp.highlight_ns
        assert not c.warmup[(c.start_ns == a) & (c.end_ns == b)].any()
