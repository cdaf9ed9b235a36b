"""Strided views: how view ops (reshape, permute, expand, slice, ...) act on a buffer's layout.

A :class:`Layout` says where a tensor's elements are: argument slot, element offset, shape and strides (in
elements; 0 for broadcast dims). A view op applied to a laid-out tensor gives another layout over the same
storage when it can (``view_layout``), so kernels read permuted, sliced and expanded inputs without copies.
The launcher uses the same rules for top-level view ops.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from neuroncc.ir.dtypes import DType
from neuroncc.ir.graph import Op
from neuroncc.ir.types import TensorType, contiguous_strides
from neuroncc.passes.strides import reshape_strides


@dataclass(frozen=True, slots=True)
class Layout:
    """A strided view of the buffer in argument slot ``arg``."""

    arg: int
    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: DType

    @staticmethod
    def of(arg: int, t: TensorType) -> Layout:
        return Layout(arg, 0, t.shape, t.layout_strides, t.dtype)

    @property
    def is_contiguous(self) -> bool:
        return all(st == cs for st, cs, n in zip(self.strides, contiguous_strides(self.shape), self.shape) if n > 1)

    @property
    def extent(self) -> int:
        """Elements of storage from the view's first element to one past its last."""
        if math.prod(self.shape) == 0:
            return 0
        return 1 + sum((n - 1) * s for n, s in zip(self.shape, self.strides))


def _split_offsets(op: Op) -> list[int]:
    sizes = op.attrs["sizes"]
    return [sum(sizes[:i]) for i in range(len(sizes))]


def view_layout(op: Op, source: Layout, result_index: int = 0) -> Layout | None:
    """The layout of ``op``'s result ``result_index`` when ``op`` is a view of ``source``, else None."""
    out = op.results[result_index].type
    attrs = op.attrs
    shape, strides, offset = list(source.shape), list(source.strides), source.offset
    name = op.name
    if name == "reshape":
        new = reshape_strides(source.shape, source.strides, out.shape)
        return None if new is None else replace(source, shape=out.shape, strides=new)
    if name == "permute":
        return replace(source, shape=out.shape, strides=tuple(strides[d] for d in attrs["dims"]))
    if name == "expand":
        pad = len(out.shape) - len(shape)
        padded_shape, padded_strides = [1] * pad + shape, [0] * pad + strides
        new = tuple(0 if have == 1 and want != 1 else st
                    for have, want, st in zip(padded_shape, out.shape, padded_strides))
        return replace(source, shape=out.shape, strides=new)
    if name in ("slice", "split"):
        if name == "slice":
            dim, start, step = attrs["dim"] % len(shape), attrs["start"], attrs["step"]
        else:
            dim, start, step = attrs["dim"] % len(shape), _split_offsets(op)[result_index], 1
        offset += start * strides[dim] if out.shape[dim] else 0
        strides[dim] *= step
        return replace(source, offset=offset, shape=out.shape, strides=tuple(strides))
    if name == "select":
        dim = attrs["dim"] % len(shape)
        offset += attrs["index"] * strides[dim]
        return replace(source, offset=offset, shape=out.shape, strides=tuple(strides[:dim] + strides[dim + 1:]))
    if name == "squeeze":
        dropped = {d % len(shape) for d in attrs["dims"]} if shape else set()
        return replace(source, shape=out.shape, strides=tuple(s for d, s in enumerate(strides) if d not in dropped))
    if name == "unsqueeze":
        dim = attrs["dim"] % (len(shape) + 1)
        return replace(source, shape=out.shape, strides=tuple(strides[:dim] + [0] + strides[dim:]))
    if name == "as_strided":
        if not source.is_contiguous:
            return None
        return replace(source, offset=offset + attrs["offset"], shape=out.shape, strides=tuple(attrs["strides"]))
    return None


#: View ops whose result can always be expressed by ``view_layout`` except reshape/as_strided on some layouts.
VIEW_OPS = frozenset({"reshape", "permute", "expand", "slice", "split", "select", "squeeze", "unsqueeze",
                      "as_strided"})
