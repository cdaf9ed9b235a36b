"""Flat numpy storage of the launcher's buffers: views over it, data addresses, aligned fresh arrays, and the
layouts the arrays a call returns have."""

from __future__ import annotations

import ctypes

import numpy as np

from neuroncc.codegen.llvm.launch_plan import ALIGN, BufferKind
from neuroncc.hardware.host import ALIAS_PERIOD_BYTES, PLACED_OUTPUT_MIN_BYTES, placement_shift
from neuroncc.ir.dtypes import DType
from neuroncc.ir.types import contiguous_strides, storage_extent


def storage_dtype(name: str) -> np.dtype:
    """The numpy dtype a buffer of IR dtype ``name`` is stored in (bf16 as float32)."""
    return DType(name).numpy


def strided_view(flat: np.ndarray, spec) -> np.ndarray:
    """The numpy view of ``spec`` (a ValueSpec: offset, shape, element strides) over its buffer's flat storage
    (no copy). A spec of another element type than the buffer's (view_as_real/view_as_complex: c64 storage
    seen as f32 pairs, or back) reinterprets the buffer's bytes."""
    dtype = storage_dtype(spec.dtype)
    if dtype != flat.dtype:
        raw = flat.view(np.uint8)
        raw = raw[: len(raw) - len(raw) % dtype.itemsize]
        flat = raw.view(dtype)
    itemsize = flat.dtype.itemsize
    return byte_view(flat, spec.offset * itemsize, spec.shape, tuple(s * itemsize for s in spec.strides))


def byte_view(base: np.ndarray, byte_offset: int, shape, byte_strides) -> np.ndarray:
    """A view of ``base``'s elements from ``byte_offset`` with ``shape`` and ``byte_strides`` (no copy; keeps
    ``base`` alive, writable when it is). The ndarray constructor over ``base``'s buffer takes ~1.5 us where
    ``as_strided`` takes ~6 (it builds an ``__array_interface__`` object): extern steps build a view of each
    operand and result per call. A base without a contiguous buffer (an adopted tensor in a permuted layout) or
    a view the constructor's bounds check refuses goes through ``as_strided`` (a nonzero offset: 1-d bases only)."""
    try:
        return np.ndarray(shape, base.dtype, buffer=base, offset=byte_offset, strides=byte_strides)
    except (TypeError, ValueError, BufferError):
        start = base[byte_offset // base.dtype.itemsize:] if byte_offset else base
        return np.lib.stride_tricks.as_strided(start, shape, byte_strides)


def data_address(array: np.ndarray) -> int:
    """The address of ``array``'s first element: through the buffer protocol (~0.2 us) when the array is
    writable and contiguous, else ``__array_interface__`` (~1 us)."""
    try:
        return ctypes.addressof(_CHAR_AT(array))
    except (TypeError, ValueError, BufferError):
        return array.__array_interface__["data"][0]


_CHAR_AT = ctypes.c_char.from_buffer


def aligned_empty(extent: int, dtype: np.dtype) -> tuple[np.ndarray, int]:
    """A fresh 1-d array whose data starts aligned to ``ALIGN`` (a cache line: the kernels' stores rely on it),
    and its address."""
    raw = np.empty(extent * dtype.itemsize + ALIGN, dtype=np.uint8)
    address = data_address(raw)
    shift = -address % ALIGN
    return raw[shift:shift + extent * dtype.itemsize].view(dtype), address + shift


def placed_empty(extent: int, dtype: np.dtype, near: list[int]) -> tuple[np.ndarray, int]:
    """:func:`aligned_empty` for an output the kernels write while they read the memory at ``near`` (data
    addresses): one of at least PLACED_OUTPUT_MIN_BYTES is not 4K-aliased with any of them
    (:func:`~neuroncc.hardware.host.placement_shift`: where it was allocated when it is not, else in memory one
    alias period longer at the shift); its address is appended to ``near``."""
    array, address = aligned_empty(extent, dtype)
    nbytes = extent * dtype.itemsize
    if nbytes >= PLACED_OUTPUT_MIN_BYTES:
        if placement_shift(address, near):
            raw = np.empty(nbytes + ALIGN + ALIAS_PERIOD_BYTES, dtype=np.uint8)
            start = -data_address(raw) % ALIGN
            start += placement_shift(data_address(raw) + start, near)
            array, address = raw[start:start + nbytes].view(dtype), data_address(raw) + start
        near.append(address)
    return array, address


def flat_view(array: np.ndarray, extent: int) -> np.ndarray:
    """A 1-d view of ``extent`` elements starting at ``array``'s first element (keeps ``array`` alive)."""
    return byte_view(array, 0, (extent,), (array.dtype.itemsize,))


def copy_layouts(function) -> list[tuple[int, tuple[int, ...], tuple[int, ...]] | None]:
    """Per output of ``function``: None (an output copied is copied in C order) or (extent, shape, strides)
    of the strided type it is copied into."""
    return [None if v.type.strides is None else
            (storage_extent(v.type.shape, v.type.strides), v.type.shape, v.type.strides)
            for v in function.outputs]


def returned_strides(plan, copies: list) -> list[tuple[int, ...]]:
    """The element strides of each array a call returns, fixed at build time: an output with a buffer of its
    own (fresh or supplied by an extern step, which falls back to a copy in the planned layout) is returned in
    its planned layout, any other output is a copy (``copies``: from :func:`copy_layouts`). The torch front end
    reports them to AOTAutograd for saved activations."""
    own = {buffer.index for buffer in plan.buffers if buffer.kind == BufferKind.OUTPUT}
    own |= {position for position, _ in plan.in_place}  # in the input's storage, in the input's layout
    strides = []
    for position, value_id in enumerate(plan.outputs):
        spec = plan.values[value_id]
        if position in own:
            strides.append(tuple(spec.strides))
        elif copies[position] is not None:
            strides.append(tuple(copies[position][2]))
        else:
            strides.append(contiguous_strides(tuple(spec.shape)))
    return strides
