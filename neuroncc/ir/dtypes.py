"""Element types of the IR and their numpy representations.

complex64 (``c64``) is stored interleaved, (real, imaginary) float32 pairs, which is numpy's complex64 and
PyTorch's layout: ``view_as_real`` reinterprets it as float32 with a trailing dimension of 2.

bfloat16 has no numpy dtype. The reference interpreter stores bf16 tensors as float32 arrays whose values
are exactly representable in bf16 (rounded to nearest-even after every op), which is also how PyTorch's CPU
kernels compute bf16: widen to float32, compute, round once.
"""

from __future__ import annotations

import enum

import numpy as np


class DType(enum.Enum):
    """A device element type. The value is the spelling used in the text format."""

    f32 = "f32"
    bf16 = "bf16"
    f16 = "f16"
    i64 = "i64"
    i32 = "i32"
    i16 = "i16"
    i8 = "i8"
    u8 = "u8"
    bool = "bool"
    c64 = "c64"

    @property
    def is_float(self) -> bool:
        return self in _FLOATS

    @property
    def is_int(self) -> bool:
        return self in _INTS

    @property
    def is_bool(self) -> bool:
        return self is DType.bool

    @property
    def is_complex(self) -> bool:
        return self is DType.c64

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self]

    @property
    def numpy(self) -> np.dtype:
        """The numpy dtype the reference interpreter stores this type in (float32 for bf16)."""
        return _STORAGE[self]

    @property
    def compute(self) -> np.dtype:
        """The numpy dtype arithmetic runs in: float32 for all floats (as PyTorch's CPU kernels do)."""
        return np.dtype(np.float32) if self.is_float else _STORAGE[self]

    def __repr__(self) -> str:
        return f"DType.{self.name}"

    def __str__(self) -> str:
        return self.value


_FLOATS = frozenset({DType.f32, DType.bf16, DType.f16})
_INTS = frozenset({DType.i64, DType.i32, DType.i16, DType.i8, DType.u8})
_ITEMSIZE = {
    DType.f32: 4, DType.bf16: 2, DType.f16: 2, DType.i64: 8, DType.i32: 4,
    DType.i16: 2, DType.i8: 1, DType.u8: 1, DType.bool: 1, DType.c64: 8,
}
_STORAGE = {
    DType.f32: np.dtype(np.float32), DType.bf16: np.dtype(np.float32), DType.f16: np.dtype(np.float16),
    DType.i64: np.dtype(np.int64), DType.i32: np.dtype(np.int32), DType.i16: np.dtype(np.int16),
    DType.i8: np.dtype(np.int8), DType.u8: np.dtype(np.uint8), DType.bool: np.dtype(np.bool_),
    DType.c64: np.dtype(np.complex64),
}
_FROM_NUMPY = {
    np.dtype(np.float32): DType.f32, np.dtype(np.float16): DType.f16, np.dtype(np.int64): DType.i64,
    np.dtype(np.int32): DType.i32, np.dtype(np.int16): DType.i16, np.dtype(np.int8): DType.i8,
    np.dtype(np.uint8): DType.u8, np.dtype(np.bool_): DType.bool, np.dtype(np.complex64): DType.c64,
}


def dtype_from_numpy(dtype: np.dtype) -> DType:
    """The IR type of a numpy array (float64 and complex128 are not device types and are refused)."""
    try:
        return _FROM_NUMPY[np.dtype(dtype)]
    except KeyError:
        raise TypeError(f"numpy dtype {np.dtype(dtype)} has no neuroncc device type") from None


def round_to_bf16(array: np.ndarray) -> np.ndarray:
    """Round float32 values to the nearest bfloat16 (ties to even), keeping float32 storage.

    NaN stays NaN (a quiet NaN with the sign kept); infinities and overflow behave as in IEEE rounding.
    """
    f32 = np.ascontiguousarray(array, dtype=np.float32)
    bits = f32.view(np.uint32)
    rounding_bias = ((bits >> 16) & 1) + np.uint32(0x7FFF)
    rounded = ((bits + rounding_bias) & np.uint32(0xFFFF0000)).astype(np.uint32)
    rounded = np.where(np.isnan(f32), (bits & np.uint32(0xFFFF0000)) | np.uint32(0x00400000), rounded)
    return rounded.view(np.float32).reshape(np.shape(array))


def bf16_words(values: np.ndarray) -> np.ndarray:
    """bf16 values (float32 storage, low halves zero) as their 16-bit words (int16), what ``bitcast`` to i16 gives."""
    return (np.asarray(values, dtype=np.float32, order="C").view(np.uint32) >> 16).astype(np.uint16).view(np.int16)


def bf16_from_words(words: np.ndarray) -> np.ndarray:
    """16-bit words (int16) as the bf16 values whose high halves they are (float32 storage)."""
    return (np.asarray(words, order="C").view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def to_storage(array: np.ndarray, dtype: DType) -> np.ndarray:
    """Convert a computed array to ``dtype``'s storage form (rounding bf16, casting the rest)."""
    with np.errstate(over="ignore", invalid="ignore"):  # overflow to inf is IEEE rounding, not an error
        if dtype is DType.bf16:
            return round_to_bf16(np.asarray(array, dtype=np.float32))
        return np.asarray(array).astype(dtype.numpy, copy=False)
