"""`python -m bench whatif`: the what-if replay on a real sample tiled in time to ~1M events.

The target (``bench.targets``; issue 31, 2 s in issue 21) is 1 s per 1M events for `gaplens whatif`
once the trace is cached: the readings it needs from a cold start (graph, blank regions and their
causes, steps) and the replay.
"""

from __future__ import annotations

import time

from bench.analysis import decode_sample
from bench.targets import WHATIF_S_PER_1M, Figure, at_most, print_figures
from bench.tiling import tile_to
from gaplens.loaders import load

BUDGET_S = WHATIF_S_PER_1M  # per 1M events
CHANGES = (
    ("--remove host", "remove", "host"),
    ("--remove launch", "remove", "launch"),
    ("--scale '*=0.5'", "scale", "*"),
)


def run(args) -> None:
    from gaplens.analysis import memo
    from gaplens.analysis.whatif import Change, whatif

    path = decode_sample()
    if path is None:
        print("whatif: decode_eager sample not found, skipped")
        return
    quick = getattr(args, "quick", False)
    big = tile_to(load(str(path)), 200_000 if quick else 1_000_000)
    print(f"synthetic trace: {len(big):,} events ({path.name} tiled)")
    figures: list[Figure] = []
    for label, kind, target in CHANGES:
        change = Change(kind, target, 0.5 if kind == "scale" else 1.0)
        best_cold = best_warm = best_cpu = float("inf")
        for _ in range(1 if quick else 3):
            memo.clear()
            c = time.process_time()  # robust to other processes sharing the box
            t = time.perf_counter()
            r = whatif(big, [change])
            best_cold = min(best_cold, time.perf_counter() - t)
            best_cpu = min(best_cpu, time.process_time() - c)
            t = time.perf_counter()
            whatif(big, [change])
            best_warm = min(best_warm, time.perf_counter() - t)
        st = r["steps"]
        budget = BUDGET_S * len(big) / 1_000_000
        print(
            f"  {label:<18} cold {best_cold:.3f} s (cpu {best_cpu:.3f} s), replay alone {best_warm:.3f} s; "
            f"{st['label']} {st['measured_median_ns'] / 1e6:.2f} -> {st['predicted_median_ns'] / 1e6:.2f} ms"
        )
        figures.append(
            Figure(
                f"whatif {label}, cold, x{len(big) / 1e6:.2f}M",
                f"{best_cold / len(big) * 1e6:.2f} s/1M ({best_cold:.2f} s)",
                f"<= {BUDGET_S:.0f} s/1M",
                f"replay alone {best_warm:.2f} s",
                at_most(best_cold, budget),
            )
        )
    print_figures("whatif", figures)
