"""Dim flow: which outer loop dim each dim of an operand carries, given the dims of the op's result.

The scheduler follows a stage's loop dims down through computed ops to the buffers they read; a buffer
written earlier in the same phase may only be read at the reader's own outer index. One rule per op
(:data:`DIM_FLOW`; pointwise ops share the broadcast rule); -1 marks a dim whose index is not the result's
(offset, strided, data-dependent or unknown). :func:`outer_dims_preserved` is that walk.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from neuroncc.codegen.llvm.kernel_plan import Computed
from neuroncc.codegen.llvm.views import Layout
from neuroncc.ir.graph import Op, Value
from neuroncc.ir.opdef import Trait
from neuroncc.ir.types import TensorType

#: (op, result number, the result's dims, operand types) -> each operand's dims
DimFlow = Callable[[Op, int, tuple[int, ...], list[TensorType]], list[tuple[int, ...]]]


def _broadcast_dims(result: TensorType, operand: TensorType, dims: tuple[int, ...]) -> tuple[int, ...]:
    offset = result.rank - operand.rank
    return tuple(dims[d + offset] if operand.shape[d] == result.shape[d + offset] else -1
                 for d in range(operand.rank))


def _broadcast(op: Op, index: int, dims: tuple[int, ...], types: list[TensorType]) -> list[tuple[int, ...]]:
    """Operands read at the broadcast of the result's index (pointwise ops, expand)."""
    result = op.results[index].type
    return [_broadcast_dims(result, t, dims) for t in types]


def _reshape(op: Op, index: int, dims: tuple[int, ...], types: list[TensorType]) -> list[tuple[int, ...]]:
    result = op.results[index].type
    (t,) = types
    return [tuple(dims[d] if d < result.rank and t.shape[: d + 1] == result.shape[: d + 1] else -1
                  for d in range(t.rank))]


def _permute(op: Op, index: int, dims: tuple[int, ...], types: list[TensorType]) -> list[tuple[int, ...]]:
    out = [-1] * types[0].rank
    for k, d in enumerate(op.attrs["dims"]):
        out[d] = dims[k]
    return [tuple(out)]


def _slice_scatter(op: Op, index: int, dims: tuple[int, ...], types: list[TensorType]) -> list[tuple[int, ...]]:
    attrs = op.attrs
    dim = attrs["dim"] % op.results[index].type.rank
    aligned = attrs["start"] == 0 and attrs["step"] == 1
    return [dims, dims if aligned else dims[:dim] + (-1,) + dims[dim + 1:]]


def _moving(moved: Callable[[Op, int, int], set[int]]) -> DimFlow:
    """Ops reading operand 0 at the result's index except along the dims ``moved(op, index, rank)`` names
    (offset, stride or wrap)."""
    def flow(op: Op, index: int, dims: tuple[int, ...], types: list[TensorType]) -> list[tuple[int, ...]]:
        t = types[0]
        gone = moved(op, index, t.rank)
        offset = op.results[index].type.rank - t.rank
        return [tuple(-1 if d in gone else dims[d + offset] for d in range(t.rank))]

    return flow


def _slice_moved(op: Op, index: int, rank: int) -> set[int]:
    return set() if op.attrs["start"] == 0 and op.attrs["step"] == 1 else {op.attrs["dim"] % rank}


def _split_moved(op: Op, index: int, rank: int) -> set[int]:
    return set() if index == 0 else {op.attrs["dim"] % rank}


def _pad_moved(op: Op, index: int, rank: int) -> set[int]:
    pad = op.attrs["pad"]
    return {rank - 1 - i for i in range(len(pad) // 2) if pad[2 * i] != 0}


def _flip_moved(op: Op, index: int, rank: int) -> set[int]:
    return {d % rank for d in op.attrs["dims"]}


def _repeat_moved(op: Op, index: int, rank: int) -> set[int]:
    repeats = op.attrs["repeats"]
    offset = len(repeats) - rank
    return {d for d in range(rank) if repeats[d + offset] != 1}


def _select(op: Op, index: int, dims: tuple[int, ...], types: list[TensorType]) -> list[tuple[int, ...]]:
    dim = op.attrs["dim"] % types[0].rank
    return [dims[:dim] + (-1,) + dims[dim:]]


def _select_scatter(op: Op, index: int, dims: tuple[int, ...], types: list[TensorType]) -> list[tuple[int, ...]]:
    dim = op.attrs["dim"] % types[0].rank
    return [dims, dims[:dim] + dims[dim + 1:]]


def _squeeze(op: Op, index: int, dims: tuple[int, ...], types: list[TensorType]) -> list[tuple[int, ...]]:
    t = types[0]
    dropped = {d % t.rank for d in op.attrs["dims"]} if t.rank else set()
    it = iter(dims)
    return [tuple(-1 if d in dropped else next(it) for d in range(t.rank))]


def _unsqueeze(op: Op, index: int, dims: tuple[int, ...], types: list[TensorType]) -> list[tuple[int, ...]]:
    dim = op.attrs["dim"] % (types[0].rank + 1)
    return [dims[:dim] + dims[dim + 1:]]


def _cat(op: Op, index: int, dims: tuple[int, ...], types: list[TensorType]) -> list[tuple[int, ...]]:
    dim = op.attrs["dim"] % op.results[index].type.rank
    return [dims if i == 0 else dims[:dim] + (-1,) + dims[dim + 1:] for i in range(len(types))]


def _gather(op: Op, index: int, dims: tuple[int, ...], types: list[TensorType]) -> list[tuple[int, ...]]:
    dim = op.attrs["dim"] % max(op.results[index].type.rank, 1)
    x_dims = dims[:dim] + (-1,) + dims[dim + 1:] if types[0].rank else ()
    return [x_dims, dims]


def _index_select(op: Op, index: int, dims: tuple[int, ...], types: list[TensorType]) -> list[tuple[int, ...]]:
    if not types[0].rank:
        return [(), tuple([-1] * types[1].rank)]
    dim = op.attrs["dim"] % types[0].rank
    return [dims[:dim] + (-1,) + dims[dim + 1:], tuple([-1] * types[1].rank)]


def _embedding(op: Op, index: int, dims: tuple[int, ...], types: list[TensorType]) -> list[tuple[int, ...]]:
    return [(-1, dims[-1]), dims[: types[1].rank]]


#: Op -> its dim-flow rule (one entry per op; pointwise ops use the broadcast rule, unlisted ops none).
DIM_FLOW: dict[str, DimFlow] = {
    "expand": _broadcast,
    "reshape": _reshape,
    "permute": _permute,
    "slice_scatter": _slice_scatter,
    "slice": _moving(_slice_moved),
    "split": _moving(_split_moved),
    "constant_pad": _moving(_pad_moved),
    "flip": _moving(_flip_moved),
    "repeat": _moving(_repeat_moved),
    "select": _select,
    "select_scatter": _select_scatter,
    "squeeze": _squeeze,
    "unsqueeze": _unsqueeze,
    "cat": _cat,
    "gather": _gather,
    "index_select": _index_select,
    "embedding": _embedding,
}


def operand_dim_maps(op: Op, index: int, dims: tuple[int, ...]) -> list[tuple[int, ...]]:
    """For each operand, which outer dim each of its dims carries given the result's map (-1: none/unknown)."""
    types = [v.type for v in op.operands]
    rule = _broadcast if op.has(Trait.POINTWISE) else DIM_FLOW.get(op.name)
    if rule is None:
        return [tuple([-1] * t.rank) for t in types]
    return rule(op, index, dims, types)


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
