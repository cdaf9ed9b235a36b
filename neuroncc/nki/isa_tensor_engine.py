"""TensorE instructions: nc_matmul and nc_transpose (nc_transpose can also run on VectorE)."""

from __future__ import annotations

import numpy as np

from neuroncc.hardware.neuron import (
    GEMM_MOVING_FMAX, GEMM_STATIONARY_FMAX, TENSOR_TRANSPOSE_MAX, VECTOR_TRANSPOSE_MAX,
)
from neuroncc.nki import instructions, masking, validate
from neuroncc.nki.context import current
from neuroncc.nki.dtypes import float32
from neuroncc.nki.errors import NKISimulationError
from neuroncc.nki.instructions import emit, engine, new_result, operand, pick_engine, read, write
from neuroncc.nki.tensor import Buffer, Tensor
from neuroncc.nki.trace import Engine



def _psum_byte_range(value: Tensor) -> tuple[int, int]:
    """Per-partition byte range ``[lo, hi)`` a PSUM view touches inside its tile."""
    strides = [1] * len(value.layout)
    for axis in range(len(value.layout) - 2, 0, -1):
        strides[axis] = strides[axis + 1] * value.layout[axis + 1]
    region = value.region()
    lo = sum(region[axis][0] * strides[axis] for axis in range(1, len(region)))
    hi = sum((region[axis][1] - 1) * strides[axis] for axis in range(1, len(region))) + 1
    return lo * value.itemsize, hi * value.itemsize


def _require_one_bank(op: str, dst: Tensor) -> None:
    """TensorE writes one accumulation group into a single 2 KiB PSUM bank per partition."""
    bank = current().target.psum_bank_bytes
    lo, hi = _psum_byte_range(dst)
    if hi - lo > bank:
        raise NKISimulationError(
            f"{op} dst spans {hi - lo} bytes per partition of PSUM, but a TensorE result must fit in one "
            f"{bank}-byte bank")
    if lo // bank != (hi - 1) // bank:
        raise NKISimulationError(f"{op} dst bytes [{lo}, {hi}) per partition cross a {bank}-byte PSUM bank boundary")


def nc_matmul(dst: Tensor | None = None, stationary: Tensor | None = None, moving: Tensor | None = None,
              is_stationary_onezero: bool = False, is_moving_onezero: bool = False, is_transpose: bool = False,
              accumulate: bool | None = None, tile_position: tuple = (), tile_size: tuple = (),
              perf_mode: object = None, name: str | None = None, mask: object = None) -> Tensor:
    """``dst[M, N] = stationary[K, M].T @ moving[K, N]`` on TensorE, accumulating in fp32 PSUM.

    ``accumulate=None`` (default) overwrites each PSUM element the first time it is written after its
    allocation and adds to it afterwards; ``True`` always adds, ``False`` always overwrites.
    """
    if moving is None and stationary is not None and dst is not None:
        # NKI 0.1: nc_matmul(stationary, moving) returns a fresh PSUM tile.
        dst, stationary, moving = None, dst, stationary
    if dst is None and isinstance(stationary, Tensor) and isinstance(moving, Tensor):
        dst = new_result((stationary.shape[-1], moving.shape[-1]), float32, Buffer.PSUM)
    context = current()
    dst = validate.tensor("nc_matmul", "dst", dst)
    stationary = validate.tensor("nc_matmul", "stationary", stationary)
    moving = validate.tensor("nc_matmul", "moving", moving)
    if mask is not None:
        # A mask selects part of the [M, N] result: the matmul runs on those stationary / moving columns.
        restricted = masking.restriction("nc_matmul", mask, dst.shape)
        if restricted is None or restricted.empty:
            return dst
        if restricted.keep is not None:
            raise NKISimulationError("nc_matmul: the mask must select a rectangle of the result")
        rows, cols = restricted.box
        nc_matmul(dst[rows, cols], stationary[:, rows], moving[:, cols], accumulate=accumulate)
        return dst
    for role, value in (("stationary", stationary), ("moving", moving)):
        if value.dtype.is_packed or not value.dtype.is_float or value.dtype.kind == "scale":
            raise NKISimulationError(
                f"nc_matmul {role} dtype {value.dtype.name} is not supported; TensorE multiplies float8, bfloat16, "
                f"float16, tfloat32 and float32 (packed MX data goes through nisa.nc_matmul_mx)")
    validate.space("nc_matmul", "stationary", stationary, validate.SBUF)
    validate.space("nc_matmul", "moving", moving, validate.SBUF)
    validate.space("nc_matmul", "dst", dst, validate.PSUM)
    for role, value in (("stationary", stationary), ("moving", moving)):
        validate.tile("nc_matmul", role, value)
        if value.ndim != 2:
            raise NKISimulationError(f"nc_matmul {role} must be 2-D, got shape {value.shape}")
    (k, m), (k_moving, n) = stationary.shape, moving.shape
    if k != k_moving:
        raise NKISimulationError(
            f"nc_matmul stationary and moving partition dimensions must match (the contraction), got {k} and {k_moving}")
    if m > GEMM_STATIONARY_FMAX:
        raise NKISimulationError(f"nc_matmul stationary free dimension {m} exceeds maximum {GEMM_STATIONARY_FMAX}")
    if n > GEMM_MOVING_FMAX:
        raise NKISimulationError(f"nc_matmul moving free dimension {n} exceeds maximum {GEMM_MOVING_FMAX}")
    validate.tile("nc_matmul", "dst", dst)
    validate.same_shape("nc_matmul", "dst", dst, (m, n), "result")
    if dst.dtype.name not in context.target.matmul_dst_dtypes:
        raise NKISimulationError(
            f"nc_matmul dst dtype {dst.dtype.name} is not supported on {context.target.name}; PSUM results "
            f"must be {' or '.join(context.target.matmul_dst_dtypes)}")
    if (stationary.dtype.itemsize == 4) != (moving.dtype.itemsize == 4):
        raise NKISimulationError(
            f"nc_matmul stationary dtype {stationary.dtype.name} and moving dtype {moving.dtype.name} cannot be "
            f"mixed: a float32 operand needs a float32 partner")
    _require_one_bank("nc_matmul", dst)
    emit(context, "nc_matmul", Engine.TENSOR,
         (operand("stationary", stationary, "r"), operand("moving", moving, "r"),
          operand("dst", dst, "w" if accumulate is False else "rw")))
    if context.numerics:
        with np.errstate(all="ignore"):
            product = read(stationary, np.dtype(np.float32)).T @ read(moving, np.dtype(np.float32))
            if accumulate is False:
                result = product
            else:
                previous = read(dst, np.dtype(np.float32))
                adds = np.ones_like(product, dtype=bool) if accumulate else dst.written_mask()
                result = np.where(adds, previous + product, product)
        write(dst, result)
    return dst


def nc_transpose(dst: Tensor | None = None, data: Tensor | None = None, engine: engine = engine.unknown,
                 name: str | None = None, mask: object = None) -> Tensor:
    """Swap the partition and (flattened) free axes of ``data``: ``dst[F, P] = data[P, F].T``.

    TensorE (data in SBUF, dst in PSUM, up to 128 x 128) multiplies by an identity; VectorE transposes
    tiles of at most 32 x 32 and can read and write SBUF or PSUM. ``engine.unknown`` picks TensorE when
    ``dst`` is in PSUM.
    """
    if data is None and isinstance(dst, Tensor):  # NKI 0.1: nc_transpose(data) returns the result
        data = dst
        buffer = Buffer.PSUM if engine in (None, instructions.engine.unknown, instructions.engine.tensor) else Buffer.SBUF
        dst = new_result((data.free_size, data.shape[0]), data.dtype, buffer)
    context = current()
    dst = validate.tensor("nc_transpose", "dst", dst)
    data = validate.tensor("nc_transpose", "data", data)
    if mask is not None:
        restricted = masking.restriction("nc_transpose", mask, data.shape)
        if restricted is None or restricted.empty:
            return dst
        if restricted.keep is not None or data.ndim != 2:
            raise NKISimulationError("nc_transpose: the mask must select a rectangle of a 2-D input")
        rows, cols = restricted.box
        nc_transpose(dst[cols, rows], data[rows, cols], engine=engine)
        return dst
    default = Engine.TENSOR if dst.buffer is Buffer.PSUM and data.buffer is Buffer.SBUF else Engine.VECTOR
    unit = pick_engine(engine, default, (Engine.TENSOR, Engine.VECTOR), "nc_transpose")
    validate.tile("nc_transpose", "data", data)
    validate.tile("nc_transpose", "dst", dst)
    partitions, free = data.shape[0], data.free_size
    if unit is Engine.TENSOR:
        validate.space("nc_transpose", "data", data, validate.SBUF)
        validate.space("nc_transpose", "dst", dst, validate.PSUM)
        if free > TENSOR_TRANSPOSE_MAX:
            raise NKISimulationError(
                f"nc_transpose data free dimension {free} exceeds maximum {TENSOR_TRANSPOSE_MAX}")
        _require_one_bank("nc_transpose", dst)
    else:
        validate.space("nc_transpose", "data", data, validate.ON_CHIP)
        validate.space("nc_transpose", "dst", dst, validate.ON_CHIP)
        if partitions > VECTOR_TRANSPOSE_MAX or free > VECTOR_TRANSPOSE_MAX:
            raise NKISimulationError(
                f"nc_transpose on the vector engine handles at most {VECTOR_TRANSPOSE_MAX}x{VECTOR_TRANSPOSE_MAX}, "
                f"got data shape {data.shape}")
    validate.same_free_size("nc_transpose", "dst", dst, (free, partitions), "result")
    if dst.dtype != data.dtype:
        raise NKISimulationError(
            f"nc_transpose dst dtype {dst.dtype.name} does not match data dtype {data.dtype.name}")
    emit(context, "nc_transpose", unit, (operand("data", data, "r"), operand("dst", dst, "w")))
    if context.numerics:
        write(dst, data.array().reshape(partitions, free).T)
    return dst
