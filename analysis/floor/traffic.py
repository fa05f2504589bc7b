"""Sizes of the memory-bound ops: elementwise, reductions, norms, softmax, copies, fills, gathers.

They carry bytes and 0 FLOPs: their floor is their traffic. Bytes are each tensor input read once plus
each output written once, at its dtype; an in-place op's output is its first input.
"""

from __future__ import annotations

import math

from gaplens.analysis.floor.opargs import DTYPES, SCALAR_TYPES, Args, OpSize, broadcast

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
        shape = broadcast(*(a.shape(i) or [] for i in operands))
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
