"""Ops that create tensors from attributes alone: constant, full, iota; and the fused-kernel region op.

``constant`` holds a :class:`DenseAttr` (printed inline when small, as a named resource when large).
``kernel`` owns one region (a nested function isolated from above) produced by the fusion pass; its
semantics are the region's, so the interpreter runs the region. Its other attributes are scheduling
decisions that never change the result, made by the layout and tile passes and obeyed by the code
generators (docs/passes.md): ``target`` and ``domain`` (the iteration space: the shape of the region's
largest value); NKI: ``partition_dim`` (the domain dim on the partitions), ``tile`` (``[partitions, free]``:
partitions per block, elements of the innermost free dim per tile), ``sbuf_budget`` (SBUF bytes per
partition one loop iteration's tiles may take), ``matmul_tile`` (``[m, n, k]``, the TensorE tile) and
``matmul_blocks`` (``[tiles_m, tiles_n, tiles_k]`` per SBUF block), ``matmul_k_group`` (``g``: each group of ``g`` K
tiles laid partition-major, its element ``p * g + j`` on partition ``p`` of K tile ``j``; 0 or 1: K in
order); CPU: ``vector_width`` (float32 lanes of
the widest vectors), ``inner_block`` (elements of a long innermost dim per parallel iteration) and
``matmul_tile`` (``[rows, n, k]``: output rows per block of a matmul and its epilogue). Empty / zero / none
means "not chosen". NKI values beyond the target's hardware limits do not verify.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from neuroncc.hardware import neuron_core
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


def _check_kernel(attrs: Attrs) -> None:
    """Sizes of the scheduling decisions, and the hardware limits of an NKI target."""
    for key, count in (("tile", 2), ("matmul_tile", 3), ("matmul_blocks", 3)):
        value = attrs[key]
        if value and (len(value) != count or min(value) < 0):
            raise fail("kernel", f"{key} must be {count} non-negative sizes, got {list(value)}")
    for key in ("vector_width", "inner_block", "sbuf_budget", "matmul_k_group"):
        if attrs[key] < 0:
            raise fail("kernel", f"{key} must not be negative, got {attrs[key]}")
    group, blocks = attrs["matmul_k_group"], attrs["matmul_blocks"]
    if group > 1 and (not blocks or blocks[2] % group):
        raise fail("kernel", f"matmul_k_group {group} does not divide the K block's {list(blocks)[2:]} tiles")
    partition, domain = attrs["partition_dim"], attrs["domain"]
    if partition is not None and domain and not 0 <= partition < len(domain):
        raise fail("kernel", f"partition_dim {partition} is not a dim of domain {list(domain)}")
    # the NeuronCore tables only for a kernel that may name a NeuronCore: a warm start parsing its cpu kernels
    # never loads them
    core = neuron_core(attrs["target"])
    if core is None:
        return
    limits = [("tile", 0, core.partitions, "partitions"), ("matmul_tile", 0, core.stationary_free, "stationary"),
              ("matmul_tile", 1, core.psum_free_fp32, "moving (one PSUM bank)"),
              ("matmul_tile", 2, core.contraction, "contraction")]
    for key, index, limit, what in limits:
        if attrs[key] and attrs[key][index] > limit:
            raise fail("kernel", f"{key} {list(attrs[key])}: {what} {attrs[key][index]} exceeds {core.name}'s {limit}")
    if attrs["sbuf_budget"] > core.sbuf_partition_bytes:
        raise fail("kernel", f"sbuf_budget {attrs['sbuf_budget']} exceeds {core.name}'s "
                             f"{core.sbuf_partition_bytes} bytes of SBUF per partition")


OPS = (
    OpDef("constant", Category.CONSTANT, (0, 0), _infer_constant, lambda value: value.array,
          {"value": AttrSpec("dense")}, "a constant tensor", traits=frozenset({Trait.STORED}),
          splat=lambda attrs: array_splat(attrs["value"].array)),
    OpDef("full", Category.CONSTANT, (0, 0), _infer_full, _full,
          {"shape": AttrSpec("ints"), "dtype": AttrSpec("dtype"), "value": AttrSpec("number")},
          "a tensor filled with one value (c64: that real value, imaginary part 0)", takes_complex=True,
          splat=lambda attrs: attrs["value"]),
    OpDef("iota", Category.CONSTANT, (0, 0), _infer_iota, _iota,
          {"length": AttrSpec("int"), "start": AttrSpec("number", 0), "step": AttrSpec("number", 1),
           "dtype": AttrSpec("dtype")},
          "start + step * [0, 1, ..., length-1] (torch.arange)", splat=_iota_splat),
    OpDef("kernel", Category.KERNEL, (0, None), lambda types, attrs: (), None,
          {"name": AttrSpec("str"), "target": AttrSpec("str", "any"),
           "domain": AttrSpec("ints", ()), "partition_dim": AttrSpec("optional-int", None),
           "tile": AttrSpec("ints", ()), "sbuf_budget": AttrSpec("int", 0),
           "matmul_tile": AttrSpec("ints", ()), "matmul_blocks": AttrSpec("ints", ()),
           "matmul_k_group": AttrSpec("int", 0),
           "vector_width": AttrSpec("int", 0), "inner_block": AttrSpec("int", 0)},
          "a fused kernel: runs its region on the operands", check_attrs=_check_kernel),
)
