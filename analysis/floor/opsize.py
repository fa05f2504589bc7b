"""FLOPs and bytes of one operator call, from the shapes and dtypes the profiler recorded.

Kineto's ``record_shapes`` puts on each CPU op ``Input Dims`` (one shape per argument, ``[]``
for a scalar, a list of shapes for a TensorList), ``Input type`` (``c10::BFloat16``, ``float``,
``Scalar``...) and ``Concrete Inputs`` (scalar arguments as text: ``'True'``, ``'[1, 1]'``,
``'15'`` for a dtype). ``size_op`` turns one such record into an ``OpSize``; it returns None for
an op it has no formula for, so the op is counted as "no size recorded", never guessed.

Conventions (DESIGN.md, "The hardware floor"):
- a GEMM of an (M×K) by a (K×N) matrix is 2·M·N·K FLOPs (a multiply and an add per term);
  a bias or beta·C term adds no FLOPs; batched GEMMs multiply by the batch;
- attention forward is 4·B·H·Sq·Sk·D (the two GEMMs Q·Kᵀ and P·V; softmax is not counted);
  causal attention counts half; the backward pass is 2.5× the forward (five GEMMs of that size);
- convolution is 2·N·Cout·(output pixels)·(Cin/groups)·(kernel pixels); its backward counts
  that once per gradient asked for (input, weight);
- bytes are each tensor input read once plus each output written once, at its dtype; an in-place
  op's output is its first input; memory-bound ops (elementwise, reductions, norms, softmax,
  copies, embedding) carry bytes and 0 FLOPs: their floor is their traffic.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

#: Bytes per element and the dtype name a GPU spec uses, by the profiler's ``Input type``.
DTYPES: dict[str, tuple[int, str]] = {
    "c10::BFloat16": (2, "bf16"),
    "c10::Half": (2, "fp16"),
    "float": (4, "fp32"),
    "double": (8, "fp64"),
    "c10::Float8_e4m3fn": (1, "fp8"),
    "c10::Float8_e5m2": (1, "fp8"),
    "c10::Float8_e4m3fnuz": (1, "fp8"),
    "c10::Float8_e5m2fnuz": (1, "fp8"),
    "c10::Float8_e8m0fnu": (1, "fp8"),
    "c10::Float4_e2m1fn_x2": (1, "fp4"),
    "long int": (8, "int64"),
    "int": (4, "int32"),
    "short int": (2, "int16"),
    "signed char": (1, "int8"),
    "unsigned char": (1, "uint8"),
    "bool": (1, "bool"),
    "c10::complex<float>": (8, "complex64"),
    "c10::complex<double>": (16, "complex128"),
}
#: The ``Input type`` given to shapes recorded without a dtype (nsys NVTX ranges): FLOPs only, no bytes.
UNKNOWN_TYPE = "?"
DTYPES[UNKNOWN_TYPE] = (0, "")
#: c10::ScalarType numbers as ``Concrete Inputs`` print a ``dtype=`` argument.
SCALAR_TYPES: dict[int, str] = {
    0: "unsigned char",
    1: "signed char",
    2: "short int",
    3: "int",
    4: "long int",
    5: "c10::Half",
    6: "float",
    7: "double",
    11: "bool",
    15: "c10::BFloat16",
    23: "c10::Float8_e5m2",
    24: "c10::Float8_e4m3fn",
    25: "c10::Float8_e5m2fnuz",
    26: "c10::Float8_e4m3fnuz",
}


@dataclass(frozen=True)
class OpSize:
    """What one call does: FLOPs, bytes moved, the dtype its FLOPs run at, the formula used."""

    flops: float
    bytes: float
    dtype: str  # bf16, fp16, fp32, tf32, fp64, fp8, fp4 (or an integer type for memory-only ops)
    formula: str  # "gemm", "attention", "conv", "bytes", ...


@dataclass(frozen=True)
class Args:
    """One op's recorded arguments, aligned by position."""

    dims: Sequence
    types: Sequence[str]
    concrete: Sequence[str]
    strides: Sequence = ()  # ``Input Strides``: a broadcast (stride-0) dimension is stored once

    def shape(self, i: int) -> list[int] | None:
        """The i-th argument's shape when it is one tensor."""
        if i >= len(self.dims) or i >= len(self.types):
            return None
        d, t = self.dims[i], self.types[i]
        if t not in DTYPES or not isinstance(d, list) or any(type(x) is not int or x < 0 for x in d):
            return None  # a shape is a list of non-negative ints; anything else was not recorded as one
        return d

    def itemsize(self, i: int) -> int:
        return DTYPES[self.types[i]][0]

    def dtype(self, i: int) -> str:
        return DTYPES[self.types[i]][1]

    def nbytes(self, i: int) -> int:
        """Bytes a tensor argument occupies: its elements, a stride-0 (expanded) dimension counted once."""
        s = self.shape(i)
        if s is None:
            return 0
        st = self.strides[i] if i < len(self.strides) else None
        if isinstance(st, list) and len(st) == len(s):
            s = [v for v, k in zip(s, st, strict=True) if k != 0]
        return math.prod(s) * self.itemsize(i)

    def tensors(self) -> list[int]:
        """Positions of single-tensor arguments."""
        return [i for i in range(len(self.types)) if self.shape(i) is not None]

    def list_bytes(self, i: int) -> int:
        """Bytes of a TensorList argument (or a single tensor)."""
        if self.shape(i) is not None:
            return self.nbytes(i)
        d = self.dims[i] if i < len(self.dims) else None
        t = self.types[i] if i < len(self.types) else ""
        if t != "TensorList" or not isinstance(d, list):
            return 0
        # A TensorList records shapes, not dtypes: the caller gives the itemsize (see _foreach).
        return sum(math.prod(s) for s in d if isinstance(s, list))

    def scalar(self, i: int) -> str:
        return self.concrete[i].strip() if i < len(self.concrete) and isinstance(self.concrete[i], str) else ""

    def flag(self, i: int) -> bool | None:
        v = self.scalar(i)
        return True if v == "True" else False if v == "False" else None

    def ints(self, i: int) -> list[int] | None:
        v = self.scalar(i)
        if not v:
            return None
        try:
            got = [int(x) for x in re.findall(r"-?\d+", v)]
        except ValueError:
            return None
        return got if got or v == "[]" else None


def _strip(name: str) -> str:
    return name.split("::", 1)[1] if name.startswith("aten::") else name


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
        batch = _broadcast(sa2[:-2], sb2[:-2])
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


def _broadcast(*shapes: Sequence[int]) -> list[int]:
    nd = max((len(s) for s in shapes), default=0)
    out = [1] * nd
    for s in shapes:
        for i, v in enumerate(s, start=nd - len(s)):
            if v != 1:
                if out[i] not in (1, v):
                    raise ValueError("shapes do not broadcast")
                out[i] = v
    return out


#: Elementwise ops: output is the broadcast of the tensor inputs, at the widest input dtype (bool for
#: comparisons). In-place variants (trailing ``_``) write their first input.
ELEMENTWISE = frozenset(
    [
        "add",
        "sub",
        "rsub",
        "mul",
        "div",
        "true_divide",
        "floor_divide",
        "remainder",
        "pow",
        "maximum",
        "minimum",
        "where",
        "masked_fill",
        "lerp",
        "addcmul",
        "addcdiv",
        "relu",
        "relu6",
        "leaky_relu",
        "gelu",
        "silu",
        "sigmoid",
        "tanh",
        "exp",
        "exp2",
        "log",
        "log1p",
        "log2",
        "neg",
        "abs",
        "sqrt",
        "rsqrt",
        "reciprocal",
        "sin",
        "cos",
        "clamp",
        "clamp_min",
        "clamp_max",
        "hardtanh",
        "hardswish",
        "hardsigmoid",
        "elu",
        "softplus",
        "mish",
        "sign",
        "erf",
        "erfinv",
        "threshold",
        "threshold_backward",
        "gelu_backward",
        "silu_backward",
        "sigmoid_backward",
        "tanh_backward",
        "hardswish_backward",
        "softplus_backward",
        "elu_backward",
        "leaky_relu_backward",
        "mse_loss",
        "square",
        "eq",
        "ne",
        "lt",
        "le",
        "gt",
        "ge",
        "logical_and",
        "logical_or",
        "logical_not",
        "bitwise_and",
        "bitwise_or",
        "bitwise_not",
        "isnan",
        "isinf",
        "nan_to_num",
        "triu",
        "tril",
    ]
)
_BOOL_OUT = frozenset(
    ["eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_not", "isnan", "isinf"]
)
#: Ops whose output has its first input's shape (and dtype).
SAME_SHAPE = frozenset(
    [
        "_softmax",
        "softmax",
        "log_softmax",
        "_log_softmax",
        "native_dropout",
        "dropout",
        "_fused_dropout",
        "cumsum",
        "cumprod",
        "flip",
        "roll",
        "clone",
        "contiguous",
        "_log_softmax_backward_data",
        "_softmax_backward_data",
    ]
)
#: Reductions: (dim position, keepdim position).
REDUCTIONS: dict[str, tuple[int, int]] = {
    "sum": (1, 2),
    "mean": (1, 2),
    "amax": (1, 2),
    "amin": (1, 2),
    "argmax": (1, 2),
    "argmin": (1, 2),
    "max": (1, 2),
    "min": (1, 2),
    "prod": (1, 2),
    "var": (1, 3),
    "std": (1, 3),
    "logsumexp": (1, 2),
    "norm": (2, 3),
    "linalg_vector_norm": (2, 3),
    "any": (1, 2),
    "all": (1, 2),
}


def _itemsize_of(type_name: str) -> int:
    return DTYPES.get(type_name, (0, ""))[0]


#: Tensor operands of elementwise ops that take other than two (``where(cond, a, b)``, ``addcmul(s, t1, t2)``);
#: a tensor argument past an op's operands is its ``out=`` tensor: written, not read.
TERNARY = frozenset(["where", "addcmul", "addcdiv", "lerp", "clamp", "threshold_backward", "hardtanh_backward"])
BINARY = frozenset(
    [
        "add", "sub", "rsub", "mul", "div", "true_divide", "floor_divide", "remainder", "pow", "maximum",
        "minimum", "masked_fill", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "bitwise_and",
        "bitwise_or", "mse_loss", "gelu_backward", "silu_backward", "sigmoid_backward", "tanh_backward",
        "hardswish_backward", "softplus_backward", "elu_backward", "leaky_relu_backward",
    ]
)  # fmt: skip


def size_elementwise(name: str, a: Args) -> OpSize | None:
    """Elementwise: bytes = tensor operands read + the output written (the operands' broadcast shape, at the
    widest operand dtype, bool for comparisons); in-place (trailing ``_``): the first operand is the output;
    an ``out=`` tensor past the operands is the output (written, not read)."""
    ts = a.tensors()
    if not ts:
        return None
    base = name.rstrip("_")
    arity = 3 if base in TERNARY else 2 if base in BINARY else 1
    operands, outs = ts[:arity], ts[arity:]
    if name.endswith("_"):
        return OpSize(0.0, sum(a.nbytes(i) for i in operands) + a.nbytes(ts[0]), a.dtype(ts[0]), "bytes")
    if outs:
        return OpSize(0.0, sum(a.nbytes(i) for i in operands) + a.nbytes(outs[0]), a.dtype(ts[0]), "bytes")
    try:
        shape = _broadcast(*(a.shape(i) or [] for i in operands))
    except ValueError:
        return None
    # The result dtype: the widest operand with dimensions (a 0-dim tensor such as a CPU scalar does not
    # promote a dimensioned one; ``where``'s bool mask does not set it either).
    ranked = [i for i in operands if a.shape(i)] or operands
    widest = max(ranked, key=a.itemsize)
    item = 1 if base in _BOOL_OUT else a.itemsize(widest)
    return OpSize(0.0, sum(a.nbytes(i) for i in operands) + math.prod(shape) * item, a.dtype(widest), "bytes")


def size_reduction(name: str, a: Args) -> OpSize | None:
    """Reduction: bytes = input + output, the output's shape from ``dim``/``keepdim`` (all dims when none);
    arg-reductions write int64."""
    s = a.shape(0)
    if s is None:
        return None
    di, ki = REDUCTIONS[name]
    dims = a.ints(di)
    if dims is None and a.scalar(di) and not a.scalar(di).startswith("["):
        return None
    nd = len(s)
    red = set(range(nd)) if not dims else {d % nd for d in dims} if nd else set()
    keep = a.flag(ki) is True
    out = [1 if i in red else v for i, v in enumerate(s) if keep or i not in red]
    item = 8 if name.startswith("arg") else a.itemsize(0)
    if name in ("max", "min") and dims:  # values and indices
        item += 8
    return OpSize(0.0, a.nbytes(0) + math.prod(out) * item, a.dtype(0), "bytes")


def size_same_shape(a: Args) -> OpSize | None:
    """Softmax, dropout, clone...: bytes = tensor inputs + one output of the first input's shape."""
    ts = a.tensors()
    if not ts:
        return None
    return OpSize(0.0, sum(a.nbytes(i) for i in ts) + a.nbytes(ts[0]), a.dtype(ts[0]), "bytes")


def size_norm(name: str, a: Args) -> OpSize | None:
    """layer_norm / rms_norm / batch_norm forward: bytes = tensor inputs (input, weight, bias, running
    stats) + output of the input's shape + the saved statistics (fp32, one per normalised row)."""
    s = a.shape(0)
    if s is None:
        return None
    normalized = a.ints(1) if "layer_norm" in name or "rms_norm" in name else None
    rows = math.prod(s[: len(s) - len(normalized)]) if normalized else (s[1] if len(s) > 1 else 1)
    stats = (2 if "layer_norm" in name or "batch_norm" in name else 1) * rows * 4
    ins = sum(a.nbytes(i) for i in a.tensors())
    return OpSize(0.0, ins + a.nbytes(0) + stats, a.dtype(0), "bytes")


def size_norm_backward(a: Args) -> OpSize | None:
    """layer_norm / batch_norm backward: bytes = tensor inputs + grad_input (the input's shape) + the
    weight and bias gradients (the weight's shape each)."""
    ts = a.tensors()
    if len(ts) < 2:
        return None
    grad_in = a.nbytes(ts[1])
    weights = [i for i in ts[2:] if (a.shape(i) or [0]) and len(a.shape(i) or []) == 1 and a.dtype(i) == a.dtype(0)]
    gw = 2 * a.nbytes(weights[-1]) if weights else 0
    return OpSize(0.0, sum(a.nbytes(i) for i in ts) + grad_in + gw, a.dtype(0), "bytes")


def size_copy(a: Args) -> OpSize | None:
    """copy_(dst, src): src read + dst written (dst is not read)."""
    if a.shape(0) is None or a.shape(1) is None:
        return None
    return OpSize(0.0, a.nbytes(0) + a.nbytes(1), a.dtype(0), "bytes")


def size_to_copy(a: Args) -> OpSize | None:
    """_to_copy(self, dtype, ...): self read + a copy written at ``dtype`` (self's dtype when not given)."""
    s = a.shape(0)
    if s is None:
        return None
    code = a.ints(1)
    out = a.types[0]
    if code and len(code) == 1 and code[0] in SCALAR_TYPES:
        out = SCALAR_TYPES[code[0]]
    return OpSize(0.0, a.nbytes(0) + math.prod(s) * _itemsize_of(out), a.dtype(0), "bytes")


def size_fill(a: Args) -> OpSize | None:
    """fill_ / zero_ / random fills: the tensor written once, nothing read."""
    if a.shape(0) is None:
        return None
    return OpSize(0.0, float(a.nbytes(0)), a.dtype(0), "bytes")


def size_embedding(a: Args) -> OpSize | None:
    """embedding(weight[V,D], indices[...]): indices read + the gathered rows read + the output written
    (numel(indices)·D each); the rest of the table is not touched."""
    sw, si = a.shape(0), a.shape(1)
    if sw is None or si is None or len(sw) != 2:
        return None
    rows = math.prod(si) * sw[1] * a.itemsize(0)
    return OpSize(0.0, a.nbytes(1) + 2 * rows, a.dtype(0), "bytes")


def size_index_select(a: Args) -> OpSize | None:
    """index_select(self, dim, index[n]): index read + the selected slices read + the output written."""
    s, si = a.shape(0), a.shape(2)
    dim = a.ints(1)
    if s is None or si is None or not dim or len(si) > 1:
        return None
    d = dim[0] % len(s)
    out = math.prod([(si[0] if si else 1) if i == d else v for i, v in enumerate(s)]) * a.itemsize(0)
    return OpSize(0.0, a.nbytes(2) + 2 * out, a.dtype(0), "bytes")


def size_gather(a: Args) -> OpSize | None:
    """gather(self, dim, index, ...): index read + one element of self read per index + the output written."""
    s, si = a.shape(0), a.shape(2)
    if s is None or si is None:
        return None
    picked = math.prod(si) * a.itemsize(0)
    return OpSize(0.0, a.nbytes(2) + 2 * picked, a.dtype(0), "bytes")


def size_embedding_backward(a: Args) -> OpSize | None:
    """embedding_dense_backward(grad_out[...,D], indices, num_weights, ...): grad_out + indices read, the
    whole gradient table (num_weights·D) written."""
    sg = a.shape(0)
    nw = a.ints(2)
    if sg is None or a.shape(1) is None or not nw:
        return None
    return OpSize(0.0, a.nbytes(0) + a.nbytes(1) + nw[0] * sg[-1] * a.itemsize(0), a.dtype(0), "bytes")


_FORMULAS = {
    "mm": size_mm,
    "addmm": size_addmm,
    "_addmm_activation": size_addmm,
    "bmm": size_bmm,
    "matmul": size_matmul,
    "linear": size_linear,
    "_scaled_mm": size_scaled_mm,
    "convolution_backward": size_conv_backward,
    "copy_": size_copy,
    "_to_copy": size_to_copy,
    "to": size_to_copy,
    "fill_": size_fill,
    "zero_": size_fill,
    "uniform_": size_fill,
    "normal_": size_fill,
    "bernoulli_": size_fill,
    "random_": size_fill,
    "embedding": size_embedding,
    "index_select": size_index_select,
    "gather": size_gather,
    "embedding_dense_backward": size_embedding_backward,
    "native_layer_norm_backward": size_norm_backward,
    "native_batch_norm_backward": size_norm_backward,
    "cudnn_batch_norm_backward": size_norm_backward,
}
_NORMS = (
    "native_layer_norm",
    "layer_norm",
    "rms_norm",
    "_fused_rms_norm",
    "native_batch_norm",
    "cudnn_batch_norm",
    "batch_norm",
    "_native_batch_norm_legit",
    "_native_batch_norm_legit_no_training",
)


def has_formula(name: str) -> bool:
    """Whether ``size_op`` knows this op (``aten::`` prefix optional)."""
    n = _strip(name)
    return (
        n in _FORMULAS
        or n in ATTENTION
        or n in CONV
        or n in REDUCTIONS
        or n in SAME_SHAPE
        or n in _NORMS
        or n == "baddbmm"
        or n.rstrip("_") in ELEMENTWISE
    )


def size_op(
    name: str, dims: Sequence, types: Sequence[str], concrete: Sequence[str] = (), strides: Sequence = ()
) -> OpSize | None:
    """FLOPs and bytes of one call of ``name`` from its recorded arguments; None when unknown or unreadable."""
    n = _strip(name)
    a = Args(dims or [], types or [], concrete or [], strides or [])
    if UNKNOWN_TYPE in a.types:  # shapes without dtypes: FLOPs of a GEMM, nothing else
        got = _size(n, a) if n in _GEMMS else None
        return OpSize(got.flops, math.nan, "", got.formula) if got is not None and got.flops > 0 else None
    return _size(n, a)


#: Ops whose FLOPs need no dtype and no scalar argument.
_GEMMS = frozenset(["mm", "addmm", "_addmm_activation", "bmm", "baddbmm", "matmul", "linear"])


def _size(n: str, a: Args) -> OpSize | None:
    try:
        if n in _FORMULAS:
            return _FORMULAS[n](a)
        if n == "baddbmm":
            return size_bmm(a, first=1)
        if n in ATTENTION:
            return size_attention(n, a)
        if n in CONV:
            return size_conv(n, a)
        if n in REDUCTIONS:
            return size_reduction(n, a)
        if n in SAME_SHAPE:
            return size_same_shape(a)
        if n in _NORMS:
            return size_norm(n, a)
        if n.rstrip("_") in ELEMENTWISE:
            return size_elementwise(n, a)
    except (TypeError, ValueError, IndexError, KeyError, ZeroDivisionError):
        return None
    return None
