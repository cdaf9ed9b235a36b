"""``nki.language``: tensors, memory, loops and the launch grid; math is in ``language_math``.

Creation functions allocate (fresh on-chip tiles are NaN-filled until written), ``load``/``store``/``copy``
move data with one or two ISA instructions, and the loop helpers are plain ``range`` as in NKI 0.2+.
"""

from __future__ import annotations

import builtins
import math

from neuroncc.nki import isa_movement, validate
from neuroncc.nki.allocate import allocate, buffer_of
from neuroncc.nki.context import current
from neuroncc.nki.dtypes import (
    ALL_DTYPES, DType, bfloat16, bool_, dtype_of, float16, float32, int8, int16, int32, uint8, uint16, uint32,
)
from neuroncc.nki.errors import NKISimulationError
from neuroncc.nki.language_math import (
    abs, add, bitwise_and, bitwise_or, bitwise_xor, broadcast_to, cos, divide, equal, exp, gelu, gelu_apprx_tanh,
    greater, greater_equal, left_shift, less, less_equal, log, matmul, max, maximum, mean, min, minimum, multiply,
    negative, nki_op, not_equal, power, reciprocal, relu, right_shift, rsqrt, sigmoid, silu, sin, sqrt, square,
    subtract, sum, tanh, transpose,
)
from neuroncc.nki.tensor import Buffer, DynSlice, Tensor, ds

sbuf = Buffer.SBUF
psum = Buffer.PSUM
hbm = Buffer.HBM
private_hbm = Buffer.HBM
shared_hbm = Buffer.SHARED_HBM

fp32 = float32
NkiTensor = Tensor  # NKI's name for the tensor class


class tile_size:  # noqa: N801 - spelled as in NKI
    """Hardware tile limits, as ``nl.tile_size`` in NKI."""

    pmax = 128  # partitions of SBUF / PSUM
    psum_fmax = 512  # fp32 elements per partition in one PSUM bank
    gemm_stationary_fmax = 128  # nc_matmul stationary free size (M)
    gemm_moving_fmax = 512  # nc_matmul moving free size (N)
    bn_stats_fmax = 512
    psum_num_banks = 8


def ndarray(shape: tuple[int, ...] | list[int], dtype: object, buffer: object = None, name: str = "") -> Tensor:
    """A new tensor; on-chip tiles (the default, ``nl.sbuf``) start NaN-filled (uninitialised)."""
    return allocate("ndarray", shape, dtype, buffer, name)


def zeros(shape: tuple[int, ...] | list[int], dtype: object, buffer: object = None, name: str = "") -> Tensor:
    """A new tensor filled with zeros (a memset instruction for on-chip tiles)."""
    return full(shape, 0, dtype, buffer=buffer, name=name)


def ones(shape: tuple[int, ...] | list[int], dtype: object, buffer: object = None, name: str = "") -> Tensor:
    """A new tensor filled with ones."""
    return full(shape, 1, dtype, buffer=buffer, name=name)


def full(shape: tuple[int, ...] | list[int], fill_value: float | int, dtype: object, buffer: object = None,
         name: str = "") -> Tensor:
    """A new tensor filled with ``fill_value``.

    On-chip tiles are filled by a memset instruction (VectorE); HBM tensors are initialised by the host
    before launch, which costs nothing in the kernel.
    """
    where = buffer_of(buffer)
    if where.on_chip:
        return isa_movement.memset(allocate("full", shape, dtype, where, name), fill_value)
    return allocate("full", shape, dtype, where, name, fill=fill_value)


def zeros_like(a: Tensor, dtype: object = None, buffer: object = None, name: str = "") -> Tensor:
    """Zeros shaped like ``a`` (``dtype`` defaults to ``a``'s; buffer to SBUF)."""
    return zeros(a.shape, a.dtype if dtype is None else dtype, buffer=buffer, name=name)


def empty_like(a: Tensor, dtype: object = None, buffer: object = None, name: str = "") -> Tensor:
    """An uninitialised tensor shaped like ``a``."""
    return ndarray(a.shape, a.dtype if dtype is None else dtype, buffer=buffer, name=name)


# --------------------------------------------------------------------------------- data movement
def load(src: Tensor, dtype: object = None, name: str = "") -> Tensor:
    """Copy an HBM tensor into a new SBUF tile (one DMA; plus a tensor_copy if ``dtype`` converts).

    A 1-D HBM tensor of ``n`` elements loads as a ``(1, n)`` tile.
    """
    src = validate.tensor("load", "src", src)
    validate.space("load", "src", src, validate.HBM)
    shape = src.shape if src.ndim >= 2 else (1, src.size)
    tile = ndarray(shape, src.dtype, buffer=sbuf, name=name)
    isa_movement.dma_copy(tile, src, op_name="load")
    if dtype is not None and dtype_of(dtype) != src.dtype:
        return isa_movement.tensor_copy(ndarray(shape, dtype, buffer=sbuf), tile)
    return tile


def store(dst: Tensor, value: Tensor) -> Tensor:
    """Copy an SBUF tile into an HBM tensor (one DMA; plus a tensor_copy if the dtypes differ)."""
    dst = validate.tensor("store", "dst", dst)
    value = validate.tensor("store", "value", value)
    validate.space("store", "dst", dst, validate.HBM)
    validate.space("store", "value", value, validate.SBUF, "DMA engines cannot access PSUM; copy to SBUF first")
    if value.dtype != dst.dtype:
        value = isa_movement.tensor_copy(ndarray(value.shape, dst.dtype, buffer=sbuf), value)
    return isa_movement.dma_copy(dst, value, op_name="store")


@nki_op("copy")  # nisa.activation(op=nl.copy) is the identity activation
def copy(x: Tensor, dtype: object = None, buffer: object = None, name: str = "") -> Tensor:
    """A copy of an on-chip tile in a new tile (tensor_copy), optionally converted to ``dtype``."""
    x = validate.tensor("copy", "x", x)
    result = ndarray(x.shape, x.dtype if dtype is None else dtype, buffer=buffer, name=name)
    return isa_movement.tensor_copy(result, x)


def assign(target: Tensor, value: object) -> None:
    """``target[...] = value``: a DMA when HBM is involved, a tensor_copy on chip, a memset for numbers."""
    if isinstance(value, Tensor):
        if target.buffer.is_hbm or value.buffer.is_hbm:
            isa_movement.dma_copy(target, value)
        else:
            isa_movement.tensor_copy(target, value)
    elif isinstance(value, (int, float)) and target.buffer.on_chip:
        isa_movement.memset(target, value)
    else:
        raise NKISimulationError(
            f"cannot assign {type(value).__name__} to {target.buffer.value} tensor '{target.name}'; assign a tile, "
            f"or a number to an on-chip tile")


# --------------------------------------------------------------------------------- loops and grid
def affine_range(start: int, stop: int | None = None, step: int = 1, **_hints: object) -> range:
    """Loop without loop-carried dependencies (other than accumulation); ``range`` in NKI 0.2+."""
    return range(start) if stop is None else range(start, stop, step)


def sequential_range(start: int, stop: int | None = None, step: int = 1, **_hints: object) -> range:
    """Loop whose iterations depend on each other; ``range`` in NKI 0.2+."""
    return range(start) if stop is None else range(start, stop, step)


def static_range(start: int, stop: int | None = None, step: int = 1, **_hints: object) -> range:
    """Fully unrolled loop; ``range`` in NKI 0.2+."""
    return range(start) if stop is None else range(start, stop, step)


def program_id(axis: int = 0) -> int:
    """This program's index along ``axis`` of the launch grid (``kernel[gx, gy](...)``)."""
    context = current()
    if not 0 <= axis < builtins.max(1, len(context.grid)):  # nl.max shadows the builtin here
        raise NKISimulationError(f"program_id axis {axis} is out of range for a {len(context.grid)}-D launch grid")
    return context.program_id[axis] if context.grid else 0


def num_programs(axes: int | tuple[int, ...] | None = None) -> int:
    """Programs along ``axes`` of the launch grid (all axes when None)."""
    grid = current().grid or (1,)
    if axes is None:
        return math.prod(grid)
    chosen = (axes,) if isinstance(axes, int) else tuple(axes)
    if any(not 0 <= a < len(grid) for a in chosen):
        raise NKISimulationError(f"num_programs axes {axes} out of range for a {len(grid)}-D launch grid")
    return math.prod(grid[a] for a in chosen)


def program_ndim() -> int:
    """Number of dimensions of the launch grid."""
    return len(current().grid)


__all__ = [
    "ALL_DTYPES", "DType", "DynSlice", "NkiTensor", "Tensor", "abs", "add", "affine_range", "bfloat16",
    "bitwise_and", "bitwise_or", "bitwise_xor", "bool_",
    "broadcast_to", "copy", "cos", "divide", "ds", "empty_like", "equal", "exp", "float16", "float32", "fp32",
    "full", "gelu", "gelu_apprx_tanh", "greater", "greater_equal", "hbm", "int8", "int16", "int32", "left_shift",
    "less", "less_equal", "load", "log", "matmul", "max", "maximum", "mean", "min", "minimum", "multiply", "ndarray",
    "negative", "not_equal", "num_programs", "ones", "power", "private_hbm", "program_id", "program_ndim", "psum",
    "reciprocal", "relu", "right_shift", "rsqrt", "sbuf", "sequential_range", "shared_hbm", "sigmoid", "silu",
    "sin", "sqrt", "square", "static_range", "store", "subtract", "sum", "tanh", "tile_size", "transpose", "uint8", "uint16",
    "uint32", "zeros", "zeros_like",
]
