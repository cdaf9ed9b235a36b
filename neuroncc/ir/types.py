"""The IR's value type: a tensor with a static shape, an element type and a layout (strides).

Types are frozen, hashable values. Strides are in elements; ``None`` means the contiguous row-major layout,
which is what type inference produces. Explicit strides come from graph inputs (a transposed or expanded
PyTorch tensor) and from the layout pass.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from neuroncc.ir.dtypes import DType


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, running = [], 1
    for size in reversed(shape):
        strides.append(running)
        running *= max(size, 1)
    return tuple(reversed(strides))


def storage_extent(shape: Sequence[int], strides: Sequence[int]) -> int:
    """Elements of storage from a strided view's first element to one past its last (0 for an empty view)."""
    if any(size == 0 for size in shape):
        return 0
    return 1 + sum((size - 1) * stride for size, stride in zip(shape, strides))


@dataclass(frozen=True, slots=True)
class TensorType:
    """A tensor's type: shape, element dtype and strides in elements (None: the contiguous layout)."""

    shape: tuple[int, ...]
    dtype: DType
    strides: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if not all(isinstance(s, int) and s >= 0 for s in self.shape):
            raise ValueError(f"tensor shape must be non-negative ints, got {self.shape}")
        if self.strides is not None:
            if len(self.strides) != len(self.shape):
                raise ValueError(f"strides {self.strides} do not match rank of shape {self.shape}")
            if self.strides == contiguous_strides(self.shape):
                object.__setattr__(self, "strides", None)  # one spelling for the contiguous layout

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    @property
    def is_contiguous(self) -> bool:
        return self.strides is None

    @property
    def layout_strides(self) -> tuple[int, ...]:
        """The strides, spelled out even for the contiguous layout."""
        return self.strides if self.strides is not None else contiguous_strides(self.shape)

    def with_shape(self, shape: tuple[int, ...]) -> TensorType:
        return TensorType(tuple(shape), self.dtype)

    def with_dtype(self, dtype: DType) -> TensorType:
        return TensorType(self.shape, dtype, self.strides)

    def contiguous(self) -> TensorType:
        return TensorType(self.shape, self.dtype)

    def __str__(self) -> str:
        dims = "".join(f"{s}x" for s in self.shape)
        layout = "" if self.strides is None else f", strides=[{', '.join(map(str, self.strides))}]"
        return f"tensor<{dims}{self.dtype.value}{layout}>"
