"""The roofline's arithmetic over an op row: intensity, achieved rates, GEMV-like, latency-paced.

Pure numbers, shared by the floor's readings, the floor command and the roofline screen.
"""

from __future__ import annotations

#: GEMMs below this arithmetic intensity (FLOP per byte) are matrix-vector-like: a row or a few per
#: weight read (decode with a small batch); 16 rows of bf16 give ~16 FLOP/B.
GEMV_INTENSITY = 16.0
#: Ops whose floor at the roof averages under this are paced by their own fixed cost, not by the roof:
#: the smallest kernel, memset or copy takes ~2 µs or more on current GPUs, so an op with a floor under
#: 5% of that cannot show more than a few percent of the roof however good it is; a 4-byte memset's
#: "0% of the roof, memory-bound" says nothing true about it. (Small decode GEMVs, ~0.5 µs of floor in
#: 3 µs, still read as a share of the roof: that share is their lever.)
LATENCY_FLOOR_NS = 100


def latency_paced(floor_ns: float, sized_count: int) -> bool:
    """Sized ops whose mean floor is under ``LATENCY_FLOOR_NS``: their time is latency, not traffic or math."""
    return sized_count > 0 and floor_ns / sized_count < LATENCY_FLOOR_NS


def intensity(flops: float, nbytes: float) -> float:
    """Arithmetic intensity, FLOP per byte moved; ``inf`` when no bytes are known (no memory roof)."""
    return flops / nbytes if nbytes else float("inf")


def per_second(amount: float | None, ns: float | None) -> float | None:
    """An achieved rate (FLOP/s, bytes/s): ``amount`` over ``ns`` nanoseconds; None when either is missing or 0.

    The caller picks the time: a family's *sized* time (the instances whose FLOPs and bytes are known)."""
    return amount / ns * 1e9 if amount and ns else None


def gemv_like(row: dict) -> bool:
    """A memory-bound family with FLOPs under ``GEMV_INTENSITY``: matrix-vector-like (a few rows per weight)."""
    return row["bound"] == "memory" and bool(row["flops"]) and intensity(row["flops"], row["bytes"]) < GEMV_INTENSITY
