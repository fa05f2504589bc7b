"""Readings on public Kineto traces, checked against independent computations.

* Device idle: a plain-Python union of the GPU intervals read straight from the JSON.
* Host-wait share: Holistic Trace Analysis's idle-time breakdown, re-implemented from
  its published definition (``hta/analyzers/breakdown_analysis.py``,
  ``_analyze_idle_time_for_stream``): per stream, sort GPU ops by start; the idle
  interval before an op is ``start - previous end``; it is *host wait* when the op's
  runtime call started after the previous op ended, *kernel wait* when shorter than
  ``consecutive_kernel_delay`` (30 ns), else *other*; shares are of the summed idle.

How gaplens differs, by definition (so the numbers agree only where these don't bite):
  1. gaplens measures blank regions of the device (union over streams); HTA sums idle
     per stream, so on multi-stream traces a stream idle while another works counts
     for HTA and not for gaplens. The comparison below uses single-stream traces.
  2. HTA asks whether the launch call *started* after the previous op ended; gaplens
     asks whether the call *returned* after it (the op can only start then), so a
     launch that began during the previous op but returned after it is host wait for
     gaplens and "other" for HTA: gaplens' share is never meaningfully below HTA's.
  3. gaplens also puts sync wake-ups and host work before a launch on the path, and
     calls a gap on the path only when host-side path segments cover half of it.
"""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from gaplens.analysis.busy import device_busy, device_splits, gpu_work
from gaplens.analysis.gaps import analyse_gaps, blank_regions
from gaplens.loaders.model import Kind
from tests.conftest import loaded
from tests.conftest import public as shared_public

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}
UNION_FILES = [
    "kineto/resnet50_2021_06.pt.trace.json.gz",
    "hta/sampled_rank-0.json.gz",
    "hta/nccl_data.json.gz",
    "hta/large_216k_events.json.gz",
    "hta/gpu_user_annotation.json.gz",
    "hta/ns_resolution.pt.trace.json.gz",
]
SINGLE_STREAM = [
    "kineto/resnet50_2021_06.pt.trace.json.gz",
    "kineto/resnet50_2020_bare_array.pt.trace.json.gz",
    "hta/ns_resolution.pt.trace.json.gz",
    "hta/gpu_user_annotation.json.gz",
]


def public(name: str):
    return loaded(str(shared_public(name)))


def raw_gpu_intervals(name: str, compute_only: bool = False) -> dict[int, list[tuple[int, int]]]:
    """Per device, [start, end) in ns as written in the file (µs floats rounded to ns).

    ``compute_only`` leaves out NCCL kernels (a device spinning in a collective is not computing) and
    copies (memcpy/memset are their own class, DESIGN.md § Three classes of GPU work).
    """
    with gzip.open(shared_public(name), "rt") as fh:
        data = json.load(fh)
    events = data["traceEvents"] if isinstance(data, dict) else data
    out: dict[int, list[tuple[int, int]]] = {}
    for ev in events:
        if ev.get("ph") != "X" or str(ev.get("cat", "")).lower() not in GPU_CATS:
            continue
        cat = str(ev.get("cat", "")).lower()
        if compute_only and (
            str(ev.get("name", "")).startswith("nccl") or cat in ("gpu_memcpy", "gpu_memset", "memcpy", "memset")
        ):
            continue
        s = round(float(ev["ts"]) * 1000)
        out.setdefault(int(ev["pid"]), []).append((s, s + round(float(ev.get("dur", 0)) * 1000)))
    return out


def python_idle(intervals: list[tuple[int, int]], window: tuple[int, int] | None = None) -> int:
    """Window (default: first to last interval) minus the union, with a plain sweep."""
    intervals = sorted(intervals)
    busy, cur_s, cur_e = 0, intervals[0][0], intervals[0][1]
    for s, e in intervals[1:]:
        if s > cur_e:
            busy += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    busy += cur_e - cur_s
    w0, w1 = window if window is not None else (intervals[0][0], max(e for _, e in intervals))
    return w1 - w0 - busy


@pytest.mark.parametrize("name", UNION_FILES)
def test_device_idle_matches_an_independent_union(name):
    """Blank time is the device window (first to last GPU op) minus the union of compute ops."""
    tr = public(name)
    raw = raw_gpu_intervals(name)
    compute = raw_gpu_intervals(name, compute_only=True)
    assert raw, "sample has GPU work"
    for dev, intervals in raw.items():
        window = (min(s for s, _ in intervals), max(e for _, e in intervals))
        expected = python_idle(compute[dev], window)
        got = sum(g.dur_ns for g in blank_regions(tr, device=dev))
        # float-µs rounding: at most 1 ns per interval edge
        assert abs(got - expected) <= 2 * len(intervals), (dev, got, expected)
        analysed = sum(g.dur_ns for g in analyse_gaps(tr, device=dev, evidence_top=0))
        assert analysed == got


def hta_host_wait_share(tr, consecutive_kernel_delay: int = 30, kernels_only: bool = False) -> float:
    """HTA's idle-time breakdown (see module docstring), summed over streams: host-wait share.

    ``kernels_only``: only idle intervals between two kernels (no copy on either side).
    """
    ops = gpu_work(tr)
    host_wait = total = 0
    for lane in np.unique(tr.lane[ops]).tolist():
        o = ops[tr.lane[ops] == lane]
        o = o[np.argsort(tr.start_ns[o], kind="stable")]
        prev_end = tr.end_ns[o][:-1]
        idle = tr.start_ns[o][1:] - prev_end
        call = tr.launch[o][1:]
        runtime_ts = np.where(call >= 0, tr.start_ns[np.maximum(call, 0)], np.iinfo(np.int64).min)
        is_host = runtime_ts > prev_end
        keep = np.ones(idle.size, bool)
        if kernels_only:
            k = tr.kind[o] == int(Kind.KERNEL)
            keep = k[:-1] & k[1:]
        host_wait += int(idle[is_host & keep].sum())
        total += int(idle[keep].sum())
    return host_wait / total


def gaplens_host_wait_share(tr, kernels_only: bool = False) -> float:
    """On-path share of the time the device ran nothing at all.

    Blank regions span copies (copies are not compute, DESIGN.md § Three classes of GPU work), but HTA's
    idle time lies between GPU ops of any kind: so both sides count only time with no GPU op running.
    ``kernels_only``: only blank regions with no copy inside (comparable to HTA's kernel-to-kernel idle).
    """
    gaps = analyse_gaps(tr, evidence_top=0)
    busy = {d.id: device_busy(tr, d.id) for d in tr.meta.devices}
    if kernels_only:
        copies = {d.id: device_splits(tr)[d.id].copy for d in tr.meta.devices}
        gaps = [g for g in gaps if copies[g.device].busy_in(g.start_ns, g.end_ns) == 0]
    empty = [g.dur_ns - busy[g.device].busy_in(g.start_ns, g.end_ns) for g in gaps]
    return sum(e for g, e in zip(gaps, empty, strict=True) if g.on_critical_path) / sum(empty)


@pytest.mark.parametrize("name", SINGLE_STREAM)
def test_host_wait_share_against_hta_definition(name):
    tr = public(name)
    assert np.unique(tr.lane[gpu_work(tr)]).size == 1, "comparison is per stream = per device here"
    ours, hta = gaplens_host_wait_share(tr), hta_host_wait_share(tr)
    assert ours >= hta - 0.02  # difference 2: gaplens judges by the call's end, HTA by its start
    if "resnet50" in name:
        # Training steps launched from one thread: both definitions see the same host waits.
        assert ours == pytest.approx(hta, abs=0.05)


def test_hta_difference_on_ns_resolution_is_launch_calls_straddling_the_previous_op():
    """ns_resolution, kernel-to-kernel idle: whatever gaplens finds beyond HTA is exactly difference 2."""
    tr = public("hta/ns_resolution.pt.trace.json.gz")
    ops = gpu_work(tr)
    o = ops[np.argsort(tr.start_ns[ops], kind="stable")]
    prev_end, start = tr.end_ns[o][:-1], tr.start_ns[o][1:]
    call = tr.launch[o][1:]
    kernel = tr.kind[o] == int(Kind.KERNEL)
    # Kernel-to-kernel idle only: a blank region holding copies is judged whole (cause copy), HTA's per gap.
    ok = (call >= 0) & (start > prev_end) & kernel[:-1] & kernel[1:]
    c = np.maximum(call, 0)
    straddle = ok & (tr.start_ns[c] <= prev_end) & (np.minimum(tr.end_ns[c], start) > prev_end)
    idle = (start - prev_end)[ok].sum()
    explained = (start - prev_end)[straddle].sum() / idle
    ours, hta = gaplens_host_wait_share(tr, kernels_only=True), hta_host_wait_share(tr, kernels_only=True)
    # Was "ours - hta > 0.05" while copies counted as compute: the extra gaps were launches straddling a
    # copy. Between kernels the two readings agree up to difference 2, which explains what remains.
    assert ours >= hta
    assert explained == pytest.approx(ours - hta, abs=0.03)


def test_the_graph_levers_launch_count_is_the_calls_that_queued_gpu_work():
    """HTA's large_216k: the lever said "its 8,066 launches per step" while each step holds 3,874
    cudaLaunchKernel and 176 cudaMemsetAsync; the rest were the runtime's queries and stream waits
    (cudaOccupancy*, cudaEventQuery, cudaStreamIsCapturing, cudaStreamWaitEvent), which queue no GPU work."""
    from gaplens.analysis.levers import GRAPH_STEP_LEVER, graph_lever

    name = "hta/large_216k_events.json.gz"
    with gzip.open(shared_public(name)) as fh:
        events = json.load(fh)["traceEvents"]
    steps = [
        (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        for e in events
        if e.get("name", "").startswith("ProfilerStep")
    ]
    queue = [
        float(e["ts"])
        for e in events
        if e.get("cat") == "cuda_runtime" and e["name"] in ("cudaLaunchKernel", "cudaMemsetAsync")
    ]
    per_step = {sum(a <= t < b for t in queue) for a, b in steps}
    assert len(per_step) == 1  # every step launches the same work: the steady ones' mean is that count
    want = GRAPH_STEP_LEVER.format(launches=f"{per_step.pop():,}")
    assert graph_lever(public(name), "training", "") == want
