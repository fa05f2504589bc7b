"""What-if on hand-built graphs: every expectation is worked out from the timing diagram, by hand."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gaplens.analysis.gaps import CAUSES, gap_columns
from gaplens.analysis.lever_changes import quote
from gaplens.analysis.whatif import Change, parse_remove, parse_scale, replay, whatif
from gaplens.loaders.model import Device, Kind, LaneKind, Meta
from tests.handbuilt import PID, Builder, stream

THREAD_B = (LaneKind.CUDA_API, PID, 200)
REPO = Path(__file__).resolve().parent.parent


def gaplens_cli() -> list[str]:
    """The installed console script (the real CLI), else the same entry point through the interpreter."""
    exe = Path(sys.executable).parent / "gaplens"
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-c", "import sys; from gaplens.tui.cli import main; sys.exit(main())"]


def _op(trace, name: str) -> int:
    return int(np.flatnonzero(np.asarray([trace.name(i) == name for i in range(len(trace))]))[0])


def _times(trace, changes, *names: str) -> dict[str, tuple[int, int]]:
    """New (start, end) of the named GPU ops after the replay."""
    rp, _ = replay(trace, changes)
    pos = {int(v): k for k, v in enumerate(rp.base.g.tolist())}
    out = {}
    for nm in names:
        k = pos[_op(trace, nm)]
        out[nm] = (int(rp.snew[k]), int(rp.enew[k]))
    return out


US = 1_000  # the island diagram in µs: a host island is at least 250 µs (analysis.smells.ISLAND_MIN_NS)


def island_steps():
    """Three steps of 400 µs; in each, a host island keeps the device blank from k's end to the next k.

    step n, S = 400 n (µs):
    thread  [launch S..S+10] [sync S+20 ........ S+105] [island S+110 ............ S+390]|
    stream              ███ k S+12..S+100 ██╯                                          |[next k S+412]
    blank                                   S+100 ──────────────────────────────────────── S+412 (host)
    """
    b = Builder()
    for n in range(3):
        s = 400 * n
        b.phase(s * US, (s + 400) * US, f"step {n + 1}")
        b.launch(s * US, (s + 10) * US, (s + 12) * US, (s + 100) * US, name=f"k{n + 1}")
        b.call((s + 20) * US, (s + 105) * US, "cudaStreamSynchronize")
        b.cpu((s + 110) * US, (s + 390) * US, "island")
    b.launch(1200 * US, 1210 * US, 1212 * US, 1300 * US, name="k4")  # the step after, so step 3's region ends
    return b.trace()


def test_no_change_replays_the_trace_exactly():
    tr = island_steps()
    r = whatif(tr, [])
    assert r["window_ns"] == {"measured": (1300 - 12) * US, "predicted": (1300 - 12) * US}
    assert [s["measured_ns"] for s in r["per_step"]] == [400 * US] * 3
    assert [s["predicted_ns"] for s in r["per_step"]] == [400 * US] * 3
    assert r["steps"]["label"] == "step" and r["steps"]["count"] == 3


def test_removing_an_island_on_the_path_moves_everything_after_it():
    """--remove host takes S+100..S+410 off the thread (the sync's wait S+20..S+100 stays: it follows k).

    Step 1 keeps its start (nothing before it changed) and returns from its sync at 105: 105 µs.
    Steps 2 and 3 start where the previous sync returned; launch (taken off) -> k: 2 µs queue + 88 µs,
    then the sync's own 5 µs: 95 µs each.
    """
    tr = island_steps()
    cols = gap_columns(tr)
    assert cols.on_path.all() and len(cols) == 3  # precondition: three host regions on the path
    r = whatif(tr, [parse_remove("host")])
    assert [s["predicted_host_ns"] for s in r["per_step"]] == [105 * US, 95 * US, 95 * US]
    assert r["steps"]["measured_host_median_ns"] == 400 * US and r["steps"]["predicted_host_median_ns"] == 95 * US
    t = _times(tr, [Change("remove", "host")], "k1", "k2", "k3", "k4")
    assert t["k1"] == (12 * US, 100 * US)  # before the change: does not move
    assert t["k2"] == (107 * US, 195 * US)  # launched as k1's sync returned (105) + its 2 µs queue
    assert t["k3"] == (202 * US, 290 * US) and t["k4"] == (297 * US, 385 * US)
    assert r["window_ns"]["predicted"] == (385 - 12) * US
    assert r["changes"][0]["regions"] == 3 and r["changes"][0]["on_critical_path"] == 3
    # the step owner times steps as CUDA events would: the same here (the sync drains the stream)
    assert r["steps"]["predicted_median_ns"] == 95 * US
    q = quote(tr, "host")  # step 6's quote for the host lever is this change's
    assert q.command == "--remove host" and (q.measured_ns, q.predicted_ns) == (400 * US, 95 * US)
    # the same regions are no launch loop: --remove launch leaves them
    assert whatif(tr, [parse_remove("launch")])["steps"]["predicted_median_ns"] == 400 * US


def test_nothing_to_remove_says_so():
    tr = island_steps()
    r = whatif(tr, [parse_remove("copy")])
    assert r["steps"]["predicted_median_ns"] == r["steps"]["measured_median_ns"] == 400 * US
    assert any("no blank region has cause copy" in n for n in r["notes"])
    q = quote(tr, "copy")
    assert q.measured_ns == q.predicted_ns == 400 * US
    assert q.lines() and q.lines()[0].startswith("what-if predicts no gain")  # said, never "A → A"


def two_devices():
    """A long kernel on device 1 ends the window; device 0 waits on a host island off that path.

    thread  [L 0..5] [launch 10..20]  island 110..300  [launch 300..310]
    dev 1     ███████████████████████████ kL 7..2000 ████████████████████████████████████
    dev 0                ███ k1 22..100                       ███ k2 312..400
    """
    b = Builder()
    corr = b.call(0, 5)
    b.cols.add(stream(9, device=1), 7, 2000, "kL", Kind.KERNEL, corr)
    b.launch(10, 20, 22, 100, name="k1")
    b.cpu(110, 300, "island")
    b.launch(300, 310, 312, 400, name="k2")
    return b.cols.finish(Meta("kineto", path="handbuilt", devices=[Device(0, "gpu0"), Device(1, "gpu1")]), None)


def test_an_island_off_the_path_predicts_no_gain_and_says_why():
    tr = two_devices()
    cols = gap_columns(tr)
    host = np.flatnonzero(cols.device == 0)
    assert host.size == 1 and not cols.on_path[host].any()  # precondition: the device-0 region is off the path
    cause = CAUSES[int(cols.cause[host[0]])]  # host or launch, as the cause reading has it
    r = whatif(tr, [parse_remove(cause)])
    assert r["window_ns"]["predicted"] == r["window_ns"]["measured"] == 2000 - 7
    assert any(f"no gain from --remove {cause}" in n and "critical path" in n for n in r["notes"])
    # the island's own device still moves: the region's 100..310 is taken off, so k2's launch returns
    # at 100 and k2 runs 102..190 (its 2 ns queue, its 88 ns)
    assert _times(tr, [Change("remove", cause)], "k2")["k2"] == (102, 190)


def behind_a_sync():
    """k1 is awaited by a sync; the launch after the sync waits for the sync to return.

    thread  [launch 0..10] [sync 20 ................ 1005] [launch 1010..1020]
    stream            ███ k1 12..1000 ██████████████╯                   ███ k2 1022..1100
    """
    b = Builder()
    b.launch(0, 10, 12, 1000, name="k1")
    b.call(20, 1005, "cudaStreamSynchronize")
    b.launch(1010, 1020, 1022, 1100, name="k2")
    return b.trace()


def test_a_faster_kernel_behind_a_sync_pulls_the_host_and_the_next_kernel_earlier():
    """k1 x0.5 lasts 494 ns: ends 506; the sync returns 5 ns later (511); k2's launch returns at 526, k2 528..606."""
    tr = behind_a_sync()
    t = _times(tr, [parse_scale("k1=0.5")], "k1", "k2")
    assert t == {"k1": (12, 506), "k2": (528, 606)}
    r = whatif(tr, [parse_scale("k1=0.5")])
    assert r["window_ns"] == {"measured": 1088, "predicted": 594}
    assert r["changes"][0]["ops"] == 1 and r["changes"][0]["gpu_ns_after"] == 494
    # slower works too: k1 x2 ends 1988, the sync returns 1993, k2's launch returns 2008: k2 2010..2088
    assert _times(tr, [parse_scale("k1=2")], "k1", "k2") == {"k1": (12, 1988), "k2": (2010, 2088)}


def sync_on_other_device():
    """Device 0 sits blank while the thread waits in a device-wide sync for device 1's long kernel.

    thread  [launch 0..10] [launch 20..30] [device sync 40 .................. 605] [launch 610..620]
    dev 0          ███ k1 12..100                                                         ███ k2 622..700
    dev 1                     ███ kX 32..600 ████████████████████████████╯
    blank dev 0           100 ─────────────────── cause sync ──────────────────────────── 622
    """
    b = Builder()
    b.launch(0, 10, 12, 100, name="k1")
    corr = b.call(20, 30)
    b.cols.add(stream(9, device=1), 32, 600, "kX", Kind.KERNEL, corr)
    b.call(40, 605, "cudaDeviceSynchronize")
    b.launch(610, 620, 622, 700, name="k2")
    return b.cols.finish(Meta("kineto", path="handbuilt", devices=[Device(0, "gpu0"), Device(1, "gpu1")]), None)


def test_removing_a_sync_frees_the_work_behind_it():
    """--remove sync: the sync keeps its own 5 ns (returns at 45); the host's own work after it stays (no host
    time is taken off) but runs 560 ns earlier, so k2's launch returns at 620 - 560 = 60; k2 queues behind k1
    (ends 100) + 2 ns: 102..180. The window now ends with kX (600): 588 ns instead of 688."""
    tr = sync_on_other_device()
    cols = gap_columns(tr)
    assert [CAUSES[int(c)] for c in cols.cause] == ["sync"]  # precondition
    r = whatif(tr, [parse_remove("sync")])
    assert r["changes"][0]["calls_unblocked"] == 1 and r["changes"][0]["host_ns"] == 0
    assert _times(tr, [Change("remove", "sync")], "k1", "k2", "kX") == {
        "k1": (12, 100),
        "k2": (102, 180),
        "kX": (32, 600),
    }
    assert r["window_ns"] == {"measured": 688, "predicted": 588}
    # removing host time instead: the sync still waits for kX, k2 cannot move
    assert _times(tr, [Change("remove", "host")], "k2")["k2"] == (622, 700)


def pageable_copy():
    """A synchronous pageable copy: the call returns only when its copy (queued behind k1) is done.

    thread  [launch 0..10] [cudaMemcpyAsync 20 ............................ 400] [launch 405..415]
    stream        ███ k1 12..100 ▒▒▒▒▒ Memcpy HtoD (Pageable) 100..395 ▒▒▒▒▒╯            ███ k2 417..500
    blank                        100 ─────────────── cause copy ──────────────────────── 417
    """
    b = Builder()
    b.launch(0, 10, 12, 100, name="k1")
    corr = b.call(20, 400, "cudaMemcpyAsync")
    b.op(corr, 100, 395, kind=Kind.MEMCPY_HTOD, name="Memcpy HtoD (Pageable -> Device)", nbytes=1 << 20)
    b.launch(405, 415, 417, 500, name="k2")
    return b.trace()


def test_a_faster_copy_pulls_the_blocked_host_with_it():
    """x0.1: the copy lasts 30 ns (100..130); the call returns 5 ns after it (135, -265): k2 152..235."""
    tr = pageable_copy()
    assert [CAUSES[int(c)] for c in gap_columns(tr).cause] == ["copy"]  # precondition
    t = _times(tr, [parse_scale("Memcpy HtoD*=0.1")], "k2")
    assert t["k2"] == (152, 235)


def test_removing_the_copy_takes_it_off_the_host_and_out_of_the_compute_stream():
    """--remove copy: the call stops waiting (keeps its own 5 ns), 395..415 of host time is taken off, so
    k2's launch returns at 20; and the copy, on the stream that computes, leaves its order (prefetched on a
    side stream): k2 queues behind k1 (100) + 2 ns: 102..185. Scaling the copy instead (pinned: x0.1) keeps
    it in the stream and the call blocking: the copy ends at 130, the call returns 5 ns later (135, 265 ns
    early), k2's launch returns at 415 - 265 = 150 and k2 runs 152..235."""
    tr = pageable_copy()
    r = whatif(tr, [parse_remove("copy")])
    assert r["changes"][0]["calls_unblocked"] == 1 and r["changes"][0]["host_ns"] == 20
    assert r["changes"][0]["copies_off_stream"] == 1
    assert _times(tr, [parse_remove("copy")], "k2")["k2"] == (102, 185)
    assert _times(tr, [parse_scale("Memcpy HtoD*=0.1")], "k2")["k2"] == (152, 235)


def sync_cliff():
    """The host blocks until k1 is done, then the device waits while the host works (an .item() in the loop).

    thread  [launch 0..10] [sync 20 ..................... 505] host 510..800 [launch 800..810]
    stream        ███ k1 12..500 ███████████████████████╯                            ███ k2 812..900
    blank                         500 ─────────────── on the critical path ──────────── 812
    """
    b = Builder()
    b.launch(0, 10, 12, 500, name="k1")
    b.call(20, 505, "cudaStreamSynchronize")
    b.cpu(510, 800, "postprocess")
    b.launch(800, 810, 812, 900, name="k2")
    return b.trace()


def test_removing_a_sync_cliff_lets_the_host_work_while_the_device_runs():
    """--remove sync: the device ran dry while the host sat in the sync: every synchronising call stops
    waiting and keeps its own 5 ns (returns at 25), the host runs 480 ns earlier, k2's launch returns at 330
    and k2 queues behind k1 (500) + 2 ns: 502..590."""
    tr = sync_cliff()
    r = whatif(tr, [parse_remove("sync")])
    assert r["changes"][0]["calls_unblocked"] == 1 and r["changes"][0]["host_ns"] == 0
    assert _times(tr, [parse_remove("sync")], "k2")["k2"] == (502, 590)
    assert r["window_ns"] == {"measured": 888, "predicted": 578}
    assert not any("nothing to remove" in n for n in r["notes"])


def across_streams():
    """Stream 13 waits (recorded Stream Wait Event) on k1 of stream 7; k_side on stream 9 waits on nothing.

    thread  [launch 0..10] [record] [wait 30..35] [launch 40..45] [launch 50..55]
    s7            ███ k1 12..300
    s9                                              ███ k_side 47..250
    s13                                                       (waits k1) ███ k2 300..400
    """
    b = Builder()
    b.launch(0, 10, 12, 300, s=7, name="k1")
    b.call(20, 25, "cudaEventRecord")
    b.wait_event(30, 35, on_stream=7, stream=13)
    b.launch(40, 45, 47, 250, s=9, name="k_side")
    b.launch(50, 55, 300, 400, s=13, name="k2")
    return b.trace()


def test_a_change_across_streams_moves_the_waiting_stream_only():
    tr = across_streams()
    # k1 x0.5: 144 ns, ends 156; k2 waited on it: starts 156 (its launch returned at 55), ends 256
    t = _times(tr, [parse_scale("k1=0.5")], "k1", "k2", "k_side")
    assert t == {"k1": (12, 156), "k2": (156, 256), "k_side": (47, 250)}
    # k_side x0.5: nothing waits on it; k2 does not move, nor the window's end
    t = _times(tr, [parse_scale("k_side=0.5")], "k2", "k_side")
    assert t == {"k2": (300, 400), "k_side": (47, 149)}
    r = whatif(tr, [parse_scale("k_side=0.5")])
    assert r["window_ns"]["predicted"] == r["window_ns"]["measured"]
    assert any("no gain" in n and "off the critical path" in n for n in r["notes"])


def across_threads():
    """Thread A syncs the device; thread B (autograd-like, never blocks) launches k2 and, later, k4.

    A  [launch 0..10]      [device sync 110 ......................... 605] [launch 610..620]
    B          [launch 20..30]                                                  [launch 650..660]
    s7     ███ k1 12..100                                                     ███ k3 622..700
    s8               ███ k2 32..600 ████████████████████████████╯                      ███ k4 662..690
    """
    b = Builder()
    b.launch(0, 10, 12, 100, s=7, name="k1")
    c = b.corr = b.corr + 1
    b.cols.add(THREAD_B, 20, 30, "cudaLaunchKernel", Kind.CUDA_API, c)
    b.op(c, 32, 600, s=8, name="k2")
    b.call(110, 605, "cudaDeviceSynchronize")
    b.launch(610, 620, 622, 700, s=7, name="k3")
    c = b.corr = b.corr + 1
    b.cols.add(THREAD_B, 650, 660, "cudaLaunchKernel", Kind.CUDA_API, c)
    b.op(c, 662, 690, s=8, name="k4")
    return b.trace()


def test_a_change_on_another_thread_reaches_this_one_through_the_sync():
    """k2 x0.5 lasts 284: ends 316; A's sync returns at 321 (-284): k3 and B's later k4 move by -284; k1 stays."""
    tr = across_threads()
    t = _times(tr, [parse_scale("k2=0.5")], "k1", "k2", "k3", "k4")
    assert t == {"k1": (12, 100), "k2": (32, 316), "k3": (338, 416), "k4": (378, 406)}
    # k1 x0.5: nothing waited on k1 alone (the sync returned with k2): only k1 moves
    t = _times(tr, [parse_scale("k1=0.5")], "k1", "k3", "k4")
    assert t == {"k1": (12, 56), "k3": (622, 700), "k4": (662, 690)}


def test_parse_errors():
    with pytest.raises(ValueError):
        parse_scale("no-factor")
    with pytest.raises(ValueError):
        parse_scale("*=-1")
    with pytest.raises(ValueError):
        parse_remove("idle")
    assert parse_scale("Memcpy HtoD (Pageable -> Device)=0.12") == Change(
        "scale", "Memcpy HtoD (Pageable -> Device)", 0.12
    )


def test_cli_json_contract_and_bad_input(tmp_path):
    path = str(REPO / "samples" / "smells.json.gz")
    run = gaplens_cli()
    out = subprocess.run([*run, "whatif", path, "--remove", "host", "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert set(data) >= {"origin_ns", "changes", "window_ns", "steps", "per_step", "notes"}
    assert set(data["window_ns"]) == {"measured", "predicted"}
    assert set(data["steps"]) >= {"label", "count", "measured_median_ns", "predicted_median_ns"}
    assert all({"measured_ns", "predicted_ns"} <= set(s) for s in data["per_step"])
    bad = subprocess.run([*run, "whatif", path, "--scale", "oops"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("gaplens: ") and len(bad.stderr.splitlines()) == 1
