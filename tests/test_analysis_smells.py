"""Smells, pacing and memory rows on hand-built traces: thresholds scale with the step, dense stays clean."""

from __future__ import annotations

from gaplens.analysis.gaps import analyse_gaps
from gaplens.analysis.memory import memory_rows
from gaplens.analysis.pacing import pacing_row
from gaplens.analysis.smells import smells
from gaplens.analysis.steps import steps
from gaplens.loaders.model import Kind
from tests.handbuilt import Builder

US = 1_000
MS = 1_000_000


def dense(n_steps: int = 3) -> Builder:
    """Each step: the host queues 20 × 1 ms kernels in 0.2 ms, then synchronises once."""
    b = Builder()
    t = 0
    for k in range(n_steps):
        b.phase(t, t + 21 * MS, f"step {k}")
        gpu = t + 10 * US
        for j in range(20):
            c0 = t + j * 10 * US
            b.launch(c0, c0 + 5 * US, max(gpu, c0 + 6 * US), max(gpu, c0 + 6 * US) + MS)
            gpu = max(gpu, c0 + 6 * US) + MS
        b.call(t + 250 * US, gpu + 5 * US, "cudaDeviceSynchronize")
        t = gpu + 20 * US  # the next step starts right after: a 25 µs blank
    return b


def test_dense_device_paced_trace_has_no_smell():
    tr = dense().trace()
    assert smells(tr) == []
    row = pacing_row(tr, 0, int(tr.end_ns.max()), "all")
    assert row["verdict"] == "device-paced" and row["busy_pct"] > 95
    gaps = analyse_gaps(tr)
    assert len(gaps) == 2 and all(g.dur_ns < 100 * US for g in gaps)


def fence(kernels: int, kernel_ns: int, call_ns: int, pause_ns: int) -> Builder:
    b = Builder()
    b.phase(0, kernels * (pause_ns + call_ns + 1 * US + kernel_ns), "step 0")
    t = 0
    for _ in range(kernels):
        b.cpu(t, t + pause_ns + call_ns, "aten::mul")
        b.launch(
            t + pause_ns,
            t + pause_ns + call_ns,
            t + pause_ns + call_ns + 1 * US,
            t + pause_ns + call_ns + 1 * US + kernel_ns,
        )
        t += pause_ns + call_ns + 1 * US + kernel_ns
    b.phase(t + 10 * US, t + 20 * MS, "step 1")
    b.launch(t + 10 * US, t + 15 * US, t + 16 * US, t + 19 * MS)  # one long kernel keeps the window honest
    return b


def test_picket_fence_needs_many_short_launch_bound_kernels():
    found = smells(fence(100, 1 * US, 5 * US, 3 * US).trace())
    fences = [f for f in found if f.kind == "picket_fence"]
    assert len(fences) == 1 and fences[0].numbers["ops"] == 100
    assert fences[0].numbers["median_op_ns"] < fences[0].numbers["median_launch_ns"]
    # Too few kernels, or kernels longer than their launches: not a fence.
    assert not [f for f in smells(fence(10, 1 * US, 5 * US, 3 * US).trace()) if f.kind == "picket_fence"]
    assert not [f for f in smells(fence(100, 20 * US, 5 * US, 3 * US).trace()) if f.kind == "picket_fence"]


def test_host_island_threshold_scales_with_the_step():
    def trace(island_ns: int):
        b = Builder()
        t = 0
        for k in range(3):
            b.phase(t, t + 10 * MS + island_ns, f"step {k}")
            b.call(t + US, t + 2 * US, "cudaEventRecord")  # the phase's marker, as torch records it
            b.launch(t + 3 * US, t + 5 * US, t + 6 * US, t + 10 * MS)
            b.call(t + 10 * US, t + 10 * MS + 2 * US, "cudaStreamSynchronize")
            # A small op right after the sync, so the island is not the sync's own drain.
            b.launch(t + 10 * MS + 3 * US, t + 10 * MS + 8 * US, t + 10 * MS + 9 * US, t + 10 * MS + 20 * US)
            b.cpu(t + 10 * MS + 20 * US, t + 10 * MS + island_ns, "tokenize")
            t += 10 * MS + island_ns + 10 * US
        b.launch(t, t + 5 * US, t + 6 * US, t + MS)
        return b.trace()

    small = smells(trace(200 * US))  # 2 % of a 10 ms step: not an island
    assert not [f for f in small if f.kind == "host_island"]
    big = [f for f in smells(trace(3 * MS)) if f.kind == "host_island"]  # 23 % of a step
    assert len(big) == 3
    assert all(f.numbers["host_share"] > 0.9 for f in big)


def test_memory_rows_report_bytes_per_step():
    b = Builder()
    t = 0
    for k in range(4):
        b.phase(t, t + MS, f"decode_step {k}")
        c = b.call(t + 10 * US, t + 20 * US, "cudaMemcpyAsync")
        b.op(c, t + 30 * US, t + 31 * US, kind=Kind.MEMCPY_DTOH, name="Memcpy DtoH", nbytes=8)
        b.launch(t + 40 * US, t + 45 * US, t + 46 * US, t + 500 * US)
        t += MS
    tr = b.trace()
    st = steps(tr)
    assert st.family == "decode_step" and len(st.spans) == 4
    (row,) = memory_rows(tr, st)
    assert row["direction"] == "DtoH" and row["count"] == 4
    assert row["bytes_per_step"] == 8 and row["copies_per_step"] == 1 and row["every_step"]


def device_paced_copies(n_steps: int = 12) -> Builder:
    """The host queues every step in its first ~1 ms; the device runs them 120 ms later.

    host    [step 0: memcpy launch launch][step 1: ...] ...          (all within ~1 ms)
    stream 7                      ▒▒▒▒████████▒▒▒▒████████ ...       (▒ 4.85 ms pinned HtoD,
                                  ^ 120 ms after its call              █ 10 ms compute)
    """
    b = Builder()
    gpu = 120 * MS
    for k in range(n_steps):
        h = 1_000 + k * 80 * US
        b.phase(h, h + 60 * US, f"train_step {k}")
        c = b.call(h + 5 * US, h + 15 * US, "cudaMemcpyAsync")
        b.op(c, gpu, gpu + 4_850 * US, kind=Kind.MEMCPY_HTOD, name="Memcpy HtoD (Pinned -> Device)", nbytes=256 << 20)
        gpu += 4_850 * US + 3 * US
        b.launch(h + 20 * US, h + 25 * US, gpu, gpu + 10 * MS)
        gpu += 10 * MS + 3 * US
    return b


def test_a_queued_copy_is_sized_as_the_device_ran_it():
    """Each copy is 4.85 ms on the device; before issue 29 a finding ran from its call (queued 120-300 ms
    ahead) to the copy's end, and all twelve fell in one step: "copy on the critical path in 1 of 12
    train_step (12 times), median 206 ms (total 2.47 s)"."""
    tr = device_paced_copies().trace()
    copies = [f for f in smells(tr) if f.kind == "copy_on_path"]
    assert len(copies) == 12
    assert all(f.dur_ns == 4_850 * US for f in copies)
    from gaplens.analysis.smells import rollup

    (group,) = rollup(tr, copies)
    assert group.line.startswith("copy on the critical path in 12 of 12 train_step")
    assert group.median_ns == 4_850 * US and group.total_ns == 12 * 4_850 * US
