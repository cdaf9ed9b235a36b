"""Data-movement and constant instructions: dma_copy, tensor_copy, tensor_copy_predicated, memset, iota,
affine_select. Each takes NKI 0.2+'s arguments and NKI 0.1's (result-returning, ``mask=``)."""

from __future__ import annotations

import math

import numpy as np

from neuroncc.nki import masking, ops, validate
from neuroncc.nki.context import current
from neuroncc.nki.dtypes import DType, dtype_of, float32, values_of
from neuroncc.nki.errors import NKISimulationError
from neuroncc.nki.index import IndexExpr, Mask
from neuroncc.nki.instructions import (
    emit, engine, new_result, operand, pick_engine, read, write,
)
from neuroncc.nki.tensor import Buffer, Tensor
from neuroncc.nki.trace import Engine

_GPSIMD_NO_PSUM = "GpSimd engine cannot access PSUM"


def _squeezed(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(n for n in shape if n != 1)


def dma_copy(dst: Tensor | None = None, src: Tensor | None = None, dge_mode: object = None, name: str | None = None,
             *, mask: object = None, dst_rmw_op: object = None, oob_mode: object = None, priority: object = None,
             engine: object = None, op_name: str = "dma_copy") -> Tensor:
    """Copy ``src`` to ``dst`` with a DMA engine (HBM <-> SBUF, or within either).

    DMA cannot reach PSUM. The element counts must match (shapes may differ, e.g. an HBM vector ``[N]``
    fills an SBUF row ``[1, N]``). Different dtypes are converted as NKI documents: src to float32, then
    float32 to dst's type. ``dst_rmw_op=nl.add`` (NKI 0.1) adds src to what dst holds.
    """
    context = current()
    dst = validate.tensor(op_name, "dst", dst)
    src = validate.tensor(op_name, "src", src)
    if mask is not None:
        return masking.run_masked(op_name, mask, dst.shape, _dma_masked(op_name), dst, dst=dst, src=src,
                                  dst_rmw_op=dst_rmw_op)
    validate.space(op_name, "src", src, validate.DMA_SPACES, "DMA engines cannot access PSUM")
    validate.space(op_name, "dst", dst, validate.DMA_SPACES, "DMA engines cannot access PSUM")
    for role, value in (("src", src), ("dst", dst)):
        if value.buffer.on_chip:
            validate.tile(op_name, role, value, aligned=False)
        value.require_in_bounds(f"{op_name} {role}")
    if dst.size != src.size:
        raise NKISimulationError(f"{op_name} dst shape {dst.shape} does not match src shape {src.shape}")
    if dst.shape != src.shape and _squeezed(dst.shape) != _squeezed(src.shape):
        context.warn("dma-reshape", f"{op_name} copies src {src.shape} into dst {dst.shape}: the same number of "
                                    f"elements in another shape (NKI allows it; check the element order)")
    converts = dst.dtype != src.dtype
    if converts and (dst.dtype.is_packed or src.dtype.is_packed):
        raise NKISimulationError(
            f"{op_name} cannot convert between {src.dtype.name} and {dst.dtype.name}: packed MX data moves bit for bit")
    rmw = None if dst_rmw_op is None else ops.resolve_alu(dst_rmw_op, op_name, "dst_rmw_op")
    if rmw is not None and rmw.name != "add":
        raise NKISimulationError(f"{op_name} dst_rmw_op supports only add (np.add / nl.add), got {rmw.name}")
    emit(context, "dma_copy", Engine.DMA,
         (operand("src", src, "r", dma=True), operand("dst", dst, "rw" if rmw else "w", dma=True)),
         **({"cast": f"{src.dtype.name}->{dst.dtype.name}"} if converts else {}),
         **({"dst_rmw_op": "add"} if rmw else {}))
    if context.numerics:
        if rmw is not None:
            total = read(dst, np.dtype(np.float32)) + read(src, np.dtype(np.float32)).reshape(dst.shape)
            write(dst, total)
        elif converts:
            # DMA converts through float32 (NKI docs: src.dtype -> float32 -> dst.dtype).
            write(dst, values_of(src.array(), src.dtype).astype(np.float32).reshape(dst.shape))
        elif context.write_mask is not None:
            write(dst, src.array().reshape(dst.shape))
        else:
            dst.array()[...] = src.array().reshape(dst.shape)
    return dst


def _dma_masked(op_name: str):  # type: ignore[no-untyped-def]
    def call(dst: Tensor, src: Tensor, dst_rmw_op: object) -> Tensor:
        return dma_copy(dst, src, dst_rmw_op=dst_rmw_op, op_name=op_name)
    return call


def tensor_copy(dst: Tensor | None = None, src: Tensor | None = None, engine: engine = engine.unknown,
                name: str | None = None, dtype: object = None, mask: object = None) -> Tensor:
    """Copy an on-chip tile into another, converting to ``dst``'s dtype (VectorE unless ``engine`` says).

    NKI 0.1's ``tensor_copy(src, dtype=)`` returns the copy; 0.2+'s ``dtype=`` (when ``dst`` is given) must
    agree with ``dst``.
    """
    if src is None and isinstance(dst, Tensor):  # NKI 0.1: tensor_copy(src, dtype=None) returns the copy
        src, dst = dst, new_result(dst.shape, _dtype_or(dtype, dst))
    elif dst is None and isinstance(src, Tensor):  # NKI 0.1 keyword form: tensor_copy(src=x)
        dst = new_result(src.shape, _dtype_or(dtype, src))
    if mask is not None:
        return masking.run_masked("tensor_copy", mask, dst.shape, tensor_copy, dst, dst=dst, src=src, engine=engine)
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
                           name: str | None = None, mask: object = None, dtype: object = None) -> Tensor:
    """Copy ``src`` (a tile or a number) into ``dst`` where ``predicate`` is non-zero; other elements of
    ``dst`` keep their values (VectorE). ``reverse_pred`` copies where the predicate is zero.

    As in NKI, the predicate is an unsigned integer tile (uint8/16/32; the simulator also takes bool_),
    src and dst share a dtype, and src and predicate may not both be in PSUM. This is how a select
    ``where(c, a, b)`` is written: copy ``b`` into the result, then copy ``a`` over it where ``c``.
    """
    if mask is not None:
        return masking.run_masked("tensor_copy_predicated", mask, dst.shape, tensor_copy_predicated, dst, dst=dst,
                                  src=src, predicate=predicate, reverse_pred=reverse_pred)
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


def memset(dst: Tensor | tuple[int, ...] | None = None, value: float | int = 0, dtype: object = None,
           engine: engine = engine.unknown, name: str | None = None, mask: object = None,
           shape: tuple[int, ...] | None = None) -> Tensor:
    """Fill an on-chip tile with ``value`` (VectorE unless ``engine`` says).

    NKI 0.1's ``memset(shape, value, dtype)`` (also ``shape=`` by keyword) returns a new tile filled with ``value``.
    """
    if dst is None and shape is not None:
        dst = shape
    if isinstance(dst, (tuple, list)):
        dst = new_result(tuple(int(n) for n in dst), dtype_of(dtype) if dtype is not None else float32)
    if mask is not None:
        return masking.run_masked("memset", mask, dst.shape, memset, dst, dst=dst, value=value, engine=engine)
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


def iota(dst: Tensor | IndexExpr, pattern: object = None, offset: int = 0,
         channel_multiplier: int = 0, name: str | None = None, dtype: object = None, mask: object = None) -> Tensor:
    """Write an affine index pattern with GpSimdE: partition ``p`` and pattern indices ``i_k`` give
    ``offset + p * channel_multiplier + sum(step_k * i_k)``, with ``pattern = [[step_k, num_k], ...]``.

    NKI 0.1's ``iota(expr, dtype)`` evaluates an ``nl.arange`` expression into a new tile of ``expr``'s shape.
    """
    if isinstance(dst, IndexExpr):
        expr = dst
        kind = dtype_of(pattern if dtype is None and pattern is not None else dtype if dtype is not None else "int32")
        result = new_result(expr.shape, kind)
        return _iota_values(result, expr.values(), mask)
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


def _iota_values(dst: Tensor, values: np.ndarray, mask: object) -> Tensor:
    if mask is not None:
        restricted = masking.restriction("iota", mask, dst.shape)
        if restricted is None or restricted.empty:
            return dst
        full = np.broadcast_to(values, dst.shape)
        with restricted.writing():
            _iota_values(restricted.trim(dst), full[restricted.box], None)
        return dst
    context = current()
    validate.space("iota", "dst", dst, validate.SBUF, _GPSIMD_NO_PSUM)
    validate.tile("iota", "dst", dst)
    emit(context, "iota", Engine.GPSIMD, (operand("dst", dst, "w"),))
    if context.numerics:
        write(dst, np.broadcast_to(values, dst.shape))
    return dst


def affine_select(pred: object = None, on_true_tile: Tensor | None = None, on_false_value: float = 0.0,
                  *, dst: Tensor | None = None, mask: object = None, dtype: object = None, **_hints: object) -> Tensor:
    """NKI 0.1's ``affine_select(pred, on_true_tile, on_false_value)`` on GpSimdE: where the affine predicate
    (a comparison of ``nl.arange`` expressions, e.g. a causal mask) holds take ``on_true_tile``, else the
    number ``on_false_value``."""
    if not isinstance(pred, Mask):
        raise NKISimulationError("affine_select pred must be an affine predicate of nl.arange expressions")
    on_true_tile = validate.tensor("affine_select", "on_true_tile", on_true_tile)
    if dst is None:
        dst = new_result(on_true_tile.shape, dtype_of(dtype) if dtype else on_true_tile.dtype)
    predicate = np.broadcast_to(pred.values, dst.shape)
    if mask is not None:
        restricted = masking.restriction("affine_select", mask, dst.shape)
        if restricted is None or restricted.empty:
            return dst
        with restricted.writing():
            _affine_select(restricted.trim(dst), restricted.trim(on_true_tile), predicate[restricted.box],
                           on_false_value)
        return dst
    return _affine_select(dst, on_true_tile, predicate, on_false_value)


def _affine_select(dst: Tensor, on_true_tile: Tensor, predicate: np.ndarray, on_false_value: float) -> Tensor:
    context = current()
    for role, value in (("on_true_tile", on_true_tile), ("dst", dst)):
        validate.space("affine_select", role, value, validate.SBUF, _GPSIMD_NO_PSUM)
        validate.tile("affine_select", role, value)
    validate.same_free_size("affine_select", "dst", dst, on_true_tile.shape, "on_true_tile")
    emit(context, "affine_select", Engine.GPSIMD, (operand("data", on_true_tile, "r"), operand("dst", dst, "w")))
    if context.numerics:
        values = read(on_true_tile, np.dtype(np.float32)).reshape(dst.shape)
        write(dst, np.where(predicate, values, np.float32(on_false_value)))
    return dst


def _dtype_or(dtype: object, like: Tensor) -> DType:
    return like.dtype if dtype is None else dtype_of(dtype)
