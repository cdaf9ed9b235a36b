"""Strided views: when a chain of view ops can read its source buffer in place.

A view op (reshape, permute, expand, slice, select, squeeze, unsqueeze) of a buffer with known strides is
itself a strided window on that buffer (shape, strides, element offset) unless a reshape merges dimensions
that are not laid out contiguously; then the data must be copied. The fusion pass keeps only in-place views
at the top level, and the layout pass records their strides in their types.
"""

from __future__ import annotations

import math

from collections.abc import Mapping
from dataclasses import dataclass

from neuroncc.ir import Op, Value
from neuroncc.ir.types import contiguous_strides

#: The ops that only reinterpret their operand (no arithmetic, no data-dependent addressing).
PURE_VIEWS = frozenset({"reshape", "permute", "expand", "slice", "select", "squeeze", "unsqueeze"})


@dataclass(frozen=True)
class StridedView:
    """A window on a buffer: element (i0, i1, ...) lives at ``offset + sum(i_k * strides[k])``."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int = 0

    @staticmethod
    def contiguous(shape: tuple[int, ...]) -> StridedView:
        return StridedView(tuple(shape), contiguous_strides(tuple(shape)), 0)


def reshape_strides(shape: tuple[int, ...], strides: tuple[int, ...],
                    new_shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """Strides that view ``shape``/``strides`` data as ``new_shape`` in place, or None (PyTorch's computeStride).

    With at most one element (or none) every layout addresses the same data, so the result is contiguous."""
    if math.prod(shape) <= 1 or math.prod(new_shape) == 0:
        return contiguous_strides(new_shape)
    new_strides = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk_base_stride = strides[-1]
    tensor_numel = view_numel = 1
    for tensor_d in range(len(shape) - 1, -1, -1):
        tensor_numel *= shape[tensor_d]
        chunk_ends = tensor_d == 0 or (shape[tensor_d - 1] != 1
                                       and strides[tensor_d - 1] != tensor_numel * chunk_base_stride)
        if chunk_ends:
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                new_strides[view_d] = view_numel * chunk_base_stride
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if tensor_d > 0:
                chunk_base_stride = strides[tensor_d - 1]
                tensor_numel = view_numel = 1
    return tuple(new_strides) if view_d == -1 else None


def apply_view(op: Op, src: StridedView) -> StridedView | None:
    """The window ``op`` (a pure view) makes of ``src``, or None if it needs a copy."""
    a, shape, strides = op.attrs, src.shape, src.strides
    out_shape = op.result.type.shape
    if op.name == "reshape":
        new = reshape_strides(shape, strides, out_shape)
        return StridedView(out_shape, new, src.offset) if new is not None else None
    if op.name == "permute":
        return StridedView(out_shape, tuple(strides[d] for d in a["dims"]), src.offset)
    if op.name == "expand":
        lead = len(out_shape) - len(shape)
        kept = tuple(0 if have == 1 and want != 1 else stride
                     for have, want, stride in zip(shape, out_shape[lead:], strides))
        return StridedView(out_shape, (0,) * lead + kept, src.offset)
    if op.name == "slice":
        d = a["dim"]
        new_strides = strides[:d] + (strides[d] * a["step"],) + strides[d + 1:]
        return StridedView(out_shape, new_strides, src.offset + a["start"] * strides[d])
    if op.name == "select":
        d = a["dim"]
        return StridedView(out_shape, strides[:d] + strides[d + 1:], src.offset + a["index"] * strides[d])
    if op.name in ("squeeze", "unsqueeze"):
        new = reshape_strides(shape, strides, out_shape)  # only size-1 dims change: always in place
        return StridedView(out_shape, new, src.offset) if new is not None else None
    raise ValueError(f"'{op.name}' is not a pure view op")


def view_chain_layout(value: Value, producers: Mapping[Value, Op]) -> tuple[Value, StridedView] | None:
    """The buffer ``value`` is a view of (the first non-view value up the chain) and the window on it.

    The root buffer keeps the strides of its type (parameters may be strided; op results are contiguous).
    None when some step of the chain needs a copy.
    """
    chain: list[Op] = []
    root = value
    while (op := producers.get(root)) is not None and op.name in PURE_VIEWS:
        chain.append(op)
        root = op.operands[0]
    layout: StridedView | None = StridedView(root.type.shape, root.type.layout_strides, 0)
    for op in reversed(chain):
        layout = apply_view(op, layout)
        if layout is None:
            return None
    return root, layout
