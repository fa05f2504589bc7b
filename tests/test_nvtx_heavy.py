"""NVTX-heavy nsys exports (issue 31): every phase and pacing row, computed for all ranges at once, equals
what the definitions give range by range, read from the export's own rows with ``sqlite3``.

DESIGN.md, *Phases*: a range [s, e) of a process is timed on the stream that ran most of the work the
process queued during it (any of its threads), else on the process's busiest stream, from M(s) to M(e),
where M(t) = max(t, the end of the work queued on that stream before t). *Pacing*: launch lag = op start -
end of its launch call, over the compute ops that start inside the GPU span, on the phase's device.

The exports are small (two processes, 400 launches each, ~500-1,300 ranges) so the range-by-range
reference stays fast; the speed itself is ``python -m bench nvtx``'s business.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from bench import nvtx
from bench.nsys_synth import add_layer_ranges, make_export
from gaplens.analysis.critical_path import Edge, graph
from gaplens.analysis.pacing import host_blank_ns, pacing, pacing_row
from gaplens.analysis.phases import PhaseList, by_process, phases, process_order, span_durations
from gaplens.analysis.words import MOSTLY
from gaplens.loaders import load
from gaplens.loaders.model import LaneKind

KERNELS = 400  # per process
PROCESSES = 2


def _flat(path: Path) -> None:
    nvtx.add_flat(path, 600)


def _nested(path: Path) -> None:
    nvtx.add_nested(path, 60)


def _per_launch(path: Path) -> None:
    add_layer_ranges(path, nested=True)  # one range per launch and one per pair, on both processes


VARIANTS = {"flat": _flat, "nested": _nested, "per_launch": _per_launch}


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def export(request, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("nvtx") / f"{request.param}.sqlite"
    make_export(path, kernels=KERNELS * PROCESSES, processes=PROCESSES, nvtx_every=100)
    VARIANTS[request.param](path)
    return path


def _raw(path: Path) -> dict:
    """The export's rows, absolute ns: ranges; kernels with their launch call's start and end and process."""
    con = sqlite3.connect(path)
    ranges = con.execute("SELECT start, end, text, globalTid FROM NVTX_EVENTS ORDER BY start").fetchall()
    ops = np.asarray(
        con.execute(
            "SELECT k.start, k.end, k.streamId, k.deviceId, r.start, r.end, (r.globalTid >> 24) & 16777215"
            " FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r"
            " ON r.correlationId = k.correlationId AND (r.globalTid >> 24) = (k.globalPid >> 24)"
        ).fetchall(),
        np.int64,
    )
    con.close()
    cols = ("start", "end", "stream", "device", "call_start", "call_end", "pid")
    return {"ranges": ranges, "ops": {c: ops[:, k] for k, c in enumerate(cols)}}


def _marker(ops: dict, stream: int, t: int) -> int:
    """M(t) on ``stream``: when a marker enqueued at t would run there."""
    before = (ops["stream"] == stream) & (ops["call_start"] < t)
    return max(t, int(ops["end"][before].max())) if before.any() else t


def _expected_phase(ops: dict, s: int, e: int, gtid: int) -> tuple[int, int, int, int | None]:
    """(M(s), M(e), stream, device or None), absolute ns, from the definition, one range at a time."""
    pid = (gtid >> 24) & 0xFFFFFF
    mine = ops["pid"] == pid
    during = mine & (ops["call_start"] >= s) & (ops["call_start"] < e)
    if during.any():
        streams, counts = np.unique(ops["stream"][during], return_counts=True)
        assert (counts == counts.max()).sum() == 1  # no tie to break in these exports
        stream, device = int(streams[counts.argmax()]), 0
    else:
        busy = {int(st): int((ops["end"] - ops["start"])[mine & (ops["stream"] == st)].sum()) for st in ops["stream"]}
        stream, device = max(busy, key=busy.__getitem__), None
    return _marker(ops, stream, s), _marker(ops, stream, e), stream, device


def test_every_phase_is_its_range_timed_by_the_marker_rule(export):
    raw = _raw(export)
    trace = load(str(export), use_cache=False)
    found = phases(trace)
    assert len(found) == len(raw["ranges"]) > 400
    origin = trace.meta.origin_ns
    got = sorted(
        (p.host_start_ns + origin, p.host_end_ns + origin, p.name, p.start_ns + origin, p.end_ns + origin,
         trace.lanes[p.lane].stream, p.device, p.pid)
        for p in found
    )  # fmt: skip
    want = sorted(
        (s, e, name, *_expected_phase(raw["ops"], s, e, gtid), (gtid >> 24) & 0xFFFFFF)
        for s, e, name, gtid in raw["ranges"]
    )
    assert got == want
    assert any(p.device is None for p in found) or "per_launch" in export.name  # some ranges queue nothing


def _busy_in(ops: dict, sel: np.ndarray, t0: int, t1: int) -> int:
    """Union of the ops' intervals clipped to [t0, t1), one interval at a time."""
    total, reach = 0, t0
    for a, b in sorted(zip(ops["start"][sel].tolist(), ops["end"][sel].tolist(), strict=True)):
        a, b = max(a, reach), min(b, t1)
        if b > a:
            total, reach = total + b - a, b
    return total


def test_every_pacing_row_reads_the_ops_of_its_phase_span(export):
    raw = _raw(export)
    ops = raw["ops"]
    trace = load(str(export), use_cache=False)
    found = phases(trace)
    rows = pacing(trace, found)
    origin = trace.meta.origin_ns
    binding_of = _binding_by_op(trace, ops, origin)
    for p, row in zip(found, rows, strict=True):
        t0, t1 = p.start_ns + origin, p.end_ns + origin
        sel = (ops["device"] == 0) & (ops["start"] >= t0) & (ops["start"] < t1)
        assert (row["name"], row["start_ns"], row["end_ns"], row["depth"], row["pid"]) == (
            p.name, p.start_ns, p.end_ns, p.depth, p.pid,
        )  # fmt: skip
        assert row["ops"] == int(sel.sum())
        dur = max(t1 - t0, 1)
        busy = _busy_in(ops, ops["device"] == 0, t0, t1)  # every kernel running in the span, whenever it started
        assert row["busy_pct"] == round(100.0 * busy / dur, 2)
        assert row["comm_pct"] == row["copy_pct"] == 0.0
        blank, host = host_blank_ns(trace, p.start_ns, p.end_ns, [0])
        assert row["host_blank_pct"] == round(100.0 * host / dur, 2)
        if not sel.any():
            assert (row["verdict"], row["launch_bound_pct"], row["lag_ns"]) == ("idle", 0.0, {})
            continue
        raw_lag = ops["start"][sel] - ops["call_end"][sel]
        lag = np.maximum(raw_lag, 0)
        assert row["clamped"] == int((raw_lag < 0).sum())
        assert row["lag_ns"] == {
            "p10": int(np.percentile(lag, 10)),
            "median": int(np.median(lag)),
            "p90": int(np.percentile(lag, 90)),
            "max": int(lag.max()),
        }
        assert row["median_op_ns"] == int(np.median(ops["end"][sel] - ops["start"][sel]))
        b = np.asarray([binding_of[k] for k in np.flatnonzero(sel).tolist()])
        launch, device = float(np.mean(b == Edge.LAUNCH)), float(np.mean(np.isin(b, (Edge.STREAM, Edge.WAIT))))
        assert (row["launch_bound_pct"], row["device_bound_pct"]) == (round(100 * launch, 1), round(100 * device, 1))
        host_paced = host >= 0.25 * dur and host > MOSTLY * blank
        want = (
            "cpu-bound"
            if host_paced or (launch > MOSTLY and row["busy_pct"] < 100 * MOSTLY)
            else "device-paced"
            if device > MOSTLY
            else "mixed"
        )
        assert row["verdict"] == want
    # The one-span form is the same reading.
    k = len(found) // 2
    assert (
        pacing_row(trace, found[k].start_ns, found[k].end_ns, found[k].name, 0)
        | {
            "depth": found[k].depth,
            "pid": found[k].pid,
        }
        == rows[k]
    )


def _binding_by_op(trace, ops: dict, origin: int) -> list[int]:
    """The critical-path binding of each raw kernel (its event found by stream and start)."""
    binding = graph(trace).binding  # per event: what set a GPU op's start
    on_stream = [ln.id for ln in trace.lanes if ln.kind == LaneKind.STREAM]
    key = {
        (int(trace.start_ns[i]) + origin, trace.lanes[int(trace.lane[i])].stream): int(binding[i])
        for i in np.flatnonzero(np.isin(trace.lane, on_stream)).tolist()
    }
    return [key[(a, st)] for a, st in zip(ops["start"].tolist(), ops["stream"].tolist(), strict=True)]


def test_phase_columns_read_as_the_phases_do(export):
    """Durations and the process order from the columns: each phase's dur_ns, by_process's keys."""
    found = phases(load(export))
    assert span_durations(found).tolist() == [p.dur_ns for p in found]
    assert process_order(found) == list(by_process(found)) and len(process_order(found)) == PROCESSES
    shuffled = found[::-1]  # a plain list, read phase by phase
    assert span_durations(shuffled).tolist() == [p.dur_ns for p in shuffled]
    assert process_order(shuffled) == list(by_process(shuffled))


def test_kept_phases_read_back_equal_and_as_columns(export, tmp_path, monkeypatch):
    """Kept with the cache entry, the phases come back equal (fields, order, types) and keep their columns."""
    from gaplens.store import readings

    monkeypatch.setenv("GAPLENS_CACHE_DIR", str(tmp_path / "cache"))  # the session's keeper, on for this test
    monkeypatch.delenv(readings.ENV, raising=False)
    trace = load(str(export))
    found = phases(trace)
    assert readings.keep(trace, "test.phases", found, compute_s=10.0)
    ok, back = readings.recall(trace, "test.phases")
    assert ok and isinstance(back, PhaseList) and back == found and back is not found
    assert [dataclasses.astuple(a) for a in back] == [dataclasses.astuple(b) for b in found]
    assert [type(v) for v in dataclasses.astuple(back[0])] == [type(v) for v in dataclasses.astuple(found[0])]
    assert back._ints is not None and back._ints.shape == (len(found), 8)


def test_a_reading_over_its_budget_is_refused_before_it_is_whole(export, tmp_path, monkeypatch):
    """A reading whose payload would take longer to read back than half its compute time is not kept, and the
    pickling stops once the payload passes that size (it is not pickled whole to be thrown away)."""
    import pickle

    from gaplens.store import readings

    monkeypatch.setenv("GAPLENS_CACHE_DIR", str(tmp_path / "cache"))  # the session's keeper, on for this test
    monkeypatch.delenv(readings.ENV, raising=False)
    trace = load(str(export))
    # A plain list of distinct phases, pickled one object at a time, as other readings hold phases; several
    # pickle frames (64 KiB) long.
    found = [dataclasses.replace(p) for p in phases(trace) for _ in range(12)]
    assert len(pickle.dumps(found)) > 250_000
    written: list[int] = []
    real = readings._Pickler.persistent_id

    def spy(self, obj):
        written.append(self._fh.tell())
        return real(self, obj)

    monkeypatch.setattr(readings._Pickler, "persistent_id", spy)
    monkeypatch.setattr(readings, "_SIZE_EVERY", 1)
    monkeypatch.setattr(readings, "MIN_COMPUTE_S", 0.0)
    monkeypatch.setattr(readings, "READ_BACK_S_PER_OBJECT", 0.0)  # the bytes alone
    budget_s = 2 * 10_000 / readings.READ_BACK_BYTES_PER_S  # 10 kB may be kept
    assert not readings.keep(trace, "test.big", found, compute_s=budget_s)
    # Stopped within a pickle frame (64 KiB) of the limit, long before the whole list: the payload streams into
    # the file (a frame at a time), so the stop comes at the first frame past the limit.
    assert max(written) < 10_000 + 70_000
    refused_calls = len(written)
    written.clear()
    import io

    readings._Pickler(io.BytesIO(), trace).dump(found)  # the same payload pickled whole, no budget
    assert refused_calls < len(written) / 2
    assert not readings.recall(trace, "test.big")[0]


def test_a_reading_is_kept_only_when_its_objects_read_back_in_time(export, tmp_path, monkeypatch):
    """Phases pickle as columns (few bytes) but read back one object each: a reading whose objects would take
    longer to rebuild than half its compute time is refused before its columns are even built."""
    import pickle

    from gaplens.store import readings

    monkeypatch.setenv("GAPLENS_CACHE_DIR", str(tmp_path / "cache"))  # the session's keeper, on for this test
    monkeypatch.delenv(readings.ENV, raising=False)
    monkeypatch.setattr(readings, "MIN_COMPUTE_S", 0.0)
    trace = load(str(export))
    found = phases(trace)
    by_bytes = len(pickle.dumps(found, protocol=5)) / readings.READ_BACK_BYTES_PER_S
    by_objects = len(found) * readings.READ_BACK_S_PER_OBJECT
    assert by_objects / 2 > by_bytes  # the bytes alone would pass the first budget below
    reduced = []
    real = PhaseList.__reduce__

    def spy(self):
        reduced.append(len(self))
        return real(self)

    monkeypatch.setattr(PhaseList, "__reduce__", spy)
    assert not readings.keep(trace, "test.slow", found, compute_s=2 * (by_bytes + by_objects / 2))
    assert reduced == []  # refused before its columns were built
    assert readings.keep(trace, "test.fast", found, compute_s=3 * (by_bytes + by_objects))
    assert reduced == [len(found)]
