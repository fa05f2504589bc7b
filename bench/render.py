"""`python -m bench render`: time to compute and render one timeline frame at 200×60.

Traces of 1M and 10M events are synthesised by tiling decode_eager in time (each
row's events repeated with a time offset, launches and correlations remapped), so
the per-frame cost can be checked against the number of events outside the view.
A frame is every visible line of the timeline rebuilt from scratch (strip cache
invalidated): rasters, overlays, labels and Strips, inside a headless app.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path

from bench.tiling import tile_trace
from gaplens.loaders import load

SAMPLE = Path(__file__).resolve().parent.parent.parent / "shared" / "samples" / "decode_eager.json.gz"
SIZE = (200, 60)


CPU_MS: list[float] = []  # thread CPU time of each frame: what the frame costs without other load


def frame_ms(tl, cold: bool = True) -> float:
    """Draw every visible line of the timeline (cache invalidated when ``cold``); wall ms, CPU ms kept aside."""
    if cold:
        tl.generation += 1
    height = tl.scrollable_content_region.height
    c = time.thread_time()
    t = time.perf_counter()
    for y in range(height):
        tl.render_line(y)
    CPU_MS.append((time.thread_time() - c) * 1000)
    return (time.perf_counter() - t) * 1000


async def measure(model, label: str) -> list[str]:
    from gaplens.tui.app import make_app
    from gaplens.tui.timeline import Timeline

    app = make_app(model)
    out = []
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(100):
            await app.workers.wait_for_complete()
            await pilot.pause()
            if app.query(Timeline) and app.model is not None and app.model.readings.gaps:
                break
        tl = app.query_one(Timeline)
        busy = model.busy_rows[next(iter(model.busy_rows))]
        mid_t = float(busy.start[busy.start.size // 2])
        vp_fit = tl.viewport
        vp_mid = vp_fit.show(mid_t - 5e6, mid_t + 5e6, fill=1.0)  # 10 ms: thousands of kernels
        vp_deep = vp_fit.show(mid_t, mid_t + vp_fit.cols, fill=1.0)  # 1 ns per column
        for name, vp in (("fit-all", vp_fit), ("mid", vp_mid), ("deepest", vp_deep)):
            tl.cursor_ns = mid_t
            tl.set_viewport(vp)
            CPU_MS.clear()
            times = [frame_ms(tl) for _ in range(15)]
            out.append(
                f"{label:>10} {name:<8} {vp.ns_per_col:>14,.0f} ns/col  "
                f"median {statistics.median(times):6.2f} ms  max {max(times):6.2f} ms  "
                f"(CPU median {statistics.median(CPU_MS):5.2f} max {max(CPU_MS):5.2f})  rows {len(tl.rows)}"
            )
        tl.set_viewport(vp_mid)
        burst = []
        CPU_MS.clear()
        for k in range(50):
            if k % 5 == 4:
                tl.action_zoom_in() if k % 10 == 4 else tl.action_zoom_out()
            else:
                tl.action_pan(0.125 if k % 2 else -0.125)
            burst.append(frame_ms(tl))
        out.append(
            f"{label:>10} burst    50 pans/zooms          "
            f"mean {statistics.mean(burst):6.2f} ms  max {max(burst):6.2f} ms  "
            f"(CPU mean {statistics.mean(CPU_MS):5.2f} max {max(CPU_MS):5.2f})  "
            f"over 16 ms: {sum(b > 16 for b in burst)}"
        )
        # j/k: only the two gutters change; the other lines come from the strip cache.
        moves = []
        for k in range(20):
            tl.action_row(1 if k % 2 == 0 else -1)
            moves.append(frame_ms(tl, cold=False))
        out.append(f"{label:>10} j/k      row cursor moves        median {statistics.median(moves):6.2f} ms")
    return out


def run(args) -> None:
    from gaplens.tui.readings import compute
    from gaplens.tui.viewmodel import build_model, with_readings

    if not SAMPLE.exists():
        print(f"[render] {SAMPLE} not found, skipped")
        return
    base = load(str(SAMPLE))
    sizes = [("1M", 10)] if getattr(args, "quick", False) else [("1M", 10), ("10M", 97)]
    print(f"frame = all visible timeline lines at {SIZE[0]}×{SIZE[1]}, strip cache cold; target ≤ 8 ms, none > 16 ms")
    for label, times in sizes:
        t = time.perf_counter()
        trace = tile_trace(base, times)
        t_tile = time.perf_counter() - t
        t = time.perf_counter()
        model = build_model(trace)
        t_model = time.perf_counter() - t
        t = time.perf_counter()
        model = with_readings(model, compute(trace))
        t_read = time.perf_counter() - t
        print(
            f"{label:>10} {len(trace):,} events: tile {t_tile:.1f} s, view model {t_model:.2f} s, "
            f"readings {t_read:.1f} s"
        )
        for line in asyncio.run(measure(model, label)):
            print(line)
