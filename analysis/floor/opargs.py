"""One operator call's recorded arguments (``Args``) and what sizing it gives (``OpSize``).

Kineto's ``record_shapes`` puts on each CPU op ``Input Dims`` (one shape per argument, ``[]``
for a scalar, a list of shapes for a TensorList), ``Input type`` (``c10::BFloat16``, ``float``,
``Scalar``...) and ``Concrete Inputs`` (scalar arguments as text: ``'True'``, ``'[1, 1]'``,
``'15'`` for a dtype); the dtype tables say what each type costs per element.
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


def broadcast(*shapes: Sequence[int]) -> list[int]:
    """The broadcast of several shapes (numpy's rule); ValueError when they do not broadcast."""
    nd = max((len(s) for s in shapes), default=0)
    out = [1] * nd
    for s in shapes:
        for i, v in enumerate(s, start=nd - len(s)):
            if v != 1:
                if out[i] not in (1, v):
                    raise ValueError("shapes do not broadcast")
                out[i] = v
    return out
