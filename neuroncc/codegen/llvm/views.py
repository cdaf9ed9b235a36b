"""Strided views: how view ops (reshape, permute, expand, slice, ...) act on a buffer's layout.

A :class:`Layout` says where a tensor's elements are: argument slot, element offset, shape and strides (in
elements of its dtype; 0 for broadcast dims). ``view_as_real``/``view_as_complex`` change the dtype of a
layout over the same storage (a c64 element is two f32 elements). A view op applied to a laid-out tensor gives another layout over the same
storage when it can (``view_layout``), so kernels read permuted, sliced and expanded inputs without copies.
The launcher uses the same rules for top-level view ops.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from neuroncc.ir.dtypes import DType
from neuroncc.ir.graph import Op
from neuroncc.ir.types import TensorType, contiguous_strides, storage_extent
from neuroncc.ir.strides import reshape_strides


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
        return storage_extent(self.shape, self.strides)


def _split_offsets(op: Op) -> list[int]:
    sizes = op.attrs["sizes"]
    return [sum(sizes[:i]) for i in range(len(sizes))]


def _reshape(op: Op, source: Layout, index: int, out: TensorType) -> Layout | None:
    new = reshape_strides(source.shape, source.strides, out.shape)
    return None if new is None else replace(source, shape=out.shape, strides=new)


def _permute(op: Op, source: Layout, index: int, out: TensorType) -> Layout:
    return replace(source, shape=out.shape, strides=tuple(source.strides[d] for d in op.attrs["dims"]))


def _expand(op: Op, source: Layout, index: int, out: TensorType) -> Layout:
    pad = len(out.shape) - len(source.shape)
    padded_shape, padded_strides = [1] * pad + list(source.shape), [0] * pad + list(source.strides)
    new = tuple(0 if have == 1 and want != 1 else st for have, want, st in zip(padded_shape, out.shape, padded_strides))
    return replace(source, shape=out.shape, strides=new)


def _window(source: Layout, out: TensorType, dim: int, start: int, step: int) -> Layout:
    """Every ``step``-th element along ``dim`` from ``start`` (slice, and each piece of a split)."""
    strides = list(source.strides)
    offset = source.offset + (start * strides[dim] if out.shape[dim] else 0)
    strides[dim] *= step
    return replace(source, offset=offset, shape=out.shape, strides=tuple(strides))


def _slice(op: Op, source: Layout, index: int, out: TensorType) -> Layout:
    return _window(source, out, op.attrs["dim"] % len(source.shape), op.attrs["start"], op.attrs["step"])


def _split(op: Op, source: Layout, index: int, out: TensorType) -> Layout:
    return _window(source, out, op.attrs["dim"] % len(source.shape), _split_offsets(op)[index], 1)


def _select(op: Op, source: Layout, index: int, out: TensorType) -> Layout:
    strides = source.strides
    dim = op.attrs["dim"] % len(source.shape)
    return replace(source, offset=source.offset + op.attrs["index"] * strides[dim], shape=out.shape,
                   strides=tuple(strides[:dim] + strides[dim + 1:]))


def _squeeze(op: Op, source: Layout, index: int, out: TensorType) -> Layout:
    dropped = {d % len(source.shape) for d in op.attrs["dims"]} if source.shape else set()
    return replace(source, shape=out.shape, strides=tuple(s for d, s in enumerate(source.strides) if d not in dropped))


def _unsqueeze(op: Op, source: Layout, index: int, out: TensorType) -> Layout:
    strides = list(source.strides)
    dim = op.attrs["dim"] % (len(source.shape) + 1)
    return replace(source, shape=out.shape, strides=tuple(strides[:dim] + [0] + strides[dim:]))


def _as_strided(op: Op, source: Layout, index: int, out: TensorType) -> Layout | None:
    if not source.is_contiguous:  # it indexes the logical row-major order
        return None
    return replace(source, offset=source.offset + op.attrs["offset"], shape=out.shape,
                   strides=tuple(op.attrs["strides"]))


def _view_as_real(op: Op, source: Layout, index: int, out: TensorType) -> Layout:
    """c64 -> f32 (re, im) pairs: offsets and strides count half-size elements."""
    return replace(source, offset=2 * source.offset, shape=out.shape, strides=tuple(2 * s for s in source.strides) + (1,),
                   dtype=out.dtype)


def _view_as_complex(op: Op, source: Layout, index: int, out: TensorType) -> Layout | None:
    """f32 (re, im) pairs -> c64: needs adjacent pairs at even offsets."""
    shape, strides = source.shape, source.strides
    if (shape[-1] > 1 and strides[-1] != 1) or source.offset % 2 \
            or any(s % 2 for s, n in zip(strides[:-1], shape) if n > 1):
        return None
    return replace(source, offset=source.offset // 2, shape=out.shape, strides=tuple(s // 2 for s in strides[:-1]),
                   dtype=out.dtype)


#: The layout each view op (``Trait.VIEW``) gives its result ``index`` over its operand's layout, or None when
#: no layout expresses it (a reshape merging dims that are not contiguous): one rule per op.
VIEW_LAYOUTS: dict[str, Callable[[Op, Layout, int, TensorType], Layout | None]] = {
    "reshape": _reshape,
    "permute": _permute,
    "expand": _expand,
    "slice": _slice,
    "split": _split,
    "select": _select,
    "squeeze": _squeeze,
    "unsqueeze": _unsqueeze,
    "as_strided": _as_strided,
    "view_as_real": _view_as_real,
    "view_as_complex": _view_as_complex,
}


def view_layout(op: Op, source: Layout, result_index: int = 0) -> Layout | None:
    """The layout of ``op``'s result ``result_index`` when ``op`` is a view of ``source``, else None."""
    rule = VIEW_LAYOUTS.get(op.name)
    return rule(op, source, result_index, op.results[result_index].type) if rule is not None else None
