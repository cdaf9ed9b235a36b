"""``nki.language``: tensors, memory, loops and the launch grid; math is in ``language_math``, loops and the
grid in ``language_grid``.

Creation functions allocate (fresh on-chip tiles are NaN-filled until written), ``load``/``store``/``copy``
move data with one ISA instruction each, and assignment (``t[...] = value``) is a copy instruction. Both API
generations are here: NKI 0.2+ and NKI 0.1's extras (``par_dim``, ``arange``/``mgrid`` index expressions and
``mask=``, ``shared_constant``, ``loop_reduce``, ``static_cast``, ``spmd_dim``/``nc``).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from neuroncc.hardware import neuron as hw
from neuroncc.nki import isa_compute, isa_movement, masking, ops, unsupported, validate
from neuroncc.nki.allocate import ParDim, allocate, buffer_of, par_dim
from neuroncc.nki.blocked import BlockedTensor
from neuroncc.nki.context import current
from neuroncc.nki.dtypes import (
    ALL_DTYPES, DType, HostArray, bfloat16, bool_, cast, dtype_of, float4_e2m1fn_x4, float8_e4m3, float8_e4m3fn,
    float8_e4m3fn_x4, float8_e5m2, float8_e5m2_x4, float8_e8m0fnu, float16, float32, int8, int16, int32,
    tfloat32, uint8, uint16, uint32,
)
from neuroncc.nki.errors import NKISimulationError
from neuroncc.nki.index import IndexExpr, Mask, arange, mgrid
from neuroncc.nki.instructions import emit, operand, read, write
from neuroncc.nki.language_grid import (
    affine_range, nc, num_programs, program_id, program_ndim, sequential_range, spmd_dim, static_range,
)
from neuroncc.nki.language_math import (
    abs, add, bitwise_and, bitwise_or, bitwise_xor, broadcast_to, cos, divide, equal, exp, gelu, gelu_apprx_tanh,
    greater, greater_equal, left_shift, less, less_equal, log, matmul, max, maximum, mean, min, minimum, multiply,
    negative, nki_op, not_equal, power, reciprocal, relu, right_shift, rsqrt, sigmoid, silu, sin, sqrt, square,
    subtract, sum, tanh, transpose, where,
)
from neuroncc.nki.tensor import Buffer, DynSlice, Tensor, ds
from neuroncc.nki.trace import Engine

sbuf = Buffer.SBUF
psum = Buffer.PSUM
hbm = Buffer.HBM
private_hbm = Buffer.HBM
shared_hbm = Buffer.SHARED_HBM

NkiTensor = Tensor  # NKI's name for the tensor class
tile = Tensor  # NKI 0.1 calls a view whose first dimension is the partition dimension a tile


class fp32:  # noqa: N801 - spelled as in NKI 0.1
    """float32 constants, as ``nl.fp32`` in NKI 0.1 (``nl.fp32.min``: the most negative finite float32)."""

    min = float(np.finfo(np.float32).min)
    max = float(np.finfo(np.float32).max)


class tile_size:  # noqa: N801 - spelled as in NKI
    """Hardware tile limits, as ``nl.tile_size`` in NKI."""

    pmax = hw.PARTITIONS  # partitions of SBUF / PSUM
    psum_fmax = hw.PSUM_FMAX  # fp32 elements per partition in one PSUM bank
    psum_bank_fmax = hw.PSUM_FMAX
    gemm_stationary_fmax = hw.GEMM_STATIONARY_FMAX  # nc_matmul stationary free size (M)
    gemm_moving_fmax = hw.GEMM_MOVING_FMAX  # nc_matmul moving free size (N)
    bn_stats_fmax = hw.BN_STATS_FMAX
    psum_num_banks = hw.PSUM_BANKS
    sbuf_min_align = hw.SBUF_ALIGNMENT  # bytes; the simulator places SBUF tiles on these boundaries
    psum_min_align = hw.PSUM_MIN_ALIGNMENT


def ndarray(shape: tuple[int, ...] | list[int], dtype: object, buffer: object = None, name: str = "",
            **_hints: object) -> Any:
    """A new tensor; on-chip tiles (the default, ``nl.sbuf``) start NaN-filled (uninitialised)."""
    return allocate("ndarray", shape, dtype, buffer, name)


def zeros(shape: tuple[int, ...] | list[int], dtype: object, buffer: object = None, name: str = "",
          **_hints: object) -> Any:
    """A new tensor filled with zeros (a memset instruction for on-chip tiles)."""
    return full(shape, 0, dtype, buffer=buffer, name=name)


def ones(shape: tuple[int, ...] | list[int], dtype: object, buffer: object = None, name: str = "",
         **_hints: object) -> Any:
    """A new tensor filled with ones."""
    return full(shape, 1, dtype, buffer=buffer, name=name)


def full(shape: tuple[int, ...] | list[int], fill_value: float | int, dtype: object, buffer: object = None,
         name: str = "", **_hints: object) -> Any:
    """A new tensor filled with ``fill_value``.

    On-chip tiles are filled by a memset instruction (VectorE); HBM tensors are initialised by the host
    before launch, which costs nothing in the kernel.
    """
    return allocate("full", shape, dtype, buffer, name, fill=fill_value)


def zeros_like(a: Tensor, dtype: object = None, buffer: object = None, name: str = "", **_hints: object) -> Any:
    """Zeros shaped like ``a`` (``dtype`` defaults to ``a``'s; buffer to SBUF)."""
    return zeros(a.shape, a.dtype if dtype is None else dtype, buffer=buffer, name=name)


def empty_like(a: Tensor, dtype: object = None, buffer: object = None, name: str = "", **_hints: object) -> Any:
    """An uninitialised tensor shaped like ``a``."""
    return ndarray(a.shape, a.dtype if dtype is None else dtype, buffer=buffer, name=name)


def shared_constant(constant: object, dtype: object = None, **_hints: object) -> Tensor:
    """An HBM tensor holding ``constant`` (a numpy array), put there by the host before launch."""
    values = np.asarray(constant)
    kind = dtype_of(values.dtype if dtype is None else dtype)
    context = current()
    data = cast(values, kind) if context.numerics else None
    return context.new_tensor(values.shape, kind, Buffer.HBM, "constant", data=data)


def shared_identity_matrix(n: int, dtype: object = uint8, **_hints: object) -> Tensor:
    """An HBM ``n x n`` identity matrix (``shared_constant`` of ``np.identity(n)``)."""
    return shared_constant(np.identity(int(n)), dtype=dtype)


def static_cast(input_data: object, dtype: object) -> Any:
    """NKI 0.1's ``static_cast``: a number or host array converted to ``dtype`` (no instruction; it also works
    outside a kernel). Arrays of types numpy lacks (bfloat16, fp8) come back as ``HostArray`` kernel inputs."""
    kind = dtype_of(dtype)
    if isinstance(input_data, Tensor):
        raise NKISimulationError("static_cast converts Python numbers and arrays; convert tiles with nl.copy(dtype=)")
    raw = input_data.values if isinstance(input_data, HostArray) else input_data
    values = cast(np.asarray(raw), kind)
    if values.ndim == 0:
        return float(values) if kind.is_float else int(values)
    if kind.storage.itemsize != kind.itemsize and kind.kind == "float":
        return HostArray(values, kind)
    return values


def device_print(prefix: str, x: object, mask: object = None, **_hints: object) -> None:
    """Print a tile's values (the simulator prints at once; nothing is traced)."""
    if isinstance(x, Tensor) and current().numerics:
        print(prefix, np.array(x.array()), file=sys.stdout)
    else:
        print(prefix, x, file=sys.stdout)


# --------------------------------------------------------------------------------- data movement
def load(src: Tensor, dtype: object = None, mask: object = None, name: str = "", **_hints: object) -> Tensor:
    """Copy an HBM tensor into a new SBUF tile (one DMA, which converts to ``dtype`` if given).

    A 1-D source of ``n`` elements loads as an ``(n, 1)`` tile: its dimension is the partition dimension, as
    for every tile (NKI's tutorials reshape a vector to ``(1, n)`` when they want it as one row).
    """
    src = validate.tensor("load", "src", src)
    validate.space("load", "src", src, validate.HBM)
    shape = src.shape if src.ndim >= 2 else (src.size, 1)
    kind = src.dtype if dtype is None else dtype_of(dtype)
    result = allocate("load", shape, kind, Buffer.SBUF, name, transient=True)
    if mask is not None:
        return masking.run_masked("load", mask, shape, _dma_as("load"), result, dst=result,
                                  src=src if src.ndim >= 2 else src.reshape(shape))
    isa_movement.dma_copy(result, src, op_name="load")
    return result


def load_transpose2d(src: Tensor, dtype: object = None, mask: object = None, **_hints: object) -> Tensor:
    """Load a 2-D HBM tensor ``[F, P]`` transposed into an SBUF tile ``[P, F]`` (a DMA with element-sized runs)."""
    src = validate.tensor("load_transpose2d", "src", src)
    validate.space("load_transpose2d", "src", src, validate.HBM)
    if src.ndim != 2:
        raise NKISimulationError(f"load_transpose2d src must be 2-D, got shape {src.shape}")
    flipped = Tensor(src.storage, src.layout, src.offset, tuple(reversed(src.axes)))
    return load(flipped, dtype=dtype, mask=mask)


def _dma_as(op_name: str):  # type: ignore[no-untyped-def]
    def call(dst: Tensor, src: Tensor) -> Tensor:
        return isa_movement.dma_copy(dst, src, op_name=op_name)
    return call


def store(dst: Tensor, value: Tensor, mask: object = None, **_hints: object) -> None:
    """Copy an on-chip tile into an HBM tensor with one DMA (which converts dtypes).

    A PSUM tile is first copied to SBUF (DMA cannot read PSUM; NKI's docs: "an extra copy will be performed").
    """
    dst = validate.tensor("store", "dst", dst)
    if isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
        value = _constant_tile(dst, value)  # nl.store(out, 100): "effectively a memset" of the HBM tensor
    value = validate.tensor("store", "value", value)
    validate.space("store", "dst", dst, validate.HBM)
    validate.space("store", "value", value, validate.ON_CHIP)
    if value.buffer is Buffer.PSUM:
        value = isa_movement.tensor_copy(allocate("store", value.shape, value.dtype, Buffer.SBUF, transient=True),
                                         value)
    if mask is not None:
        masking.run_masked("store", mask, dst.shape, _dma_as("store"), None, dst=dst, src=value)
        return
    isa_movement.dma_copy(dst, value, op_name="store")


def _constant_tile(dst: Tensor, value: float | int) -> Tensor:
    """An SBUF tile of ``dst``'s shape filled with ``value`` (memset), for storing a number into HBM."""
    shape = dst.shape if dst.ndim >= 2 else (dst.shape[0] if dst.ndim else 1, 1)
    if shape[0] > hw.PARTITIONS:
        raise NKISimulationError(
            f"store of the number {value} into '{dst.name}' {list(dst.shape)}: partition dimension {shape[0]} "
            f"exceeds maximum {hw.PARTITIONS}; store into 128-row slices")
    tile = allocate("store", shape, dst.dtype, Buffer.SBUF, transient=True)
    return isa_movement.memset(tile, value)


@nki_op("copy")  # nisa.activation(op=nl.copy) is the identity activation
def copy(x: Tensor, dtype: object = None, buffer: object = None, name: str = "", mask: object = None,
         **_hints: object) -> Tensor:
    """A copy of an on-chip tile in a new tile (tensor_copy), optionally converted to ``dtype``."""
    x = validate.tensor("copy", "x", x)
    result = allocate("copy", x.shape, x.dtype if dtype is None else dtype, buffer, name, transient=True)
    return isa_movement.tensor_copy(result, x, mask=mask)


def _same_view(a: Tensor, b: Tensor) -> bool:
    return (a.storage.id == b.storage.id and a.layout == b.layout and a.offset == b.offset and a.axes == b.axes
            and a.dtype == b.dtype)


def assign(target: Any, value: object) -> None:
    """``target[...] = value``: a DMA when HBM is involved, a tensor_copy on chip, a memset for numbers.

    Assigning a tensor to itself (what ``t[i] += x`` does last) does nothing. Assigning the fresh result of a
    value-returning call is a copy here; ``forwarding`` later lets the producing instruction write the
    target directly, as NKI's compiler does.
    """
    if isinstance(value, LoopReduce):
        value.reduce_into(target)
        return
    if isinstance(target, BlockedTensor) or isinstance(value, BlockedTensor):
        raise NKISimulationError("assign tiles of a blocked tensor one at a time: index every block dimension")
    if isinstance(value, Tensor):
        if _same_view(target, value):
            return
        if target.buffer.is_hbm or value.buffer.is_hbm:
            if value.buffer is Buffer.PSUM:
                value = isa_movement.tensor_copy(allocate("assign", value.shape, value.dtype, Buffer.SBUF,
                                                          transient=True), value)
            isa_movement.dma_copy(target, value)
        else:
            isa_movement.tensor_copy(target, value)
    elif isinstance(value, (int, float, np.number)) and not isinstance(value, bool) and target.buffer.on_chip:
        isa_movement.memset(target, value)
    else:
        raise NKISimulationError(
            f"cannot assign {type(value).__name__} to {target.buffer.value} tensor '{target.name}'; assign a tile, "
            f"or a number to an on-chip tile")


def accumulate(target: Tensor, value: object, op_name: str) -> Tensor:
    """``target += value`` (also ``-=``, ``*=``): update ``target`` in place and return it.

    ``psum_tile += nisa.nc_matmul(...)`` is NKI 0.1's matmul accumulation: the matmul writes into the PSUM
    tile, overwriting elements not yet written and adding to the rest (as ``accumulate=None``). The trace
    records it as a VectorE add that ``forwarding`` folds into the matmul. Anything else is a
    tensor_tensor (or tensor_scalar) into ``target``.
    """
    alu = ops.ALU_OPS[op_name]
    context = current()
    if (op_name == "add" and isinstance(value, Tensor) and target.buffer is Buffer.PSUM
            and value.buffer is Buffer.PSUM and value.storage.transient
            and context.producers.get(value.storage.id) in ("nc_matmul", "nc_matmul_mx")):
        validate.same_free_size("accumulate", "value", value, target.shape, "target")
        emit(context, "tensor_tensor", Engine.VECTOR,
             (operand("data1", target, "r"), operand("data2", value, "r"), operand("dst", target, "w")),
             op="add", psum_input=True, accumulate=True)
        if context.numerics:
            product = read(value, np.dtype(np.float32)).reshape(target.shape)
            previous = read(target, np.dtype(np.float32))
            write(target, np.where(target.written_mask(), previous + product, product))
        return target
    if isinstance(value, Tensor):
        if value.shape != target.shape and value.free_size == 1 and value.shape[0] == target.shape[0]:
            return isa_compute.tensor_scalar(target, target, alu, value)
        return isa_compute.tensor_tensor(target, target, value, op=alu)
    if isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
        return isa_compute.tensor_scalar(target, target, alu, value)
    raise NKISimulationError(f"cannot update tensor '{target.name}' with {type(value).__name__}")


class LoopReduce:
    """The value of ``nl.loop_reduce(x, op, loop_indices)``: assigned into a tile, it folds ``x`` into it.

    NKI 0.1: "the destination tile is also the rhs input to op" - ``acc[...] = nl.loop_reduce(x, np.add, [i])``
    is ``acc = op(x, acc)``, a tensor_tensor on VectorE.
    """

    def __init__(self, x: Tensor, op: object, dtype: object, mask: object):
        self.x, self.op, self.dtype, self.mask = x, op, dtype, mask

    def reduce_into(self, target: Tensor) -> None:
        isa_compute.tensor_tensor(target, self.x, target, op=self.op, mask=self.mask)

    def __getattr__(self, name: str) -> Any:
        raise NKISimulationError(
            "nl.loop_reduce(...) must be assigned into a tile (acc[...] = nl.loop_reduce(x, op, loop_indices)); "
            "its destination is also the op's right-hand input")


def loop_reduce(x: Tensor, op: object, loop_indices: object = None, dtype: object = None, mask: object = None,
                **_hints: object) -> LoopReduce:
    """``dst[...] = nl.loop_reduce(x, op, loop_indices)`` folds ``x`` into ``dst`` with ``op`` (NKI 0.1)."""
    x = validate.tensor("loop_reduce", "x", x)
    ops.resolve_alu(op, "loop_reduce")
    return LoopReduce(x, op, dtype, mask)


def __getattr__(name: str) -> object:
    """NKI language functions the simulator lacks: a function raising ``NKIUnsupportedError`` when called."""
    return unsupported.stub("nki.language", name)


__all__ = [
    "ALL_DTYPES", "DType", "DynSlice", "IndexExpr", "Mask", "NkiTensor", "ParDim", "Tensor", "abs", "add",
    "affine_range", "arange", "bfloat16", "bitwise_and", "bitwise_or", "bitwise_xor", "bool_", "broadcast_to",
    "buffer_of", "copy", "cos", "device_print", "divide", "ds", "empty_like", "equal", "exp", "float4_e2m1fn_x4",
    "float8_e4m3", "float8_e4m3fn", "float8_e4m3fn_x4", "float8_e5m2", "float8_e5m2_x4", "float8_e8m0fnu",
    "float16", "float32", "fp32", "full", "gelu", "gelu_apprx_tanh", "greater", "greater_equal", "hbm", "int8",
    "int16", "int32", "left_shift", "less", "less_equal", "load", "load_transpose2d", "log", "loop_reduce", "matmul", "max",
    "maximum", "mean", "mgrid", "min", "minimum", "multiply", "nc", "ndarray", "negative", "not_equal",
    "num_programs", "ones", "par_dim", "power", "private_hbm", "program_id", "program_ndim", "psum", "reciprocal",
    "relu", "right_shift", "rsqrt", "sbuf", "sequential_range", "shared_constant", "shared_hbm", "shared_identity_matrix",
    "sigmoid", "silu", "sin", "spmd_dim", "sqrt", "square", "static_cast", "static_range", "store", "subtract",
    "sum", "tanh", "tfloat32", "tile", "tile_size", "transpose", "uint8", "uint16", "uint32", "where", "zeros",
    "zeros_like",
]
