"""Simulator tensors: a Storage (one allocation) and Tensor views into it.

A ``Tensor`` is a view: a storage, the shape the storage is seen as (``layout``; differs from the
allocation shape only after ``reshape``) and, per layout dimension, either a fixed index or a strided
``Span``. Slicing a view composes spans, so every view of a tile writes through to the same numpy array,
and each view knows exactly which box of its storage it touches. That box is what the trace records and
what the cost model uses for dependencies.

On-chip tensors (SBUF, PSUM) are 2-D or more and dimension 0 is the partition dimension. In cost-only mode
(``numerics=False``) storages have no numpy data at all; views still compute shapes and boxes.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import numpy as np

from neuroncc.nki.dtypes import DType
from neuroncc.nki.errors import NKISimulationError


class Buffer(enum.Enum):
    """NKI memory regions (``nl.sbuf``, ``nl.psum``, ``nl.hbm``, ``nl.shared_hbm``)."""

    HBM = "hbm"
    SHARED_HBM = "shared_hbm"
    SBUF = "sbuf"
    PSUM = "psum"

    @property
    def on_chip(self) -> bool:
        return self in (Buffer.SBUF, Buffer.PSUM)

    @property
    def is_hbm(self) -> bool:
        return self in (Buffer.HBM, Buffer.SHARED_HBM)

    def __repr__(self) -> str:
        return f"nl.{self.value}"


@dataclass(frozen=True, slots=True)
class DynSlice:
    """``nl.ds(start, size)``: the ``size`` elements starting at ``start`` of one dimension."""

    start: int
    size: int


def ds(start: int, size: int) -> DynSlice:
    """A dynamic slice ``[start, start + size)`` for indexing tensors, as ``nl.ds`` in NKI."""
    return DynSlice(int(start), int(size))


class Span(NamedTuple):
    """A strided range of one layout dimension: ``start, start + step, ...`` (``size`` elements)."""

    start: int
    step: int
    size: int


class TileOperators(Protocol):
    """What Python's operators on tiles do (``a + b`` is ``nl.add(a, b)``, ``t[i] = v`` is ``nl`` assignment):
    the ``nki.language`` of the launch that allocated the tile, handed to its storage by the launch
    (:mod:`neuroncc.nki.launch`), since the instruction set lives above this module."""

    def add(self, x: Any, y: Any) -> Tensor: ...
    def subtract(self, x: Any, y: Any) -> Tensor: ...
    def multiply(self, x: Any, y: Any) -> Tensor: ...
    def divide(self, x: Any, y: Any) -> Tensor: ...
    def negative(self, x: Any) -> Tensor: ...
    def assign(self, target: Tensor, value: Any) -> None: ...


class Storage:
    """One allocation: buffer, dtype, shape and (unless cost-only) the numpy array holding its values.

    ``written`` exists for PSUM only: NKI's default matmul accumulation overwrites a PSUM element the first
    time it is written after allocation and adds to it afterwards, so each element's written state is kept.
    """

    __slots__ = ("id", "buffer", "dtype", "shape", "name", "data", "written", "operators")

    def __init__(self, id: int, buffer: Buffer, dtype: DType, shape: tuple[int, ...], name: str,
                 data: np.ndarray | None, operators: TileOperators):
        self.operators = operators
        self.id = id
        self.buffer = buffer
        self.dtype = dtype
        self.shape = shape
        self.name = name
        self.data = data
        self.written = np.zeros(shape, dtype=bool) if (buffer is Buffer.PSUM and data is not None) else None

    @property
    def bytes_per_partition(self) -> int:
        return math.prod(self.shape[1:]) * self.dtype.itemsize

    def __repr__(self) -> str:
        return f"Storage({self.name!r}, {self.buffer.value}, {self.shape}, {self.dtype.name})"


def _is_int_index(key: object) -> bool:
    return isinstance(key, (int, np.integer)) and not isinstance(key, bool)


class Tensor:
    """A view of a Storage; what kernels see for every tile and HBM tensor (NKI's ``NkiTensor``)."""

    __slots__ = ("storage", "layout", "dims", "_shape", "_numpy")

    def __init__(self, storage: Storage, layout: tuple[int, ...], dims: tuple[int | Span, ...]):
        self.storage = storage
        self.layout = layout
        self.dims = dims
        self._shape = tuple(d.size for d in dims if isinstance(d, Span))
        self._numpy: np.ndarray | None = None

    @classmethod
    def whole(cls, storage: Storage) -> Tensor:
        return cls(storage, storage.shape, tuple(Span(0, 1, n) for n in storage.shape))

    # ----------------------------------------------------------------------------- properties
    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def dtype(self) -> DType:
        return self.storage.dtype

    @property
    def buffer(self) -> Buffer:
        return self.storage.buffer

    @property
    def name(self) -> str:
        return self.storage.name

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def size(self) -> int:
        return math.prod(self._shape)

    @property
    def itemsize(self) -> int:
        return self.storage.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.storage.dtype.itemsize

    @property
    def free_size(self) -> int:
        """Elements per partition: the product of every dimension but the first."""
        return math.prod(self._shape[1:])

    @property
    def keeps_partition_dim(self) -> bool:
        """Whether this view's first dimension is the storage's partition dimension (layout dim 0)."""
        return isinstance(self.dims[0], Span)

    @property
    def partition_start(self) -> int:
        first = self.dims[0]
        return first.start if isinstance(first, Span) else first

    def __repr__(self) -> str:
        return f"Tensor({self.name!r}, {self.buffer.value}, shape={self.shape}, dtype={self.dtype.name})"

    def __len__(self) -> int:
        return self._shape[0]

    # ----------------------------------------------------------------------------- indexing
    def __getitem__(self, key: Any) -> Tensor:
        keys = key if isinstance(key, tuple) else (key,)
        visible = [i for i, d in enumerate(self.dims) if isinstance(d, Span)]
        if any(k is Ellipsis for k in keys):
            at = keys.index(Ellipsis)
            fill = len(visible) - (len(keys) - 1)
            keys = keys[:at] + (slice(None),) * fill + keys[at + 1:]
        if len(keys) > len(visible):
            raise NKISimulationError(f"too many indices for tensor '{self.name}' of shape {self.shape}: got {len(keys)}")
        dims = list(self.dims)
        for axis, (k, layout_dim) in enumerate(zip(keys, visible)):
            dims[layout_dim] = self._index_one(axis, dims[layout_dim], k)
        return Tensor(self.storage, self.layout, tuple(dims))

    def _index_one(self, axis: int, span: Span, key: object) -> int | Span:
        size = span.size
        if _is_int_index(key):
            index = int(key)  # type: ignore[call-overload]
            if index < 0:
                index += size
            if not 0 <= index < size:
                raise NKISimulationError(
                    f"index {key} is out of bounds for dimension {axis} of size {size} in tensor '{self.name}'")
            return span.start + index * span.step
        if isinstance(key, DynSlice):
            start, count, step = key.start, key.size, 1
        elif isinstance(key, slice):
            step = 1 if key.step is None else int(key.step)
            if step <= 0:
                raise NKISimulationError(f"slice step must be positive, got {step} for tensor '{self.name}'")
            start = 0 if key.start is None else int(key.start)
            stop = size if key.stop is None else int(key.stop)
            start, stop = (start + size if start < 0 else start), (stop + size if stop < 0 else stop)
            if stop > size:
                raise NKISimulationError(
                    f"slice [{start}:{stop}] is out of bounds for dimension {axis} of size {size} in tensor '{self.name}'")
            count = max(0, -(-(stop - start) // step))
        else:
            raise NKISimulationError(
                f"unsupported index {key!r} for tensor '{self.name}': use ints, slices or nl.ds(start, size)")
        if count <= 0 or start < 0 or start + (count - 1) * step >= size:
            raise NKISimulationError(
                f"slice of {count} elements from {start} is out of bounds (or empty) for dimension {axis} "
                f"of size {size} in tensor '{self.name}'")
        return Span(span.start + start * span.step, span.step * step, count)

    def __setitem__(self, key: Any, value: Any) -> None:
        self.storage.operators.assign(self[key], value)  # a copy instruction (DMA, tensor_copy or memset)

    def reshape(self, shape: tuple[int, ...] | list[int]) -> Tensor:
        """The same storage seen with a new shape; only whole, unsliced tensors can be reshaped."""
        new_shape = tuple(int(n) for n in shape)
        if math.prod(new_shape) != self.size:
            raise NKISimulationError(f"cannot reshape tensor '{self.name}' of shape {self.shape} to {new_shape}")
        if self.layout != self.storage.shape or self._shape != self.storage.shape:
            raise NKISimulationError(f"reshape needs the whole tensor '{self.name}', not a slice of it")
        if self.buffer.on_chip and new_shape[0] != self.shape[0]:
            raise NKISimulationError(
                f"reshape of on-chip tile '{self.name}' must keep the partition dimension {self.shape[0]}, "
                f"got {new_shape}")
        return Tensor(self.storage, new_shape, tuple(Span(0, 1, n) for n in new_shape))

    # ----------------------------------------------------------------------------- numpy access
    def _numpy_index(self) -> tuple[int | slice, ...]:
        return tuple(d if isinstance(d, int) else slice(d.start, d.start + d.step * (d.size - 1) + 1, d.step)
                     for d in self.dims)

    def array(self) -> np.ndarray:
        """The numpy view of this tensor's elements (storage dtype; bfloat16 is float32)."""
        if self._numpy is None:
            data = self.storage.data
            if data is None:
                raise NKISimulationError(
                    f"tensor '{self.name}' has no values: the kernel runs in cost-only mode (numerics=False)")
            base = data if self.layout == self.storage.shape else data.reshape(self.layout)
            self._numpy = base[self._numpy_index()]
        return self._numpy

    def written_mask(self) -> np.ndarray:
        """PSUM only: which elements of this view were written since allocation."""
        assert self.storage.written is not None
        written = self.storage.written
        base = written if self.layout == self.storage.shape else written.reshape(self.layout)
        return base[self._numpy_index()]

    # ----------------------------------------------------------------------------- trace helpers
    def region(self) -> tuple[tuple[int, int], ...]:
        """Half-open bounding box of the elements this view touches, per layout dimension."""
        return tuple((d, d + 1) if isinstance(d, int) else (d.start, d.start + d.step * (d.size - 1) + 1)
                     for d in self.dims)

    def contiguous_bytes(self) -> int:
        """Longest run of consecutive bytes this view reads or writes (per partition for on-chip tiles).

        DMA efficiency depends on it: the hardware moves one descriptor per contiguous chunk.
        """
        run = self.storage.dtype.itemsize
        first = 1 if self.buffer.on_chip else 0  # partitions are separate memories, never contiguous
        for axis in range(len(self.dims) - 1, first - 1, -1):
            dim = self.dims[axis]
            count = 1 if isinstance(dim, int) else dim.size
            if isinstance(dim, Span) and dim.step != 1 and count > 1:
                break
            run *= count
            if count != self.layout[axis]:
                break
        return run

    # ----------------------------------------------------------------------------- arithmetic sugar
    # Python operators lower to the nl.* functions, as in NKI (`a + b` is `nl.add(a, b)`).
    def __add__(self, other: Any) -> Tensor:
        return self.storage.operators.add(self, other)

    def __radd__(self, other: Any) -> Tensor:
        return self.storage.operators.add(other, self)

    def __sub__(self, other: Any) -> Tensor:
        return self.storage.operators.subtract(self, other)

    def __rsub__(self, other: Any) -> Tensor:
        return self.storage.operators.subtract(other, self)

    def __mul__(self, other: Any) -> Tensor:
        return self.storage.operators.multiply(self, other)

    def __rmul__(self, other: Any) -> Tensor:
        return self.storage.operators.multiply(other, self)

    def __truediv__(self, other: Any) -> Tensor:
        return self.storage.operators.divide(self, other)

    def __rtruediv__(self, other: Any) -> Tensor:
        return self.storage.operators.divide(other, self)

    def __neg__(self) -> Tensor:
        return self.storage.operators.negative(self)
