"""Strided views: when a chain of view ops can read its source buffer in place.

A strided view op (``Trait.STRIDED_VIEW``: reshape, permute, expand, slice, select, squeeze, unsqueeze) of a
buffer with known strides is itself a strided window on that buffer (shape, strides, element offset) unless a
reshape merges dimensions that are not laid out contiguously; then the data must be copied. The fusion pass
keeps only in-place views at the top level, and the layout pass records their strides in their types. How each
op windows its operand is one rule per op (:data:`WINDOW_RULES`).

Read by the passes and the NKI code generator; apart from :mod:`neuroncc.ir.strides` (which the cpu launcher
reads when it loads an artifact): a graph cache hit makes no window, and :class:`StridedView`'s generated
methods were ~0.6 ms of its import (docs/performance-history.md, session 23 hit23).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from neuroncc.ir.graph import Op, Value
from neuroncc.ir.opdef import Trait
from neuroncc.ir.strides import reshape_strides
from neuroncc.ir.types import contiguous_strides


@dataclass(frozen=True)
class StridedView:
    """A window on a buffer: element (i0, i1, ...) lives at ``offset + sum(i_k * strides[k])``."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int = 0

    @staticmethod
    def contiguous(shape: tuple[int, ...]) -> StridedView:
        return StridedView(tuple(shape), contiguous_strides(tuple(shape)), 0)



def _reshape_window(op: Op, src: StridedView) -> StridedView | None:
    out_shape = op.result.type.shape
    new = reshape_strides(src.shape, src.strides, out_shape)  # squeeze/unsqueeze change only size-1 dims:
    return StridedView(out_shape, new, src.offset) if new is not None else None  # always in place


def _permute_window(op: Op, src: StridedView) -> StridedView:
    return StridedView(op.result.type.shape, tuple(src.strides[d] for d in op.attrs["dims"]), src.offset)


def _expand_window(op: Op, src: StridedView) -> StridedView:
    out_shape = op.result.type.shape
    lead = len(out_shape) - len(src.shape)
    kept = tuple(0 if have == 1 and want != 1 else stride
                 for have, want, stride in zip(src.shape, out_shape[lead:], src.strides))
    return StridedView(out_shape, (0,) * lead + kept, src.offset)


def _slice_window(op: Op, src: StridedView) -> StridedView:
    d, strides = op.attrs["dim"], src.strides
    new_strides = strides[:d] + (strides[d] * op.attrs["step"],) + strides[d + 1:]
    return StridedView(op.result.type.shape, new_strides, src.offset + op.attrs["start"] * strides[d])


def _select_window(op: Op, src: StridedView) -> StridedView:
    d, strides = op.attrs["dim"], src.strides
    return StridedView(op.result.type.shape, strides[:d] + strides[d + 1:], src.offset + op.attrs["index"] * strides[d])


#: The window each strided view op (``Trait.STRIDED_VIEW``) makes of its operand's (one rule per op).
WINDOW_RULES: dict[str, Callable[[Op, StridedView], StridedView | None]] = {
    "reshape": _reshape_window,
    "permute": _permute_window,
    "expand": _expand_window,
    "slice": _slice_window,
    "select": _select_window,
    "squeeze": _reshape_window,
    "unsqueeze": _reshape_window,
}


def apply_view(op: Op, src: StridedView) -> StridedView | None:
    """The window ``op`` (a strided view) makes of ``src``, or None if it needs a copy."""
    rule = WINDOW_RULES.get(op.name)
    if rule is None:
        raise ValueError(f"'{op.name}' is not a strided view op")
    return rule(op, src)


def view_chain_layout(value: Value, producers: Mapping[Value, Op],
                      contiguous_root: bool = False) -> tuple[Value, StridedView] | None:
    """The buffer ``value`` is a view of (the first non-view value up the chain) and the window on it.

    The root buffer keeps the strides of its type (parameters may be strided; op results are contiguous),
    or is taken as contiguous with ``contiguous_root`` (NKI kernel arguments always are). None when some step
    of the chain needs a copy.
    """
    chain: list[Op] = []
    root = value
    while (op := producers.get(root)) is not None and op.has(Trait.STRIDED_VIEW):
        chain.append(op)
        root = op.operands[0]
    strides = contiguous_strides(root.type.shape) if contiguous_root else root.type.layout_strides
    layout: StridedView | None = StridedView(root.type.shape, strides, 0)
    for op in reversed(chain):
        layout = apply_view(op, layout)
        if layout is None:
            return None
    return root, layout
