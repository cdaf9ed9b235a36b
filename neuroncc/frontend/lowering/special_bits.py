"""Floating-point bit functions: signbit, copysign, nextafter, frexp, written on the float's bits.

Each reinterprets float32 as int32 (``x.view(torch.int32)``, the IR's ``bitcast``) so that signs of zeros and
NaNs, neighbouring floats and exponents come out exactly as C's functions give them (what eager calls).
bfloat16 values are held in float32 with the low 16 bits zero, so their sign and exponent are float32's and
their neighbour is 2^16 float32 steps away. float16 values convert to float32 exactly (sign of zeros and NaNs
kept), so signbit, copysign and frexp read them there; nextafter of float16 (whose neighbour is no fixed number of
float32 steps away: its subnormals are float32 normals) and float64 decline, and stay refused.
"""

from __future__ import annotations

from typing import Any

import torch

from neuroncc.errors import UnsupportedOpError
from neuroncc.frontend.lowering.context import LoweringContext
from neuroncc.ir import Value
from neuroncc.ir.ops.elementwise import BITCAST_PAIRS

aten = torch.ops.aten

_SIGN = -(2 ** 31)  # 0x80000000 as int32
_MAGNITUDE = 2 ** 31 - 1
_EXPONENT = 0x7F800000
_MANTISSA_AND_SIGN = _SIGN | 0x007FFFFF
_HALF_EXPONENT = 0x3F000000  # the exponent field of [0.5, 1)
_SMALLEST_NORMAL = 2.0 ** -126
_BITS_STEP = {torch.float32: 1, torch.bfloat16: 1 << 16}  # one unit in the last place, in float32 bits
_EXACT_IN_FLOAT32 = (torch.float32, torch.bfloat16, torch.float16)  # sign, magnitude and exponent read in float32


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float32).view(torch.int32)


def _from_bits(bits: torch.Tensor) -> torch.Tensor:
    return bits.view(torch.float32)


def _signbit(x: torch.Tensor) -> Any:
    if x.dtype == torch.bool:
        return torch.zeros_like(x)
    if not x.is_floating_point():
        return x < 0
    if x.dtype not in _EXACT_IN_FLOAT32:
        return NotImplemented
    return _bits(x) < 0  # the sign bit is int32's sign: -0.0 and -NaN included


def _copysign(a: Any, b: Any) -> Any:
    dtype = torch.result_type(a, b)
    dtype = dtype if dtype.is_floating_point else torch.get_default_dtype()
    if dtype not in _EXACT_IN_FLOAT32:
        return NotImplemented
    a = torch.as_tensor(a).to(torch.float32)
    b = torch.as_tensor(b).to(torch.float32)
    bits = torch.bitwise_or(torch.bitwise_and(_bits(a), _MAGNITUDE), torch.bitwise_and(_bits(b), _SIGN))
    return _from_bits(bits).to(dtype)


def _nextafter(x: torch.Tensor, y: torch.Tensor) -> Any:
    dtype = torch.result_type(x, y)
    if dtype not in _BITS_STEP:
        return NotImplemented
    step = _BITS_STEP[dtype]
    x, y = x.to(torch.float32), y.to(torch.float32)
    bits = _bits(x)
    # Away from zero exactly when y lies beyond x on x's side: the magnitude bits grow by one unit (int32
    # arithmetic does that for either sign); otherwise they shrink. From zero: the smallest subnormal, y's sign.
    away = (y > x) == (x > 0)
    moved = torch.where(away, bits + step, bits - step)
    from_zero = torch.bitwise_or(torch.bitwise_and(_bits(y), _SIGN), torch.full_like(bits, step))
    result = _from_bits(torch.where(x == 0, from_zero, moved))
    result = torch.where(x == y, y, result)
    return torch.where(torch.isnan(x) | torch.isnan(y), x + y, result).to(dtype)


def _frexp(x: torch.Tensor) -> Any:
    if x.dtype not in _EXACT_IN_FLOAT32:
        return NotImplemented
    f = x.to(torch.float32)
    # Subnormals: scale by 2^24 (exact) so that the exponent field is not zero, and take 24 off the exponent.
    subnormal = (torch.abs(f) < _SMALLEST_NORMAL) & (f != 0)
    scaled = torch.where(subnormal, f * 16777216.0, f)
    bits = _bits(scaled)
    field = torch.div(torch.bitwise_and(bits, _EXPONENT), 1 << 23, rounding_mode="floor")
    exponent = field - 126 - torch.where(subnormal, 24, 0).to(torch.int32)
    mantissa = _from_bits(torch.bitwise_or(torch.bitwise_and(bits, _MANTISSA_AND_SIGN), _HALF_EXPONENT))
    special = (f == 0) | torch.isinf(f) | torch.isnan(f)  # C's frexp: the value itself and exponent 0
    mantissa = torch.where(special, f, mantissa)
    exponent = torch.where(special, 0, exponent).to(torch.int32)
    return mantissa.to(x.dtype), exponent


#: aten op -> decomposition on the bits.
BIT_FORMULAS: dict[Any, Any] = {
    aten.signbit.default: _signbit,  # the int32 view's sign
    aten.copysign.Tensor: _copysign,  # |a|'s bits with b's sign bit
    aten.copysign.Scalar: _copysign,
    aten.nextafter.default: _nextafter,  # the bits +-1 unit
    aten.frexp.Tensor: _frexp,  # the exponent field, the mantissa with exponent -1
}


def _view_dtype(ctx: LoweringContext, node: Any, self: Any, dtype: Any) -> Value:
    """aten.view.dtype (and its functional form view_copy.dtype, as a traced program holds it): a same-width
    reinterpretation, the IR's bitcast (float32 <-> int32, bfloat16 <-> int16)."""
    source = ctx.value(self)
    target = ctx.out_dtype(node)
    if source.type.dtype is target:
        return source
    if (source.type.dtype, target) not in BITCAST_PAIRS:
        raise UnsupportedOpError(f"viewing a {source.type.dtype.value} tensor as {target.value} "
                                 "(only float32 <-> int32 and bfloat16 <-> int16 bit views)")
    return ctx.emit("bitcast", source, dtype=target)


BIT_LOWERINGS: dict[Any, Any] = {aten.view.dtype: _view_dtype, aten.view_copy.dtype: _view_dtype}
