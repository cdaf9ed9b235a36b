"""NKI 0.1's ``mask=`` argument: which elements of an instruction's iteration space it processes.

A mask is a predicate over tile positions built from ``nl.arange`` expressions (``(i_p < 64) & (i_f < 256)``).
NKI's compiler turns an affine mask into a smaller access pattern, so the instruction runs on the bounding
box of the selected elements: every operand shaped like the iteration space is sliced to that box (a
``(P, 1)`` column only along the partitions), and the instruction runs on the slices, costed at their size.
When the selection is not a box (a triangle), the instruction runs on the box and only the selected
elements of its result are written (``context.write_mask``). An empty selection skips the instruction.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from neuroncc.nki.context import current
from neuroncc.nki.errors import NKISimulationError
from neuroncc.nki.index import Mask
from neuroncc.nki.tensor import Tensor


@dataclass(frozen=True)
class Restriction:
    """The part of an iteration space a mask selects: a box, and (if not all of it) which elements in it."""

    shape: tuple[int, ...]
    box: tuple[slice, ...]
    keep: np.ndarray | None  # None: every element of the box

    @property
    def empty(self) -> bool:
        return any(s.stop <= s.start for s in self.box)

    def trim(self, value: Any) -> Any:
        """``value`` restricted to the box: tiles shaped like the iteration space (or broadcasting to it)."""
        if not isinstance(value, Tensor):
            return value
        if value.ndim == len(self.shape):
            key = tuple(s if n == full else slice(None) for s, n, full in zip(self.box, value.shape, self.shape))
            return value[key]
        if value.shape[0] == self.shape[0]:
            free_box = all(s.start == 0 and s.stop == n for s, n in zip(self.box[1:], self.shape[1:]))
            if free_box:
                return value[(self.box[0],) + (slice(None),) * (value.ndim - 1)]
        raise NKISimulationError(
            f"mask over shape {self.shape} cannot restrict an operand of shape {value.shape}; shape the operands "
            f"like the masked iteration space")

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """Inside: instructions write only the selected elements of a dst shaped like the box."""
        context = current()
        previous = context.write_mask
        context.write_mask = self.keep
        try:
            yield
        finally:
            context.write_mask = previous


def restriction(op: str, mask: object, shape: tuple[int, ...]) -> Restriction | None:
    """The part of ``shape`` that ``mask`` selects (None when there is no mask)."""
    if mask is None:
        return None
    if isinstance(mask, (bool, np.bool_)):
        values = np.full(shape, bool(mask))
    elif isinstance(mask, Mask):
        values = mask.values
    else:
        raise NKISimulationError(f"{op} mask must be a predicate of nl.arange expressions, got {type(mask).__name__}")
    if values.ndim > len(shape):
        raise NKISimulationError(f"{op} mask of shape {values.shape} has more axes than the instruction's {shape}")
    values = values.reshape((1,) * (len(shape) - values.ndim) + values.shape)
    if any(1 < m < n for m, n in zip(values.shape, shape)):
        raise NKISimulationError(f"{op} mask of shape {values.shape} does not cover the instruction's shape {shape}")
    # A mask over a larger index space (the whole arange of a partial tile) is cut to the instruction's shape.
    values = values[tuple(slice(0, n) if m > 1 else slice(None) for m, n in zip(values.shape, shape))]
    values = np.broadcast_to(values, shape)
    selected = np.nonzero(values)
    if not selected[0].size:
        return Restriction(shape, tuple(slice(0, 0) for _ in shape), None)
    box = tuple(slice(int(axis.min()), int(axis.max()) + 1) for axis in selected)
    inside = values[box]
    return Restriction(shape, box, None if inside.all() else np.ascontiguousarray(inside))


def run_masked(op_name: str, mask: object, shape: tuple[int, ...], call: Callable[..., Any], result: Any, /,
               **operands: Any) -> Any:
    """Run ``call(**operands)`` on the masked part of ``shape``; returns ``result`` (the full dst)."""
    restricted = restriction(op_name, mask, shape)
    assert restricted is not None
    if restricted.empty:
        return result
    trimmed = {name: restricted.trim(value) for name, value in operands.items()}
    with restricted.writing():
        call(**trimmed)
    return result
