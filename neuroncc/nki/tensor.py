"""Simulator tensors: a Storage (one allocation) and Tensor views into it.

A ``Tensor`` is an affine access pattern over a storage: the shape the storage is seen as (``layout``; it
differs from the allocation shape only after ``reshape`` or ``.ap()``), the element the view starts at
(``offset``, one index per layout dimension) and, per view axis, its size and how far one step along it moves
in every layout dimension (``Axis.steps``). Basic slicing keeps one layout dimension per axis; NKI 0.1's
advanced indexing (``x[i_p, 2 * i_f + 1]``), the 0.2+ ``.ap(pattern)`` and free-axis permutations give axes
that step several layout dimensions, or layout dimensions stepped by several axes. Every view of a tile
writes through to the same numpy array (a strided view of it), and each view knows the box of its storage
it touches: what the trace records and the cost model uses for dependencies.

On-chip tensors (SBUF, PSUM) are 2-D or more and layout dimension 0 is the partition dimension. NKI 0.1's
block dimensions (``nl.ndarray((4, nl.par_dim(128), 512))``) are ``BlockedTensor``: each block is a tile of its
own, allocated when first used. In cost-only mode (``numerics=False``) storages have no numpy data at all;
views still compute shapes and boxes.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from neuroncc.nki.active import current
from neuroncc.nki.dtypes import DType, dtype_of
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


class Axis(NamedTuple):
    """One axis of a view: ``size`` elements, each step moving ``steps[d]`` along layout dimension ``d``."""

    size: int
    steps: tuple[int, ...]


class Storage:
    """One allocation: buffer, dtype, shape and (unless cost-only) the numpy array holding its values.

    ``written`` exists for PSUM only: NKI's default matmul accumulation overwrites a PSUM element the first
    time it is written after allocation and adds to it afterwards, so each element's written state is kept.
    ``transient`` marks the result tile of a value-returning call (NKI 0.1 style, ``nl.exp(x)``): assigning it
    into a tensor lets the instruction that produced it write there directly, as NKI's compiler does.
    """

    __slots__ = ("id", "buffer", "dtype", "shape", "name", "data", "written", "transient")

    def __init__(self, id: int, buffer: Buffer, dtype: DType, shape: tuple[int, ...], name: str,
                 data: np.ndarray | None, written: np.ndarray | None = None):
        self.id = id
        self.buffer = buffer
        self.dtype = dtype
        self.shape = shape
        self.name = name
        self.data = data
        if written is None and buffer is Buffer.PSUM and data is not None:
            written = np.zeros(shape, dtype=bool)
        self.written = written
        self.transient = False

    @property
    def bytes_per_partition(self) -> int:
        return math.prod(self.shape[1:]) * self.dtype.itemsize

    def __repr__(self) -> str:
        return f"Storage({self.name!r}, {self.buffer.value}, {self.shape}, {self.dtype.name})"


def _is_int_index(key: object) -> bool:
    return isinstance(key, (int, np.integer)) and not isinstance(key, bool)


def _row_major(layout: tuple[int, ...]) -> tuple[int, ...]:
    strides, running = [], 1
    for n in reversed(layout):
        strides.append(running)
        running *= n
    return tuple(reversed(strides))


def _unit(ndim: int, d: int, step: int = 1) -> tuple[int, ...]:
    return tuple(step if i == d else 0 for i in range(ndim))


def _scaled(steps: tuple[int, ...], k: int) -> tuple[int, ...]:
    return tuple(s * k for s in steps)


def _added(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(x + y for x, y in zip(a, b))


class Tensor:
    """A view of a Storage; what kernels see for every tile and HBM tensor (NKI's ``NkiTensor``)."""

    __slots__ = ("storage", "layout", "offset", "axes", "_shape", "_numpy", "_region")

    def __init__(self, storage: Storage, layout: tuple[int, ...], offset: tuple[int, ...],
                 axes: tuple[Axis, ...]):
        self.storage = storage
        self.layout = layout
        self.offset = offset
        self.axes = axes
        self._shape = tuple(a.size for a in axes)
        self._numpy: np.ndarray | None = None
        self._region: tuple[tuple[int, int], ...] | None = None

    @classmethod
    def whole(cls, storage: Storage) -> Tensor:
        shape = storage.shape
        return cls(storage, shape, (0,) * len(shape), tuple(Axis(n, _unit(len(shape), d)) for d, n in enumerate(shape)))

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
        """Whether axis 0 walks the storage's partitions (layout dim 0) and no other axis does."""
        if not self.axes:
            return False
        first = self.axes[0]
        if any(first.steps[1:]) or (first.steps[0] == 0 and first.size > 1):
            return False
        return all(a.steps[0] == 0 or a.size == 1 for a in self.axes[1:])

    @property
    def partition_start(self) -> int:
        return self.offset[0]

    @property
    def partition_step(self) -> int:
        return self.axes[0].steps[0] if self.axes and self.axes[0].size > 1 else 1

    def __repr__(self) -> str:
        return f"Tensor({self.name!r}, {self.buffer.value}, shape={self.shape}, dtype={self.dtype.name})"

    def __len__(self) -> int:
        return self._shape[0]

    # ----------------------------------------------------------------------------- indexing
    def __getitem__(self, key: Any) -> Tensor:
        keys = key if isinstance(key, tuple) else (key,)
        for k in keys:
            # NKI 0.1 index expressions (``neuroncc.nki.index``) build their own strided views.
            build = getattr(k, "advanced_view", None)
            if build is not None:
                return build(self, keys)
        if any(k is Ellipsis for k in keys):
            at = keys.index(Ellipsis)
            fill = len(self.axes) - (len(keys) - 1)
            keys = keys[:at] + (slice(None),) * fill + keys[at + 1:]
        if len(keys) > len(self.axes):
            raise NKISimulationError(f"too many indices for tensor '{self.name}' of shape {self.shape}: got {len(keys)}")
        offset = self.offset
        axes: list[Axis] = []
        for position, (k, axis) in enumerate(zip(keys, self.axes)):
            if k is None:
                raise NKISimulationError(f"tensor '{self.name}': None (new axis) is not a supported index")
            picked = self._index_one(position, axis, k)
            if isinstance(picked, int):
                offset = _added(offset, _scaled(axis.steps, picked))
            else:
                start, count, step = picked
                offset = _added(offset, _scaled(axis.steps, start))
                axes.append(Axis(count, _scaled(axis.steps, step)))
        axes.extend(self.axes[len(keys):])
        return Tensor(self.storage, self.layout, offset, tuple(axes))

    def _index_one(self, position: int, axis: Axis, key: object) -> int | tuple[int, int, int]:
        size = axis.size
        if _is_int_index(key):
            index = int(key)  # type: ignore[call-overload]
            if index < 0:
                index += size
            if not 0 <= index < size:
                raise NKISimulationError(
                    f"index {key} is out of bounds for dimension {position} of size {size} in tensor '{self.name}'")
            return index
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
                    f"slice [{start}:{stop}] is out of bounds for dimension {position} of size {size} in tensor "
                    f"'{self.name}'")
            count = max(0, -(-(stop - start) // step))
        else:
            raise NKISimulationError(
                f"unsupported index {key!r} for tensor '{self.name}': use ints, slices, nl.ds(start, size) or "
                f"nl.arange expressions")
        if count <= 0 or start < 0 or start + (count - 1) * step >= size:
            raise NKISimulationError(
                f"slice of {count} elements from {start} is out of bounds (or empty) for dimension {position} "
                f"of size {size} in tensor '{self.name}'")
        return start, count, step

    def __setitem__(self, key: Any, value: Any) -> None:
        # Assignment is a copy instruction of nki.language, which the running launch provides.
        current().api.assign(self[key], value)

    def reshape(self, shape: tuple[int, ...] | list[int]) -> Tensor:
        """The same elements seen with a new shape; the view must cover its storage in row-major order."""
        new_shape = tuple(int(n) for n in shape)
        if math.prod(new_shape) != self.size:
            raise NKISimulationError(f"cannot reshape tensor '{self.name}' of shape {self.shape} to {new_shape}")
        if not self.is_whole():
            raise NKISimulationError(f"reshape needs the whole tensor '{self.name}', not a slice of it")
        if self.buffer.on_chip and new_shape[0] != self.shape[0]:
            raise NKISimulationError(
                f"reshape of on-chip tile '{self.name}' must keep the partition dimension {self.shape[0]}, "
                f"got {new_shape}")
        return Tensor(self.storage, new_shape, (0,) * len(new_shape),
                      tuple(Axis(n, _unit(len(new_shape), d)) for d, n in enumerate(new_shape)))

    def is_whole(self) -> bool:
        """Whether this view reads every element of its storage in row-major order."""
        if self.size != math.prod(self.storage.shape) or any(self.offset):
            return False
        strides = _row_major(self.layout)
        expected = 1
        for axis in reversed(self.axes):
            if axis.size == 1:
                continue
            if sum(s * k for s, k in zip(axis.steps, strides)) != expected:
                return False
            expected *= axis.size
        return True

    def ap(self, pattern: list[list[int]] | tuple[tuple[int, int], ...], offset: int = 0, dtype: object = None,
           **dynamic: object) -> Tensor:
        """An access pattern over this tensor's storage, as NKI 0.2+'s ``tensor.ap(pattern, offset, dtype)``.

        ``pattern`` is ``[[step, num], ...]`` (outermost first) in elements of the storage seen flat (row-major),
        ``offset`` the first element. For an on-chip tile the first pair walks partitions (its step a multiple
        of the elements per partition) and the others stay within a partition. ``dtype`` first reinterprets
        the storage's bytes as another type (``_x4`` packed MX data, uint8 scales). Dynamic indirection
        (``vector_offset``, ``scalar_offset``) is not simulated.
        """
        if any(value is not None for value in dynamic.values()):
            raise NKISimulationError(
                f".ap() with {', '.join(k for k, v in dynamic.items() if v is not None)} (dynamic indirection) is not "
                f"supported by the simulator")
        storage = self.storage if dtype is None else _reinterpreted(self.storage, dtype_of(dtype))
        base = _row_major(self.layout)
        start = sum(o * s for o, s in zip(self.offset, base))
        if dtype is not None:
            ratio = self.storage.dtype.itemsize / storage.dtype.itemsize
            start = int(start * ratio)
        pairs = [(int(step), int(num)) for step, num in pattern]
        if not pairs or any(num <= 0 for _, num in pairs):
            raise NKISimulationError(f".ap() pattern {pattern} needs [step, num] pairs with num >= 1")
        flat_start = start + int(offset)
        if storage.buffer.on_chip:
            partitions, per_partition = storage.shape[0], math.prod(storage.shape[1:])
            layout = (partitions, per_partition)
            (pstep, pnum), rest = pairs[0], pairs[1:]
            if pstep % per_partition:
                raise NKISimulationError(
                    f".ap() on on-chip tile '{self.name}': the first pattern pair [{pstep}, {pnum}] must step whole "
                    f"partitions ({per_partition} elements each)")
            first, free0 = divmod(flat_start, per_partition)
            axes = [Axis(pnum, (pstep // per_partition, 0))] + [Axis(num, (0, step)) for step, num in rest]
            view = Tensor(storage, layout, (first, free0), tuple(axes))
        else:
            layout = (math.prod(storage.shape),)
            view = Tensor(storage, layout, (flat_start,), tuple(Axis(num, (step,)) for step, num in pairs))
        view.require_in_bounds(".ap()")
        return view

    def broadcast_to(self, shape: tuple[int, ...] | list[int]) -> Tensor:
        """``shape`` by repeating size-1 axes (numpy rules): a view along free axes (nothing is copied); an
        on-chip tile broadcast across partitions (``(1, F)`` to ``(P, F)``) is a copy instruction, as in
        hardware (NKI 0.1's ``tile.broadcast_to``)."""
        target = tuple(int(n) for n in shape)
        if len(target) < self.ndim:
            raise NKISimulationError(f"cannot broadcast tensor '{self.name}' of shape {self.shape} to {target}")
        if self.buffer.on_chip and len(target) > self.ndim:
            raise NKISimulationError(
                f"broadcast_to of on-chip tile '{self.name}' cannot add leading dimensions (the partition dimension "
                f"stays first)")
        axes = [Axis(1, (0,) * len(self.layout))] * (len(target) - self.ndim) + list(self.axes)
        out = []
        for axis, n in zip(axes, target):
            if axis.size == n:
                out.append(axis)
            elif axis.size == 1:
                out.append(Axis(n, (0,) * len(self.layout)))
            else:
                raise NKISimulationError(f"cannot broadcast tensor '{self.name}' of shape {self.shape} to {target}")
        if self.buffer.on_chip and target[0] != self.shape[0]:
            return current().api.broadcast_to(self, target)
        return Tensor(self.storage, self.layout, self.offset, tuple(out))

    def expand_dims(self, axis: int) -> Tensor:
        """A view with a new axis of size 1 at ``axis``."""
        position = axis + self.ndim + 1 if axis < 0 else axis
        axes = list(self.axes)
        axes.insert(position, Axis(1, (0,) * len(self.layout)))
        return Tensor(self.storage, self.layout, self.offset, tuple(axes))

    def view(self, dtype: object) -> Tensor:
        """The whole tensor's bytes reinterpreted as ``dtype`` (NKI 0.1's ``tensor.view``)."""
        if not self.is_whole():
            raise NKISimulationError(f"view(dtype) needs the whole tensor '{self.name}', not a slice of it")
        storage = _reinterpreted(self.storage, dtype_of(dtype))
        return Tensor.whole(storage)

    # ----------------------------------------------------------------------------- bounds
    def region(self) -> tuple[tuple[int, int], ...]:
        """Half-open bounding box of the elements this view touches, per layout dimension."""
        if self._region is None:
            lows, highs = list(self.offset), list(self.offset)
            for axis in self.axes:
                for d, step in enumerate(axis.steps):
                    reach = step * (axis.size - 1)
                    if reach < 0:
                        lows[d] += reach
                    else:
                        highs[d] += reach
            self._region = tuple((lo, hi + 1) for lo, hi in zip(lows, highs))
        return self._region

    def in_bounds(self) -> bool:
        return all(lo >= 0 and hi <= n for (lo, hi), n in zip(self.region(), self.layout))

    def require_in_bounds(self, what: str = "access") -> None:
        if not self.in_bounds():
            box = ", ".join(f"{lo}:{hi}" for lo, hi in self.region())
            raise NKISimulationError(
                f"{what} of tensor '{self.name}' touches [{box}], outside its shape {self.layout}; mask or slice it")

    # ----------------------------------------------------------------------------- numpy access
    def _strided(self, base: np.ndarray) -> np.ndarray:
        self.require_in_bounds()
        flat = base.reshape(-1)
        strides = _row_major(self.layout)
        start = sum(o * s for o, s in zip(self.offset, strides))
        element_strides = [sum(step * s for step, s in zip(axis.steps, strides)) for axis in self.axes]
        if not self.axes:
            return flat[start:start + 1].reshape(())
        return np.lib.stride_tricks.as_strided(
            flat[start:], shape=self._shape, strides=[e * flat.itemsize for e in element_strides])

    def array(self) -> np.ndarray:
        """The numpy view of this tensor's elements (storage dtype; bfloat16 is float32)."""
        if self._numpy is None:
            data = self.storage.data
            if data is None:
                raise NKISimulationError(
                    f"tensor '{self.name}' has no values: the kernel runs in cost-only mode (numerics=False)")
            self._numpy = self._strided(data)
        return self._numpy

    def written_mask(self) -> np.ndarray:
        """PSUM only: which elements of this view were written since allocation."""
        assert self.storage.written is not None
        return self._strided(self.storage.written)

    # ----------------------------------------------------------------------------- trace helpers
    def contiguous_bytes(self) -> int:
        """Longest run of consecutive bytes this view reads or writes (per partition for on-chip tiles).

        DMA efficiency depends on it: the hardware moves one descriptor per contiguous chunk.
        """
        strides = _row_major(self.layout)
        run = 1
        first = 1 if self.buffer.on_chip else 0  # partitions are separate memories, never contiguous
        for axis in reversed(self.axes[first:]):
            if axis.size == 1:
                continue
            if sum(step * s for step, s in zip(axis.steps, strides)) != run:
                break
            run *= axis.size
        return run * self.storage.dtype.itemsize

    # ----------------------------------------------------------------------------- arithmetic sugar
    # Python operators lower to the nl.* functions, as in NKI (`a + b` is `nl.add(a, b)`).
    def __add__(self, other: Any) -> Tensor:
        return current().api.add(self, other)

    def __radd__(self, other: Any) -> Tensor:
        return current().api.add(other, self)

    def __sub__(self, other: Any) -> Tensor:
        return current().api.subtract(self, other)

    def __rsub__(self, other: Any) -> Tensor:
        return current().api.subtract(other, self)

    def __mul__(self, other: Any) -> Tensor:
        return current().api.multiply(self, other)

    def __rmul__(self, other: Any) -> Tensor:
        return current().api.multiply(other, self)

    def __truediv__(self, other: Any) -> Tensor:
        return current().api.divide(self, other)

    def __rtruediv__(self, other: Any) -> Tensor:
        return current().api.divide(other, self)

    def __neg__(self) -> Tensor:
        return current().api.negative(self)

    def __iadd__(self, other: Any) -> Tensor:
        # `acc += x` accumulates into acc itself (a PSUM matmul result is written with accumulation).
        return current().api.accumulate(self, other, "add")

    def __isub__(self, other: Any) -> Tensor:
        return current().api.accumulate(self, other, "subtract")

    def __imul__(self, other: Any) -> Tensor:
        return current().api.accumulate(self, other, "multiply")

    def astype(self, dtype: object) -> Tensor:
        """A converted copy (NKI 0.1's ``tensor.astype``: a copy always happens)."""
        return current().api.copy(self, dtype=dtype)

    def assert_shape(self, shape: tuple[int, ...] | list[int]) -> Tensor:
        """NKI 0.1's ``tensor.assert_shape``: check the shape, return the tensor."""
        if tuple(shape) != self.shape:
            raise NKISimulationError(f"tensor '{self.name}' has shape {self.shape}, expected {tuple(shape)}")
        return self


def _reinterpreted(storage: Storage, dtype: DType) -> Storage:
    """The same bytes seen as ``dtype``: both types must keep exact bits in their numpy storage."""
    if dtype == storage.dtype:
        return storage
    for kind in (storage.dtype, dtype):
        if not kind.exact_bits:
            raise NKISimulationError(
                f"cannot reinterpret tensor '{storage.name}' ({storage.dtype.name}) as {dtype.name}: the simulator "
                f"keeps {kind.name} as rounded values, not bits")
    total_bytes = math.prod(storage.shape) * storage.dtype.itemsize
    if storage.buffer.on_chip:
        per_partition = math.prod(storage.shape[1:]) * storage.dtype.itemsize
        if per_partition % dtype.itemsize:
            raise NKISimulationError(
                f"cannot reinterpret tile '{storage.name}' as {dtype.name}: {per_partition} bytes per partition")
        shape = (storage.shape[0], per_partition // dtype.itemsize)
    else:
        if total_bytes % dtype.itemsize:
            raise NKISimulationError(f"cannot reinterpret tensor '{storage.name}' of {total_bytes} bytes as {dtype.name}")
        shape = (total_bytes // dtype.itemsize,)
    if storage.buffer is Buffer.PSUM and dtype.itemsize != storage.dtype.itemsize:
        raise NKISimulationError(f"cannot reinterpret psum tile '{storage.name}' with a different element size")
    data = None if storage.data is None else storage.data.reshape(-1).view(dtype.storage).reshape(shape)
    written = None if storage.written is None else storage.written.reshape(shape)
    # Same id: the trace sees one tile, so dependencies between the two views are kept.
    return Storage(storage.id, storage.buffer, dtype, shape, storage.name, data, written)
