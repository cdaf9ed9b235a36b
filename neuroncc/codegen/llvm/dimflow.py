"""Dim flow: which outer loop dim each dim of an operand carries, given the dims of the op's result.

The scheduler follows a stage's loop dims down through computed ops to the buffers they read; a buffer
written earlier in the same phase may only be read at the reader's own outer index. One rule per op kind;
-1 marks a dim whose index is not the result's (offset, strided, data-dependent or unknown).
:func:`outer_dims_preserved` is that walk.
"""

from __future__ import annotations

from collections.abc import Mapping

from neuroncc.codegen.llvm.kernel_plan import Computed
from neuroncc.codegen.llvm.views import Layout
from neuroncc.ir.graph import Op, Value
from neuroncc.ir.opdef import Category
from neuroncc.ir.ops import REGISTRY
from neuroncc.ir.types import TensorType


def _broadcast_dims(result: TensorType, operand: TensorType, dims: tuple[int, ...]) -> tuple[int, ...]:
    offset = result.rank - operand.rank
    return tuple(dims[d + offset] if operand.shape[d] == result.shape[d + offset] else -1
                 for d in range(operand.rank))


def operand_dim_maps(op: Op, index: int, dims: tuple[int, ...]) -> list[tuple[int, ...]]:
    """For each operand, which outer dim each of its dims carries given the result's map (-1: none/unknown)."""
    result = op.results[index].type
    name, attrs = op.name, op.attrs
    types = [v.type for v in op.operands]
    unknown = [tuple([-1] * t.rank) for t in types]
    category = REGISTRY.get(name).category
    if category is Category.ELEMENTWISE or name in ("copy", "expand"):
        return [_broadcast_dims(result, t, dims) for t in types]
    if name == "reshape":
        (t,) = types
        return [tuple(dims[d] if d < result.rank and t.shape[: d + 1] == result.shape[: d + 1] else -1
                      for d in range(t.rank))]
    if name == "permute":
        out = [-1] * types[0].rank
        for k, d in enumerate(attrs["dims"]):
            out[d] = dims[k]
        return [tuple(out)]
    if name == "slice_scatter":
        dim = attrs["dim"] % result.rank
        aligned = attrs["start"] == 0 and attrs["step"] == 1
        return [dims, dims if aligned else dims[:dim] + (-1,) + dims[dim + 1:]]
    if name in ("slice", "split", "constant_pad", "flip", "repeat"):
        moved = _moved_dims(op, index)
        t = types[0]
        offset = result.rank - t.rank
        return [tuple(-1 if d in moved else dims[d + offset] for d in range(t.rank))]
    if name in ("select", "select_scatter"):
        dim = attrs["dim"] % types[0].rank
        base = dims if name == "select_scatter" else dims[:dim] + (-1,) + dims[dim:]
        maps = [tuple(base)]
        if name == "select_scatter":
            maps.append(dims[:dim] + dims[dim + 1:])
        return maps
    if name == "squeeze":
        t = types[0]
        dropped = {d % t.rank for d in attrs["dims"]} if t.rank else set()
        it = iter(dims)
        return [tuple(-1 if d in dropped else next(it) for d in range(t.rank))]
    if name == "unsqueeze":
        dim = attrs["dim"] % (types[0].rank + 1)
        return [dims[:dim] + dims[dim + 1:]]
    if name == "cat":
        dim = attrs["dim"] % result.rank
        return [dims if i == 0 else dims[:dim] + (-1,) + dims[dim + 1:] for i in range(len(types))]
    if name == "gather":
        dim = attrs["dim"] % max(result.rank, 1)
        x_dims = dims[:dim] + (-1,) + dims[dim + 1:] if types[0].rank else ()
        return [x_dims, dims]
    if name == "index_select":
        if not types[0].rank:
            return [(), tuple([-1] * types[1].rank)]
        dim = attrs["dim"] % types[0].rank
        return [dims[:dim] + (-1,) + dims[dim + 1:], tuple([-1] * types[1].rank)]
    if name == "embedding":
        return [(-1, dims[-1]), dims[: types[1].rank]]
    return unknown


def _moved_dims(op: Op, index: int) -> set[int]:
    """Dims of operand 0 whose index differs from the result's (offset, stride or wrap)."""
    name, attrs = op.name, op.attrs
    rank = op.operands[0].type.rank
    if name == "slice":
        dim = attrs["dim"] % rank
        return set() if attrs["start"] == 0 and attrs["step"] == 1 else {dim}
    if name == "split":
        return set() if index == 0 else {attrs["dim"] % rank}
    if name == "constant_pad":
        pad = attrs["pad"]
        return {rank - 1 - i for i in range(len(pad) // 2) if pad[2 * i] != 0}
    if name == "flip":
        return {d % rank for d in attrs["dims"]}
    if name == "repeat":
        repeats = attrs["repeats"]
        offset = len(repeats) - rank
        return {d for d in range(rank) if repeats[d + offset] != 1}
    return set(range(rank))


def outer_dims_preserved(access: Mapping[Value, Layout | Computed], value: Value, dims: tuple[int, ...], k: int,
                         written: set[int], visited: set) -> bool:
    """Whether ``value`` reads the buffers in ``written`` only at its own outer index: follows the outer dim
    ids (``dims[d]`` = outer dim carried by dim d of ``value``, or -1) down through the computed ops of
    ``access`` to the buffers, where each of the first ``k`` outer dims must be read by its own dim."""
    key = (value, dims)
    if key in visited:
        return True
    visited.add(key)
    where = access[value]
    if isinstance(where, Layout):
        if where.arg not in written:
            return True
        return all(j < len(dims) and dims[j] == j for j in range(k))
    op = where.op
    for operand, operand_dims in zip(op.operands, operand_dim_maps(op, where.index, dims)):
        if not outer_dims_preserved(access, operand, operand_dims, k, written, visited):
            return False
    return True
