"""Gap causes on hand-built traces: dependency vs host-late, copy bounded by copy calls, host calls, warm-up.

Times in ns; every expectation is read off the timing diagram of its test.
"""

from __future__ import annotations

import numpy as np
import pytest

from gaplens.analysis.busy import busy_share, copy_label
from gaplens.analysis.comm import comm_family, is_comm_name
from gaplens.analysis.gaps import CAUSES, analyse_gaps, gap_columns
from gaplens.analysis.regions import bound_by
from gaplens.loaders.model import Kind
from tests.handbuilt import Builder


def _only(gaps):
    assert len(gaps) == 1, [(g.start_ns, g.end_ns, g.cause) for g in gaps]
    return gaps[0]


def test_queued_op_is_a_dependency_not_the_host():
    """k2 was launched (call ended at 30) long before the gap began (100): the host was not late.

    thread  [A][B]                      host work .........................
    stream7  ███k1███                                  ███k2███
                    ^100  gap: nothing on the device   ^1000
    """
    b = Builder()
    b.launch(0, 10, 12, 100, name="k1")
    b.launch(20, 30, 1_000, 1_100, name="k2")
    b.cpu(40, 2_000, "python_work")
    g = _only(analyse_gaps(b.trace()))
    assert (g.start_ns, g.end_ns) == (100, 1_000)
    assert g.cause == "dependency" and g.shares == {"dependency": 1.0}
    assert not g.on_critical_path
    assert "host was not late" in g.message


def test_late_launch_is_the_host():
    """The same gap, but k2's launch call ends at 995 (after the gap began at 100): the host was late.

    thread  [A]  python_work ......................[B]
    stream7  ███k1███                                  ███k2███
    """
    b = Builder()
    b.launch(0, 10, 12, 100, name="k1")
    b.cpu(20, 980, "python_work")
    b.launch(985, 995, 1_000, 1_100, name="k2")
    g = _only(analyse_gaps(b.trace()))
    assert g.cause == "host" and g.on_critical_path
    assert g.shares["launch"] == pytest.approx(10 / 900, abs=1e-3)


def test_a_recorded_stream_wait_is_the_evidence_of_a_dependency():
    """k2 on stream 13 waits (cudaStreamWaitEvent) on the event recorded after k1b; it starts late (900).

    thread  [k1][k1b][rec][wait][k2]
    stream7  █k1█ ███k1b███
    stream13                 (k2 queued at 70, waits)   ███k2███
                          ^500 gap                      ^900
    """
    b = Builder()
    b.launch(0, 10, 12, 100, s=7, name="k1")
    b.launch(20, 30, 100, 500, s=7, name="k1b")
    rec = b.call(40, 45, "cudaEventRecord")
    b.wait_event(50, 55, on_stream=7, stream=13, record_corr=rec)
    b.launch(60, 70, 900, 1_000, s=13, name="k2")
    tr = b.trace()
    g = _only(analyse_gaps(tr))
    assert (g.start_ns, g.end_ns) == (500, 900)
    assert g.cause == "dependency" and not g.on_critical_path
    names = [tr.name(i) for i in g.evidence]
    assert "Stream Wait Event" in names and "k1b" in names and "k2" in names
    assert "cudaEventRecord" in names  # the event's record, named by the wait row's correlation
    assert "cudaStreamWaitEvent" in g.message


def test_copy_share_is_bounded_by_time_inside_copy_calls():
    """An op that issued a DtoD copy call (record_param_comms) does not make its whole span `copy`.

    thread  [k1] [record_param_comms ..................................][k2]
                    [cudaMemcpyAsync 20ns]  (async DtoD: a launch, not a copy)
    stream7  █k1█          ▒DtoD▒                                          █k2█
    """
    us = 1_000  # in µs: the op must outlast DISPATCH_MAX_NS to be host work rather than dispatch overhead
    b = Builder()
    b.launch(0, 10 * us, 12 * us, 100 * us, name="k1")
    b.cpu(110 * us, 900 * us, "record_param_comms")
    c = b.call(120 * us, 140 * us, "cudaMemcpyAsync")
    b.op(c, 150 * us, 160 * us, kind=Kind.MEMCPY_DTOD, name="Memcpy DtoD (Device -> Device)")
    b.launch(980 * us, 990 * us, 1_000 * us, 1_100 * us, name="k2")
    g = _only(analyse_gaps(b.trace()))
    assert (g.start_ns, g.end_ns) == (100 * us, 1_000 * us)
    # The device ran the DtoD copy 10 µs: the only copy share. The thread's 20 µs in the async DtoD call
    # is a launch (nothing crossed the host link), and record_param_comms does not inherit `copy`.
    assert g.shares["copy"] == pytest.approx(10 / 900, abs=1e-3)
    assert g.shares["launch"] == pytest.approx((890 / 900) * (30 / 900), abs=1e-3)
    assert g.cause == "host"
    assert "host<->device" not in g.message


def test_blocking_copy_behind_a_wait_is_the_host_waiting_on_the_device():
    """hipMemcpyWithStream queued behind device work: the host waits (sync) until its copy starts.

    thread  [k1][hipMemcpyWithStream ...........................][k2]
    stream7  ██████████████ k1 ████████████████ ▒HtoD▒        █k2█
                                              ^800  ^850    ^880
    """
    b = Builder()
    b.launch(0, 10, 12, 800, name="k1")
    c = b.call(20, 860, "hipMemcpyWithStream")
    b.op(c, 800, 850, kind=Kind.MEMCPY_HTOD, name="Memcpy HtoD (Pageable -> Device)")
    b.launch(860, 870, 880, 980, name="k2")
    tr = b.trace()
    g = _only(analyse_gaps(tr))
    assert (g.start_ns, g.end_ns) == (800, 880)
    # Device copy 50 of 80 ns; of the rest, the thread's 60 ns in the call from the copy's start on; no
    # sync inside the gap: the call's wait (20..800) is sync time, and it ended when the copy started.
    assert g.shares["copy"] == pytest.approx(50 / 80 + (30 / 80) * (60 / 80), abs=1e-3)
    assert g.cause == "copy"
    assert "sync" not in g.shares
    assert "HtoD pageable" in g.message
    copy = next(i for i in range(len(tr)) if tr.kind[i] == int(Kind.MEMCPY_HTOD))
    assert copy_label(tr, copy) == "HtoD pageable"


def test_memory_management_is_alloc_not_launch_or_host():
    """cudaMalloc/cudaFree queue nothing: not launch overhead, and their own cause, not "no CUDA calls".

    thread  [k1][cudaMalloc ..........][cudaFree .....][k2]
            0   110                600 610          900 980
    stream7   ██k1██ 12..100   gap 100..1000            ██k2██
    """
    b = Builder()
    b.launch(0, 10, 12, 100, name="k1")
    b.call(110, 600, "cudaMalloc")
    b.call(610, 900, "cudaFree")
    b.launch(980, 990, 1_000, 1_100, name="k2")
    g = _only(analyse_gaps(b.trace()))
    assert g.cause == "alloc"
    assert g.shares["alloc"] == pytest.approx((490 + 290) / 900, abs=1e-3)
    assert g.shares["launch"] == pytest.approx(10 / 900, abs=1e-3)
    # 100..110, 600..610, 900..980, and 990..1000 (k2 queued after its call returned, within launch latency)
    assert g.shares["host"] == pytest.approx((10 + 10 + 80 + 10) / 900, abs=1e-3)
    assert "cudaMalloc ×1" in g.message and "cudaFree ×1" in g.message
    assert "run-ahead" not in g.message  # neither call waited for the device


def test_a_free_that_waits_for_the_device_costs_its_run_ahead_as_alloc():
    """cudaFree synchronises: it returns when k1 ends (5000); the host work after it, up to the next launch,
    would have overlapped k1 without the wait, for at most as long as the free waited.

    thread  [k1 call][cudaFree ............ 5000][python ..... 5800][k2 call]
            0     10  100                                          5800   5810
    stream7     ████████████████ k1 12..5000 ███   gap 5000..5820  ██k2██
    """
    b = Builder()
    b.launch(0, 10, 12, 5_000, name="k1")
    b.call(100, 5_000, "cudaFree")
    b.cpu(5_000, 5_790, "python_work")
    b.launch(5_800, 5_810, 5_820, 5_900, name="k2")
    g = _only(analyse_gaps(b.trace()))
    assert (g.start_ns, g.end_ns) == (5_000, 5_820)
    assert g.cause == "alloc"
    # 5000..5810 run-ahead: the Python and the launch after the free, which waited 4900 ns (more than 810);
    # 5810..5820 host (k2 queued after its call returned)
    assert g.shares["alloc"] == pytest.approx(810 / 820, abs=1e-3)
    assert "run-ahead lost" in g.message


def test_sync_costs_its_run_ahead_bounded_by_the_wait():
    """A sync per layer: the host waits 300 ns for k1, then runs 1000 ns of Python before the next launch.
    Without the sync that Python would have overlapped k1's last 300 ns only: the rest the host was late.

    thread  [k1 call][cudaStreamSynchronize 1000..1300][python 1300..2300][k2 call 2300..2310]
    stream7   █████ k1 12..1300 █████        gap 1300..2320             ██k2██
    """
    b = Builder()
    b.launch(0, 10, 12, 1_300, name="k1")
    b.call(1_000, 1_300, "cudaStreamSynchronize")
    b.cpu(1_300, 2_290, "python_work")
    b.launch(2_300, 2_310, 2_320, 2_400, name="k2")
    g = _only(analyse_gaps(b.trace()))
    assert (g.start_ns, g.end_ns) == (1_300, 2_320)
    assert g.shares["sync"] == pytest.approx(300 / 1_020, abs=1e-3)
    assert g.shares["host"] == pytest.approx(710 / 1_020, abs=1e-3)
    assert g.cause == "host"  # the host was late for the other 700 ns whether it synchronised or not


def test_the_input_pipeline_after_a_sync_stays_host_work():
    """The step's wait for its next batch (a DataLoader's __next__) after a ``.item()`` is the input
    pipeline's time, with its own lever (more workers, prefetch), not the sync's run-ahead."""
    b = Builder()
    b.launch(0, 10, 12, 5_000, name="k1")
    b.call(100, 5_000, "cudaStreamSynchronize")
    b.phase(5_000, 5_800, "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__")
    b.launch(5_800, 5_810, 5_820, 5_900, name="k2")
    g = _only(analyse_gaps(b.trace()))
    assert g.cause == "host"
    assert g.shares["host"] == pytest.approx(810 / 820, abs=1e-3)


def test_first_launch_that_loads_its_module_is_warm_up_host_work():
    """A 3 ms first launch of `k` is a module load; the second launch of `k` is an ordinary launch."""
    b = Builder()
    b.launch(0, 10, 12, 100, name="k0")
    b.launch(100, 3_000_100, 3_000_200, 3_000_300, name="k")
    b.launch(3_000_400, 3_000_410, 3_000_420, 3_000_500, name="k")
    gaps = analyse_gaps(b.trace())
    first = max(gaps, key=lambda g: g.dur_ns)
    assert first.cause == "host" and first.shares.get("launch", 0) < 0.01


def test_a_driver_module_load_before_a_launch_is_warm_up_and_never_the_gap():
    """nsys records lazy loading as a driver call before the launch that needed it (cuLibraryLoadData, then
    cudaLaunchKernel): the kernel name was launched before, so the first-launch rule cannot see it. The
    region is one-off warm-up host work (one cause, host), its message names the load, and THE gap is the
    smaller steady host island, not it."""
    b = Builder()
    b.launch(0, 10, 12, 100, name="k")
    b.call(200, 4_000_200, "cuLibraryLoadData")  # 4 ms of module loading
    b.launch(4_000_300, 7_000_300, 7_000_400, 7_000_500, name="k")  # the launch it was for: 3 ms more
    b.launch(8_000_000, 8_000_010, 8_000_020, 8_000_100, name="k")  # after ~1 ms of Python: a host island
    cols = gap_columns(b.trace())
    dur = cols.end_ns - cols.start_ns
    load = int(np.argmax(dur))
    assert cols.start_ns[load] == 100 and cols.end_ns[load] == 7_000_400
    assert cols.warmup[load] and CAUSES[cols.cause[load]] == "host" and cols.shares_of(load) == {"host": 1.0}
    assert "cuLibraryLoadData ×1 4 ms, then cudaLaunchKernel 3 ms" in cols.message[load]
    assert "one-off warm-up cost" in cols.message[load]
    the = cols.the_index()
    assert the != load and cols.start_ns[the] == 7_000_500 and not cols.warmup[the]


def test_copy_bound_window_reads_copy_bound():
    """90% of the window in a pageable HtoD copy: copy-bound, with the copy named."""
    b = Builder()
    c = b.call(0, 900, "cudaMemcpy")
    b.op(c, 5, 905, kind=Kind.MEMCPY_HTOD, name="Memcpy HtoD (Pageable -> Device)")
    b.launch(906, 910, 912, 1_005, name="k")
    tr = b.trace()
    share = busy_share(tr)
    assert share.copy_ns == 900 and share.compute_ns == 93
    bound = bound_by(tr)
    assert bound.verdict == "copy" and bound.copies == {"HtoD pageable": 900}
    assert bound.words.startswith("copy-bound")
    g = max(analyse_gaps(tr), key=lambda g: g.dur_ns)
    assert g.cause == "copy"


# Real kernel names (demangled as Kineto/nsys write them), with where each spelling comes from.
COMM_NAMES = [
    # NVIDIA/nccl src/device/generate.py (NCCL >= 2.19) and older ncclKernel_ names (HTA's test traces)
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
    "ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)",
    # microsoft/msccl
    "mscclKernel_Sum_float_LL128(int, int, mscclAlgo*, mscclWork*)",
    # deepseek-ai/DeepEP csrc/kernels/internode.cu, intranode.cu; DeepSeek's profile-data spelling dpsk::ep
    "void deep_ep::internode::dispatch<true, 8, 768, 28, 4, 1>(int4*, float*, long*, float*)",
    "void deep_ep::intranode::combine<__nv_bfloat16, 8, 768>(__nv_bfloat16*, float*)",
    "void deep_ep::internode::notify_dispatch<false, 8>(int const*, int*, int)",
    "void deep_ep::internode::cached_notify<8>(int, int, int)",
    "void dpsk::ep::internode::combine<8, 4>(int4*, float*)",
    # vllm-project/vllm csrc/custom_all_reduce.cuh; sglang sgl-kernel; ROCm aiter
    "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, vllm::Signal*)",
    "void aiter::cross_device_reduce_1stage_naive<__half, 8, false>(aiter::RankData*, aiter::RankData*)",
    # pytorch torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemoryOps.cu
    "void c10d::symmetric_memory::one_shot_all_reduce_kernel<float, 8>(float**, float*, unsigned long)",
    "void c10d::symmetric_memory::multimem_all_reduce_kernel<__nv_bfloat16, 16>(__nv_bfloat16*, unsigned long)",
    "two_shot_all_reduce_kernel",  # the Triton twin (torch/distributed/_symmetric_memory)
    # NVIDIA/TensorRT-LLM customAllReduceKernels.cu
    "void tensorrt_llm::kernels::oneShotAllReduceKernel<half, 8, true>(tensorrt_llm::kernels::AllReduceParams)",
    # NVSHMEM device collectives
    "nvshmemi_reduce_kernel<float, (rdxn_ops)0>(int, float*, float const*, unsigned long)",
]
COMPUTE_NAMES = [
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, at::native::FillFunctor)",
    "nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT",
    "void deep_ep::layout::get_dispatch_layout<256, 32, 8>(long const*, int*, int*, int*, bool*, int, int)",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t>>()",
    "ampere_sgemm_128x64_nn",
    "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>(Flash_fwd_params)",
]


@pytest.mark.parametrize("name", COMM_NAMES)
def test_comm_table_knows_real_collective_names(name):
    assert is_comm_name(name) and comm_family(name) is not None


@pytest.mark.parametrize("name", COMPUTE_NAMES)
def test_comm_table_leaves_compute_alone(name):
    assert not is_comm_name(name)


def test_kernel_launched_inside_an_nccl_range_is_comm():
    """A kernel whose name says nothing, launched inside c10d's ``nccl:all_reduce`` CPU op, is a collective."""
    b = Builder()
    b.launch(0, 10, 12, 100, name="k1")
    b.cpu(200, 300, "nccl:all_reduce")
    b.launch(210, 220, 230, 800, s=13, name="my_custom_collective")
    b.launch(850, 860, 870, 900, name="k2")
    tr = b.trace()
    share = busy_share(tr)
    assert share.comm_ns == 570 and share.compute_ns == 88 + 30


def test_a_long_queue_delay_on_an_empty_device_gets_a_note():
    """k2's graph launch returns at 1 ms; its first kernel starts 8 ms later and nothing runs meanwhile.

    thread  [k1]  [cudaGraphLaunch]
    stream7  █k1█                   ........ 8 ms, device empty ........ ███k2███
    """
    ms = 1_000_000
    b = Builder()
    b.launch(0, 10, 12, 100, name="k1")
    c = b.call(ms - 10_000, ms, "cudaGraphLaunch")
    b.op(c, 9 * ms, 9 * ms + 100, name="k2")
    g = _only(analyse_gaps(b.trace()))
    assert "started 8 ms after cudaGraphLaunch returned" in g.message
    assert "clocks" in g.message


def test_no_queue_note_when_other_work_ran_meanwhile():
    """k2 waits 8 ms behind k1b on another stream: the queue explains it, no note."""
    ms = 1_000_000
    b = Builder()
    b.launch(0, 10, 12, 100, s=7, name="k1")
    b.launch(20, 30, 200, 8 * ms, s=13, name="k1b")
    b.launch(40, 50, 9 * ms, 9 * ms + 100, s=7, name="k2")
    for g in analyse_gaps(b.trace()):
        assert "does not explain" not in g.message


def test_launched_during_the_region_then_queued_splits_host_and_dependency():
    """The host is late by 0.2 ms (launch returns at 0.3 ms); then k2 sits queued 5 ms on an empty device.

    thread  [k1] python ....[launch]
    stream7  █k1█                   ..... 5 ms queued, nothing running ..... ███k2███
               ^0.1 ms            ^0.3 ms                                    ^5.3 ms
    """
    us = 1_000
    b = Builder()
    b.launch(0, 10, 12, 100 * us, name="k1")
    b.cpu(110 * us, 290 * us, "python_work")
    b.launch(290 * us, 300 * us, 5_300 * us, 5_400 * us, name="k2")
    g = _only(analyse_gaps(b.trace()))
    dur = 5_200 * us
    # Past the launch path's own 100 µs, the 4.9 ms the op waited after its call returned is a dependency.
    assert g.shares["dependency"] == pytest.approx((5_000 - 100) * us / dur, abs=1e-3)
    assert g.cause == "dependency" and not g.on_critical_path
    assert "started 5 ms after cudaLaunchKernel returned" in g.message


def test_thread_copy_without_a_device_copy_names_the_calls():
    """The thread sits 790 µs in a cudaMemcpy whose copy the trace did not record: copy, from the call alone."""
    us = 1_000
    b = Builder()
    b.launch(0, 10, 12, 100 * us, name="k1")
    b.call(110 * us, 900 * us, "cudaMemcpy")
    b.launch(980 * us, 990 * us, 1_000 * us, 1_100 * us, name="k2")
    g = _only(analyse_gaps(b.trace()))
    assert g.cause == "copy" and g.shares["copy"] == pytest.approx(790 / 900, abs=1e-3)
    assert g.message.startswith("the launching thread sat in copy calls: copy 790 µs")


def test_another_process_kernel_ending_inside_a_sync_is_not_its_wait():
    """Two ranks in one report: process 100's sync (its own k1 ended long before it began) sits in the call
    while process 200's kernel kB ends inside it. The sync waited on nothing of its own, so the host work
    after it is host; counting kB would have made 1010..1715 run-ahead (sync ~70% of the region).

    pid 100  [k1 call][cudaStreamSynchronize 300..1010][python 1010..1990][k2 call 2000..2010]
    pid 200        [kB call]
    stream7    █ k1 12..100                                                        █ k2 2020..2100
    stream9 (GPU 0, pid 200's)   ████████ kB 40..1005
    """
    from gaplens.loaders.model import Kind as K
    from gaplens.loaders.model import LaneKind

    b = Builder()
    b.launch(0, 10, 12, 100, name="k1")
    b.call(300, 1_010, "cudaStreamSynchronize")
    b.cpu(1_010, 1_990, "python_work")
    b.launch(2_000, 2_010, 2_020, 2_100, name="k2")
    b.corr += 1
    b.cols.add((LaneKind.CUDA_API, 200, 200), 20, 30, "cudaLaunchKernel", K.CUDA_API, b.corr)
    b.cols.add((LaneKind.STREAM, 0, 9), 40, 1_005, "kB", K.KERNEL, b.corr)
    gaps = [g for g in analyse_gaps(b.trace()) if g.start_ns >= 1_005]
    g = _only(gaps)
    assert (g.start_ns, g.end_ns) == (1_005, 2_020)
    assert "sync" not in g.shares or g.shares["sync"] < 0.01  # 1005..1010 inside the call only
    assert g.cause == "host"


def test_the_alloc_lever_names_what_allocates():
    """One cudaMalloc per step beside four launches is code allocating in the loop, not the allocator off:
    the lever says reuse the tensors, not PYTORCH_NO_CUDA_MEMORY_CACHING (the allocator-off lever is for
    allocations as many as half the launches: round-4 alloc_fault, 371 per 264)."""
    from gaplens.analysis.levers import alloc_lever, allocator_off

    b = Builder()
    for n in range(4):
        s = n * 10_000
        b.phase(s, s + 10_000, f"step {n}")
        b.call(s + 100, s + 2_000, "cudaMalloc")
        for k in range(4):
            t = s + 2_100 + k * 1_000
            b.launch(t, t + 10, t + 20, t + 900, name=f"k{k}")
    tr = b.trace()
    assert not allocator_off(tr)
    text = alloc_lever(tr, "training")
    assert text.startswith("create the device tensors once") and "PYTORCH_NO_CUDA_MEMORY_CACHING" not in text
    assert "cudaMalloc ×1 per step" in text
