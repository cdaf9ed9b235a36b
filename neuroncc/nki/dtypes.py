"""NKI data types and how the simulator holds their values in numpy.

numpy has no bfloat16, so a bfloat16 tensor is stored as float32 whose values are always exactly
representable in bfloat16: every write rounds to the nearest bfloat16 (ties to even) by clearing the low 16
bits of the float32 pattern. The 8-bit floats (float8_e4m3, float8_e5m2, float8_e4m3fn) and tfloat32 are kept
the same way, rounded by ``minifloat``. float16 uses numpy's own float16. The engines compute in float32
(ScalarE and VectorE always do), so reading a tile gives float32 for every float dtype.

Two kinds keep raw bits instead: the MX scale type float8_e8m0fnu (one uint8 exponent code) and the 4-packed
MX data types (float8_e5m2_x4, float8_e4m3fn_x4: four fp8 codes in a uint32; float4_e2m1fn_x4: four fp4 codes
in a uint16). Only the MX instructions read their values; copies move their bits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from neuroncc.nki import minifloat
from neuroncc.nki.errors import NKISimulationError


@dataclass(frozen=True, slots=True)
class DType:
    """An NKI element type: its name, size on the device and the numpy dtype that stores its values."""

    name: str
    itemsize: int  # bytes per element on the device (bfloat16 is 2 even though we store float32)
    storage: np.dtype
    kind: str  # "float" | "int" | "uint" | "bool" | "scale" (e8m0 codes) | "packed" (_x4 MX data)
    element: minifloat.MiniFloat | None = None  # the rounding of a narrow float, or the packed element format

    @property
    def is_float(self) -> bool:
        return self.kind in ("float", "scale")

    @property
    def is_packed(self) -> bool:
        return self.kind == "packed"

    @property
    def exact_bits(self) -> bool:
        """Whether the numpy storage holds the device's exact bits (so the bytes may be reinterpreted)."""
        return (self.storage.itemsize == self.itemsize and self.element is None) or self.kind in ("packed", "scale")

    @property
    def is_integer(self) -> bool:
        return self.kind in ("int", "uint")

    def __repr__(self) -> str:
        return f"nl.{self.name}"

    def __str__(self) -> str:
        return self.name


float32 = DType("float32", 4, np.dtype(np.float32), "float")
bfloat16 = DType("bfloat16", 2, np.dtype(np.float32), "float")
float16 = DType("float16", 2, np.dtype(np.float16), "float")
int8 = DType("int8", 1, np.dtype(np.int8), "int")
int16 = DType("int16", 2, np.dtype(np.int16), "int")
int32 = DType("int32", 4, np.dtype(np.int32), "int")
uint8 = DType("uint8", 1, np.dtype(np.uint8), "uint")
uint16 = DType("uint16", 2, np.dtype(np.uint16), "uint")
uint32 = DType("uint32", 4, np.dtype(np.uint32), "uint")
bool_ = DType("bool_", 1, np.dtype(np.bool_), "bool")
tfloat32 = DType("tfloat32", 4, np.dtype(np.float32), "float", minifloat.TFLOAT32)
float8_e4m3 = DType("float8_e4m3", 1, np.dtype(np.float32), "float", minifloat.FLOAT8_E4M3)
float8_e5m2 = DType("float8_e5m2", 1, np.dtype(np.float32), "float", minifloat.FLOAT8_E5M2)
float8_e4m3fn = DType("float8_e4m3fn", 1, np.dtype(np.float32), "float", minifloat.FLOAT8_E4M3FN)
float8_e8m0fnu = DType("float8_e8m0fnu", 1, np.dtype(np.uint8), "scale")
float8_e5m2_x4 = DType("float8_e5m2_x4", 4, np.dtype(np.uint32), "packed", minifloat.FLOAT8_E5M2)
float8_e4m3fn_x4 = DType("float8_e4m3fn_x4", 4, np.dtype(np.uint32), "packed", minifloat.FLOAT8_E4M3FN)
float4_e2m1fn_x4 = DType("float4_e2m1fn_x4", 2, np.dtype(np.uint16), "packed", minifloat.FLOAT4_E2M1FN)

ALL_DTYPES: tuple[DType, ...] = (
    float32, bfloat16, float16, int8, int16, int32, uint8, uint16, uint32, bool_, tfloat32, float8_e4m3,
    float8_e5m2, float8_e4m3fn, float8_e8m0fnu, float8_e5m2_x4, float8_e4m3fn_x4, float4_e2m1fn_x4,
)
_BY_NAME = {d.name: d for d in ALL_DTYPES} | {"bool": bool_, "fp32": float32, "bf16": bfloat16, "fp16": float16}

# numpy dtypes that map one-to-one onto an NKI dtype (float32 maps to float32, never to bfloat16).
_BY_NUMPY = {
    np.dtype(np.float32): float32,
    np.dtype(np.float16): float16,
    np.dtype(np.int8): int8,
    np.dtype(np.int16): int16,
    np.dtype(np.int32): int32,
    np.dtype(np.uint8): uint8,
    np.dtype(np.uint16): uint16,
    np.dtype(np.uint32): uint32,
    np.dtype(np.bool_): bool_,
}


def dtype_of(value: object) -> DType:
    """The NKI dtype named by ``value``: a DType, a name ("bfloat16"), or a numpy dtype / scalar type."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        if value in _BY_NAME:
            return _BY_NAME[value]
        raise NKISimulationError(f"unknown dtype {value!r}; supported: {', '.join(d.name for d in ALL_DTYPES)}")
    try:
        numpy_dtype = np.dtype(value)  # type: ignore[call-overload]
    except TypeError:
        raise NKISimulationError(f"{value!r} is not a dtype") from None
    if numpy_dtype == np.float64:
        # Device kernels have no float64; numpy defaults to it, so a float64 host array means float32.
        return float32
    if numpy_dtype == np.int64:
        return int32
    if numpy_dtype in _BY_NUMPY:
        return _BY_NUMPY[numpy_dtype]
    if numpy_dtype.name in _BY_NAME:  # ml_dtypes' bfloat16 / float8_* arrays, when that library is installed
        return _BY_NAME[numpy_dtype.name]
    raise NKISimulationError(f"numpy dtype {numpy_dtype} has no NKI equivalent")


def round_to_bfloat16(values: np.ndarray) -> np.ndarray:
    """Round float values to the nearest bfloat16 (ties to even), returned as float32.

    Adding 0x7FFF plus the lowest kept bit and truncating is round-to-nearest-even on the top 16 bits. NaN
    would carry into the exponent and become inf, so NaNs are kept as a quiet NaN explicitly.
    """
    as_f32 = np.asarray(values, dtype=np.float32)
    bits = as_f32.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(as_f32), np.float32(np.nan), rounded)


def cast(values: np.ndarray | float | int, dtype: DType) -> np.ndarray:
    """Convert computed values to ``dtype``'s storage, the way a write to a tile of that dtype does.

    Float to integer rounds to nearest (ties to even) and saturates at the type's range, NaN becomes 0;
    the hardware's exact float-to-int behaviour is not published, so this is a documented choice.
    """
    array = np.asarray(values)
    if dtype is bfloat16:
        return round_to_bfloat16(array)
    if dtype.element is not None and dtype.kind == "float":
        return minifloat.round_to(array, dtype.element)
    if dtype.kind == "scale":
        return minifloat.e8m0_encode(array)
    if dtype.kind == "packed":
        raise NKISimulationError(
            f"values cannot be converted to {dtype.name}: packed MX data is written by nisa.quantize_mx or copied "
            f"bit for bit from a tensor of the same type")
    if dtype.kind == "float":
        with np.errstate(over="ignore", invalid="ignore"):
            return array.astype(dtype.storage)
    if dtype.kind == "bool":
        return array != 0
    info = np.iinfo(dtype.storage)
    if array.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            array = np.nan_to_num(np.rint(array.astype(np.float64)), nan=0.0)
    return np.clip(array, info.min, info.max).astype(dtype.storage)


def values_of(raw: np.ndarray, dtype: DType) -> np.ndarray:
    """The numbers a stored array means: e8m0 codes become powers of two; packed data has no single value."""
    if dtype.kind == "scale":
        return minifloat.e8m0_decode(raw)
    if dtype.kind == "packed":
        raise NKISimulationError(
            f"{dtype.name} holds four packed values per element; only nisa.nc_matmul_mx and copies can read it")
    return raw


def compute_dtype(*dtypes: DType) -> np.dtype:
    """The numpy dtype engines compute in for these operand dtypes: float32 unless everything is integral."""
    if all(d.kind != "float" for d in dtypes):
        return np.dtype(np.int64)
    return np.dtype(np.float32)


def promote(a: DType, b: DType) -> DType:
    """Result dtype of an elementwise op on tiles of dtypes ``a`` and ``b`` (nl.* ops without ``dtype=``).

    Floats win over integers; mixing two different 16-bit floats, or a 16-bit float with float32, gives
    float32; among integers the wider type wins (signed on a tie).
    """
    if a == b:
        return a
    if a.is_packed or b.is_packed:
        raise NKISimulationError(f"no elementwise arithmetic on packed MX data ({a.name}, {b.name})")
    if a.is_float or b.is_float:
        floats = [d for d in (a, b) if d.is_float]
        return floats[0] if len(floats) == 1 else float32
    if a.kind == "bool":
        return b
    if b.kind == "bool":
        return a
    wider = max((a, b), key=lambda d: (d.itemsize, d.kind == "int"))
    return wider


def uninitialised_fill(dtype: DType) -> object:
    """What a fresh ``nl.ndarray`` holds: NaN for floats so a read-before-write shows up in the output.

    Integers cannot hold NaN; they get the type's most negative (or, unsigned, largest) value, which is as
    unlikely as we can make it to pass for real data.
    """
    if dtype.kind == "float":
        return np.nan
    if dtype.kind in ("scale", "packed"):
        return np.iinfo(dtype.storage).max  # all ones: NaN codes
    if dtype.kind == "bool":
        return True
    info = np.iinfo(dtype.storage)
    return info.min if dtype.kind == "int" else info.max


@dataclass(frozen=True, slots=True)
class HostArray:
    """Host values with an explicit NKI dtype; how to pass bfloat16 / fp8 inputs, which numpy cannot hold."""

    values: np.ndarray
    dtype: DType

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.values.shape)

    def __array__(self, dtype: object = None, copy: object = None) -> np.ndarray:
        return self.values if dtype is None else self.values.astype(dtype)


def host_array(values: np.ndarray, dtype: object) -> HostArray:
    """``values`` as a kernel input of ``dtype`` (e.g. ``nl.bfloat16``; values are rounded to it)."""
    kind = dtype_of(dtype)
    return HostArray(cast(np.asarray(values), kind), kind)
