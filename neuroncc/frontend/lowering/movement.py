"""Lowerings of views and data movement, indexing, and tensor creation.

IR values are logical tensors, so every view lowers to the IR op that computes the same elements (whether it
shares storage is the backend's business; aliasing visible to the user is restored by AOTAutograd's runtime
wrappers). Arguments are normalized here as the IR requires: negative dims made non-negative, slice bounds
clamped, ``-1`` in view shapes resolved (read from the result's metadata).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx

from neuroncc.errors import UnsupportedOpError
from neuroncc.frontend.lowering.context import LoweringContext, meta_value, normalize_dim
from neuroncc.ir import DType, Value

aten = torch.ops.aten
Lowering = Callable[..., Any]


# ---- views ---------------------------------------------------------------------------------------------


def _reshape(ctx: LoweringContext, node: fx.Node, self: Any, size: Any = None) -> Value:
    x, shape = ctx.value(self), ctx.out_shape(node)  # the metadata has -1 resolved
    return x if x.type.shape == shape else ctx.emit("reshape", x, shape=shape)


def _permute(ctx: LoweringContext, node: fx.Node, self: Any, dims: Any) -> Value:
    x = ctx.value(self)
    return ctx.emit("permute", x, dims=tuple(normalize_dim(d, x.type.rank) for d in dims))


def _transpose(ctx: LoweringContext, node: fx.Node, self: Any, dim0: int = 0, dim1: int = 1) -> Value:
    x = ctx.value(self)
    if x.type.rank < 2:
        return x  # t() of a 0-d/1-d tensor is the tensor itself
    order = list(range(x.type.rank))
    a, b = normalize_dim(dim0, x.type.rank), normalize_dim(dim1, x.type.rank)
    order[a], order[b] = order[b], order[a]
    return ctx.emit("permute", x, dims=tuple(order))


def _expand(ctx: LoweringContext, node: fx.Node, self: Any, size: Any, *, implicit: bool = False) -> Value:
    x, shape = ctx.value(self), ctx.out_shape(node)  # -1 ("keep this size") resolved by the metadata
    return x if x.type.shape == shape else ctx.emit("expand", x, shape=shape)


def clamp_slice(size: int, start: int | None, end: int | None) -> tuple[int, int]:
    """Python slice bounds made explicit: negatives count from the end, then clamped to [0, size]."""
    start = 0 if start is None else start
    end = size if end is None else end
    start = start + size if start < 0 else start
    end = end + size if end < 0 else end
    start = min(max(start, 0), size)
    return start, min(max(end, start), size)


def _slice(ctx: LoweringContext, node: fx.Node, self: Any, dim: int = 0, start: int | None = None,
           end: int | None = None, step: int = 1) -> Value:
    x = ctx.value(self)
    d = normalize_dim(dim, x.type.rank)
    lo, hi = clamp_slice(x.type.shape[d], start, end)
    if (lo, hi, step) == (0, x.type.shape[d], 1):
        return x
    return ctx.emit("slice", x, dim=d, start=lo, end=hi, step=step)


def _select(ctx: LoweringContext, node: fx.Node, self: Any, dim: int, index: int) -> Value:
    x = ctx.value(self)
    d = normalize_dim(dim, x.type.rank)
    return ctx.emit("select", x, dim=d, index=index + x.type.shape[d] if index < 0 else index)


def _squeeze(ctx: LoweringContext, node: fx.Node, self: Any, dim: Any = None) -> Value:
    x = ctx.value(self)
    if x.type.rank == 0:
        return x
    dims = range(x.type.rank) if dim is None else [dim] if isinstance(dim, int) else dim
    # aten.squeeze drops only the named dims of size 1 and ignores the others.
    sized_one = tuple(sorted({d for d in (normalize_dim(d, x.type.rank) for d in dims) if x.type.shape[d] == 1}))
    return ctx.emit("squeeze", x, dims=sized_one) if sized_one else x


def _unsqueeze(ctx: LoweringContext, node: fx.Node, self: Any, dim: int) -> Value:
    x = ctx.value(self)
    return ctx.emit("unsqueeze", x, dim=normalize_dim(dim, x.type.rank + 1))


def _as_strided(ctx: LoweringContext, node: fx.Node, self: Any, size: Any, stride: Any,
                storage_offset: int | None = None) -> Value:
    base = ctx.out_meta(self)
    # aten.as_strided addresses the operand's storage; the IR op addresses its logical elements. They agree
    # when the operand is contiguous and starts its storage. A dense permuted layout (LAPACK results are
    # column-major) agrees once the value is permuted into storage order.
    value = ctx.value(self)
    order = sorted(range(base.dim()), key=lambda d: -int(base.stride(d)))
    dense = base.permute(order).is_contiguous() if base.dim() else True
    if not dense or base.storage_offset() != 0:
        raise UnsupportedOpError("as_strided of a non-dense tensor or one with a storage offset")
    if not base.is_contiguous():
        value = ctx.emit("permute", value, dims=tuple(order))
    return ctx.emit("as_strided", value, shape=tuple(size), strides=tuple(stride),
                    offset=int(storage_offset or 0))


# ---- data movement -------------------------------------------------------------------------------------


def _cat(ctx: LoweringContext, node: fx.Node, tensors: Any, dim: int = 0) -> Value:
    dtype = ctx.out_dtype(node)
    rank = len(ctx.out_shape(node))
    # torch.cat skips legacy empty 1-d tensors of any shape mismatch; so do we.
    parts = [t for t in tensors if not (ctx.out_meta(t).dim() == 1 and ctx.out_meta(t).numel() == 0 and rank != 1)]
    return ctx.emit("cat", *ctx.tensors(parts, dtype), dim=normalize_dim(dim, rank))


def _split(ctx: LoweringContext, node: fx.Node, self: Any, split_size: Any, dim: int = 0) -> tuple[Value, ...]:
    x = ctx.value(self)
    d = normalize_dim(dim, x.type.rank)
    sizes = tuple(int(m.shape[d]) for m in meta_value(node))
    results = ctx.emit("split", x, dim=d, sizes=sizes)
    return results if isinstance(results, tuple) else (results,)


def _constant_pad(ctx: LoweringContext, node: fx.Node, self: Any, pad: Any, value: Any = 0) -> Value:
    x = ctx.value(self)
    return ctx.emit("constant_pad", x, pad=tuple(pad), value=ctx.python_scalar(value, x.type.dtype))


def _flip(ctx: LoweringContext, node: fx.Node, self: Any, dims: Any) -> Value:
    x = ctx.value(self)
    return ctx.emit("flip", x, dims=tuple(normalize_dim(d, x.type.rank) for d in dims))


def _slice_scatter(ctx: LoweringContext, node: fx.Node, self: Any, src: Any, dim: int = 0,
                   start: int | None = None, end: int | None = None, step: int = 1) -> Value:
    base = ctx.value(self)
    d = normalize_dim(dim, base.type.rank)
    lo, hi = clamp_slice(base.type.shape[d], start, end)
    return ctx.emit("slice_scatter", base, ctx.operand(src, base.type.dtype), dim=d, start=lo, end=hi, step=step)


def _select_scatter(ctx: LoweringContext, node: fx.Node, self: Any, src: Any, dim: int, index: int) -> Value:
    base = ctx.value(self)
    d = normalize_dim(dim, base.type.rank)
    index = index + base.type.shape[d] if index < 0 else index
    return ctx.emit("select_scatter", base, ctx.operand(src, base.type.dtype), dim=d, index=index)


def _repeat(ctx: LoweringContext, node: fx.Node, self: Any, repeats: Any) -> Value:
    return ctx.emit("repeat", ctx.value(self), repeats=tuple(repeats))


# ---- indexing ------------------------------------------------------------------------------------------


def _gather(ctx: LoweringContext, node: fx.Node, self: Any, dim: int, index: Any, *, sparse_grad: bool = False) -> Value:
    x = ctx.value(self)
    return ctx.emit("gather", x, ctx.value(index), dim=normalize_dim(dim, x.type.rank))


def _scatter(reduce: str) -> Lowering:
    """scatter (src tensor or scalar value) and scatter_add."""
    def lower(ctx: LoweringContext, node: fx.Node, self: Any, dim: int, index: Any, src: Any = None,
              value: Any = None) -> Value:
        x, idx = ctx.value(self), ctx.value(index)
        source = src if src is not None else value
        if isinstance(source, fx.Node):
            values = ctx.operand(source, x.type.dtype)
        else:
            values = ctx.emit("full", shape=idx.type.shape, dtype=x.type.dtype,
                              value=ctx.python_scalar(source, x.type.dtype))
        dim = normalize_dim(dim, x.type.rank)
        if reduce == "add" and x.type.dtype in (DType.bf16, DType.f16):
            # CPU's scatter_add accumulates bf16/f16 in float32 and rounds once (the IR's accumulating
            # write rounds after every add, as index_put's accumulate on CPU): added in f32
            total = ctx.emit("scatter", ctx.cast(x, DType.f32), idx, ctx.cast(values, DType.f32), dim=dim,
                             reduce=reduce)
            return ctx.cast(total, x.type.dtype)
        return ctx.emit("scatter", x, idx, values, dim=dim, reduce=reduce)

    return lower


def _index_select(ctx: LoweringContext, node: fx.Node, self: Any, dim: int, index: Any) -> Value:
    x = ctx.value(self)
    return ctx.emit("index_select", x, ctx.value(index), dim=normalize_dim(dim, x.type.rank))


def _index_operands(ctx: LoweringContext, indices: Any) -> tuple[tuple[int, ...], list[Value]]:
    """aten's index list (None = take the whole dim) as the IR's (dims, index tensors)."""
    dims, values = [], []
    for d, index in enumerate(indices):
        if index is None:
            continue
        if ctx.out_meta(index).dtype is torch.bool:
            raise UnsupportedOpError("boolean-mask indexing (its result shape depends on the data)")
        dims.append(d)
        values.append(ctx.value(index))
    return tuple(dims), values


def _index(ctx: LoweringContext, node: fx.Node, self: Any, indices: Any) -> Value:
    dims, index_values = _index_operands(ctx, indices)
    return ctx.emit("index", ctx.value(self), *index_values, dims=dims)


def _index_put(ctx: LoweringContext, node: fx.Node, self: Any, indices: Any, values: Any,
               accumulate: bool = False) -> Value:
    x = ctx.value(self)
    dims, index_values = _index_operands(ctx, indices)
    return ctx.emit("index_put", x, ctx.operand(values, x.type.dtype), *index_values, dims=dims,
                    accumulate=bool(accumulate))


def _embedding(ctx: LoweringContext, node: fx.Node, weight: Any, indices: Any, padding_idx: int = -1,
               scale_grad_by_freq: bool = False, sparse: bool = False) -> Value:
    return ctx.emit("embedding", ctx.value(weight), ctx.value(indices))


# ---- creation ------------------------------------------------------------------------------------------


def _filled(value_position: int | None, default: float = 0) -> Lowering:
    """Factory ops (full, zeros, ones_like, empty, ...): a constant-filled tensor of the result's shape.

    ``value_position`` is the position of the fill value in the aten schema; ops without one fill with
    ``default`` (``empty``'s contents are unspecified, and zeros are a valid choice).
    """
    names = ("fill_value", "s")

    def lower(ctx: LoweringContext, node: fx.Node, *args: Any, **kwargs: Any) -> Value:
        dtype = ctx.out_dtype(node)
        value = default
        if value_position is not None:
            given = [kwargs[n] for n in names if n in kwargs]
            value = given[0] if given else args[value_position]
        return ctx.full(ctx.out_shape(node), dtype, value)

    return lower


def _arange(ctx: LoweringContext, node: fx.Node, start: Any, end: Any = None, step: Any = 1, **kwargs: Any) -> Value:
    if end is None:  # arange(end)
        start, end = 0, start
    dtype = ctx.out_dtype(node)
    (length,) = ctx.out_shape(node)
    # bool bounds (arange(False, True, True)) count as 0/1, as PyTorch reads them
    start, step = (int(v) if isinstance(v, bool) else v for v in (start, step))
    return ctx.emit("iota", length=length, start=start, step=step, dtype=dtype)


_VIEWS = {
    aten.view.default: _reshape,
    aten._unsafe_view.default: _reshape,
    aten.reshape.default: _reshape,
    aten.view_copy.default: _reshape,
    aten.permute.default: _permute,
    aten.permute_copy.default: _permute,
    aten.transpose.int: _transpose,
    aten.t.default: _transpose,
    aten.expand.default: _expand,
    aten.expand_copy.default: _expand,
    aten.slice.Tensor: _slice,
    aten.slice_copy.Tensor: _slice,
    aten.select.int: _select,
    aten.select_copy.int: _select,
    aten.squeeze.default: _squeeze,
    aten.squeeze.dim: _squeeze,
    aten.squeeze.dims: _squeeze,
    aten.unsqueeze.default: _unsqueeze,
    aten.unsqueeze_copy.default: _unsqueeze,
    aten.as_strided.default: _as_strided,
}

_MOVEMENT = {
    aten.cat.default: _cat,
    aten.split.Tensor: _split,
    aten.split_with_sizes.default: _split,
    aten.constant_pad_nd.default: _constant_pad,
    aten.flip.default: _flip,
    aten.slice_scatter.default: _slice_scatter,
    aten.select_scatter.default: _select_scatter,
    aten.repeat.default: _repeat,
}

_INDEXING = {
    aten.gather.default: _gather,
    aten.scatter.src: _scatter("none"),
    aten.scatter.value: _scatter("none"),
    aten.scatter_add.default: _scatter("add"),
    aten.index_select.default: _index_select,
    aten.index.Tensor: _index,
    aten.index_put.default: _index_put,
    aten.embedding.default: _embedding,
}

_CREATION = {
    aten.full.default: _filled(1),  # full(size, fill_value)
    aten.full_like.default: _filled(1),  # full_like(self, fill_value)
    aten.new_full.default: _filled(2),  # new_full(self, size, fill_value)
    aten.scalar_tensor.default: _filled(0),  # scalar_tensor(s)
    aten.zeros.default: _filled(None, 0),
    aten.zeros_like.default: _filled(None, 0),
    aten.new_zeros.default: _filled(None, 0),
    aten.ones.default: _filled(None, 1),
    aten.ones_like.default: _filled(None, 1),
    aten.new_ones.default: _filled(None, 1),
    aten.empty.memory_format: _filled(None, 0),
    aten.empty_like.default: _filled(None, 0),
    aten.empty_strided.default: _filled(None, 0),
    aten.empty_permuted.default: _filled(None, 0),
    aten.new_empty.default: _filled(None, 0),
    aten.arange.default: _arange,
    aten.arange.start: _arange,
    aten.arange.start_step: _arange,
}

MOVEMENT_LOWERINGS: dict[Any, Lowering] = {**_VIEWS, **_MOVEMENT, **_INDEXING, **_CREATION}
