"""Ops that create tensors from attributes alone: constant, full, iota; and the fused-kernel region op.

``constant`` holds a :class:`DenseAttr` (printed inline when small, as a named resource when large).
``kernel`` owns one region (a nested function isolated from above) produced by the fusion pass; its
semantics are the region's, so the interpreter runs the region. Its other attributes are scheduling
annotations that never change the result (see docs/passes.md): ``domain`` (the iteration space: the shape of
the region's largest value), ``partition_dim`` (NKI: the domain dim laid on the 128 partitions, chosen by the
layout pass), ``tile`` (block per domain dim), ``vector_width`` (CPU lanes), ``matmul_tile`` ([m, n, k] block
of the region's matmul) and ``sbuf_bytes`` (NKI: SBUF bytes per partition of the live tiles), set by the
tile pass. Empty / zero / none means "not chosen".
"""

from __future__ import annotations

from typing import Any

import numpy as np

from neuroncc.ir.attrs import Attrs
from neuroncc.ir.opdef import AttrSpec, Category, OpDef, Trait, check_scalar, fail
from neuroncc.ir.types import TensorType


def _infer_constant(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
    return attrs["value"].type


def array_splat(array: np.ndarray) -> Any:
    """The one value all elements of ``array`` hold (NaN counts as equal to NaN), or None."""
    if array.size == 0:
        return None
    first = array.reshape(-1)[0]
    same = array == first
    if array.dtype.kind == "f" and np.isnan(first):
        same = np.isnan(array)
    return first.item() if bool(np.all(same)) else None


def _infer_full(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
    shape, dtype, value = attrs["shape"], attrs["dtype"], attrs["value"]
    if any(s < 0 for s in shape):
        raise fail("full", f"negative size in shape {list(shape)}")
    check_scalar("full", "value", value, dtype)
    return TensorType(shape, dtype)


def _full(shape, dtype, value):
    return np.full(shape, value, dtype=dtype.compute)


def _infer_iota(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
    if attrs["length"] < 0:
        raise fail("iota", f"length must be non-negative, got {attrs['length']}")
    return TensorType((attrs["length"],), attrs["dtype"])


def _iota(length, start, step, dtype):
    return (start + step * np.arange(length, dtype=np.float64)).astype(dtype.compute)


def _iota_splat(attrs: Attrs) -> Any:
    """The one element of a length-1 iota (its start, in its element type)."""
    return _iota(1, attrs["start"], attrs["step"], attrs["dtype"])[0].item() if attrs["length"] == 1 else None


OPS = (
    OpDef("constant", Category.CONSTANT, (0, 0), _infer_constant, lambda value: value.array,
          {"value": AttrSpec("dense")}, "a constant tensor", traits=frozenset({Trait.STORED}),
          splat=lambda attrs: array_splat(attrs["value"].array)),
    OpDef("full", Category.CONSTANT, (0, 0), _infer_full, _full,
          {"shape": AttrSpec("ints"), "dtype": AttrSpec("dtype"), "value": AttrSpec("number")},
          "a tensor filled with one value", splat=lambda attrs: attrs["value"]),
    OpDef("iota", Category.CONSTANT, (0, 0), _infer_iota, _iota,
          {"length": AttrSpec("int"), "start": AttrSpec("number", 0), "step": AttrSpec("number", 1),
           "dtype": AttrSpec("dtype")},
          "start + step * [0, 1, ..., length-1] (torch.arange)", splat=_iota_splat),
    OpDef("kernel", Category.KERNEL, (0, None), lambda types, attrs: (), None,
          {"name": AttrSpec("str"), "target": AttrSpec("str", "any"),
           "domain": AttrSpec("ints", ()), "partition_dim": AttrSpec("optional-int", None),
           "tile": AttrSpec("ints", ()), "vector_width": AttrSpec("int", 0),
           "matmul_tile": AttrSpec("ints", ()), "sbuf_bytes": AttrSpec("int", 0)},
          "a fused kernel: runs its region on the operands"),
)
