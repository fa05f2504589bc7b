"""A recorded CPU op's arguments in its detail string, and read back: what the floor sizes an op from.

``record_shapes`` puts on each op ``Input Dims``, ``Input type``, ``Concrete Inputs`` and ``Input
Strides`` (``with_flops`` adds ``flops``). The detail keeps them in one line, the dims first as
they always read (``Input Dims [[64, 2048], [2048, 2048]]``, what the summary's input shapes and
the details panel show), then each other argument present as its key and its JSON value::

    Input Dims [[64, 2048], []]  Input type ["c10::BFloat16", "Scalar"]  Concrete Inputs ["", "1"]
    Input Strides [[2048, 1], []]  flops 262144

(one line; wrapped here). Ops with the same arguments share one detail, so a trace holds each
distinct call signature once (options_all: 354 against its 208 distinct dims). ``op_args`` reads
it back without the trace's file: the floor never parses the JSON a second time (issue 31).
"""

from __future__ import annotations

import ast
import json
import math
from decimal import Decimal

import orjson

from gaplens.loaders.kineto.fields import number_text

DIMS = "Input Dims"
#: The arguments kept after the dims, in this order; each value is JSON.
EXTRA_KEYS = ("Input type", "Concrete Inputs", "Input Strides", "flops")
SEP = "  "  # between arguments, as kernel details separate theirs
_HEADS = tuple(f"{SEP}{key} " for key in EXTRA_KEYS)
_DECODER = json.JSONDecoder()


def op_detail(
    dims: str,
    types: list | None = None,
    concrete: list | None = None,
    strides: str | None = None,
    flops: float | None = None,
) -> str:
    """The detail of a CPU op: ``dims`` (its ``Input Dims ...`` text) and the other arguments given.

    ``types`` and ``concrete`` are lists of strings (or None), ``strides`` a ``dims.list_text``. Dims text
    that could be taken for the start of another argument (strings in a hostile trace's dims) keeps
    the dims alone: the others could not be read back apart from it.
    """
    if any(head in dims for head in _HEADS):
        return dims
    parts = [dims]
    if types is not None:
        parts.append(f"{EXTRA_KEYS[0]} {json.dumps(types)}")
    if concrete is not None:
        parts.append(f"{EXTRA_KEYS[1]} {json.dumps(concrete)}")
    if strides is not None:
        parts.append(strides)
    if flops is not None and math.isfinite(flops):
        parts.append(f"{EXTRA_KEYS[3]} {number_text(flops)}")
    return SEP.join(parts)


def string_list(value) -> list | None:
    """A list of strings (or nulls) as Arrow reads ``Input type`` / ``Concrete Inputs``; None for anything else."""
    if isinstance(value, list) and all(v is None or isinstance(v, str) for v in value):
        return value
    return None


def flops_value(value) -> float | None:
    """A ``flops`` number as Arrow reads it (float64); None for anything else."""
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


def dims_part(detail: str) -> str:
    """The ``Input Dims ...`` text of an op's detail, without the arguments after it."""
    cut = min((at for head in _HEADS if (at := detail.find(head)) >= 0), default=len(detail))
    return detail[:cut]


def op_args(detail: str) -> dict:
    """The arguments an op's detail keeps, decoded: ``{"Input Dims": [...], "Input type": [...], ...}``.

    Dims that do not decode (a hostile trace's text) read as none recorded, so the op is unsized.
    """
    if not detail.startswith(f"{DIMS} "):
        return {}
    dims = dims_part(detail)
    args: dict = {DIMS: _decode_dims(dims[len(DIMS) + 1 :])}
    at = len(dims)
    while at < len(detail):
        key = next((k for k, h in zip(EXTRA_KEYS, _HEADS, strict=True) if detail.startswith(h, at)), None)
        if key is None:
            break
        try:
            args[key], at = _DECODER.raw_decode(detail, at + len(SEP) + len(key) + 1)
        except (ValueError, RecursionError):
            break
    return args


def _decode_dims(text: str):
    try:
        return orjson.loads(text)  # the byte scan's text: lists of integers
    except orjson.JSONDecodeError:
        pass
    try:
        return ast.literal_eval(text)  # Python's print of a decoded value (``dims.dims_text``)
    except (ValueError, SyntaxError, RecursionError, MemoryError):
        return []
