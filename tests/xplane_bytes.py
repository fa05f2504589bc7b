"""XSpace protobuf bytes written by hand (no protobuf package), for tests and the benchmark.

A space is described with plain tuples and dicts; ``space_bytes`` serialises it with the field
numbers of ``xplane.proto`` (listed in ``gaplens.loaders.xplane.wire``), so a test can build the
exact file it reasons about, and ``synthetic`` makes a big one for timing.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field


def varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def key(f: int, wt: int) -> bytes:
    return varint(f << 3 | wt)


def vfield(f: int, v: int) -> bytes:
    return key(f, 0) + varint(v)


def lfield(f: int, payload: bytes | str) -> bytes:
    data = payload.encode() if isinstance(payload, str) else payload
    return key(f, 2) + varint(len(data)) + data


def stat(sid: int, value: int | float | str | bytes, ref: bool = False) -> bytes:
    """An XStat: ints as int64 (uint64 when past int64), floats as double, str, bytes, or a ref id."""
    out = vfield(1, sid)
    if ref:
        return out + vfield(7, int(value))  # type: ignore[arg-type]
    if isinstance(value, bool | int):
        return out + (vfield(3, value) if value >= 1 << 63 else vfield(4, value))
    if isinstance(value, float):
        return out + key(2, 1) + struct.pack("<d", value)
    if isinstance(value, str):
        return out + lfield(5, value)
    return out + lfield(6, value)


@dataclass
class Ev:
    """One XEvent: metadata id, offset and duration in ps, stats as {stat id: value}."""

    mid: int
    offset_ps: int
    duration_ps: int
    stats: dict = field(default_factory=dict)
    occurrences: int = 0  # > 0: an aggregate (num_occurrences instead of offset_ps)


def event_bytes(e: Ev) -> bytes:
    out = vfield(1, e.mid)
    out += vfield(5, e.occurrences) if e.occurrences else vfield(2, e.offset_ps)
    out += vfield(3, e.duration_ps)
    for sid, value in e.stats.items():
        ref = isinstance(value, tuple)
        out += lfield(4, stat(sid, value[0] if ref else value, ref))
    return out


def line_bytes(line_id: int, name: str, timestamp_ns: int, events: list[Ev], display_name: str = "") -> bytes:
    out = vfield(1, line_id) + lfield(2, name) + vfield(3, timestamp_ns)
    if display_name:
        out += lfield(11, display_name)
    return out + b"".join(lfield(4, event_bytes(e)) for e in events)


def plane_bytes(
    plane_id: int,
    name: str,
    lines: list[bytes],
    event_names: dict[int, str],
    stat_names: dict[int, str],
    stats: dict | None = None,
) -> bytes:
    out = vfield(1, plane_id) + lfield(2, name)
    out += b"".join(lfield(3, ln) for ln in lines)
    for mid, ename in event_names.items():
        out += lfield(4, vfield(1, mid) + lfield(2, vfield(1, mid) + lfield(2, ename)))
    for sid, sname in stat_names.items():
        out += lfield(5, vfield(1, sid) + lfield(2, vfield(1, sid) + lfield(2, sname)))
    for sid, value in (stats or {}).items():
        out += lfield(6, stat(sid, value))
    return out


def space_bytes(planes: list[bytes], hostnames: tuple[str, ...] = ("host0",)) -> bytes:
    return b"".join(lfield(1, p) for p in planes) + b"".join(lfield(4, h) for h in hostnames)


# Stat ids of the synthetic planes (any numbering works: names are looked up per plane).
CORR, HLO_OP, HLO_MODULE, KERNEL_DETAILS, BYTES, MEMCPY_DETAILS, STEP_NUM = 1, 2, 3, 4, 5, 6, 7
STAT_NAMES = {
    CORR: "correlation_id",
    HLO_OP: "hlo_op",
    HLO_MODULE: "hlo_module",
    KERNEL_DETAILS: "kernel_details",
    BYTES: "bytes_transferred",
    MEMCPY_DETAILS: "memcpy_details",
    STEP_NUM: "step_num",
}


def synthetic(n_kernels: int, streams: int = 4, ts_ns: int = 1_000_000) -> bytes:
    """A GPU plane of ``n_kernels`` kernels over ``streams`` streams, and a host plane launching each.

    Every kernel carries hlo_op, hlo_module, kernel_details and a correlation id; each launch
    (``cuLaunchKernelEx``) carries the same id. Kernels last 3 us with 2 us between them.
    """
    gpu_lines, host_events = [], []
    per: list[list[Ev]] = [[] for _ in range(streams)]
    for i in range(n_kernels):
        s = i % streams
        t = (i // streams) * 5_000_000
        per[s].append(
            Ev(
                1 + i % 50,
                t + 1_000_000,
                3_000_000,
                {CORR: i + 1, HLO_OP: f"fusion.{i % 50}", HLO_MODULE: "jit_step", KERNEL_DETAILS: "grid:1,1,1"},
            )
        )
        host_events.append(Ev(1, (i // streams) * 5_000_000 + s * 100_000, 50_000, {CORR: i + 1}))
    for s in range(streams):
        gpu_lines.append(line_bytes(10 + s, f"Stream #{10 + s}(Kernel)", ts_ns, per[s]))
    gpu = plane_bytes(1, "/device:GPU:0", gpu_lines, {k: f"fusion_{k}" for k in range(1, 51)}, STAT_NAMES)
    host = plane_bytes(
        2, "/host:CPU", [line_bytes(77, "launcher", ts_ns, host_events)], {1: "cuLaunchKernelEx"}, STAT_NAMES
    )
    return space_bytes([gpu, host])
