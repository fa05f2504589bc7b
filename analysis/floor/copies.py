"""Host↔device copies against the host link: bytes, time, achieved GB/s and what slows them."""

from __future__ import annotations

import numpy as np

from gaplens.analysis.floor.floors import floors
from gaplens.analysis.units import fmt_bytes
from gaplens.loaders.model import Kind, Trace

#: A pageable host copy is named as such when it reaches less than this share of the link's peak.
SLOW_COPY_SHARE = 0.5
#: Copies averaging less than this many bytes are paced by per-copy latency, not by the link's bandwidth.
SMALL_COPY_BYTES = 1 << 20


def copy_rows(trace: Trace, gpu_spec: str | None = None) -> list[dict]:
    """Host↔device copies by name (direction and memory kind): bytes, time, achieved GB/s vs the link."""
    f = floors(trace, gpu_spec)
    kinds = trace.kind[f.gpu]
    out: dict[str, dict] = {}
    for j in np.flatnonzero(np.isin(kinds, [int(Kind.MEMCPY_HTOD), int(Kind.MEMCPY_DTOH)])).tolist():
        name = f.family[j]
        r = out.setdefault(
            name,
            {
                "name": name,
                "count": 0,
                "bytes": 0,
                "time_ns": 0,
                "floor_ns": 0.0,
                "device": int(trace.device_of_event()[f.gpu[j]]),
                "unsized": 0,  # copies whose size the trace does not record (ROCm's gpu_memcpy has no bytes)
                "sized_ns": 0,
            },
        )
        r["count"] += 1
        r["time_ns"] += int(f.time_ns[j])
        if np.isnan(f.bytes[j]):
            r["unsized"] += 1
            continue
        r["bytes"] += int(f.bytes[j])
        r["sized_ns"] += int(f.time_ns[j])
        r["floor_ns"] += 0.0 if np.isnan(f.floor_ns[j]) else float(f.floor_ns[j])
    rows = []
    for r in out.values():
        m = f.matches.get(r["device"])
        link = m.spec.link_bytes_per_s if m and m.spec else 0.0
        sized_ns = r.pop("sized_ns")
        r["bytes_per_s"] = r["bytes"] / sized_ns * 1e9 if sized_ns and r["bytes"] else None
        r["link_bytes_per_s"] = link or None
        r["floor_ns"] = round(r["floor_ns"]) if link and sized_ns else None
        if r["unsized"] == r["count"]:
            r["bytes"] = None
        pageable = "pageable" in r["name"].lower()
        slow = bool(link and r["bytes_per_s"] and r["bytes_per_s"] < SLOW_COPY_SHARE * link)
        r["note"] = ""
        n_sized = r["count"] - r["unsized"]
        if slow and r["bytes"] < SMALL_COPY_BYTES * n_sized:
            r["note"] = (
                f"{n_sized} copies of {fmt_bytes(r['bytes'] / n_sized)} on average: each is paced by "
                "its latency, not the link; batch them or keep the values on the device"
            )
        elif slow:
            what = (
                "pageable host memory is staged through a bounce buffer: pin it"
                if pageable
                else "below half the link's peak: small or unpinned transfers"
            )
            r["note"] = (
                f"{fmt_bytes(r['bytes'])} at {r['bytes_per_s'] / 1e9:.1f} GB/s on a link that peaks at "
                f"{link / 1e9:.0f} GB/s ({m.spec.link if m and m.spec else 'host link'}): {what}"
            )
        if r["unsized"] == r["count"]:
            r["note"] = "the trace records no size for these copies: no rate, no floor"
        elif r["unsized"]:
            n = f"{r['unsized']} of these {r['count']}"
            unsized = f"the trace records no size for {n} copies (left out of the rate)"
            r["note"] = f"{r['note']}; {unsized}" if r["note"] else unsized
        rows.append(r)
    rows.sort(key=lambda r: -r["time_ns"])
    return rows
