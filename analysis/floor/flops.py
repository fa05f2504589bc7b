"""Sizes of the ops that do math: GEMMs, attention, convolution (FLOPs and the bytes they move).

Conventions (DESIGN.md, "The hardware floor"): a GEMM of an (M×K) by a (K×N) matrix is 2·M·N·K FLOPs
(a multiply and an add per term); a bias or beta·C term adds no FLOPs; batched GEMMs multiply by the
batch. Attention forward is 4·B·H·Sq·Sk·D (the two GEMMs Q·Kᵀ and P·V; softmax is not counted); causal
attention counts half; the backward pass is 2.5× the forward (five GEMMs of that size). Convolution is
2·N·Cout·(output pixels)·(Cin/groups)·(kernel pixels); its backward counts that once per gradient asked
for (input, weight).
"""

from __future__ import annotations

import math
import re

from gaplens.analysis.floor.opargs import DTYPES, SCALAR_TYPES, Args, OpSize, broadcast


def _gemm(m: int, n: int, k: int, batch: int = 1) -> float:
    """2·M·N·K per GEMM (times the batch)."""
    return 2.0 * batch * m * n * k


def size_mm(a: Args) -> OpSize | None:
    """mm(A[M,K], B[K,N]) → C[M,N]: 2·M·N·K FLOPs; bytes A + B + C (C at A's dtype)."""
    sa, sb = a.shape(0), a.shape(1)
    if sa is None or sb is None or len(sa) != 2 or len(sb) != 2:
        return None
    (m, k), n = sa, sb[1]
    return OpSize(_gemm(m, n, k), a.nbytes(0) + a.nbytes(1) + m * n * a.itemsize(0), a.dtype(0), "gemm")


def size_addmm(a: Args) -> OpSize | None:
    """addmm(C, A[M,K], B[K,N]) → [M,N]: 2·M·N·K FLOPs (the bias add is not counted); bytes C + A + B + out."""
    sa, sb = a.shape(1), a.shape(2)
    if sa is None or sb is None or len(sa) != 2 or len(sb) != 2:
        return None
    (m, k), n = sa, sb[1]
    out = m * n * a.itemsize(1)
    return OpSize(_gemm(m, n, k), a.nbytes(0) + a.nbytes(1) + a.nbytes(2) + out, a.dtype(1), "gemm")


def size_bmm(a: Args, first: int = 0) -> OpSize | None:
    """bmm(A[B,M,K], B[B,K,N]) → [B,M,N]: 2·B·M·N·K FLOPs; baddbmm(C, A, B) the same plus C read."""
    sa, sb = a.shape(first), a.shape(first + 1)
    if sa is None or sb is None or len(sa) != 3 or len(sb) != 3:
        return None
    (b, m, k), n = sa, sb[2]
    extra = a.nbytes(0) if first else 0
    nbytes = extra + a.nbytes(first) + a.nbytes(first + 1) + b * m * n * a.itemsize(first)
    return OpSize(_gemm(m, n, k, b), nbytes, a.dtype(first), "gemm")


def size_matmul(a: Args) -> OpSize | None:
    """matmul(A[...,M,K], B[...,K,N]) with broadcast batch dims: 2·batch·M·N·K; a vector operand has M or N = 1."""
    sa, sb = a.shape(0), a.shape(1)
    if not sa or not sb:
        return None
    va, vb = len(sa) == 1, len(sb) == 1
    sa2 = [1, *sa] if va else sa
    sb2 = [*sb, 1] if vb else sb
    m, k, n = sa2[-2], sa2[-1], sb2[-1]
    try:
        batch = broadcast(sa2[:-2], sb2[:-2])
    except ValueError:
        return None
    nb = math.prod(batch)
    out = nb * m * n * a.itemsize(0)
    return OpSize(_gemm(m, n, k, nb), a.nbytes(0) + a.nbytes(1) + out, a.dtype(0), "gemm")


def size_linear(a: Args) -> OpSize | None:
    """linear(x[...,K], W[N,K], b) → [...,N]: 2·(rows)·N·K FLOPs; bytes x + W + b + out."""
    sx, sw = a.shape(0), a.shape(1)
    if not sx or sw is None or len(sw) != 2:
        return None
    rows, (n, k) = math.prod(sx[:-1]), sw
    out = rows * n * a.itemsize(0)
    return OpSize(_gemm(rows, n, k), a.nbytes(0) + a.nbytes(1) + a.nbytes(2) + out, a.dtype(0), "gemm")


def size_scaled_mm(a: Args) -> OpSize | None:
    """_scaled_mm(A[M,K] fp8, B[K,N] fp8, scale_a, scale_b, bias, scale_result, out_dtype): 2·M·N·K FLOPs at
    A's dtype (fp8); bytes A + B + scales + bias + out, out at ``out_dtype`` when recorded, else A's dtype."""
    sa, sb = a.shape(0), a.shape(1)
    if sa is None or sb is None or len(sa) != 2 or len(sb) != 2:
        return None
    (m, k), n = sa, sb[1]
    out_type = a.types[0]
    code = a.ints(6)
    if code and len(code) == 1 and code[0] in SCALAR_TYPES:
        out_type = SCALAR_TYPES[code[0]]
    ins = sum(a.nbytes(i) for i in a.tensors())
    return OpSize(_gemm(m, n, k), ins + m * n * DTYPES[out_type][0], a.dtype(0), "gemm")


#: Attention ops: (q, k, v positions, layout of q/k/v, position of is_causal or of a mask type, backward?).
#: Layout "bhsd" = [batch, heads, seq, dim] (the SDPA entry points), "bshd" = [batch, seq, heads, dim]
#: (the flash/efficient kernels' own entry points). A mask-type position (``custom_mask_type``) is
#: marked by a negative number: causal when the value is 1 or 2.
ATTENTION: dict[str, tuple[int, int, int, str, int, bool]] = {
    "scaled_dot_product_attention": (0, 1, 2, "bhsd", 5, False),
    "_scaled_dot_product_flash_attention": (0, 1, 2, "bhsd", 4, False),
    "_scaled_dot_product_efficient_attention": (0, 1, 2, "bhsd", 6, False),
    "_scaled_dot_product_cudnn_attention": (0, 1, 2, "bhsd", 6, False),
    "_cudnn_attention_forward": (0, 1, 2, "bhsd", 10, False),
    "_flash_attention_forward": (0, 1, 2, "bshd", 8, False),
    "_efficient_attention_forward": (0, 1, 2, "bshd", -9, False),
    # the flash-attn package: _flash_attn_forward(q, k, v, dropout_p, softmax_scale, causal, ...)
    "flash_attn::_flash_attn_forward": (0, 1, 2, "bshd", 5, False),
    "_scaled_dot_product_flash_attention_backward": (1, 2, 3, "bhsd", 11, True),
    "_scaled_dot_product_efficient_attention_backward": (1, 2, 3, "bhsd", 11, True),
    "_scaled_dot_product_cudnn_attention_backward": (1, 2, 3, "bhsd", 14, True),
    "_flash_attention_backward": (1, 2, 3, "bshd", 11, True),
    "_efficient_attention_backward": (1, 2, 3, "bshd", -14, True),
}
#: Attention backward does five GEMMs of the forward's size where the forward does two.
ATTENTION_BWD_FACTOR = 2.5


def size_attention(name: str, a: Args) -> OpSize | None:
    """Attention forward 4·B·H·Sq·Sk·D FLOPs (2·B·H·Sq·Sk·(D+Dv) when V's dim differs), half when causal,
    ×2.5 for the backward; bytes every tensor input + the output (forward: out of Q's shape with V's dim;
    backward: dQ, dK, dV of Q, K, V's shapes). Causality comes from ``is_causal`` (or ``custom_mask_type``
    1/2); an unrecorded or unreadable flag leaves the op unsized.
    """
    qi, ki, vi, layout, causal_at, backward = ATTENTION[name]
    sq, sk, sv = a.shape(qi), a.shape(ki), a.shape(vi)
    if sq is None or sk is None or sv is None or len(sq) != 4 or len(sk) != 4 or len(sv) != 4:
        return None
    if layout == "bhsd":
        b, h, lq, d = sq
        lk, dv = sk[2], sv[3]
    else:
        b, lq, h, d = sq
        lk, dv = sk[1], sv[3]
    flops = 2.0 * b * h * lq * lk * (d + dv)
    if causal_at >= 0:
        causal = a.flag(causal_at)
    else:
        mask = a.ints(-causal_at)
        causal = None if mask is None else (mask[0] in (1, 2))
    if causal is None:
        return None  # causality not recorded (or not readable): half or all of the work, not guessed
    if causal:
        flops /= 2
    ins = sum(a.nbytes(i) for i in a.tensors())
    if backward:
        flops *= ATTENTION_BWD_FACTOR
        out = a.nbytes(qi) + a.nbytes(ki) + a.nbytes(vi)
    else:
        out = b * h * lq * dv * a.itemsize(qi)
    return OpSize(flops, ins + out, a.dtype(qi), "attention")


#: Convolution ops: (input, weight position; positions of stride, padding, dilation, groups; transposed
#: position or -1). cudnn_convolution(input, weight, padding, stride, dilation, groups, ...).
CONV: dict[str, tuple[int, int, int, int, int, int, int]] = {
    "convolution": (0, 1, 3, 4, 5, 8, 6),
    "_convolution": (0, 1, 3, 4, 5, 8, 6),
    "conv1d": (0, 1, 3, 4, 5, 6, -1),
    "conv2d": (0, 1, 3, 4, 5, 6, -1),
    "conv3d": (0, 1, 3, 4, 5, 6, -1),
    "cudnn_convolution": (0, 1, 3, 2, 4, 5, -1),
    "miopen_convolution": (0, 1, 4, 3, 5, 6, -1),
}


def _conv_out(inp: list[int], k: list[int], stride, pad, dil) -> list[int] | None:
    nd = len(k)

    def at(v, i, default):
        if v is None or not v:
            return default
        return v[i] if len(v) == nd else v[0]

    out = []
    for i in range(nd):
        s, p, d = at(stride, i, 1), at(pad, i, 0), at(dil, i, 1)
        o = (inp[i] + 2 * p - d * (k[i] - 1) - 1) // s + 1
        if o <= 0:
            return None
        out.append(o)
    return out


def size_conv(name: str, a: Args) -> OpSize | None:
    """Convolution forward 2·N·Cout·prod(out spatial)·(Cin/groups)·prod(kernel); bytes input + weight (+ bias)
    + output. Output size from stride/padding/dilation in ``Concrete Inputs``; a transposed convolution
    or padding given as a string ('same') is not sized. fp32 runs at TF32 when cuDNN's ``allow_tf32``
    (the last flag of ``cudnn_convolution``) is True.
    """
    ii, wi, st, pd, dl, gi, tr = CONV[name]
    si, sw = a.shape(ii), a.shape(wi)
    if si is None or sw is None or len(si) < 3 or len(si) != len(sw):
        return None
    if tr >= 0 and a.flag(tr):
        return None
    stride, pad, dil = a.ints(st), a.ints(pd), a.ints(dl)
    if pad is None and a.scalar(pd):
        return None  # padding='same' / 'valid' printed as text
    groups = (a.ints(gi) or [1])[0] or 1
    n, cout, kernel = si[0], sw[0], sw[2:]
    spatial = _conv_out(si[2:], kernel, stride, pad, dil)
    if spatial is None:
        return None
    flops = 2.0 * n * cout * math.prod(spatial) * (si[1] // groups) * math.prod(kernel)
    out = n * cout * math.prod(spatial) * a.itemsize(ii)
    dtype = a.dtype(ii)
    if name == "cudnn_convolution" and dtype == "fp32" and a.flag(len(a.concrete) - 1):
        dtype = "tf32"
    return OpSize(flops, sum(a.nbytes(i) for i in a.tensors()) + out, dtype, "conv")


def size_conv_backward(a: Args) -> OpSize | None:
    """convolution_backward(grad_out, input, weight, bias_sizes, stride, padding, dilation, transposed,
    output_padding, groups, output_mask): the forward's FLOPs once per gradient asked for among
    (input, weight) in ``output_mask``; bytes grad_out + input + weight read, the asked gradients written."""
    sg, si, sw = a.shape(0), a.shape(1), a.shape(2)
    mask = a.scalar(10)
    if sg is None or si is None or sw is None or len(si) < 3 or a.flag(7) or not mask:
        return None
    flags = re.findall(r"True|False|1|0", mask)
    if len(flags) < 2:
        return None
    asked = [f in ("True", "1") for f in flags[:3]]
    groups = (a.ints(9) or [1])[0] or 1
    fwd = 2.0 * sg[0] * sg[1] * math.prod(sg[2:]) * (si[1] // groups) * math.prod(sw[2:])
    flops = fwd * (int(asked[0]) + int(asked[1]))
    written = (a.nbytes(1) if asked[0] else 0) + (a.nbytes(2) if asked[1] else 0)
    if len(asked) > 2 and asked[2]:
        written += sw[0] * a.itemsize(2)
    return OpSize(flops, a.nbytes(0) + a.nbytes(1) + a.nbytes(2) + written, a.dtype(0), "conv")
