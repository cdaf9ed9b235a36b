"""Data-movement and constant instructions: dma_copy, tensor_copy, tensor_copy_predicated, memset, iota."""

from __future__ import annotations

import math

import numpy as np

from neuroncc.nki import validate
from neuroncc.nki.context import current
from neuroncc.nki.dtypes import DType, dtype_of
from neuroncc.nki.errors import NKISimulationError
from neuroncc.nki.instructions import (
    emit, engine, new_result, operand, pick_engine, reject_mask, write,
)
from neuroncc.nki.tensor import Buffer, Tensor
from neuroncc.nki.trace import Engine

_GPSIMD_NO_PSUM = "GpSimd engine cannot access PSUM"


def _squeezed(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(n for n in shape if n != 1)


def dma_copy(dst: Tensor, src: Tensor, dge_mode: object = None, name: str | None = None, *,
             op_name: str = "dma_copy") -> Tensor:
    """Copy ``src`` to ``dst`` with a DMA engine (HBM <-> SBUF, or within either).

    DMA cannot reach PSUM and does not convert dtypes. Shapes must match (size-1 dimensions aside, so an
    HBM vector ``[N]`` can fill an SBUF row ``[1, N]``).
    """
    context = current()
    dst = validate.tensor(op_name, "dst", dst)
    src = validate.tensor(op_name, "src", src)
    validate.space(op_name, "src", src, validate.DMA_SPACES, "DMA engines cannot access PSUM")
    validate.space(op_name, "dst", dst, validate.DMA_SPACES, "DMA engines cannot access PSUM")
    for role, value in (("src", src), ("dst", dst)):
        if value.buffer.on_chip:
            validate.tile(op_name, role, value, aligned=False)
    if dst.shape != src.shape and _squeezed(dst.shape) != _squeezed(src.shape):
        raise NKISimulationError(f"{op_name} dst shape {dst.shape} does not match src shape {src.shape}")
    if dst.dtype != src.dtype:
        raise NKISimulationError(
            f"{op_name} dst dtype {dst.dtype.name} does not match src dtype {src.dtype.name}; DMA does not "
            f"convert dtypes (copy through an engine with tensor_copy)")
    emit(context, "dma_copy", Engine.DMA,
         (operand("src", src, "r", dma=True), operand("dst", dst, "w", dma=True)))
    if context.numerics:
        dst.array()[...] = src.array().reshape(dst.shape)
    return dst


def tensor_copy(dst: Tensor | None = None, src: Tensor | None = None, engine: engine = engine.unknown,
                name: str | None = None, dtype: object = None, mask: object = None) -> Tensor:
    """Copy an on-chip tile into another, converting to ``dst``'s dtype (VectorE unless ``engine`` says)."""
    reject_mask("tensor_copy", mask)
    if src is None and isinstance(dst, Tensor):  # NKI 0.1: tensor_copy(src, dtype=None) returns the copy
        src, dst = dst, new_result(dst.shape, _dtype_or(dtype, dst))
    context = current()
    dst = validate.tensor("tensor_copy", "dst", dst)
    src = validate.tensor("tensor_copy", "src", src)
    unit = pick_engine(engine, Engine.VECTOR, (Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD), "tensor_copy")
    allowed = validate.SBUF if unit is Engine.GPSIMD else validate.ON_CHIP
    why = _GPSIMD_NO_PSUM if unit is Engine.GPSIMD else ""
    validate.space("tensor_copy", "src", src, allowed, why)
    validate.space("tensor_copy", "dst", dst, allowed, why)
    validate.tile("tensor_copy", "src", src)
    validate.tile("tensor_copy", "dst", dst)
    validate.same_free_size("tensor_copy", "dst", dst, src.shape, "src")
    emit(context, "tensor_copy", unit, (operand("src", src, "r"), operand("dst", dst, "w")))
    if context.numerics:
        write(dst, src.array())
    return dst


def tensor_copy_predicated(dst: Tensor, src: Tensor | float | int, predicate: Tensor, reverse_pred: bool = False,
                           name: str | None = None) -> Tensor:
    """Copy ``src`` (a tile or a number) into ``dst`` where ``predicate`` is non-zero; other elements of
    ``dst`` keep their values (VectorE). ``reverse_pred`` copies where the predicate is zero.

    As in NKI, the predicate is an unsigned integer tile (uint8/16/32; the simulator also takes bool_),
    src and dst share a dtype, and src and predicate may not both be in PSUM. This is how a select
    ``where(c, a, b)`` is written: copy ``b`` into the result, then copy ``a`` over it where ``c``.
    """
    context = current()
    dst = validate.tensor("tensor_copy_predicated", "dst", dst)
    predicate = validate.tensor("tensor_copy_predicated", "predicate", predicate)
    operands = [("predicate", predicate), ("dst", dst)]
    if isinstance(src, Tensor):
        operands.insert(0, ("src", src))
    elif not isinstance(src, (int, float, np.number)) or isinstance(src, bool):
        raise NKISimulationError(f"tensor_copy_predicated src must be a tile or a number, got {src!r}")
    for role, value in operands:
        validate.space("tensor_copy_predicated", role, value, validate.ON_CHIP)
        validate.tile("tensor_copy_predicated", role, value)
        validate.same_free_size("tensor_copy_predicated", role, value, dst.shape, "dst")
    if predicate.dtype.kind not in ("uint", "bool"):
        raise NKISimulationError(
            f"tensor_copy_predicated predicate must be uint8, uint16 or uint32, got {predicate.dtype.name}")
    psum_inputs = sum(value.buffer is Buffer.PSUM for role, value in operands if role != "dst")
    if psum_inputs > 1:
        raise NKISimulationError("tensor_copy_predicated src and predicate cannot both be in PSUM")
    if isinstance(src, Tensor) and src.dtype != dst.dtype:
        raise NKISimulationError(
            f"tensor_copy_predicated src dtype {src.dtype.name} does not match dst dtype {dst.dtype.name}")
    emit(context, "tensor_copy_predicated", Engine.VECTOR,
         tuple(operand(role, value, "rw" if role == "dst" else "r") for role, value in operands),
         psum_input=psum_inputs == 1, reverse_pred=bool(reverse_pred))
    if context.numerics:
        chosen = predicate.array().reshape(dst.shape) != 0
        if reverse_pred:
            chosen = ~chosen
        values = src.array().reshape(dst.shape) if isinstance(src, Tensor) else np.asarray(src)
        write(dst, np.where(chosen, values, dst.array()))
    return dst


def memset(dst: Tensor, value: float | int, engine: engine = engine.unknown, name: str | None = None) -> Tensor:
    """Fill an on-chip tile with ``value`` (VectorE unless ``engine`` says)."""
    context = current()
    dst = validate.tensor("memset", "dst", dst)
    unit = pick_engine(engine, Engine.VECTOR, (Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD), "memset")
    allowed = validate.SBUF if unit is Engine.GPSIMD else validate.ON_CHIP
    validate.space("memset", "dst", dst, allowed, _GPSIMD_NO_PSUM if unit is Engine.GPSIMD else "")
    validate.tile("memset", "dst", dst)
    emit(context, "memset", unit, (operand("dst", dst, "w"),), value=value)
    if context.numerics:
        write(dst, np.asarray(value))
    return dst


def iota(dst: Tensor, pattern: list[list[int]] | tuple[tuple[int, int], ...], offset: int = 0,
         channel_multiplier: int = 0, name: str | None = None) -> Tensor:
    """Write an affine index pattern with GpSimdE: partition ``p`` and pattern indices ``i_k`` give
    ``offset + p * channel_multiplier + sum(step_k * i_k)``, with ``pattern = [[step_k, num_k], ...]``."""
    context = current()
    dst = validate.tensor("iota", "dst", dst)
    validate.space("iota", "dst", dst, validate.SBUF, _GPSIMD_NO_PSUM)
    validate.tile("iota", "dst", dst)
    pairs = [(int(step), int(num)) for step, num in pattern]
    if not 1 <= len(pairs) <= 4:
        raise NKISimulationError(f"iota pattern must have 1 to 4 [step, num] pairs, got {len(pairs)}")
    count = math.prod(num for _, num in pairs)
    if count != dst.free_size:
        raise NKISimulationError(
            f"iota pattern generates {count} elements per partition but dst has {dst.free_size} (shape {dst.shape})")
    emit(context, "iota", Engine.GPSIMD, (operand("dst", dst, "w"),))
    if context.numerics:
        values = np.full([num for _, num in pairs], int(offset), dtype=np.int64)
        for axis, (step, num) in enumerate(pairs):
            shape = [1] * len(pairs)
            shape[axis] = num
            values = values + step * np.arange(num, dtype=np.int64).reshape(shape)
        partitions = np.arange(dst.shape[0], dtype=np.int64).reshape(-1, 1) * int(channel_multiplier)
        write(dst, partitions + values.reshape(1, -1))
    return dst


def _dtype_or(dtype: object, like: Tensor) -> DType:
    return like.dtype if dtype is None else dtype_of(dtype)
