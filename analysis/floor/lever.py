"""The floor's lever: the kernel family with the most time above its floor, and what would bring it down."""

from __future__ import annotations

from dataclasses import dataclass

from gaplens.analysis.floor.floors import floors
from gaplens.analysis.floor.gpuspecs import GpuSpec
from gaplens.analysis.floor.roof import gemv_like, intensity, latency_paced
from gaplens.analysis.floor.windows import op_rows, window_sel
from gaplens.analysis.units import fmt_ns
from gaplens.loaders.model import Kind, Trace

#: A compute-bound op family below this share of its floor has a lever in its kernel, dtype or shape.
LOW_EFFICIENCY = 0.6


@dataclass(frozen=True)
class FloorLever:
    """The op family with the most time above its floor, and the lever that fits it."""

    family: str
    bound: str
    dtype: str | None
    time_ns: int
    floor_ns: int
    excess_ns: int
    efficiency: float
    share: float  # of all excess in the window
    shape: str
    lever: str
    text: str


def _lever(row: dict, spec: GpuSpec | None) -> str:
    """The lever that fits a family's bound, dtype and arithmetic intensity (FLOP per byte)."""
    ai = intensity(row["flops"], row["bytes"])
    fam = row["name"]
    eff = row["efficiency"] or 0.0
    if row["bound"] == "memory":
        if fam.startswith("Memcpy") or fam.startswith("Memset"):
            return "keep tensors on the device, pin host buffers and overlap copies with compute"
        if gemv_like(row):
            return (
                "a matrix-vector-like GEMM reads every weight for a few rows: batch more requests/tokens per "
                "step, or quantise the weights (fp8/int8/int4) to read fewer bytes"
            )
        if row["flops"]:
            peak = spec.peak_flops.get(row["dtype"] or "") if spec else None
            ridge = f" of {peak / spec.mem_bytes_per_s:.0f}" if peak and spec else ""
            text = (
                f"at {ai:.0f} FLOP/B it sits under the GPU's ridge{ridge}: more rows per weight read "
                "(a larger batch) or a narrower dtype"
            )
            if eff < LOW_EFFICIENCY:
                text += f"; it reaches {eff:.0%} of the memory roof: a better kernel or layout"
            return text
        return "fuse it with its neighbours (torch.compile, a fused kernel) so each tensor is read once"
    if row["dtype"] == "fp32":
        return "fp32 runs on CUDA cores: allow TF32 or use bf16 on tensor cores"
    if eff < LOW_EFFICIENCY:
        if "attention" in fam:
            return (
                "a newer fused attention kernel (FlashAttention-3, a recent cuDNN), fp8 attention where accuracy allows"
            )
        if "conv" in fam:
            return "channels-last tensors (no NCHW↔NHWC transposes), cudnn.benchmark, a narrower dtype"
        return (
            "a better kernel, dtype or shape: bf16→fp8 where accuracy allows, dimensions in multiples of "
            "64/128, more rows per GEMM"
        )
    return "it runs near the compute roof: only less work (smaller model, fewer tokens) or a faster dtype helps"


def floor_lever(
    trace: Trace,
    t0_ns: int | None = None,
    t1_ns: int | None = None,
    pid: int | None = None,
    gpu_spec: str | None = None,
) -> FloorLever | None:
    """The kernel family (op name and dtype) with the most measured time above its floor among the GPU ops
    starting in [t0, t1) (launched by ``pid``), with its bound and lever; None when no kernel in the window
    is sized (no ``record_shapes``) or no GPU row matched. Copies are left to the copy readings."""
    f = floors(trace, gpu_spec)
    if not any(m.spec for m in f.matches.values()):
        return None
    sel = window_sel(trace, t0_ns, t1_ns, pid, None, gpu_spec)
    # Kernels only: a copy-bound stretch is the copy reading's (DESIGN: copies are not compute).
    rows = [
        r for r in op_rows(trace, gpu_spec, sel) if r["excess_ns"] > 0 and trace.kind[r["longest"]] == int(Kind.KERNEL)
    ]
    if not rows:
        return None
    total = sum(r["excess_ns"] for r in rows)
    top = max(rows, key=lambda r: r["excess_ns"])
    spec = next((m.spec for m in f.matches.values() if m.spec), None)
    lever = _lever(top, spec)
    what = f"{top['bound']}-bound"
    if gemv_like(top):
        what += ", GEMV-like"
    roof = f"{top['efficiency']:.0%} of the roof over {fmt_ns(top['sized_ns'])}"
    if latency_paced(top["floor_ns"], top["sized_kernels"]):
        # Tiny kernels: their time is launch-to-completion latency; a roof share would mislead.
        what = "latency-bound"
        roof = f"{top['sized_kernels']:,} kernels of {fmt_ns(top['sized_ns'] / top['sized_kernels'])} on average"
        lever = "fuse it with its neighbours (torch.compile, a fused kernel) so the work runs as fewer, larger kernels"
    text = (
        f"{top['name']} ({top['dtype'] or 'no dtype'}, {what}) spends {fmt_ns(top['excess_ns'])} above its floor "
        f"of {fmt_ns(top['floor_ns'])} ({roof}): {lever}"
    )
    return FloorLever(
        top["name"],
        top["bound"],
        top["dtype"],
        int(top["time_ns"]),
        int(top["floor_ns"]),
        int(top["excess_ns"]),
        float(top["efficiency"]),
        top["excess_ns"] / total if total else 0.0,
        top["shape"],
        lever,
        text,
    )
