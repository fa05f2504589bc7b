"""Peak FLOP/s and bandwidths of data-centre GPUs, so a trace's ops can be held against a floor.

Every number is DENSE (no 2:4 sparsity): vendors print the sparse figure first, marked with an
asterisk, and it is twice the dense one; each row names its data sheet and what was divided.
``peak_flops`` is per dtype: ``fp64`` (FP64 tensor/matrix cores where they exist: what a DGEMM
reaches), ``fp32`` (plain FP32 on CUDA cores / vector units: what an FP32 GEMM without TF32
reaches), ``tf32``, ``bf16`` and ``fp16`` (tensor/matrix cores), ``fp8`` and ``fp4`` where the
hardware has them. ``mem_bytes_per_s`` is peak HBM/GDDR bandwidth; ``link_bytes_per_s`` is the
host link's peak in ONE direction (data sheets quote PCIe both ways: "Gen5 x16 128 GB/s" is
64 GB/s each way; a pinned copy reaches ~80-90% of it, a pageable one far less).

A row is chosen by the device name the trace records and, where two rows share a name, by its
properties (SM/CU count, memory size). A user file (``--gpu-spec FILE``, else
``$XDG_CONFIG_HOME/gaplens/gpus.json``, default ``~/.config/gaplens/gpus.json``) adds rows or
replaces a built-in one with the same ``key``; its rows are tried first. The store reads the file
(``gaplens.store.gpuspecs``) and hands its rows here (``use_user_rows``); this module only parses
them. Format (JSON, a list or {"gpus": [...]}), units as data sheets print them::

    [{"key": "my-h100", "name": "NVIDIA H100 80GB HBM3", "match": "H100.*HBM3", "sms": 132,
      "peak_tflops": {"bf16": 989.5, "fp8": 1979, "fp32": 67, "tf32": 494.7, "fp64": 67},
      "mem_gb_per_s": 3350, "link_gb_per_s": 64, "source": "where the numbers come from"}]
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from gaplens.loaders.model import Trace

T = 1e12  # TFLOP/s
G = 1e9  # GB/s

#: Host-link peaks, one direction (x16 lanes): PCIe Gen3/4/5 are 32/64/128 GB/s both ways.
PCIE3 = 16 * G
PCIE4 = 32 * G
PCIE5 = 64 * G
#: NVLink-C2C between Grace and the GPU: 900 GB/s both ways.
C2C = 450 * G

#: Dtypes a spec may carry, in display order.
DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp4")


@dataclass(frozen=True)
class GpuSpec:
    """One data-sheet row."""

    key: str
    name: str
    match: str  # regex searched (case-insensitive) in the trace's device name
    peak_flops: dict[str, float]
    mem_bytes_per_s: float
    link_bytes_per_s: float
    source: str
    note: str = ""
    sms: int | None = None  # SM (NVIDIA) / CU (AMD) count that tells apart rows with one name
    mem_gb: tuple[float, float] | None = None  # device memory range (GB, 1e9) that does the same
    user: bool = False
    link: str = ""

    def to_json(self) -> dict:
        return {
            "key": self.key,
            "name": self.name,
            "peak_flops": dict(self.peak_flops),
            "mem_bytes_per_s": self.mem_bytes_per_s,
            "link_bytes_per_s": self.link_bytes_per_s,
            "link": self.link,
            "source": self.source,
            "note": self.note,
            "user": self.user,
        }


def _row(key, name, match, tflops, mem_gbs, link, link_name, source, note="", sms=None, mem_gb=None) -> GpuSpec:
    peaks = {k: v * T for k, v in tflops.items() if v}
    if "bf16" in peaks and "fp16" not in peaks:
        peaks["fp16"] = peaks["bf16"]
    return GpuSpec(key, name, match, peaks, mem_gbs * G, link, source, note, sms, mem_gb, False, link_name)


_A100 = "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
_V100 = "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf"
_A100_NOTE = "TF32 312 and BF16 624 are sparse on the sheet: halved"
_A100_PEAKS = {"fp64": 19.5, "fp32": 19.5, "tf32": 156, "bf16": 312}
_H100 = "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet (H100 data sheet)"
_H100_NOTE = "TF32/BF16/FP8 on the sheet are with sparsity (989/1979/3958 SXM): halved"
_H200 = "https://www.nvidia.com/en-us/data-center/h200/ (H200 data sheet)"
_HGX = "https://www.nvidia.com/en-us/data-center/hgx/ (HGX B200 per-GPU specifications)"
_GB200 = "https://www.nvidia.com/en-us/data-center/gb200-nvl72/ (per-GPU specifications)"
_BW_NOTE = "FP4/FP8/BF16/TF32 on the sheet are with sparsity: halved; FP32 and FP64 are dense"
_AMD_NOTE = "AMD's peak without sparsity (its sparse figures are twice these)"

#: The built-in table. Order matters only among rows a device name matches equally well.
BUILTIN: tuple[GpuSpec, ...] = (
    _row(
        "a100-sxm4-80gb",
        "NVIDIA A100 SXM4 80GB",
        r"A100.*(SXM|PG509)",
        _A100_PEAKS,
        2039,
        PCIE4,
        "PCIe Gen4 x16",
        _A100,
        _A100_NOTE,
        108,
        (70, 90),
    ),
    _row(
        "a100-sxm4-40gb",
        "NVIDIA A100 SXM4 40GB",
        r"A100.*(SXM|PG509)",
        _A100_PEAKS,
        1555,
        PCIE4,
        "PCIe Gen4 x16",
        _A100,
        _A100_NOTE,
        108,
        (30, 50),
    ),
    _row(
        "a100-pcie-80gb",
        "NVIDIA A100 PCIe 80GB",
        r"A100.*PCI",
        _A100_PEAKS,
        1935,
        PCIE4,
        "PCIe Gen4 x16",
        _A100,
        _A100_NOTE,
        108,
        (70, 90),
    ),
    _row(
        "a100-pcie-40gb",
        "NVIDIA A100 PCIe 40GB",
        r"A100.*PCI",
        _A100_PEAKS,
        1555,
        PCIE4,
        "PCIe Gen4 x16",
        _A100,
        _A100_NOTE,
        108,
        (30, 50),
    ),
    _row(
        "h100-nvl",
        "NVIDIA H100 NVL",
        r"H100 NVL",
        {"fp64": 60, "fp32": 60, "tf32": 417.5, "bf16": 835.5, "fp8": 1670.5},
        3900,
        PCIE5,
        "PCIe Gen5 x16",
        _H100,
        "NVL column, per GPU; TF32 835, BF16 1671, FP8 3341 with sparsity: halved",
        132,
    ),
    _row(
        "h100-pcie",
        "NVIDIA H100 PCIe",
        r"H100.*PCI",
        {"fp64": 51, "fp32": 51, "tf32": 378, "bf16": 756, "fp8": 1513},
        2000,
        PCIE5,
        "PCIe Gen5 x16",
        _H100,
        "PCIe column; TF32 756, BF16 1513, FP8 3026 with sparsity: halved",
        114,
    ),
    _row(
        "h100-sxm",
        "NVIDIA H100 SXM5 80GB",
        r"H100",
        {"fp64": 67, "fp32": 67, "tf32": 494.5, "bf16": 989.5, "fp8": 1979},
        3350,
        PCIE5,
        "PCIe Gen5 x16",
        _H100,
        _H100_NOTE,
        132,
    ),
    _row(
        "h200-nvl",
        "NVIDIA H200 NVL",
        r"H200 NVL",
        {"fp64": 60, "fp32": 60, "tf32": 417.5, "bf16": 835.5, "fp8": 1670.5},
        4800,
        PCIE5,
        "PCIe Gen5 x16",
        _H200,
        "NVL column; TF32 835, BF16 1671, FP8 3341 with sparsity: halved",
        132,
    ),
    _row(
        "h200-sxm",
        "NVIDIA H200 SXM 141GB",
        r"H200",
        {"fp64": 67, "fp32": 67, "tf32": 494.5, "bf16": 989.5, "fp8": 1979},
        4800,
        PCIE5,
        "PCIe Gen5 x16",
        _H200,
        "SXM column; TF32 989, BF16 1979, FP8 3958 with sparsity: halved",
        132,
    ),
    _row(
        "h20",
        "NVIDIA H20",
        r"\bH20\b",
        {"fp64": 1, "fp32": 44, "tf32": 74, "bf16": 148, "fp8": 296},
        4000,
        PCIE5,
        "PCIe Gen5 x16",
        "no public NVIDIA data sheet; figures as reported for the China-market H20 "
        "(e.g. https://willitrunai.com/es/gpus/h20-96gb: 148 TFLOPS FP16, 4.0 TB/s)",
        "dense figures as reported; check against your vendor's sheet",
        78,
    ),
    _row(
        "gb200",
        "NVIDIA GB200 (Blackwell GPU in a Grace superchip)",
        r"GB200",
        {"fp64": 40, "fp32": 80, "tf32": 1250, "bf16": 2500, "fp8": 5000, "fp4": 10000},
        8000,
        C2C,
        "NVLink-C2C to Grace (900 GB/s both ways, shared by two GPUs)",
        _GB200,
        _BW_NOTE,
    ),
    _row(
        "b200",
        "NVIDIA B200 (HGX)",
        r"B200",
        {"fp64": 37, "fp32": 75, "tf32": 1100, "bf16": 2250, "fp8": 4500, "fp4": 9000},
        7700,
        PCIE5,
        "PCIe Gen5 x16",
        _HGX,
        _BW_NOTE + "; memory 7.7 TB/s per GPU (62 TB/s per 8)",
    ),
    _row(
        "l40s",
        "NVIDIA L40S",
        r"L40S",
        {"fp32": 91.6, "tf32": 183, "bf16": 366, "fp8": 733},
        864,
        PCIE4,
        "PCIe Gen4 x16",
        "https://www.nvidia.com/en-us/data-center/l40s/ (L40S data sheet)",
        "TF32 366, BF16 733, FP8 1466 with sparsity: halved; no FP64 figure on the sheet",
    ),
    _row(
        "l4",
        "NVIDIA L4",
        r"\bL4\b",
        {"fp32": 30.3, "tf32": 60, "bf16": 121, "fp8": 242.5},
        300,
        PCIE4,
        "PCIe Gen4 x16",
        "https://www.nvidia.com/en-us/data-center/l4/ (L4 data sheet)",
        "TF32 120, BF16 242, FP8 485 with sparsity: halved; no FP64 figure on the sheet",
    ),
    _row(
        "v100-pcie",
        "NVIDIA V100 PCIe",
        r"V100.*PCI",
        {"fp64": 7, "fp32": 14, "fp16": 112},
        900,
        PCIE3,
        "PCIe Gen3 x16",
        _V100,
        "Volta has no bf16, tf32 or fp8: ops in those dtypes get no compute floor",
    ),
    _row(
        "v100s-pcie",
        "NVIDIA V100S PCIe",
        r"V100S",
        {"fp64": 8.2, "fp32": 16.4, "fp16": 130},
        1134,
        PCIE3,
        "PCIe Gen3 x16",
        _V100,
        "Volta has no bf16, tf32 or fp8",
    ),
    _row(
        "v100-sxm2",
        "NVIDIA V100 SXM2",
        r"V100",
        {"fp64": 7.8, "fp32": 15.7, "fp16": 125},
        900,
        PCIE3,
        "PCIe Gen3 x16",
        _V100,
        "SXM2 column (DGX/DGXS V100 boards too); Volta has no bf16, tf32 or fp8",
    ),
    _row(
        "mi325x",
        "AMD Instinct MI325X",
        r"MI325X",
        {"fp64": 163.4, "fp32": 163.4, "tf32": 653.7, "bf16": 1307.4, "fp8": 2614.9},
        6000,
        PCIE5,
        "PCIe Gen5 x16",
        "https://www.amd.com/en/products/accelerators/instinct/mi300/mi325x.html",
        _AMD_NOTE,
    ),
    _row(
        "mi300x",
        "AMD Instinct MI300X",
        r"MI300X",
        {"fp64": 163.4, "fp32": 163.4, "tf32": 653.7, "bf16": 1307.4, "fp8": 2614.9},
        5300,
        PCIE5,
        "PCIe Gen5 x16",
        "https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html",
        _AMD_NOTE,
    ),
    _row(
        "mi250x-gcd",
        "AMD Instinct MI250X (one GCD)",
        r"MI250",
        {"fp64": 47.85, "fp32": 47.85, "bf16": 191.5},
        1600,
        PCIE4,
        "PCIe Gen4 x16",
        "https://www.amd.com/en/products/accelerators/instinct/mi200/mi250x.html",
        "the sheet's 95.7 FP64/FP32 matrix, 383 BF16, 3.2 TB/s are for the package of two GCDs; "
        "each GCD is its own device in a trace: halved",
        110,
    ),
    _row(
        "mi250x",
        "AMD Instinct MI250X (whole package)",
        r"MI250",
        {"fp64": 95.7, "fp32": 95.7, "bf16": 383},
        3200,
        PCIE4,
        "PCIe Gen4 x16",
        "https://www.amd.com/en/products/accelerators/instinct/mi200/mi250x.html",
        _AMD_NOTE,
        220,
    ),
)


class SpecError(ValueError):
    """A user spec file that cannot be used; the message names the file and the row."""


#: Reads the user's rows: (``--gpu-spec`` path, or None for the default location) -> rows. The store
#: installs it (``gaplens.store.gpuspecs.load_user_specs``): reading a file is the store's, not a reading's.
UserRows = Callable[[str | None], list["GpuSpec"]]
_USER_ROWS: UserRows | None = None


def use_user_rows(reader: UserRows | None) -> None:
    """Install (or, with None, remove) where the user's GPU rows come from."""
    global _USER_ROWS
    _USER_ROWS = reader


def user_specs(gpu_spec: str | None = None) -> list[GpuSpec]:
    """The user's rows (``gpu_spec``: a file; None: the default location, when present) through the installed
    reader; with none installed there are no user rows, and a named file is an error, never silently skipped."""
    if _USER_ROWS is not None:
        return _USER_ROWS(gpu_spec)
    if gpu_spec is not None:
        raise SpecError(f"cannot read GPU spec file {gpu_spec}: no reader installed (gaplens.store.install())")
    return []


def parse_user_specs(data: object, source: str) -> list[GpuSpec]:
    """Rows of a parsed user spec file (a list, or {"gpus": [...]}); ``source`` names the file in errors."""
    rows = data.get("gpus") if isinstance(data, dict) else data
    if not isinstance(rows, list):
        raise SpecError(f"GPU spec file {source}: expected a list of rows or {{'gpus': [...]}}")
    return [_user_row(source, i, r) for i, r in enumerate(rows)]


def _user_row(p: str, i: int, r: object) -> GpuSpec:
    if not isinstance(r, dict) or not isinstance(r.get("name"), str):
        raise SpecError(f"GPU spec file {p}, row {i}: each row needs a 'name'")
    try:
        tflops = {str(k).lower(): float(v) for k, v in (r.get("peak_tflops") or {}).items()}
        mem = float(r["mem_gb_per_s"])
        link = float(r.get("link_gb_per_s") or 0)
        match = str(r.get("match") or re.escape(r["name"]))
        re.compile(match)
        mem_gb = tuple(float(x) for x in r["mem_gb"]) if r.get("mem_gb") else None
    except (KeyError, TypeError, ValueError, re.error) as exc:
        raise SpecError(f"GPU spec file {p}, row {i} ({r.get('name')}): {exc!r}") from exc
    unknown = sorted(set(tflops) - set(DTYPES))
    if unknown:
        raise SpecError(f"GPU spec file {p}, row {i}: unknown dtype(s) {unknown}; use {', '.join(DTYPES)}")
    spec = _row(
        str(r.get("key") or r["name"]),
        r["name"],
        match,
        tflops,
        mem,
        link * G,
        str(r.get("link") or ""),
        str(r.get("source") or p),
        str(r.get("note") or ""),
        int(r["sms"]) if r.get("sms") else None,
        mem_gb,  # type: ignore[arg-type]
    )
    return GpuSpec(**{**spec.__dict__, "user": True})


@dataclass
class Match:
    """The row chosen for one device, or why none was."""

    device: int
    device_name: str
    spec: GpuSpec | None
    why: str = ""
    candidates: list[str] = field(default_factory=list)


def _sm_count(props: dict) -> int | None:
    for k in ("numSms", "smCount", "multiProcessorCount", "cuCount"):
        v = props.get(k)
        if isinstance(v, int | float) and v > 0:
            return int(v)
    return None


def _mem_gb(props: dict) -> float | None:
    for k in ("totalGlobalMem", "totalMemory"):
        v = props.get(k)
        if isinstance(v, int | float) and v > 0:
            return float(v) / 1e9
    return None


def match_spec(name: str, props: dict | None = None, user: list[GpuSpec] | None = None, device: int = 0) -> Match:
    """The table row for a device: user rows first, then built-ins; name regex, then SM count and memory."""
    props = props or {}
    user = user or []
    replaced = {s.key for s in user}
    rows = [*user, *(s for s in BUILTIN if s.key not in replaced)]
    named = [s for s in rows if name and re.search(s.match, name, re.IGNORECASE)]
    if not named:
        return Match(device, name, None, f"no row of the GPU table matches {name or 'an unnamed device'!r}")
    sms, mem = _sm_count(props), _mem_gb(props)
    fits = [
        s
        for s in named
        if (s.sms is None or sms is None or s.sms == sms)
        and (s.mem_gb is None or mem is None or s.mem_gb[0] <= mem <= s.mem_gb[1])
    ]
    if not fits:
        return Match(
            device,
            name,
            None,
            f"{name!r} matches {[s.key for s in named]} but not its SM count {sms} / memory {mem and round(mem)} GB",
            [s.key for s in named],
        )
    return Match(device, name, fits[0], "", [s.key for s in fits])


def gpu_matches(trace: Trace, gpu_spec: str | None = None) -> dict[int, Match]:
    """The spec row per device (``gpu_spec``: a user file; else the default location when present)."""
    user = user_specs(gpu_spec)
    return {d.id: match_spec(d.name, d.properties, user, d.id) for d in trace.meta.devices}
