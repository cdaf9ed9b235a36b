"""Lowerings of elementwise aten ops: unary math, binary arithmetic, comparisons, where, clamp, casts.

Binary ops cast both operands to one dtype first: the result dtype PyTorch computed (``node.meta``) for
arithmetic, the promoted operand dtype for comparisons. A bf16/f16 result with a scalar operand follows what
PyTorch's CPU kernels read the scalar as (measured on torch 2.13, see :data:`SCALAR_PRECISION`): some read it
at full precision and round the result once, others narrow it to the result dtype first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from neuroncc.errors import UnsupportedOpError
from neuroncc.frontend.lowering.context import LoweringContext, ir_dtype
from neuroncc.ir import DType, Value

aten = torch.ops.aten
Lowering = Callable[..., Any]


#: How PyTorch's CPU kernels read a scalar operand (a Python number, or a 0-dim tensor, which does not take
#: part in type promotion) when the result is bf16/f16; measured on torch 2.13 against both readings.
SCALAR_PRECISION = {
    # mul_kernel / div_*_kernel: `iter.is_scalar(2)` reads the second operand with
    # `original_scalar_value<float>` (a Python number or a 0-dim float32 tensor, unrounded); a first-operand
    # scalar goes through the common dtype like any tensor.
    "mul": "wide-second",
    "div": "wide-second",
    # add/sub, remainder/fmod: the scalar is cast to the common dtype first (bf16 + 0.3 adds 0.30078125).
    "add": "narrow",
    "sub": "narrow",
    "remainder": "narrow",
    "fmod": "narrow",
}


def _wide_scalar(ctx: LoweringContext, ir_name: str, a: Any, b: Any) -> bool:
    """Whether ``ir_name(a, b)`` with a bf16/f16 result computes in f32 with a full-precision scalar."""
    rule = SCALAR_PRECISION.get(ir_name, "wide-python")
    if rule == "narrow":
        return False
    if rule == "wide-second":
        return not isinstance(b, fx.Node) or ctx.out_meta(b).dim() == 0
    return not isinstance(a, fx.Node) or not isinstance(b, fx.Node)  # the other ops: Python scalars only


def _arith(ctx: LoweringContext, ir_name: str, dtype: DType, a: Any, b: Any, **attrs: Any) -> Value:
    """``ir_name(a, b)`` with both operands in ``dtype``; low-precision floats with a scalar read at full
    precision (see :data:`SCALAR_PRECISION`) computed in f32 and rounded once."""
    if dtype in (DType.bf16, DType.f16) and _wide_scalar(ctx, ir_name, a, b):
        result = ctx.emit(ir_name, ctx.operand(a, DType.f32), ctx.operand(b, DType.f32), **attrs)
        return ctx.cast(result, dtype)
    return ctx.emit(ir_name, ctx.operand(a, dtype), ctx.operand(b, dtype), **attrs)


def _scaled(ctx: LoweringContext, other: Any, alpha: Any, dtype: DType) -> Any:
    """``alpha * other`` for add/sub's alpha argument (a Python scalar stays a scalar). The shortcut is for
    plain numbers: a lifted float's stand-in (a float subclass, device/stand_ins.py) would record the question
    and guard the kernel, and ``other * alpha`` is exact for alpha = 1 as well."""
    if type(alpha) in (int, float, bool) and alpha == 1:
        return other
    if not isinstance(other, fx.Node):
        return other * alpha
    return _arith(ctx, "mul", dtype, other, alpha)


# ---- rule makers ---------------------------------------------------------------------------------------


def unary(ir_name: str) -> Lowering:
    """``x -> ir_name(x)`` in the result dtype (an integer input of a float function is cast first)."""
    def lower(ctx: LoweringContext, node: fx.Node, self: Any) -> Value:
        return ctx.emit(ir_name, ctx.operand(self, ctx.out_dtype(node)))

    return lower


def predicate(ir_name: str) -> Lowering:
    """``x -> ir_name(x)`` returning bool, on the input's own dtype."""
    def lower(ctx: LoweringContext, node: fx.Node, self: Any) -> Value:
        return ctx.emit(ir_name, ctx.value(self))

    return lower


def float_predicate(ir_name: str) -> Lowering:
    """isnan / isinf: ``ir_name(x)`` on floats; all False on integers and bool, which hold no NaN or infinity (as
    PyTorch answers; nansum and heaviside's decompositions ask isnan of any dtype)."""
    def lower(ctx: LoweringContext, node: fx.Node, self: Any) -> Value:
        x = ctx.value(self)
        if not (x.type.dtype.is_float or x.type.dtype.is_complex):
            return ctx.full(ctx.out_shape(node), DType.bool, False)
        return ctx.emit(ir_name, x)

    return lower


def float_rounding(ir_name: str) -> Lowering:
    """floor / ceil / round / trunc: ``ir_name(x)`` on floats; an integer tensor is its own rounding (same dtype,
    as PyTorch returns it). Bool stays refused by the IR op, as PyTorch's CPU kernels refuse it."""
    def lower(ctx: LoweringContext, node: fx.Node, self: Any) -> Value:
        x = ctx.value(self)
        return x if x.type.dtype.is_int else ctx.emit(ir_name, x)

    return lower


def _sign(ctx: LoweringContext, node: fx.Node, self: Any) -> Value:
    """sign (and sgn of real tensors): a bool tensor is its own sign (True is 1, False 0; the result is bool)."""
    x = ctx.value(self)
    return x if x.type.dtype.is_bool else ctx.emit("sign", ctx.operand(self, ctx.out_dtype(node)))


def binary(ir_name: str) -> Lowering:
    """``(a, b) -> ir_name(a, b)`` with both operands cast to the result dtype."""
    def lower(ctx: LoweringContext, node: fx.Node, self: Any, other: Any) -> Value:
        return _arith(ctx, ir_name, ctx.out_dtype(node), self, other)

    return lower


def shift(ir_name: str) -> Lowering:
    """A bit shift in the result dtype. A Python number is converted as PyTorch's kernels convert it: wrapped into
    the dtype (``int8 << 260`` shifts by 4; ``uint8 >> -1`` by 255, out of range), where ``full`` would refuse it."""
    def lower(ctx: LoweringContext, node: fx.Node, self: Any, other: Any) -> Value:
        dtype = ctx.out_dtype(node)
        bits = 8 * dtype.itemsize
        low = 0 if dtype is DType.u8 else -(1 << (bits - 1))

        def wrapped(arg: Any) -> Any:
            return (arg - low) % (1 << bits) + low if type(arg) in (int, bool) else arg

        return ctx.emit(ir_name, ctx.operand(wrapped(self), dtype), ctx.operand(wrapped(other), dtype))

    return lower


def compare(ir_name: str) -> Lowering:
    """``(a, b) -> ir_name(a, b)`` (bool) with both operands cast to their promoted dtype."""
    def lower(ctx: LoweringContext, node: fx.Node, self: Any, other: Any) -> Value:
        dtype = ctx.promoted_dtype(self, other)
        return ctx.emit(ir_name, ctx.operand(self, dtype), ctx.operand(other, dtype))

    return lower


def signed_infinity(sign: float) -> Lowering:
    """isposinf / isneginf as PyTorch's reference computes them: ``x == sign * inf`` on floating dtypes (in the
    comparison's computation dtype: float32 for bf16/f16), all False on the others. The eager device traced the
    reference for each new signature (~8-10 ms of make_fx, for a decoding step's every new sequence length in
    text generation); this lowering builds the same IR at once."""

    def lower(ctx: LoweringContext, node: fx.Node, self: Any) -> Value:
        meta = ctx.out_meta(self)
        if not meta.dtype.is_floating_point:
            return ctx.full(ctx.out_shape(node), DType.bool, False)
        infinity = sign * float("inf")
        computation, _ = elementwise_dtypes(meta, infinity, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
        dtype = ir_dtype(computation)
        return ctx.emit("eq", ctx.operand(self, dtype), ctx.operand(infinity, dtype))

    return lower


def logical(ir_name: str) -> Lowering:
    """``(a, b) -> ir_name(a != 0, b != 0)``: logical ops look only at truthiness."""
    def lower(ctx: LoweringContext, node: fx.Node, self: Any, other: Any) -> Value:
        return ctx.emit(ir_name, ctx.operand(self, DType.bool), ctx.operand(other, DType.bool))

    return lower


# ---- ops with extra arguments --------------------------------------------------------------------------


def _add(ctx: LoweringContext, node: fx.Node, self: Any, other: Any, *, alpha: Any = 1) -> Value:
    dtype = ctx.out_dtype(node)
    return _arith(ctx, "add", dtype, self, _scaled(ctx, other, alpha, dtype))


def _sub(ctx: LoweringContext, node: fx.Node, self: Any, other: Any, *, alpha: Any = 1) -> Value:
    dtype = ctx.out_dtype(node)
    return _arith(ctx, "sub", dtype, self, _scaled(ctx, other, alpha, dtype))


def _rsub(ctx: LoweringContext, node: fx.Node, self: Any, other: Any, *, alpha: Any = 1) -> Value:
    dtype = ctx.out_dtype(node)
    return _arith(ctx, "sub", dtype, other, _scaled(ctx, self, alpha, dtype))


def _div(ctx: LoweringContext, node: fx.Node, self: Any, other: Any, *, rounding_mode: str | None = None) -> Value:
    return _arith(ctx, "div", ctx.out_dtype(node), self, other, rounding_mode=rounding_mode or "none")


def _pow_tensor_scalar(ctx: LoweringContext, node: fx.Node, self: Any, exponent: Any) -> Value:
    """``x ** exponent``. PyTorch's bf16 kernel spells x**3 as x*x*x and x**-2 as 1/(x*x) in bf16 arithmetic
    (each product rounded; measured on torch 2.13), so a single rounding of f32 pow is an ulp off there (found by
    the fuzzer: amplified in rsqrt's gradient, which is -0.5 * g * rsqrt(x)**3). Other exponents and dtypes:
    one rounding of the f32 power."""
    dtype = ctx.out_dtype(node)
    if dtype is DType.bf16 and exponent in (3, -2) and not isinstance(exponent, bool):
        x = ctx.operand(self, dtype)
        square = ctx.emit("mul", x, x)
        if exponent == 3:
            return ctx.emit("mul", square, x)
        return ctx.emit("div", ctx.scalar(1.0, dtype), square, rounding_mode="none")
    return _arith(ctx, "pow", dtype, self, exponent)


def _floor_divide(ctx: LoweringContext, node: fx.Node, self: Any, other: Any) -> Value:
    return _arith(ctx, "div", ctx.out_dtype(node), self, other, rounding_mode="floor")


def _gelu(ctx: LoweringContext, node: fx.Node, self: Any, *, approximate: str = "none") -> Value:
    return ctx.emit("gelu", ctx.operand(self, ctx.out_dtype(node)), approximate=approximate)


def _where(ctx: LoweringContext, node: fx.Node, condition: Any, self: Any, other: Any) -> Value:
    dtype = ctx.out_dtype(node)
    return ctx.emit("where", ctx.operand(condition, DType.bool), ctx.operand(self, dtype), ctx.operand(other, dtype))


def _clamp(ctx: LoweringContext, node: fx.Node, self: Any, min: Any = None, max: Any = None,
           nan_from_bound: bool = False) -> Value:
    dtype = ctx.out_dtype(node)
    if isinstance(min, fx.Node) or isinstance(max, fx.Node):  # clamp.Tensor: elementwise bounds
        result = ctx.operand(self, dtype)
        if min is not None:
            result = ctx.emit("maximum", result, ctx.operand(min, dtype))
        if max is not None:
            result = ctx.emit("minimum", result, ctx.operand(max, dtype))
        return result
    # the bounds as given: the IR's clamp converts them to the element type as eager does (rounded here, a bf16
    # bound would no longer be the sentinel the device's lifting looks for, and compiled once per value), and
    # fills the result with NaN for a NaN bound
    return ctx.emit("clamp", ctx.operand(self, dtype), min=min, max=max,
                    nan_from_bound=nan_from_bound and dtype in _BOUND_NAN_KEPT)


#: the element types whose clamp_min/clamp_max return a NaN bound itself, its sign kept (eager's ``clamp_min(x,
#: -nan)`` is -nan everywhere; its bfloat16 kernel, and clamp and hardtanh of every type, give a positive NaN)
_BOUND_NAN_KEPT = frozenset({DType.f32, DType.f16})


def _clamp_min(ctx: LoweringContext, node: fx.Node, self: Any, min: Any) -> Value:
    return _clamp(ctx, node, self, min=min, nan_from_bound=True)


def _clamp_max(ctx: LoweringContext, node: fx.Node, self: Any, max: Any) -> Value:
    return _clamp(ctx, node, self, max=max, nan_from_bound=True)


def _to_copy(ctx: LoweringContext, node: fx.Node, self: Any, **kwargs: Any) -> Value:
    device = kwargs.get("device")
    if device is not None and torch.device(device).type not in ctx.host_devices:
        raise UnsupportedOpError(f"copy to device '{device}' (neuroncc's torch backend computes tensors in host "
                                 f"memory: {', '.join(ctx.host_devices)})")
    return ctx.cast(ctx.value(self), ctx.out_dtype(node))


def _copy(ctx: LoweringContext, node: fx.Node, self: Any, src: Any, non_blocking: bool = False) -> Value:
    """aten.copy(self, src): src in self's dtype, broadcast to self's shape (functional copy_)."""
    result = ctx.operand(src, ctx.out_dtype(node))
    shape = ctx.out_shape(node)
    return result if result.type.shape == shape else ctx.emit("expand", result, shape=shape)


def _fill(ctx: LoweringContext, node: fx.Node, self: Any, value: Any) -> Value:
    dtype = ctx.out_dtype(node)
    if isinstance(value, fx.Node):  # fill.Tensor: a 0-dim tensor value
        return ctx.emit("expand", ctx.operand(value, dtype), shape=ctx.out_shape(node))
    return ctx.full(ctx.out_shape(node), dtype, value)


def _identity(ctx: LoweringContext, node: fx.Node, self: Any, *args: Any, **kwargs: Any) -> Value:
    """Ops that only change aliasing or memory format (clone, alias, detach): the same logical tensor."""
    return ctx.value(self)


_UNARY = {
    aten.abs.default: unary("abs"),
    aten.neg.default: unary("neg"),
    aten.sign.default: _sign,
    aten.relu.default: unary("relu"),
    aten.exp.default: unary("exp"),
    aten.exp2.default: unary("exp2"),
    aten.expm1.default: unary("expm1"),
    aten.log.default: unary("log"),
    aten.log2.default: unary("log2"),
    aten.log1p.default: unary("log1p"),
    aten.sqrt.default: unary("sqrt"),
    aten.rsqrt.default: unary("rsqrt"),
    aten.reciprocal.default: unary("reciprocal"),
    aten.sin.default: unary("sin"),
    aten.cos.default: unary("cos"),
    aten.tan.default: unary("tan"),
    aten.tanh.default: unary("tanh"),
    aten.atan.default: unary("atan"),
    aten.sigmoid.default: unary("sigmoid"),
    aten.erf.default: unary("erf"),
    aten.floor.default: float_rounding("floor"),
    aten.ceil.default: float_rounding("ceil"),
    aten.round.default: float_rounding("round"),
    aten.trunc.default: float_rounding("trunc"),
    aten.bitwise_not.default: unary("bitwise_not"),
    aten.isnan.default: float_predicate("isnan"),
    aten.isinf.default: float_predicate("isinf"),
    aten.isposinf.default: signed_infinity(1.0),
    aten.isneginf.default: signed_infinity(-1.0),
    aten.logical_not.default: predicate("logical_not"),
    aten.gelu.default: _gelu,
}

_BINARY = {
    aten.add.Tensor: _add,
    aten.add.Scalar: _add,
    aten.sub.Tensor: _sub,
    aten.sub.Scalar: _sub,
    aten.rsub.Tensor: _rsub,
    aten.rsub.Scalar: _rsub,
    aten.mul.Tensor: binary("mul"),
    aten.mul.Scalar: binary("mul"),
    aten.div.Tensor: _div,
    aten.div.Scalar: _div,
    aten.div.Tensor_mode: _div,
    aten.div.Scalar_mode: _div,
    aten.floor_divide.default: _floor_divide,
    aten.floor_divide.Scalar: _floor_divide,
    aten.pow.Tensor_Tensor: binary("pow"),
    aten.pow.Tensor_Scalar: _pow_tensor_scalar,
    aten.pow.Scalar: binary("pow"),
    aten.maximum.default: binary("maximum"),
    aten.minimum.default: binary("minimum"),
    aten.remainder.Tensor: binary("remainder"),
    aten.remainder.Scalar: binary("remainder"),
    aten.fmod.Tensor: binary("fmod"),
    aten.fmod.Scalar: binary("fmod"),
    aten.atan2.default: binary("atan2"),
    aten.bitwise_and.Tensor: binary("bitwise_and"),
    aten.bitwise_and.Scalar: binary("bitwise_and"),
    aten.bitwise_or.Tensor: binary("bitwise_or"),
    aten.bitwise_or.Scalar: binary("bitwise_or"),
    aten.bitwise_xor.Tensor: binary("bitwise_xor"),
    aten.bitwise_xor.Scalar: binary("bitwise_xor"),
    **{overload: shift("bitwise_left_shift") for overload in (
        aten.bitwise_left_shift.Tensor, aten.bitwise_left_shift.Tensor_Scalar, aten.bitwise_left_shift.Scalar_Tensor,
        aten.__lshift__.Tensor, aten.__lshift__.Scalar)},
    **{overload: shift("bitwise_right_shift") for overload in (
        aten.bitwise_right_shift.Tensor, aten.bitwise_right_shift.Tensor_Scalar,
        aten.bitwise_right_shift.Scalar_Tensor, aten.__rshift__.Tensor, aten.__rshift__.Scalar)},
    aten.logical_and.default: logical("logical_and"),
    aten.logical_or.default: logical("logical_or"),
    aten.logical_xor.default: logical("logical_xor"),
}

_COMPARE = {
    overload: compare(name)
    for name in ("eq", "ne", "lt", "le", "gt", "ge")
    for overload in (getattr(aten, name).Tensor, getattr(aten, name).Scalar)
}

_OTHER = {
    aten.where.self: _where,
    aten.clamp.default: _clamp,
    aten.clamp.Tensor: _clamp,
    aten.clamp_min.default: _clamp_min,
    aten.clamp_max.default: _clamp_max,
    aten._to_copy.default: _to_copy,
    aten.copy.default: _copy,
    aten.fill.Scalar: _fill,
    aten.fill.Tensor: _fill,
    aten.clone.default: _identity,
    aten.alias.default: _identity,
    aten.detach.default: _identity,
    aten.lift_fresh_copy.default: _identity,
    # a copy with the given strides (PyTorch's out= decompositions: lerp.Scalar_out): the layout is the caller's
    torch.ops.prims.copy_strided.default: _identity,
}

ELEMENTWISE_LOWERINGS: dict[Any, Lowering] = {**_UNARY, **_BINARY, **_COMPARE, **_OTHER}
