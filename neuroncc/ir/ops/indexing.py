"""Data-dependent addressing: gather, scatter, index_select, index (advanced indexing), index_put, embedding.

Index operands are i64 or i32; negative indices count from the end, out-of-range ones are an error at run
time (as in PyTorch). ``index``/``index_put`` follow ``aten.index.Tensor``: ``dims`` names the dimensions that
carry an index tensor, the index tensors broadcast together, and the indexed dims are replaced by the
broadcast shape (in place when the indexed dims are adjacent, at the front otherwise, as in numpy).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from neuroncc.ir.attrs import Attrs
from neuroncc.ir.dtypes import DType, to_storage
from neuroncc.ir.opdef import AttrSpec, Category, OpDef, Trait, broadcast_shapes, fail, normalize_dim, same_dtype
from neuroncc.ir.types import TensorType


def _check_index_type(op: str, t: TensorType, position: int) -> None:
    if t.dtype.value not in ("i64", "i32"):
        raise fail(op, f"index operand #{position} must be i64 or i32, got {t.dtype.value}")


def _infer_gather(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
    x, index = types
    _check_index_type("gather", index, 1)
    dim = normalize_dim("gather", attrs["dim"], x.rank)
    if index.rank != x.rank and not (x.rank == 0 and index.rank <= 1):
        raise fail("gather", f"index rank {index.rank} must equal input rank {x.rank}")
    if x.rank and any(i > s for d, (i, s) in enumerate(zip(index.shape, x.shape)) if d != dim):
        raise fail("gather", f"index {list(index.shape)} is larger than the input {list(x.shape)} outside dim {dim}")
    return TensorType(index.shape, x.dtype)


def checked_indices(index: np.ndarray, size: int, dim: int) -> np.ndarray:
    """``index`` as int64 with negative entries counted from the end; IndexError for any out of range."""
    index = index.astype(np.int64)
    if index.size and (index.min() < -size or index.max() >= size):
        bad = index[(index < -size) | (index >= size)].reshape(-1)[0]
        raise IndexError(f"index {bad} is out of bounds for dimension {dim} with size {size}")
    return np.where(index < 0, index + size, index)


def _gather(x, index, dim):
    if x.ndim == 0:
        checked_indices(index, 1, 0)
        return np.broadcast_to(x, index.shape).copy()
    dim %= x.ndim
    index = checked_indices(index, x.shape[dim], dim)
    # torch.gather reads only the leading index.shape[d] entries of the other dims
    window = x[tuple(slice(None) if d == dim else slice(0, n) for d, n in enumerate(index.shape))]
    return np.take_along_axis(window, index, axis=dim)


def _infer_scatter(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
    x, index, src = types
    _check_index_type("scatter", index, 1)
    same_dtype("scatter", (x, src))
    normalize_dim("scatter", attrs["dim"], x.rank)
    if attrs["reduce"] not in ("none", "add"):
        raise fail("scatter", f"reduce must be none or add, got {attrs['reduce']!r}")
    if index.rank != x.rank or src.rank != x.rank:
        raise fail("scatter", f"input, index and src must have one rank, got {x.rank}, {index.rank}, {src.rank}")
    if any(i > s for i, s in zip(index.shape, src.shape)):
        raise fail("scatter", f"index {list(index.shape)} is larger than src {list(src.shape)}")
    dim = normalize_dim("scatter", attrs["dim"], x.rank)
    if any(i > s for d, (i, s) in enumerate(zip(index.shape, x.shape)) if d != dim):
        raise fail("scatter", f"index {list(index.shape)} is larger than the input {list(x.shape)} outside dim {dim}")
    return x.contiguous()


def _add_at(out: np.ndarray, key: Any, values: np.ndarray, out_dtype: DType | None) -> None:
    """``np.add.at(out, key, values)``; in bf16/f16 each add rounded, in index order (row-major over the
    values), as PyTorch's CPU kernels accumulate (index_put's accumulate, embedding's backward)."""
    if out_dtype not in (DType.bf16, DType.f16):
        np.add.at(out, key, values)
        return
    positions = np.arange(out.size).reshape(out.shape)[key]
    values = np.broadcast_to(values, positions.shape).reshape(-1)
    positions = positions.reshape(-1)
    order = np.argsort(positions, kind="stable")
    ranks = np.empty(len(positions), dtype=np.int64)  # each add's place among the adds to its position
    sorted_positions = positions[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_positions)) + 1] if len(positions) else np.zeros(0, np.int64)
    group_start = np.repeat(starts, np.diff(np.r_[starts, len(positions)]))
    ranks[order] = np.arange(len(positions)) - group_start
    flat = out.reshape(-1)
    for rank in range(int(ranks.max()) + 1 if len(ranks) else 0):  # one add per position and wave
        chosen = ranks == rank
        where = positions[chosen]
        flat[where] = to_storage(flat[where] + values[chosen], out_dtype)


def _scatter(x, index, src, dim, reduce, out_dtype=None):
    out = x.copy()
    if index.size == 0:
        return out
    if x.ndim == 0:  # one element: index must address it
        checked_indices(index, 1, 0)
        return out + src if reduce == "add" else src.copy()
    dim %= x.ndim
    grids = list(np.indices(index.shape, sparse=True))
    grids[dim] = checked_indices(index, x.shape[dim], dim)
    values = src[tuple(slice(0, n) for n in index.shape)]
    if reduce == "add":
        _add_at(out, tuple(grids), values, out_dtype)
    else:
        out[tuple(grids)] = values
    return out


def _infer_index_select(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
    x, index = types
    _check_index_type("index_select", index, 1)
    if index.rank > 1:
        raise fail("index_select", f"index must be 0-d or 1-d, got {index}")
    dim = normalize_dim("index_select", attrs["dim"], x.rank)
    if x.rank == 0:
        return TensorType((), x.dtype)
    return TensorType(x.shape[:dim] + (index.numel,) + x.shape[dim + 1:], x.dtype)


def _index_select(x, index, dim):
    if x.ndim == 0:
        return x.copy()
    return np.take(x, index.reshape(-1).astype(np.int64), axis=dim)


def index_result_shape(op: str, x: TensorType, dims: tuple[int, ...], indices: tuple[TensorType, ...]) -> tuple[int, ...]:
    if len(dims) != len(indices) or not indices:
        raise fail(op, f"dims {list(dims)} must name one dimension per index tensor ({len(indices)} given)")
    if list(dims) != sorted(set(dims)) or any(not 0 <= d < x.rank for d in dims):
        raise fail(op, f"dims {list(dims)} must be sorted, distinct and within rank {x.rank}")
    for position, t in enumerate(indices):
        if t.dtype.is_bool:
            raise fail(op, "bool mask indices have a data-dependent shape; the front end must refuse them")
        _check_index_type(op, t, position + 2)
    broadcast = broadcast_shapes(op, *(t.shape for t in indices))
    adjacent = list(dims) == list(range(dims[0], dims[0] + len(dims)))
    rest_before = x.shape[: dims[0]] if adjacent else ()
    rest = tuple(s for d, s in enumerate(x.shape) if d not in dims)
    if adjacent:
        rest_after = x.shape[dims[-1] + 1:]
        return rest_before + broadcast + rest_after
    return broadcast + rest


def _numpy_index(rank: int, dims: tuple[int, ...], indices: tuple[np.ndarray, ...]) -> tuple:
    key: list = [slice(None)] * rank
    for d, idx in zip(dims, indices):
        key[d] = idx.astype(np.int64)
    return tuple(key)


def _infer_index(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
    x, *indices = types
    return TensorType(index_result_shape("index", x, attrs["dims"], tuple(indices)), x.dtype)


def _index(x, *indices, dims):
    return x[_numpy_index(x.ndim, dims, indices)]


def _infer_index_put(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
    x, values, *indices = types
    same_dtype("index_put", (x, values))
    target = index_result_shape("index_put", x, attrs["dims"], tuple(indices))
    if broadcast_shapes("index_put", values.shape, target) != target:
        raise fail("index_put", f"values {list(values.shape)} do not broadcast to the indexed shape {list(target)}")
    return x.contiguous()


def _index_put(x, values, *indices, dims, accumulate, out_dtype=None):
    out = x.copy()
    key = _numpy_index(x.ndim, dims, indices)
    if accumulate:
        _add_at(out, key, np.broadcast_to(values, out[key].shape), out_dtype)
    else:
        out[key] = values
    return out


def _infer_embedding(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
    weight, index = types
    _check_index_type("embedding", index, 1)
    if weight.rank != 2:
        raise fail("embedding", f"weight must be 2-d, got {weight}")
    return TensorType(index.shape + weight.shape[1:], weight.dtype)


_WRITE = frozenset({Trait.INDEXED_WRITE})

OPS = (
    OpDef("gather", Category.INDEX, (2, 2), _infer_gather, _gather, {"dim": AttrSpec("int")},
          "out[i][j] = x[index[i][j]][j] (dim 0), as torch.gather"),
    OpDef("scatter", Category.INDEX, (3, 3), _infer_scatter, _scatter,
          {"dim": AttrSpec("int"), "reduce": AttrSpec("str", "none")},
          "copy of x with src written (or added, reduce=add) at index along dim", traits=_WRITE,
          wants_out_dtype=True),
    OpDef("index_select", Category.INDEX, (2, 2), _infer_index_select, _index_select, {"dim": AttrSpec("int")},
          "rows of x along dim picked by a 1-d index"),
    OpDef("index", Category.INDEX, (2, None), _infer_index, _index, {"dims": AttrSpec("ints")},
          "advanced indexing x[..., i0, ..., i1, ...] (aten.index.Tensor)"),
    OpDef("index_put", Category.INDEX, (3, None), _infer_index_put, _index_put,
          {"dims": AttrSpec("ints"), "accumulate": AttrSpec("bool", False)},
          "copy of x with values written (or accumulated) at advanced indices", traits=_WRITE,
          wants_out_dtype=True),
    OpDef("embedding", Category.INDEX, (2, 2), _infer_embedding,
          lambda w, idx: w[idx.astype(np.int64)], {}, "weight[indices] (embedding lookup)"),
)
