"""Indexing and scatter ops added for OpInfo coverage, written with the IR's gather/scatter/index ops.

Reductions that scatter several values into one slot (``scatter_reduce`` amax/amin/prod, ``index_reduce``,
``segment_reduce``) have no IR op: they are written as one dense reduction over a one-hot mask
``hit[.., k, m, ..] = (index[.., k, ..] == m)``, so every target gets them from ops it already has. The mask
is O(index elements x destination length); larger problems decline (and stay refused) rather than exhaust
memory. NaN propagates as in eager (amax/amin propagate NaN; a masked-out slot holds the reduction's
identity, so only the values that hit a slot take part in its result).

Ops whose result shape is data dependent (nonzero, masked_select, unique, ...) are not here: they stay
refused by name. ``nonzero_static`` and ``masked_scatter`` have static shapes and are written with a cumsum
(the masked-triangle scan of :mod:`neuroncc.frontend.lowering.coverage`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

aten = torch.ops.aten

#: Elements the one-hot mask of a dense scatter-reduction may hold; beyond it the decomposition declines.
DENSE_LIMIT = 1 << 22

_REDUCERS: dict[str, Callable[[torch.Tensor, int], torch.Tensor]] = {
    "amax": lambda t, dim: torch.amax(t, dim),
    "amin": lambda t, dim: torch.amin(t, dim),
    "prod": lambda t, dim: torch.prod(t, dim),
    "sum": lambda t, dim: torch.sum(t, dim),
}

#: How a slot's own value combines with the reduction of what was scattered into it (include_self=True).
_COMBINE: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "amax": torch.maximum,  # NaN on either side propagates, as eager's scatter max
    "amin": torch.minimum,
    "prod": torch.mul,
    "sum": torch.add,
}


def _identity(reduce: str, dtype: torch.dtype) -> float | int:
    """The value a masked-out element contributes: neutral for the reduction."""
    if reduce in ("amax", "amin"):
        sign = -1 if reduce == "amax" else 1
        if dtype.is_floating_point:
            return sign * math.inf
        info = torch.iinfo(dtype) if dtype is not torch.bool else None
        return (info.min if sign < 0 else info.max) if info else int(sign > 0)
    return 1 if reduce == "prod" else 0


def _one_hot(index: torch.Tensor, dim: int, length: int) -> torch.Tensor:
    """hit[.., k, m, ..] = index[.., k, ..] == m: the index unsqueezed after ``dim``, compared with 0..length-1."""
    positions = torch.arange(length, device=index.device).reshape((length,) + (1,) * (index.ndim - dim - 1))
    return index.unsqueeze(dim + 1) == positions


def _dense_scatter_reduce(self: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor, reduce: str,
                          include_self: bool) -> Any:
    """scatter_reduce with amax/amin/prod (and sum, for index_reduce) as a masked dense reduction."""
    if self.ndim == 0:
        out = _dense_scatter_reduce(self.reshape(1), 0, index.reshape(-1)[:1], src.reshape(-1), reduce, include_self)
        return out if out is NotImplemented else out.reshape(())
    dim %= self.ndim
    length = self.shape[dim]
    if index.numel() * length > DENSE_LIMIT:
        return NotImplemented
    window = tuple(slice(0, n) for n in index.shape)
    src = src[window]  # scatter reads only the leading index.shape entries of src
    hit = _one_hot(index, dim, length)
    picked = torch.where(hit, src.unsqueeze(dim + 1), _identity(reduce, self.dtype))
    reduced = _REDUCERS[reduce](picked, dim)  # index.shape with dim replaced by length
    region = self[tuple(slice(None) if d == dim else slice(0, n) for d, n in enumerate(index.shape))]
    if include_self:
        combined = _COMBINE[reduce](region, reduced)
    else:
        combined = torch.where(hit.any(dim), reduced, region)
    # prod widens int32/uint8/bool to int64 (amax/amin of bool meet an integer identity): back to self's
    # dtype, which wrapping products agree with modulo 2**bits, and bool's and/or with
    return _paste(self, combined.to(self.dtype))


def _paste(base: torch.Tensor, part: torch.Tensor) -> torch.Tensor:
    """``base`` with its leading ``part.shape`` block replaced by ``part``."""
    if part.shape == base.shape:
        return part
    pads = [p for d in reversed(range(base.ndim)) for p in (0, base.shape[d] - part.shape[d])]
    inside = torch.nn.functional.pad(torch.ones(part.shape, dtype=torch.bool, device=part.device), pads, value=False)
    return torch.where(inside, torch.nn.functional.pad(part, pads), base)


def scatter_reduce(self: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor, reduce: str, *,
                   include_self: bool = True) -> Any:
    """aten.scatter_reduce.two: sum/mean from scatter_add, amax/amin/prod as a masked dense reduction."""
    if reduce in ("amax", "amin", "prod"):
        return _dense_scatter_reduce(self, dim, index, src, reduce, include_self)
    if reduce not in ("sum", "mean") or (reduce == "mean" and not self.is_floating_point()):
        return NotImplemented
    base = self if include_self else self.scatter(dim, index, 0)
    total = base.scatter_add(dim, index, src)
    if reduce == "sum":
        return total
    counts = torch.ones_like(self) if include_self else torch.zeros_like(self)
    counts = counts.scatter_add(dim, index, torch.ones_like(src))
    return total / torch.where(counts == 0, 1, counts)


def index_reduce(self: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor, reduce: str, *,
                 include_self: bool = True) -> Any:
    """aten.index_reduce: the slices of ``source`` along ``dim`` reduced into the rows ``index`` names; a
    scatter_reduce with the 1-d index broadcast along ``dim`` of ``source``."""
    if reduce == "mean" and not self.is_floating_point():
        return NotImplemented  # integer mean floors; not written here
    if self.ndim == 0:
        return index_reduce(self.reshape(1), 0, index.reshape(-1), source.reshape(-1), reduce,
                            include_self=include_self).reshape(())
    dim %= self.ndim
    expanded = index.reshape(-1).reshape([-1 if d == dim else 1 for d in range(source.ndim)]).expand(source.shape)
    return torch.scatter_reduce(self, dim, expanded, source, reduce, include_self=include_self)


def _segments(data: torch.Tensor, lengths: torch.Tensor | None, offsets: torch.Tensor | None,
              axis: int) -> tuple[int, int, torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """(axis normalized, dims after it, inside [.., S, L, 1..] "position l is in segment s", starts, ends),
    or None when the segments are not given or too large to handle densely."""
    axis %= data.ndim
    if offsets is not None:
        starts, ends = offsets[..., :-1], offsets[..., 1:]
    elif lengths is not None:
        ends = torch.cumsum(lengths, -1)
        starts = ends - lengths
    else:
        return None
    length, rest = data.shape[axis], data.ndim - axis - 1
    if starts.numel() * length * max(1, math.prod(data.shape[axis + 1:])) > DENSE_LIMIT:
        return None
    positions = torch.arange(length, device=data.device)
    inside = (starts.unsqueeze(-1) <= positions) & (positions < ends.unsqueeze(-1))  # [.., S, L]
    return axis, rest, inside.reshape(inside.shape + (1,) * rest), starts, ends


def segment_reduce(data: torch.Tensor, reduce: str, *, lengths: torch.Tensor | None = None,
                   indices: torch.Tensor | None = None, offsets: torch.Tensor | None = None, axis: int = 0,
                   unsafe: bool = False, initial: Any = None) -> Any:
    """aten.segment_reduce: reduce runs of ``data`` along ``axis``; the runs are given by lengths or offsets
    (values, not shapes, so the result shape is static). ``initial`` starts every segment, as in eager;
    an empty segment without one is the reduction's identity (NaN for mean)."""
    if indices is not None or reduce not in ("sum", "mean", "max", "min", "prod") or not data.is_floating_point():
        return NotImplemented
    segments = _segments(data, lengths, offsets, axis)
    if segments is None:
        return NotImplemented
    axis, rest, inside, starts, ends = segments
    name = {"max": "amax", "min": "amin"}.get(reduce, reduce)
    name = "sum" if name == "mean" else name
    picked = torch.where(inside, data.unsqueeze(axis), _identity(name, data.dtype))
    reduced = _REDUCERS[name](picked, axis + 1)
    if initial is not None:
        reduced = _COMBINE[name](reduced, torch.full((), initial, dtype=data.dtype, device=data.device))
    if reduce != "mean":
        return reduced
    counts = (ends - starts).reshape(ends.shape + (1,) * rest).to(data.dtype)
    if initial is None:
        return reduced / counts  # 0 / 0 is NaN for an empty segment, as eager
    return torch.where(counts > 0, reduced / torch.where(counts > 0, counts, 1), reduced)


def segment_reduce_backward(grad: torch.Tensor, output: torch.Tensor, data: torch.Tensor, reduce: str, *,
                            lengths: torch.Tensor | None = None, offsets: torch.Tensor | None = None,
                            axis: int = 0, initial: Any = None) -> Any:
    """aten._segment_reduce_backward: sum hands each element its segment's gradient, mean divides it by the
    segment length, max/min split it equally among the elements equal to the result (none when the initial
    value won), as eager."""
    if reduce not in ("sum", "mean", "max", "min") or not data.is_floating_point():
        return NotImplemented
    segments = _segments(data, lengths, offsets, axis)
    if segments is None:
        return NotImplemented
    axis, rest, inside, starts, ends = segments
    share = grad.unsqueeze(axis + 1)  # [.., S, 1, rest]
    if reduce == "mean":
        counts = (ends - starts).reshape(ends.shape + (1,) * (rest + 1)).to(data.dtype)
        share = share / torch.clamp(counts, min=1)
    elif reduce in ("max", "min"):
        inside = inside & (data.unsqueeze(axis) == output.unsqueeze(axis + 1))
        ties = inside.sum(axis + 1, keepdim=True).to(data.dtype)
        share = share / torch.clamp(ties, min=1)
    return torch.where(inside, share, 0.0).sum(axis)


def put(self: torch.Tensor, index: torch.Tensor, source: torch.Tensor, accumulate: bool = False) -> torch.Tensor:
    """aten.put: index_put on the flattened tensor."""
    flat = self.reshape(-1)
    return torch.index_put(flat, (index.reshape(-1),), source.reshape(-1), accumulate).reshape(self.shape)


def diagonal_scatter(self: torch.Tensor, src: torch.Tensor, offset: int = 0, dim1: int = 0,
                     dim2: int = 1) -> torch.Tensor:
    """aten.diagonal_scatter: index_put at (i + max(-offset, 0), i + max(offset, 0)) with dim1, dim2 moved last."""
    rank = self.ndim
    dim1, dim2 = dim1 % rank, dim2 % rank
    order = [d for d in range(rank) if d not in (dim1, dim2)] + [dim1, dim2]
    steps = torch.arange(src.shape[-1], device=self.device)
    rows, cols = steps + max(-offset, 0), steps + max(offset, 0)
    moved = aten.index_put.default(self.permute(order), [None] * (rank - 2) + [rows, cols], src)
    return moved.permute([order.index(d) for d in range(rank)])


def as_strided_scatter(self: torch.Tensor, src: torch.Tensor, size: Any, stride: Any,
                       storage_offset: int | None = None) -> Any:
    """aten.as_strided_scatter of a contiguous tensor: index_put at the view's flat storage positions."""
    if not self.is_contiguous():
        return NotImplemented  # the view would address storage positions the logical tensor does not name
    flat_index = torch.full(tuple(size), int(storage_offset or 0), dtype=torch.int64,
                            device=self.device)
    for d, (n, s) in enumerate(zip(size, stride)):
        steps = torch.arange(n, device=self.device) * s
        flat_index = flat_index + steps.reshape([-1 if e == d else 1 for e in range(len(size))])
    return torch.index_put(self.reshape(-1), (flat_index,), src).reshape(self.shape)


def masked_scatter(self: torch.Tensor, mask: torch.Tensor, source: torch.Tensor) -> Any:
    """aten.masked_scatter: the k-th true position of the (broadcast) mask takes source's k-th element."""
    shape = torch.broadcast_shapes(self.shape, mask.shape)
    mask = mask.expand(shape)
    if mask.numel() == 0 or source.numel() == 0:
        return NotImplemented
    rank_of = torch.cumsum(mask.reshape(-1), 0) - 1  # the k of each true position
    taken = source.reshape(-1)[torch.clamp(rank_of, 0, source.numel() - 1)]
    return torch.where(mask, taken.reshape(shape), self.expand(shape))


def nonzero_static(self: torch.Tensor, *, size: int, fill_value: int = -1) -> torch.Tensor:
    """aten.nonzero_static: the coordinates of the first ``size`` nonzeros (row-major), padded with
    fill_value; a scatter of every nonzero's coordinates into its rank among the nonzeros."""
    rank, count = self.ndim, self.numel()
    out = torch.full((size + 1, rank), fill_value, dtype=torch.int64, device=self.device)
    if rank == 0 or count == 0:
        if rank == 0:  # a 0-dim tensor has no coordinates: (size, 0)
            return out[:size]
        return out[:size]
    nonzero = (self != 0).reshape(-1)
    rank_of = torch.cumsum(nonzero, 0) - 1
    row = torch.where(nonzero & (rank_of < size), rank_of, size)  # row `size` collects the rest, then goes
    flat = torch.arange(count, device=self.device)
    strides = [math.prod(self.shape[d + 1:]) for d in range(rank)]
    coords = torch.stack([(flat // strides[d]) % self.shape[d] for d in range(rank)], dim=1)
    return out.scatter(0, row.unsqueeze(1).expand(count, rank), coords)[:size]


def scatter_with_reduce(self: torch.Tensor, dim: int, index: torch.Tensor, src: Any, *, reduce: str) -> Any:
    """aten.scatter.reduce / scatter.value_reduce (the legacy ``reduce=`` spelling): add is scatter_add,
    multiply a scatter_reduce prod that includes self."""
    if not isinstance(src, torch.Tensor):
        src = torch.full(index.shape, src, dtype=self.dtype, device=self.device)
    if reduce == "add":
        return self.scatter_add(dim, index, src)
    if reduce == "multiply":
        return torch.scatter_reduce(self, dim, index, src, "prod", include_self=True)
    return NotImplemented


def gather(self: torch.Tensor, dim: int, index: torch.Tensor, *, sparse_grad: bool = False) -> Any:
    """aten.gather with an empty index (eager accepts any rank and integer type then) or a non-int64 one."""
    if index.numel() == 0:
        return self.new_zeros(index.shape)  # eager skips its shape and dtype checks for an empty index
    if index.dtype in (torch.int64, torch.int32):
        return NotImplemented  # the IR's gather
    return aten.gather.default(self, dim, index.to(torch.int64))


def scatter_add(self: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor) -> Any:
    """aten.scatter_add with an empty index (of any integer type, any rank) adds nothing; a 0-dim self (its
    index and src may be 1-d) is a 1-element one."""
    if index.numel() == 0:
        return self.clone()
    if self.ndim == 0:
        return self.reshape(1).scatter_add(0, index.reshape(-1), src.reshape(-1)[: index.numel()]).reshape(())
    return NotImplemented


def index_put(self: torch.Tensor, indices: Any, values: torch.Tensor, accumulate: bool = False) -> Any:
    """aten.index_put with one leading boolean mask and values that do not depend on how many elements it
    selects (they broadcast to one selected slice): a ``where``. Otherwise the IR's index_put (integer
    indices) or a refusal (a data-dependent count of values)."""
    if len(indices) != 1 or indices[0] is None or indices[0].dtype is not torch.bool:
        return NotImplemented
    mask = indices[0]
    rest = self.shape[mask.ndim:]
    if values.ndim > len(rest) and values.shape[values.ndim - len(rest) - 1] != 1:
        return NotImplemented  # one value per selected slice: how many depends on the data
    try:
        slice_values = values.reshape(values.shape[max(values.ndim - len(rest), 0):]).expand(rest) \
            if values.ndim >= len(rest) else values.expand(rest)
    except RuntimeError:
        return NotImplemented
    selected = mask.reshape(mask.shape + (1,) * len(rest))
    if accumulate:
        return self + torch.where(selected, slice_values.to(self.dtype), 0)
    return torch.where(selected, slice_values.to(self.dtype), self)


def take(self: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """aten.take: advanced indexing of the flattened tensor (negative indices count from the end)."""
    return aten.index.Tensor(self.reshape(-1), [index])  # (a 0-d index through [] would be read as an int)


def embedding_renorm(weight: torch.Tensor, indices: torch.Tensor, max_norm: float, norm_type: float) -> Any:
    """aten.embedding_renorm (functional): every row that ``indices`` names and whose norm exceeds max_norm
    is scaled by max_norm / (norm + 1e-7), as eager's embedding_renorm_."""
    rows = weight.shape[0]
    if indices.numel() * rows > DENSE_LIMIT:
        return NotImplemented
    named = (indices.reshape(-1, 1) == torch.arange(rows, device=weight.device)).any(0)
    norms = torch.linalg.vector_norm(weight, norm_type, dim=1)
    scale = torch.where(named & (norms > max_norm), max_norm / (norms + 1e-7), 1.0)
    return weight * scale.unsqueeze(1)


def isin(elements: Any, test_elements: Any, *, assume_unique: bool = False, invert: bool = False) -> Any:
    """aten.isin: one dense comparison of every element with every test element (no sort)."""
    elements, test_elements = torch.as_tensor(elements), torch.as_tensor(test_elements)
    if elements.numel() * max(test_elements.numel(), 1) > DENSE_LIMIT:
        return NotImplemented
    found = (elements.unsqueeze(-1) == test_elements.reshape(-1)).any(-1)
    return ~found if invert else found


def embedding_bag(weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor,
                  scale_grad_by_freq: bool = False, mode: int = 0, sparse: bool = False,
                  per_sample_weights: torch.Tensor | None = None, include_last_offset: bool = False,
                  padding_idx: int = -1) -> Any:
    """aten._embedding_bag(_forward_only): each bag's rows summed, averaged or maxed over a dense
    "position l is in bag b" mask (padding_idx rows left out), with eager's auxiliary outputs: offset2bag
    (empty on the CPU sum fast path), bag_size (0 for sum), max_indices (the winning row per column for
    max, zeros otherwise). An empty bag gives zeros."""
    length, rows_count = indices.numel(), offsets.numel() - (1 if include_last_offset else 0)
    fast_sum = mode == 0 and padding_idx < 0 and weight.dtype in (torch.float32, torch.float16) \
        and weight.stride(1) == 1
    if indices.ndim != 1 or length * rows_count * weight.shape[1] > DENSE_LIMIT or (mode == 0 and not fast_sum
                                                                                      and weight.stride(1) != 1):
        return NotImplemented
    position = torch.arange(length, device=indices.device)
    starts = offsets[:rows_count]
    ends = offsets[1:rows_count + 1] if include_last_offset else torch.cat([offsets[1:], offsets.new_full((1,), length)])
    member = (starts.unsqueeze(1) <= position) & (position < ends.unsqueeze(1))  # [bags, L]
    if padding_idx >= 0:
        member = member & (indices != padding_idx)
    rows = weight[indices]
    if mode != 2 and weight.dtype in (torch.bfloat16, torch.float16):  # CPU: weighted sum and mean in float32
        rows = rows.to(torch.float32)
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.unsqueeze(1)
    counts = member.sum(1)
    picked = member.unsqueeze(2)
    if mode == 2:
        values = torch.where(picked, rows.unsqueeze(0), -math.inf)
        best = torch.argmax(values, 1)  # first maximum, as eager
        output = torch.where(counts.unsqueeze(1) > 0, torch.amax(values, 1), 0.0)
        max_indices = torch.where(counts.unsqueeze(1) > 0, indices[best], 0)
    else:
        output = torch.where(picked, rows.unsqueeze(0), 0.0).sum(1)
        if mode == 1:
            output = output / torch.clamp(counts, min=1).unsqueeze(1).to(output.dtype)
        output = output.to(weight.dtype)
        max_indices = torch.zeros(rows_count, dtype=offsets.dtype, device=offsets.device)
    bag_size = counts.to(offsets.dtype) if mode else torch.zeros(rows_count, dtype=offsets.dtype, device=offsets.device)
    if mode == 1:
        max_indices = bag_size  # eager hands back bag_size there
    if fast_sum:
        offset2bag = offsets.new_zeros((0,))
    else:
        offset2bag = ((offsets[:rows_count].unsqueeze(1) <= position).sum(0) - 1).to(offsets.dtype)
    return output, offset2bag, bag_size, max_indices.to(offsets.dtype)


def embedding_bag_forward_only(weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor,
                               scale_grad_by_freq: bool = False, mode: int = 0, *args: Any, **kwargs: Any) -> Any:
    """aten._embedding_bag_forward_only: as _embedding_bag; on CPU's sum path bag_size and max_indices have one
    entry per offset (include_last_offset's extra one too)."""
    result = embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, *args, **kwargs)
    if result is NotImplemented:
        return result
    output, offset2bag, bag_size, max_indices = result
    missing = offsets.numel() - bag_size.numel()
    if missing and mode == 0:  # on the sum path bag_size and max_indices have one entry per offset
        bag_size = torch.cat([bag_size, bag_size.new_zeros((missing,))])
        if max_indices.ndim == 1:
            max_indices = torch.cat([max_indices, max_indices.new_zeros((missing,))])
    return output, offset2bag, bag_size, max_indices


#: aten op -> decomposition written here (one comment per rule).
INDEXING_FORMULAS: dict[Any, Callable[..., Any]] = {
    aten.scatter_reduce.two: scatter_reduce,  # sum/mean via scatter_add; amax/amin/prod dense and masked
    aten.index_reduce.default: index_reduce,  # scatter_reduce with the index broadcast along dim
    aten.segment_reduce.default: segment_reduce,  # dense masked reduction per segment
    aten._segment_reduce_backward.default: segment_reduce_backward,  # the same mask, ties share (max/min)
    aten.put.default: put,  # index_put on the flattened tensor
    aten.diagonal_scatter.default: diagonal_scatter,  # index_put on the two diagonal dims moved last
    aten.as_strided_scatter.default: as_strided_scatter,  # index_put at flat storage positions (contiguous)
    aten.masked_scatter.default: masked_scatter,  # cumsum ranks + gather + where
    aten.nonzero_static.default: nonzero_static,  # cumsum ranks + scatter of coordinates
    aten.scatter.reduce: scatter_with_reduce,  # add -> scatter_add, multiply -> scatter_reduce prod
    aten.scatter.value_reduce: scatter_with_reduce,  # the same with a scalar source
    aten.gather.default: gather,  # an empty index gives an empty result; another integer index read as int64
    aten.scatter_add.default: scatter_add,  # an empty index leaves self as it is; 0-dim self as 1-d
    aten.index_put.default: index_put,  # one boolean mask with count-independent values -> where
    aten.take.default: take,  # flat advanced indexing (PyTorch's rule guards on the data)
    aten.embedding_renorm.default: embedding_renorm,  # dense "named rows" mask, scaled rows
    aten.isin.Tensor_Tensor: isin,  # dense comparison (PyTorch's rule sorts)
    aten._embedding_bag_forward_only.default: embedding_bag_forward_only,  # dense bag-membership mask + reduction
    aten._embedding_bag.default: embedding_bag,
}
