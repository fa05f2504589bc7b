"""FLOPs and bytes of one operator call, from the shapes and dtypes the profiler recorded.

``size_op`` turns one record (``opargs.Args``: ``Input Dims``, ``Input type``, ``Concrete Inputs``) into
an ``OpSize`` by its op's formula: the ops that do math in ``flops`` (GEMMs, attention, convolution),
the memory-bound ones in ``traffic`` (bytes only). It returns None for an op it has no formula for, so
the op is counted as "no size recorded", never guessed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gaplens.analysis.floor.flops import (
    ATTENTION,
    CONV,
    size_addmm,
    size_attention,
    size_bmm,
    size_conv,
    size_conv_backward,
    size_linear,
    size_matmul,
    size_mm,
    size_scaled_mm,
)
from gaplens.analysis.floor.opargs import UNKNOWN_TYPE, Args, OpSize
from gaplens.analysis.floor.traffic import (
    ELEMENTWISE,
    REDUCTIONS,
    SAME_SHAPE,
    size_copy,
    size_elementwise,
    size_embedding,
    size_embedding_backward,
    size_fill,
    size_gather,
    size_index_select,
    size_norm,
    size_norm_backward,
    size_reduction,
    size_same_shape,
    size_to_copy,
)


def _strip(name: str) -> str:
    return name.split("::", 1)[1] if name.startswith("aten::") else name


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
