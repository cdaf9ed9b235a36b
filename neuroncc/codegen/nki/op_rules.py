"""Per-op emission rules: how each IR op of a tile stage becomes NKI instructions.

One entry per op in :data:`OP_RULES`. A rule gets the :class:`~neuroncc.codegen.nki.body.Body`, the op and
its operands (tiles of this iteration, or numbers for immediates) and returns the result. Elementwise math
goes to ScalarE (``activation``) when NKI has the function, to VectorE (``tensor_tensor`` /
``tensor_scalar``) otherwise; reductions run on VectorE along free axes (``tensor_reduce``); a select is a
copy then a predicated copy. Ops with no NKI instruction (erf, floor...) are short instruction sequences,
each documented at its rule. An op missing here raises :class:`CodegenError` naming it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from neuroncc.codegen.nki.body import Body, typed_number
from neuroncc.codegen.nki.instructions import Instr, Operand, Ref
from neuroncc.codegen.nki.philox import emit_random
from neuroncc.codegen.nki.shapes import view_window
from neuroncc.errors import CodegenError
from neuroncc.ir import REGISTRY, Category, Op
from neuroncc.ir.ops.elementwise import clamp_bound

Rule = Callable[[Body, Op, list[Operand]], Operand]

#: IR unary ops that are one ScalarE activation function.
ACTIVATIONS: dict[str, str] = {
    "exp": "nl.exp",
    "log": "nl.log",
    "sqrt": "nl.sqrt",
    "rsqrt": "nl.rsqrt",
    "tanh": "nl.tanh",
    "sigmoid": "nl.sigmoid",
    "sin": "nl.sin",
    "cos": "nl.cos",
    "reciprocal": "nl.reciprocal",
}

#: IR binary ops that are one VectorE ALU operator.
ALU_OPS: dict[str, str] = {
    "add": "nl.add",
    "sub": "nl.subtract",
    "mul": "nl.multiply",
    "maximum": "nl.maximum",
    "minimum": "nl.minimum",
    "pow": "nl.power",
    "bitwise_and": "nl.bitwise_and",
    "bitwise_or": "nl.bitwise_or",
    "bitwise_xor": "nl.bitwise_xor",
    "eq": "nl.equal",
    "ne": "nl.not_equal",
    "lt": "nl.less",
    "le": "nl.less_equal",
    "gt": "nl.greater",
    "ge": "nl.greater_equal",
}

#: Reductions: the tensor_reduce operator.
REDUCE_ALU: dict[str, str] = {
    "sum": "nl.add", "mean": "nl.add", "var": "nl.add", "prod": "nl.multiply",
    "amax": "nl.maximum", "amin": "nl.minimum", "any": "nl.maximum", "all": "nl.minimum",
}

LN2 = math.log(2.0)


def _float_tile(body: Body, base: str, shape: tuple[int, ...]) -> Ref:
    return body.new(base, shape, "float32")


def _f32(body: Body, value: Operand, shape: tuple[int, ...]) -> Ref:
    """``value`` as a float32 tile of ``shape`` (sequences compute in float32 whatever the op's dtype)."""
    if isinstance(value, Ref) and value.dtype == "float32":
        return body.broadcast(value, shape)
    tile = _float_tile(body, "wide", shape)
    return body.copy(value, tile)


def _as_bool(body: Body, value: Operand) -> Operand:
    if not isinstance(value, Ref):
        return int(bool(value))
    if value.dtype == "bool_":
        return value
    return body.binary("nl.not_equal", value, 0, body.new("nonzero", value.shape, "bool_"))


# ---- elementwise rules ---------------------------------------------------------------------------------


def _activation(function: str, scale: float | None = None, bias: float | None = None) -> Rule:
    def rule(body: Body, op: Op, x: list[Operand]) -> Operand:
        return body.activation(function, x[0], body.result(op), scale=scale, bias=bias)
    return rule


def _alu(alu: str) -> Rule:
    def rule(body: Body, op: Op, x: list[Operand]) -> Operand:
        return body.binary(alu, x[0], x[1], body.result(op))
    return rule


def _neg(body: Body, op: Op, x: list[Operand]) -> Operand:
    return body.binary("nl.multiply", x[0], -1, body.result(op))


def _abs(body: Body, op: Op, x: list[Operand]) -> Operand:
    dst = body.result(op)
    if dst.dtype in ("float32", "bfloat16", "float16"):
        return body.activation("nl.abs", x[0], dst)
    negated = body.binary("nl.multiply", x[0], -1, body.new("negated", dst.shape, dst.dtype))
    return body.binary("nl.maximum", x[0], negated, dst)  # |x| = max(x, -x) for integers


def _relu(body: Body, op: Op, x: list[Operand]) -> Operand:
    dst = body.result(op)
    if dst.dtype in ("float32", "bfloat16", "float16"):
        return body.activation("nl.relu", x[0], dst)
    return body.binary("nl.maximum", x[0], 0, dst)


def _gelu(body: Body, op: Op, x: list[Operand]) -> Operand:
    function = "nl.gelu_apprx_tanh" if op.attrs["approximate"] == "tanh" else "nl.gelu"
    return body.activation(function, x[0], body.result(op))


def _then(function: str, alu: str, number: float) -> Rule:
    """``function(x) <alu> number`` (expm1 = exp(x) - 1, log2 = ln(x) / ln 2)."""
    def rule(body: Body, op: Op, x: list[Operand]) -> Operand:
        dst = body.result(op)
        inner = body.activation(function, x[0], body.new("partial", dst.shape, "float32"))
        return body.binary(alu, inner, number, dst)
    return rule


def _log1p(body: Body, op: Op, x: list[Operand]) -> Operand:
    """log(u) * x / (u - 1) with u = 1 + x (Goldberg): u - 1 is exact, so the quotient corrects log(u)'s lost
    digits (plain ln(x + 1) has a 5% error at 1e-6 and returns 0 below 6e-8); x itself where u rounds to 1,
    and u where it is infinite."""
    dst = body.result(op)
    shape = dst.shape
    u = body.binary("nl.add", x[0], 1.0, _float_tile(body, "u", shape))
    log_u = body.activation("nl.log", u, _float_tile(body, "log_u", shape))
    u_minus_1 = body.binary("nl.subtract", u, 1.0, _float_tile(body, "u_minus_1", shape))
    ratio = body.binary("nl.divide", x[0], u_minus_1, _float_tile(body, "ratio", shape))
    corrected = body.binary("nl.multiply", log_u, ratio, _float_tile(body, "corrected", shape))
    infinite = body.binary("nl.equal", u, float("inf"), body.new("infinite", shape, "bool_"))
    finite = body.select(infinite, u, corrected, _float_tile(body, "finite", shape))
    one = body.binary("nl.equal", u, 1.0, body.new("one", shape, "bool_"))
    return body.select(one, x[0], finite, dst)


def _expm1(body: Body, op: Op, x: list[Operand]) -> Operand:
    """(u - 1) * x / log(u) with u = exp(x) (Kahan): accurate where exp(x) - 1 cancels; x where u rounds to 1,
    -1 where it underflows, u where it overflows."""
    dst = body.result(op)
    shape = dst.shape
    u = body.activation("nl.exp", x[0], _float_tile(body, "u", shape))
    u_minus_1 = body.binary("nl.subtract", u, 1.0, _float_tile(body, "u_minus_1", shape))
    log_u = body.activation("nl.log", u, _float_tile(body, "log_u", shape))
    ratio = body.binary("nl.divide", x[0], log_u, _float_tile(body, "ratio", shape))
    corrected = body.binary("nl.multiply", u_minus_1, ratio, _float_tile(body, "corrected", shape))
    saturated = body.binary("nl.equal", u_minus_1, -1.0, body.new("saturated", shape, "bool_"))
    bounded = body.select(saturated, u_minus_1, corrected, _float_tile(body, "bounded", shape))
    infinite = body.binary("nl.equal", u, float("inf"), body.new("infinite", shape, "bool_"))
    finite = body.select(infinite, u, bounded, _float_tile(body, "finite", shape))
    one = body.binary("nl.equal", u, 1.0, body.new("one", shape, "bool_"))
    return body.select(one, x[0], finite, dst)


def _tan(body: Body, op: Op, x: list[Operand]) -> Operand:
    dst = body.result(op)
    sin = body.activation("nl.sin", x[0], _float_tile(body, "sin", dst.shape))
    cos = body.activation("nl.cos", x[0], _float_tile(body, "cos", dst.shape))
    return body.binary("nl.divide", sin, cos, dst)


def _div(body: Body, op: Op, x: list[Operand]) -> Operand:
    dst = body.result(op)
    mode = op.attrs["rounding_mode"]
    if mode == "none":
        return body.binary("nl.divide", x[0], x[1], dst)
    quotient = body.binary("nl.divide", x[0], x[1], _float_tile(body, "quotient", dst.shape))
    return _round_to_integer(body, quotient, "floor" if mode == "floor" else "trunc", dst)


def _remainder(kind: str) -> Rule:
    """remainder: a - floor(a / b) * b (sign of b); fmod: a - trunc(a / b) * b (sign of a)."""
    def rule(body: Body, op: Op, x: list[Operand]) -> Operand:
        dst = body.result(op)
        shape = dst.shape
        quotient = body.binary("nl.divide", x[0], x[1], _float_tile(body, "quotient", shape))
        whole = _round_to_integer(body, quotient, kind, _float_tile(body, "whole", shape))
        product = body.binary("nl.multiply", whole, _f32(body, x[1], shape) if isinstance(x[1], Ref) else x[1],
                              _float_tile(body, "multiple", shape))
        return body.binary("nl.subtract", _f32(body, x[0], shape) if isinstance(x[0], Ref) else x[0], product, dst)
    return rule


def _round_to_integer(body: Body, value: Operand, kind: str, dst: Ref) -> Ref:
    """floor / ceil / trunc / round (half to even) in float32.

    The float-to-int32 conversion rounds to nearest even; floor subtracts one where that went up, ceil adds
    one where it went down, trunc picks floor or ceil by sign. Values of magnitude >= 2**23 are already
    integers (and would saturate int32), and NaN would become 0: both keep their value.
    """
    shape = dst.shape
    x = _f32(body, value, shape)
    as_int = body.copy(x, body.new("as_int", shape, "int32"))
    rounded = body.copy(as_int, _float_tile(body, "rounded", shape))
    if kind in ("floor", "trunc"):
        above = body.binary("nl.greater", rounded, x, _float_tile(body, "above", shape))
        floor = body.binary("nl.subtract", rounded, above, _float_tile(body, "floor", shape))
    if kind in ("ceil", "trunc"):
        below = body.binary("nl.less", rounded, x, _float_tile(body, "below", shape))
        ceil = body.binary("nl.add", rounded, below, _float_tile(body, "ceil", shape))
    if kind == "floor":
        result = floor
    elif kind == "ceil":
        result = ceil
    elif kind == "trunc":
        negative = body.binary("nl.less", x, 0.0, body.new("negative", shape, "bool_"))
        result = body.select(negative, ceil, floor, _float_tile(body, "trunc", shape))
    else:
        result = rounded
    magnitude = body.activation("nl.abs", x, _float_tile(body, "magnitude", shape))
    large = body.binary("nl.greater_equal", magnitude, float(2 ** 23), body.new("large", shape, "bool_"))
    nan = body.binary("nl.not_equal", x, x, body.new("nan", shape, "bool_"))
    keep = body.binary("nl.bitwise_or", large, nan, body.new("keep", shape, "bool_"))
    exact = body.select(keep, x, result, _float_tile(body, "exact", shape))
    return body.copy(exact, dst)


def _rounding(kind: str) -> Rule:
    def rule(body: Body, op: Op, x: list[Operand]) -> Operand:
        return _round_to_integer(body, x[0], kind, body.result(op))
    return rule


#: Abramowitz & Stegun 7.1.26: erf(|x|) = 1 - t (a1 + t (a2 + ... + t a5)) exp(-x^2), t = 1 / (1 + p |x|).
ERF_P = 0.3275911
ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def _erf(body: Body, op: Op, x: list[Operand]) -> Operand:
    """erf as A&S 7.1.26 (|error| < 1.5e-7, below float32 noise): ScalarE abs/reciprocal/square/exp, VectorE
    Horner steps, and the sign restored with a predicated copy."""
    dst = body.result(op)
    shape = dst.shape
    value = _f32(body, x[0], shape)
    magnitude = body.activation("nl.abs", value, _float_tile(body, "magnitude", shape))
    denominator = body.binary("nl.multiply", magnitude, ERF_P, _float_tile(body, "denominator", shape))
    t = body.activation("nl.reciprocal", denominator, _float_tile(body, "t", shape), bias=1.0)
    poly = body.binary("nl.multiply", t, ERF_A[4], _float_tile(body, "poly", shape))
    for coefficient in reversed(ERF_A[:4]):
        shifted = body.binary("nl.add", poly, coefficient, _float_tile(body, "poly", shape))
        poly = body.binary("nl.multiply", shifted, t, _float_tile(body, "poly", shape))
    square = body.activation("nl.square", magnitude, _float_tile(body, "square", shape))
    gauss = body.activation("nl.exp", square, _float_tile(body, "gauss", shape), scale=-1.0)
    tail = body.binary("nl.multiply", poly, gauss, _float_tile(body, "tail", shape))
    positive = body.binary("nl.subtract", 1.0, tail, _float_tile(body, "erf_abs", shape))
    negated = body.binary("nl.multiply", positive, -1.0, _float_tile(body, "erf_neg", shape))
    negative = body.binary("nl.less", value, 0.0, body.new("negative", shape, "bool_"))
    signed = body.select(negative, negated, positive, _float_tile(body, "erf", shape))
    return body.copy(signed, dst)


#: Cephes atanf: range reduction at tan(pi/8) and tan(3pi/8), then an odd polynomial (error ~ 1e-7).
ATAN_POLY = (8.05374449538e-2, -1.38776856032e-1, 1.99777106478e-1, -3.33329491539e-1)
TAN_3PI_8, TAN_PI_8 = 2.414213562373095, 0.4142135623730950


def _atan(body: Body, op: Op, x: list[Operand]) -> Operand:
    """atan: |x| reduced to [0, tan(pi/8)] (x, (x - 1) / (x + 1) + pi/4, or -1/x + pi/2), a polynomial in x^2,
    the sign restored with a predicated copy."""
    dst = body.result(op)
    shape = dst.shape
    value = _f32(body, x[0], shape)
    magnitude = body.activation("nl.abs", value, _float_tile(body, "magnitude", shape))
    big = body.binary("nl.greater", magnitude, TAN_3PI_8, body.new("big", shape, "bool_"))
    mid = body.binary("nl.greater", magnitude, TAN_PI_8, body.new("mid", shape, "bool_"))
    above = body.binary("nl.add", magnitude, 1.0, _float_tile(body, "above", shape))
    below = body.binary("nl.subtract", magnitude, 1.0, _float_tile(body, "below", shape))
    ratio = body.binary("nl.divide", below, above, _float_tile(body, "ratio", shape))
    inverse = body.binary("nl.divide", -1.0, magnitude, _float_tile(body, "inverse", shape))
    reduced = body.select(mid, ratio, magnitude, _float_tile(body, "reduced", shape))
    reduced = body.select(big, inverse, reduced, _float_tile(body, "reduced", shape))
    offset = body.select(mid, math.pi / 4, 0.0, _float_tile(body, "offset", shape))
    offset = body.select(big, math.pi / 2, offset, _float_tile(body, "offset", shape))
    z = body.binary("nl.multiply", reduced, reduced, _float_tile(body, "z", shape))
    poly = body.binary("nl.multiply", z, ATAN_POLY[0], _float_tile(body, "poly", shape))
    for coefficient in ATAN_POLY[1:]:
        shifted = body.binary("nl.add", poly, coefficient, _float_tile(body, "poly", shape))
        poly = body.binary("nl.multiply", shifted, z, _float_tile(body, "poly", shape))
    scaled = body.binary("nl.multiply", poly, reduced, _float_tile(body, "scaled", shape))
    angle = body.binary("nl.add", scaled, reduced, _float_tile(body, "angle", shape))
    positive = body.binary("nl.add", angle, offset, _float_tile(body, "atan_abs", shape))
    negated = body.binary("nl.multiply", positive, -1.0, _float_tile(body, "atan_neg", shape))
    negative = body.binary("nl.less", value, 0.0, body.new("negative", shape, "bool_"))
    return body.copy(body.select(negative, negated, positive, _float_tile(body, "atan", shape)), dst)


def _sign(body: Body, op: Op, x: list[Operand]) -> Operand:
    """(x > 0) - (x < 0): 0 for NaN, as torch.sign."""
    dst = body.result(op)
    positive = body.binary("nl.greater", x[0], 0, body.new("positive", dst.shape, dst.dtype))
    negative = body.binary("nl.less", x[0], 0, body.new("negative", dst.shape, dst.dtype))
    return body.binary("nl.subtract", positive, negative, dst)


def _isnan(body: Body, op: Op, x: list[Operand]) -> Operand:
    return body.binary("nl.not_equal", x[0], x[0], body.result(op))


def _isinf(body: Body, op: Op, x: list[Operand]) -> Operand:
    dst = body.result(op)
    magnitude = body.activation("nl.abs", x[0], _float_tile(body, "magnitude", dst.shape))
    return body.binary("nl.equal", magnitude, float("inf"), dst)


def _logical_not(body: Body, op: Op, x: list[Operand]) -> Operand:
    return body.binary("nl.equal", x[0], 0, body.result(op))


def _bitwise_not(body: Body, op: Op, x: list[Operand]) -> Operand:
    dst = body.result(op)
    if dst.dtype == "bool_":
        return body.binary("nl.equal", x[0], 0, dst)
    negated = body.binary("nl.multiply", x[0], -1, body.new("negated", dst.shape, dst.dtype))
    return body.binary("nl.subtract", negated, 1, dst)  # ~x = -x - 1 in two's complement


def _logical(alu: str) -> Rule:
    def rule(body: Body, op: Op, x: list[Operand]) -> Operand:
        dst = body.result(op)
        return body.binary(alu, _as_bool(body, x[0]), _as_bool(body, x[1]), dst)
    return rule


def _where(body: Body, op: Op, x: list[Operand]) -> Operand:
    return body.select(_as_bool(body, x[0]), x[1], x[2], body.result(op))


def _clamp(body: Body, op: Op, x: list[Operand]) -> Operand:
    """max then min (the IR op's semantics: a NaN bound makes every element NaN; bounds converted to the element
    type). Bound operands (the device's lifted floats, a CPU-only form) are not emitted."""
    dst = body.result(op)
    dtype = op.result.type.dtype
    if op.attrs["lifted"]:
        raise body.ctx.fail("clamp with bound operands (a lifted float: the device's CPU kernels only)")
    low, high = (None if b is None else clamp_bound(b, dtype) for b in (op.attrs["min"], op.attrs["max"]))
    nan_bounds = [b for b in (low, high) if isinstance(b, float) and math.isnan(b)]
    if nan_bounds:  # eager fills the result with NaN (clamp_min/clamp_max: the bound itself)
        return body.copy(nan_bounds[0] if op.attrs["nan_from_bound"] else math.nan, dst)
    if low is None and high is None:
        return body.copy(x[0], dst)
    if low is None:
        return body.binary("nl.minimum", x[0], typed_number(high, dtype), dst)
    if high is None:
        return body.binary("nl.maximum", x[0], typed_number(low, dtype), dst)
    lower = body.binary("nl.maximum", x[0], typed_number(low, dtype), body.new("clamped", dst.shape, dst.dtype))
    return body.binary("nl.minimum", lower, typed_number(high, dtype), dst)


def _cast(body: Body, op: Op, x: list[Operand]) -> Operand:
    dst = body.result(op)
    source = op.operands[0].type.dtype
    target = op.result.type.dtype
    if target.is_bool:
        return body.binary("nl.not_equal", x[0], 0, dst)
    if source.is_float and not target.is_float:
        return _round_to_integer(body, x[0], "trunc", dst)  # C casts truncate; the engines round
    return _copy(body, op, x)


def _copy(body: Body, op: Op, x: list[Operand]) -> Operand:
    """A tile already holding the values in the result's arrangement is the result (no instruction)."""
    dst = body.result(op)
    if isinstance(x[0], Ref) and x[0].shape == dst.shape and x[0].dtype == dst.dtype and not x[0].view:
        return x[0]
    return body.copy(x[0], dst)


# ---- reductions ----------------------------------------------------------------------------------------


def _reduced_dims(body: Body, op: Op) -> tuple[set[int], int]:
    """The domain dims ``op`` reduces and how many elements each result element combines."""
    grouping = body.stage.groupings[op]
    shape = op.operands[0].type.shape
    dims: set[int] = set()
    count = 1
    for j in op.attrs["dims"]:
        count *= shape[j]
        if grouping[j].full:
            dims.update(grouping[j].dims)
    return dims, count


def _reduction(body: Body, op: Op, x: list[Operand]) -> Operand:
    dst = body.result(op)
    dims, count = _reduced_dims(body, op)
    alu = REDUCE_ALU[op.name]
    data = x[0]
    if op.name in ("any", "all"):
        data = _as_bool(body, data)
    if op.name == "mean":
        total = body.reduce(alu, data, dims, _float_tile(body, "total", dst.shape))
        return body.binary("nl.multiply", total, 1.0 / count if count else float("nan"), dst)
    if op.name == "var":
        return _variance(body, op, data, dims, count, dst)
    return body.reduce(alu, data, dims, dst)


def _variance(body: Body, op: Op, data: Operand, dims: set[int], count: int, dst: Ref) -> Ref:
    """Two passes: the mean, then the sum of squared deviations. When the result is one value per
    partition, the second pass is one ScalarE activation: square(x - mean) with a fused row sum."""
    total = body.reduce("nl.add", data, dims, _float_tile(body, "total", dst.shape))
    divisor = count - op.attrs["correction"]
    source = data if isinstance(data, Ref) else body.materialize(data, dst.shape, dst.dtype)
    if dst.is_column and source.partitions == dst.partitions and len(dims) == len(source.shape) - 1:
        neg_mean = body.binary("nl.multiply", total, -1.0 / count, _float_tile(body, "neg_mean", dst.shape))
        squares = body.new("squares", source.shape, source.dtype)
        deviation = _float_tile(body, "deviation", dst.shape)
        body.instrs.append(Instr("activation", squares, {"op": "nl.square", "data": source, "bias": neg_mean,
                                                         "reduce_op": "nl.add", "reduce_res": deviation},
                                 also_allocates=(deviation,)))
    else:
        mean = body.binary("nl.multiply", total, 1.0 / count, _float_tile(body, "mean", dst.shape))
        centered = body.binary("nl.subtract", source, mean, _float_tile(body, "centered", source.shape))
        squared = body.binary("nl.multiply", centered, centered, _float_tile(body, "squared", source.shape))
        deviation = body.reduce("nl.add", squared, dims, _float_tile(body, "deviation", dst.shape))
    if divisor <= 0:
        return body.binary("nl.divide", deviation, 0.0, dst)
    return body.binary("nl.multiply", deviation, 1.0 / divisor, dst)


#: Every op a tile stage can hold, with its rule (one entry per op).
OP_RULES: dict[str, Rule] = {
    **{name: _activation(function) for name, function in ACTIVATIONS.items()},
    **{name: _alu(alu) for name, alu in ALU_OPS.items()},
    "neg": _neg,                                    # -x on VectorE (exact, integers too)
    "abs": _abs,                                    # ScalarE abs; max(x, -x) for integers
    "relu": _relu,                                  # ScalarE relu; max(x, 0) for integers
    "gelu": _gelu,                                  # ScalarE gelu / gelu_apprx_tanh
    "exp2": _activation("nl.exp", scale=LN2),       # exp(x ln 2)
    "expm1": _expm1,                                # (exp(x) - 1) * x / ln(exp(x)), Kahan
    "log2": _then("nl.log", "nl.multiply", 1.0 / LN2),  # ln(x) / ln 2
    "log1p": _log1p,                                # ln(1 + x) * x / ((1 + x) - 1), Goldberg
    "tan": _tan,                                    # sin / cos
    "erf": _erf,                                    # A&S 7.1.26 polynomial
    "atan": _atan,                                  # Cephes atanf: range reduction + polynomial
    "sign": _sign,                                  # (x > 0) - (x < 0)
    "floor": _rounding("floor"),                    # via the int conversion, corrected
    "ceil": _rounding("ceil"),
    "trunc": _rounding("trunc"),
    "round": _rounding("round"),                    # half to even, as the int conversion
    "isnan": _isnan,                                # x != x
    "isinf": _isinf,                                # |x| == inf
    "logical_not": _logical_not,                    # x == 0
    "bitwise_not": _bitwise_not,                    # x == 0 for bool, -x - 1 for integers
    "logical_and": _logical("nl.bitwise_and"),      # on (x != 0) values
    "logical_or": _logical("nl.bitwise_or"),
    "logical_xor": _logical("nl.not_equal"),
    "div": _div,                                    # divide; floor / trunc modes round the quotient
    "remainder": _remainder("floor"),               # a - floor(a / b) b
    "fmod": _remainder("trunc"),                    # a - trunc(a / b) b
    "where": _where,                                # copy b, predicated copy of a
    "clamp": _clamp,                                # max then min
    "cast": _cast,                                  # tensor_copy converts; float -> int truncates
    "copy": _copy,                                  # tensor_copy (memset for a constant)
    **{name: _reduction for name in REDUCE_ALU},    # tensor_reduce along free axes
}


def is_plain_copy(op: Op) -> bool:
    """Whether ``op``'s rule is a plain copy of its operand in its own element type (a stage of these is a
    relayout that DMA does alone)."""
    return OP_RULES.get(op.name) is _copy and op.operands[0].type.dtype == op.result.type.dtype


def emit_op(body: Body, op: Op) -> None:
    """Emit ``op`` into ``body`` and record its result."""
    if REGISTRY.get(op.name).category is Category.RANDOM:  # its operand is the key schedule (plan.py)
        body.values[op.results[0]] = emit_random(body, op, view_window(op.operands[0], body.ctx.plan.producers)[0])
        return
    rule = OP_RULES.get(op.name)
    if rule is None:
        raise CodegenError(f"nki: kernel '{body.ctx.name}': op '{op.name}' has no NKI emission rule")
    operands = [body.operand(op, i) for i in range(len(op.operands))]
    if not any(isinstance(x, Ref) for x in operands) and REGISTRY.get(op.name).category is Category.ELEMENTWISE:
        body.values[op.results[0]] = _fold(op, operands)
        return
    body.values[op.results[0]] = rule(body, op, operands)


def _fold(op: Op, operands: list[Operand]) -> float | int:
    """An elementwise op of numbers, computed now with the op's reference."""
    arrays = [np.asarray(x, dtype=v.type.dtype.compute) for x, v in zip(operands, op.operands)]
    value = np.asarray(REGISTRY.get(op.name).reference(*arrays, **dict(op.attrs))).reshape(-1)[0]
    return typed_number(value.item(), op.result.type.dtype)
