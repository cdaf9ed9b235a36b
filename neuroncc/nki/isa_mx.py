"""Microscaling (MX) instructions of NeuronCore-v4: quantize_mx (VectorE) and nc_matmul_mx (TensorE).

MX data is 4-packed: one ``float8_e5m2_x4`` / ``float8_e4m3fn_x4`` element is four fp8 codes in a uint32
(byte ``q`` is value ``q``), one ``float4_e2m1fn_x4`` element four fp4 codes in a uint16 (nibble ``q``). The
four values of an element lie along the contraction, after the partition dimension: an ``[K, M]`` x4 tile
holds ``[K, M, 4]`` values. A scale (uint8 or ``float8_e8m0fnu``: ``2 ** (code - 127)``) covers a group of
8 partitions x 1 packed element (32 values). Group ``g`` (partitions ``8g .. 8g + 7``) keeps its scales on
partition ``32 * (g // 4) + g % 4`` of the scale tile: each 32-partition quadrant of data has its scales in
the first 4 partitions of the same quadrant (NKI's quantize_mx / nc_matmul_mx layout).
"""

from __future__ import annotations

import numpy as np

from neuroncc.hardware.neuron import GEMM_STATIONARY_FMAX, MX_MOVING_FMAX
from neuroncc.nki import minifloat, validate
from neuroncc.nki.context import current
from neuroncc.nki.dtypes import DType
from neuroncc.nki.errors import NKISimulationError
from neuroncc.nki.instructions import emit, operand, write
from neuroncc.nki.tensor import Tensor
from neuroncc.nki.trace import Engine

GROUP_PARTITIONS = 8


def unpack_x4(raw: np.ndarray, dtype: DType) -> np.ndarray:
    """The float32 values of packed x4 data: shape ``raw.shape + (4,)``."""
    assert dtype.element is not None
    bits = dtype.element.bits
    codes = np.stack([(raw.astype(np.uint64) >> np.uint64(bits * q)) & np.uint64((1 << bits) - 1)
                      for q in range(4)], axis=-1)
    return minifloat.decode(codes.astype(np.uint8), dtype.element)


def pack_x4(values: np.ndarray, dtype: DType) -> np.ndarray:
    """Pack ``[..., 4]`` values (rounded to ``dtype``'s element format, saturating) into x4 elements."""
    assert dtype.element is not None
    codes = minifloat.encode(values, dtype.element, saturate=True).astype(np.uint64)
    bits = dtype.element.bits
    packed = sum(codes[..., q] << np.uint64(bits * q) for q in range(4))
    return np.asarray(packed).astype(dtype.storage)


def scale_rows(partitions: int) -> np.ndarray:
    """For each group of 8 data partitions, the partition of the scale tile that holds its scales."""
    groups = np.arange(partitions // GROUP_PARTITIONS)
    return 32 * (groups // 4) + groups % 4


def _require_v4(op: str) -> None:
    target = current().target
    if target.core != "NC-v4":
        raise NKISimulationError(
            f"{op} is available only on NeuronCore-v4 (trn3), not on {target.name} ({target.core})")


def _check_scale(op: str, role: str, scale: Tensor, partitions: int, columns: int) -> None:
    validate.space(op, role, scale, validate.SBUF)
    validate.tile(op, role, scale, aligned=False)
    if scale.dtype.name not in ("uint8", "float8_e8m0fnu"):
        raise NKISimulationError(f"{op} {role} dtype must be float8_e8m0fnu or uint8, got {scale.dtype.name}")
    needed = int(scale_rows(partitions).max()) + 1
    if scale.shape[0] < needed or scale.free_size < columns:
        raise NKISimulationError(
            f"{op} {role} of shape {scale.shape} is too small for {partitions} data partitions x {columns} packed "
            f"elements: it needs {needed} partitions (scales of each 32-partition quadrant in its first 4) and "
            f"{columns} elements per partition")


def _scales(scale: Tensor, partitions: int, columns: int) -> np.ndarray:
    codes = scale.array().reshape(scale.shape[0], -1)[scale_rows(partitions), :columns]
    return minifloat.e8m0_decode(codes)


def nc_matmul_mx(dst: Tensor, stationary: Tensor, moving: Tensor, stationary_scale: Tensor, moving_scale: Tensor,
                 tile_position: object = None, tile_size: object = None, accumulate: bool | None = None,
                 name: str | None = None) -> Tensor:
    """``dst[M, N] = sum over (k, q) of S[k, m, q] * s_S * V[k, n, q] * s_V`` on TensorE (NeuronCore-v4).

    ``stationary`` ``[K, M]`` and ``moving`` ``[K, N]`` are x4 MX data in SBUF (``K`` a multiple of 32, at most
    128; ``M`` even, at most 128), their scales in SBUF, ``dst`` float32 or bfloat16 in PSUM (``N`` at most 4096
    for float32, 8192 for bfloat16). Accumulation as ``nc_matmul``.
    """
    op = "nc_matmul_mx"
    context = current()
    _require_v4(op)
    for role, value in (("dst", dst), ("stationary", stationary), ("moving", moving),
                        ("stationary_scale", stationary_scale), ("moving_scale", moving_scale)):
        validate.tensor(op, role, value)
    for role, value in (("stationary", stationary), ("moving", moving)):
        validate.space(op, role, value, validate.SBUF)
        validate.tile(op, role, value)
        if not value.dtype.is_packed:
            raise NKISimulationError(
                f"{op} {role} dtype must be float8_e5m2_x4, float8_e4m3fn_x4 or float4_e2m1fn_x4, "
                f"got {value.dtype.name}")
        if value.ndim != 2:
            raise NKISimulationError(f"{op} {role} must be 2-D, got shape {value.shape}")
    validate.space(op, "dst", dst, validate.PSUM)
    validate.tile(op, "dst", dst)
    (k, m), (k_moving, n) = stationary.shape, moving.shape
    if k != k_moving:
        raise NKISimulationError(f"{op} stationary and moving partition dimensions must match, got {k} and {k_moving}")
    if k % 32:
        raise NKISimulationError(f"{op} partition dimension {k} must be a multiple of 32")
    if m > GEMM_STATIONARY_FMAX or m % 2:
        raise NKISimulationError(f"{op} stationary free dimension {m} must be even and at most {GEMM_STATIONARY_FMAX}")
    if dst.dtype.name not in ("float32", "bfloat16"):
        raise NKISimulationError(f"{op} dst dtype must be float32 or bfloat16, got {dst.dtype.name}")
    limit = MX_MOVING_FMAX[dst.dtype.name]
    if n > limit:
        raise NKISimulationError(f"{op} moving free dimension {n} exceeds maximum {limit} for a {dst.dtype.name} dst")
    validate.same_shape(op, "dst", dst, (m, n), "result")
    _check_scale(op, "stationary_scale", stationary_scale, k, m)
    _check_scale(op, "moving_scale", moving_scale, k, n)
    emit(context, op, Engine.TENSOR,
         (operand("stationary", stationary, "r"), operand("moving", moving, "r"),
          operand("stationary_scale", stationary_scale, "r"), operand("moving_scale", moving_scale, "r"),
          operand("dst", dst, "w" if accumulate is False else "rw")), packed=4)
    if context.numerics:
        s = unpack_x4(stationary.array(), stationary.dtype)  # [K, M, 4]
        v = unpack_x4(moving.array(), moving.dtype)  # [K, N, 4]
        s = s * np.repeat(_scales(stationary_scale, k, m), GROUP_PARTITIONS, axis=0)[:, :, None]
        v = v * np.repeat(_scales(moving_scale, k, n), GROUP_PARTITIONS, axis=0)[:, :, None]
        with np.errstate(all="ignore"):
            product = np.einsum("kmq,knq->mn", s.astype(np.float64), v.astype(np.float64)).astype(np.float32)
            if accumulate is False:
                result = product
            else:
                previous = dst.array().astype(np.float32)
                adds = np.ones_like(product, dtype=bool) if accumulate else dst.written_mask()
                result = np.where(adds, previous + product, product)
        write(dst, result)
    return dst


def quantize_mx(dst: Tensor, src: Tensor, dst_scale: Tensor, name: str | None = None) -> Tensor:
    """Quantize bfloat16/float16 ``src [P, 4F]`` into MXFP8 ``dst [P, F]`` (x4) and its scales (VectorE, NC-v4).

    Each group of 8 partitions x 4 values gets the scale ``X = 2 ** (floor(log2(max |v|)) - (E_max - 1))``
    (``E_max`` 8 for float8_e4m3fn, 15 for float8_e5m2; ``2 ** -127`` for an all-zero group), as NKI's
    quantize_mx documents; each value ``v / X`` is rounded to the fp8 format (nearest, ties to even).
    """
    op = "quantize_mx"
    context = current()
    _require_v4(op)
    for role, value in (("dst", dst), ("src", src), ("dst_scale", dst_scale)):
        validate.tensor(op, role, value)
    for role, value in (("dst", dst), ("src", src)):
        validate.space(op, role, value, validate.SBUF)
        validate.tile(op, role, value)
    if src.dtype.name not in ("bfloat16", "float16"):
        raise NKISimulationError(f"{op} src dtype must be bfloat16 or float16, got {src.dtype.name}")
    if dst.dtype.name not in ("float8_e5m2_x4", "float8_e4m3fn_x4"):
        raise NKISimulationError(f"{op} dst dtype must be float8_e5m2_x4 or float8_e4m3fn_x4, got {dst.dtype.name}")
    partitions, free = src.shape[0], src.free_size
    if partitions % 32:
        raise NKISimulationError(f"{op} src partition dimension {partitions} must be a multiple of 32")
    if free % 4:
        raise NKISimulationError(f"{op} src free size {free} must be a multiple of 4")
    validate.same_free_size(op, "dst", dst, (partitions, free // 4), "packed result")
    _check_scale(op, "dst_scale", dst_scale, partitions, free // 4)
    if dst_scale.ndim != 2:
        raise NKISimulationError(f"{op} dst_scale must be 2-D, got shape {dst_scale.shape}")
    emit(context, op, Engine.VECTOR,
         (operand("src", src, "r"), operand("dst", dst, "w"), operand("dst_scale", dst_scale, "w")))
    if context.numerics:
        element = dst.dtype.element
        assert element is not None
        values = src.array().astype(np.float64).reshape(partitions // GROUP_PARTITIONS, GROUP_PARTITIONS, free // 4, 4)
        amax = np.abs(values).max(axis=(1, 3))  # [groups, F]
        with np.errstate(divide="ignore"):
            exponent = np.floor(np.log2(np.where(amax > 0, amax, 1.0))) - (element.max_exponent - 1)
        codes = np.where(amax > 0, np.clip(exponent + 127, 0, 254), 0).astype(np.uint8)
        scale = np.exp2(codes.astype(np.float64) - 127)
        quantized = values / scale[:, None, :, None]
        dst.array()[...] = pack_x4(quantized.reshape(partitions, free // 4, 4), dst.dtype).reshape(dst.shape)
        scales = dst_scale.array()
        scales[scale_rows(partitions), :free // 4] = codes  # raw e8m0 codes (the dst_scale tile is 2-D)
    return dst
