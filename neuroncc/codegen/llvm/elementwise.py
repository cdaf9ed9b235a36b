"""Per-op lowering of elementwise ops to scalar LLVM IR: one table entry per op.

Each entry takes the emission context, the op and its operands' compute-typed values (already loaded at the
broadcast index) and returns the result's compute-typed value. Float semantics follow the ops' numpy
references: NaN propagates through maximum/minimum/clamp/relu/sign, integer division by zero gives 0 (numpy's
answer) instead of trapping, comparisons with NaN are false except ``ne``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from llvmlite import ir

from neuroncc.codegen.llvm.bit_shifts import shift_left, shift_right
from neuroncc.codegen.llvm.context import EmitContext
from neuroncc.codegen.llvm.division import true_division
from neuroncc.codegen.llvm.integer_arithmetic import int_div, int_pow, int_rem
from neuroncc.codegen.llvm.mathlib import LIBM, POLYNOMIAL, math_call
from neuroncc.codegen.llvm.norm_affine import fused_weight_and_bias
from neuroncc.codegen.llvm.scalars import (
    F32, F32_EXACT_BITS, I1, I32, I64, bf16_bits, call, compute_type, constant, convert, is_unsigned, round_to,
    type_suffix,
)
from neuroncc.codegen.llvm.widening import widened_even
from neuroncc.hardware.host import CpuTarget
from neuroncc.ir.dtypes import DType
from neuroncc.ir.ops.elementwise import CLAMP_BOUNDS, clamp_bound
from neuroncc.ir.graph import Op
from neuroncc.ir.signs import at_most_zero

Lowering = Callable[[EmitContext, Op, list[ir.Value]], ir.Value]


def _dtype(op: Op) -> DType:
    return op.operands[0].type.dtype


def _zero(v: ir.Value) -> ir.Constant:
    return ir.Constant(v.type, 0.0 if v.type == F32 else 0)


def _exp_function(ctx, op) -> str:
    # x - max(x) (softmax, log-sum-exp, log-softmax's gradient) needs neither exp's upper clamp nor its two-step scale
    if not at_most_zero(ctx.plan.region, op.operands[0]):
        return "exp"
    if ctx.target.evaluates_exp_for_bf16_results_in_degree_five and reaches_only_bf16(ctx.plan.region, op.results[0]):
        return "exp_nonpositive_for_bf16"
    return "exp_nonpositive"


#: Ops through which a value's relative error stays its own (plus their roundings): sums (of exponentials: terms of
#: one sign), products and quotients.
_RELATIVE_ERROR_OPS = frozenset({"sum", "mul", "div"})


def reaches_only_bf16(region: Any, value: Any) -> bool:
    """Whether every result ``value`` of ``region`` reaches is a cast to bf16 of it through sums, products and
    quotients only (softmax's exponentials: their sum, e / sum, cast to bf16), none of them a region output."""
    users = region.users()
    pending, seen = [value], set()
    while pending:
        v = pending.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in region.outputs or not users.get(v):
            return False
        for user, _ in users[v]:
            if user.name == "cast" and user.attrs.get("dtype") is DType.bf16:
                continue
            if user.name not in _RELATIVE_ERROR_OPS or len(user.results) != 1:
                return False
            pending.append(user.results[0])
    return True


def gelu_function(target: CpuTarget, approximate: str, dtype: DType) -> str:
    """The math library function a gelu op with this ``approximate`` attribute and result ``dtype`` evaluates:
    its tanh form, or its erf form, whose ratio a float32 gelu divides where the target says so
    (``CpuTarget.divides_gelu_erf_ratio``: ``gelu_divided``)."""
    if approximate == "tanh":
        return "gelu_tanh"
    return "gelu_divided" if dtype is DType.f32 and target.divides_gelu_erf_ratio else "gelu"


def _gelu_function(ctx, op) -> str:
    return gelu_function(ctx.target, op.attrs["approximate"], op.results[0].type.dtype)


def _function(name: str) -> Callable[[EmitContext, Op], str]:
    return lambda ctx, op: name


#: Unary elementwise op -> the math library function its lowering calls (``mathlib.math_call``: a polynomial of
#: ``mathlib.POLYNOMIAL``, or the C library's function of ``mathlib.LIBM``), by the emission context and the op:
#: also what a bf16 table of its results is made from (``bf16_tables.py``).
MATH_FUNCTION_OF: dict[str, Callable[[EmitContext, Op], str]] = {
    "exp": _exp_function,
    "exp2": _function("exp2"),
    "expm1": _function("expm1"),
    "log": _function("log"),
    "log2": _function("log2"),
    "log1p": _function("log1p"),
    "tanh": _function("tanh"),
    "sigmoid": _function("sigmoid"),
    "erf": _function("erf"),
    "gelu": _gelu_function,
    "sin": _function("sin"),
    "cos": _function("cos"),
    "tan": _function("tan"),
    "atan": _function("atan"),
}


def _math(ctx, op, args):
    return math_call(ctx.b, MATH_FUNCTION_OF[op.name](ctx, op), *args, target=ctx.target)


def table_function(ctx: EmitContext, op: Op) -> str | None:
    """The math function whose bf16 table ``op`` reads instead of computing it (``bf16_tables.py``), or None: where
    the target looks such polynomials up (:attr:`CpuTarget.looks_up_bf16_unary_math`) and ``op`` is a unary elementwise
    math function of a bf16 value with a bf16 result (every bf16 value in a graph is rounded: its result is a
    function of the operand's 16 bits). The C library's functions are looked up where
    :attr:`CpuTarget.looks_up_bf16_library_math` says so."""
    if op.name not in MATH_FUNCTION_OF or _dtype(op) is not DType.bf16 or op.results[0].type.dtype is not DType.bf16:
        return None
    function = MATH_FUNCTION_OF[op.name](ctx, op)
    if function in LIBM:
        return function if ctx.target.looks_up_bf16_library_math else None
    if ctx.target.bf16_table_loop_lanes and not getattr(ctx, "narrow_tables", False):
        return None  # (its tables only in narrow loops: a map stage with no other polynomial, ``map_stages.py``)
    return function if ctx.target.looks_up_bf16_unary_math else None


def evaluated_polynomial(ctx: EmitContext, op: Op) -> str | None:
    """The math library polynomial (``mathlib.POLYNOMIAL``) that ``op``'s lowering evaluates, or None: not a math
    function, the C library's, or read from a bf16 table (:func:`table_function`)."""
    if op.name not in MATH_FUNCTION_OF or table_function(ctx, op) is not None:
        return None
    function = MATH_FUNCTION_OF[op.name](ctx, op)
    return function if function in POLYNOMIAL else None


def _intrinsic(name: str) -> Lowering:
    return lambda ctx, op, args: call(ctx.b, f"llvm.{name}.f32", args)


def _neg(ctx, op, args):
    (x,) = args
    return ctx.b.fneg(x) if x.type == F32 else ctx.b.neg(x)


def _abs(ctx, op, args):
    (x,) = args
    if x.type == F32:
        return call(ctx.b, "llvm.fabs.f32", [x])
    if is_unsigned(_dtype(op)):
        return x
    return ctx.b.select(ctx.b.icmp_signed("<", x, _zero(x)), ctx.b.neg(x), x)


def _sign(ctx, op, args):
    (x,) = args
    b = ctx.b
    one = ir.Constant(x.type, 1.0 if x.type == F32 else 1)
    minus_one = ir.Constant(x.type, -1.0 if x.type == F32 else -1)
    if x.type == F32:
        positive, negative = b.fcmp_ordered(">", x, _zero(x)), b.fcmp_ordered("<", x, _zero(x))
        # (0 < x) - (x < 0) as PyTorch computes it: 0, -0 and NaN all give +0
        return b.select(positive, one, b.select(negative, minus_one, _zero(x)))
    if is_unsigned(_dtype(op)):
        return b.zext(b.icmp_unsigned("!=", x, _zero(x)), x.type)
    return b.select(b.icmp_signed(">", x, _zero(x)), one, b.select(b.icmp_signed("<", x, _zero(x)), minus_one, x))


def _relu(ctx, op, args):
    (x,) = args
    if x.type == F32:
        return ctx.b.select(ctx.b.fcmp_ordered("<", x, _zero(x)), _zero(x), x)  # NaN < 0 is false: NaN kept
    if is_unsigned(_dtype(op)):
        return x
    return ctx.b.select(ctx.b.icmp_signed("<", x, _zero(x)), _zero(x), x)


def _rsqrt(ctx, op, args):
    return ctx.b.fdiv(ir.Constant(F32, 1.0), call(ctx.b, "llvm.sqrt.f32", args))


def _reciprocal(ctx, op, args):
    return ctx.b.fdiv(ir.Constant(F32, 1.0), args[0])


def _isnan(ctx, op, args):
    return ctx.b.fcmp_unordered("uno", args[0], args[0])


def _isinf(ctx, op, args):
    return ctx.b.fcmp_ordered("==", call(ctx.b, "llvm.fabs.f32", args), ir.Constant(F32, math.inf))


def _truthy(ctx, value: ir.Value) -> ir.Value:
    if value.type == I1:
        return value
    if value.type == F32:
        return ctx.b.fcmp_unordered("!=", value, _zero(value))
    return ctx.b.icmp_unsigned("!=", value, _zero(value))


def _logical_not(ctx, op, args):
    return ctx.b.not_(_truthy(ctx, args[0]))


def _bitwise_not(ctx, op, args):
    return ctx.b.not_(args[0])


def _arith(float_op: str, int_op: str, bool_op: str | None = None) -> Lowering:
    def lower(ctx, op, args):
        a, c = args
        if a.type == F32:
            return getattr(ctx.b, float_op)(a, c)
        if a.type == I1 and bool_op is not None:
            return getattr(ctx.b, bool_op)(a, c)  # numpy: bool + bool is "or", bool * bool is "and"
        return getattr(ctx.b, int_op)(a, c)

    return lower


def _mul(ctx, op, args):
    """a * c; e**x * s for a row-invariant s as one function (``CpuTarget.folds_row_scale_into_exp``: s in the
    polynomial's coefficients and the scale, no multiply per element)."""
    for exp, scale, mine, operand in ((args[0], args[1], op.operands[0], op.operands[1]),
                                      (args[1], args[0], op.operands[1], op.operands[0])):
        if (exp.type == F32 and isinstance(exp, ir.CallInstr) and exp.callee.name == "ncc.math.exp_nonpositive"
                and ctx.target.folds_row_scale_into_exp and _row_invariant(op, operand)
                and len(ctx.plan.region.users().get(mine, ())) == 1 and mine not in ctx.plan.region.outputs):
            return math_call(ctx.b, "exp_nonpositive_times", exp.args[0], scale, target=ctx.target)
    return _arith("fmul", "mul", "and_")(ctx, op, args)


def _add(ctx, op, args):
    """a + c; LayerNorm's (normalized * w) + b as one fused multiply-add where the emitter fuses it
    (``norm_affine.fused_weight_and_bias``)."""
    fused = fused_weight_and_bias(ctx, op, args)
    return fused if fused is not None else _arith("fadd", "add", "or_")(ctx, op, args)


def _row_invariant(op: Op, operand) -> bool:
    """Whether ``operand`` broadcasts along the last dimension of ``op``'s result (one value per row)."""
    shape, result = operand.type.shape, op.results[0].type.shape
    return len(result) > 0 and result[-1] > 1 and (len(shape) == 0 or shape[-1] == 1)


def _div(ctx, op, args):
    a, c = args
    mode = op.attrs["rounding_mode"]
    if a.type != F32:
        return int_div(ctx, a, c, mode, unsigned=is_unsigned(_dtype(op)))
    if mode == "none":
        return true_division(ctx, op, a, c)
    quotient = ctx.b.fdiv(a, c)
    if mode == "floor":
        return _float_floor_div(ctx, a, c, quotient)
    # PyTorch's reduced-precision trunc division rounds the quotient to bf16/f16 before truncating it
    return call(ctx.b, "llvm.trunc.f32", [round_to(ctx.b, quotient, _dtype(op))])


def _float_floor_div(ctx, a: ir.Value, c: ir.Value, quotient: ir.Value) -> ir.Value:
    """Python's ``a // c`` for floats exactly as ATen's div_floor_floating does it: from fmod, not floor(a/c).

    floor(a / c) is wrong when a / c rounds up to an integer (1 // 0.1 is 9), and inf // x is NaN in PyTorch.
    Mirrors the reference ``_div_floor_float`` in neuroncc/ir/ops/elementwise.py step by step.
    """
    b = ctx.b
    zero = _zero(a)
    mod = math_call(b, "fmod", a, c, target=ctx.target)
    inf = ir.Constant(F32, float("inf"))
    quotient_inf = b.fcmp_ordered("==", call(b, "llvm.fabs.f32", [quotient]), inf)
    a_inf = b.fcmp_ordered("==", call(b, "llvm.fabs.f32", [a]), inf)
    numerator = b.select(b.and_(quotient_inf, b.not_(a_inf)), a, b.fsub(a, mod))
    div = b.fdiv(numerator, c)
    sign_differs = b.icmp_unsigned("!=", b.fcmp_ordered("<", c, zero), b.fcmp_ordered("<", mod, zero))
    div = b.select(b.and_(b.fcmp_unordered("!=", mod, zero), sign_differs), b.fsub(div, ir.Constant(F32, 1.0)), div)
    floordiv = call(b, "llvm.floor.f32", [div])
    floordiv = b.select(b.fcmp_ordered(">", b.fsub(div, floordiv), ir.Constant(F32, 0.5)),
                        b.fadd(floordiv, ir.Constant(F32, 1.0)), floordiv)
    signed_zero = call(b, "llvm.copysign.f32", [zero, quotient])
    floordiv = b.select(b.fcmp_ordered("==", div, zero), signed_zero, floordiv)
    return b.select(b.fcmp_ordered("==", c, zero), quotient, floordiv)


def _remainder(ctx, op, args):
    a, c = args
    if a.type != F32:
        return int_rem(ctx, a, c, python_sign=True, unsigned=is_unsigned(_dtype(op)))
    b = ctx.b
    r = math_call(b, "fmod", a, c, target=ctx.target)
    fix = b.and_(b.fcmp_ordered("!=", r, _zero(r)),
                 b.icmp_unsigned("!=", b.fcmp_ordered("<", r, _zero(r)), b.fcmp_ordered("<", c, _zero(c))))
    return b.select(fix, b.fadd(r, c), r)


def _fmod(ctx, op, args):
    a, c = args
    if a.type != F32:
        return int_rem(ctx, a, c, python_sign=False, unsigned=is_unsigned(_dtype(op)))
    return math_call(ctx.b, "fmod", a, c, target=ctx.target)


def _pow(ctx, op, args):
    a, c = args
    if a.type == F32:
        return math_call(ctx.b, "pow", a, c, target=ctx.target)
    return int_pow(ctx, a, c)


def _max_min(float_name: str, signed_name: str, unsigned_name: str, bool_op: str) -> Lowering:
    def lower(ctx, op, args):
        a, c = args
        if a.type == F32:
            return call(ctx.b, f"llvm.{float_name}.f32", [a, c])  # NaN-propagating maximum/minimum
        if a.type == I1:
            return getattr(ctx.b, bool_op)(a, c)
        name = unsigned_name if is_unsigned(_dtype(op)) else signed_name
        return call(ctx.b, f"llvm.{name}.{type_suffix(a.type)}", [a, c])

    return lower


def _bitwise(name: str) -> Lowering:
    return lambda ctx, op, args: getattr(ctx.b, name)(args[0], args[1])


def _logical(name: str) -> Lowering:
    return lambda ctx, op, args: getattr(ctx.b, name)(_truthy(ctx, args[0]), _truthy(ctx, args[1]))


_FLOAT_PREDICATES = {"eq": "==", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def narrow_equality(b: ir.IRBuilder, name: str, a: ir.Value, c: ir.Value) -> ir.Value | None:
    """``a == c`` / ``a != c`` on i64 operands, one of them the zero extension of an integer of at most
    ``F32_EXACT_BITS`` bits (an iota's: the class index of a one-hot, ``iota == target``), as a float compare of
    the two, exact because f32 holds both, plus a range check of the other operand (usually loop-invariant, so it
    leaves the loop). AVX2 compares 8 float lanes per instruction but 4 i64 ones, and an i64 mask selecting floats
    is packed down again: cross-entropy's backward spent 5 vector instructions per 8 classes on its one-hot.
    (An i32 compare would do as well, but LLVM's induction-variable simplification widens a compare of a
    truncated loop counter back to i64.) None when neither operand is such a value."""
    if a.type != I64 or c.type != I64:
        return None
    narrow, other = _zero_extended(a), c
    if narrow is None:
        narrow, other = _zero_extended(c), a
    if narrow is None:
        return None
    in_range = b.icmp_unsigned("<", other, ir.Constant(I64, 1 << narrow.type.width))
    # out of the narrow value's range, the other operand is NaN as a float: equal to nothing, and selected
    # once outside the loop (an i1 "in range" vector and-ed per element costs 5 instructions on AVX2)
    y = b.select(in_range, b.uitofp(b.trunc(other, narrow.type), F32), ir.Constant(F32, math.nan))
    x = b.uitofp(narrow, F32)
    return b.fcmp_ordered("==", x, y) if name == "eq" else b.fcmp_unordered("!=", x, y)


def _zero_extended(value: ir.Value) -> ir.Value | None:
    """The integer of at most ``F32_EXACT_BITS`` bits that ``value`` zero-extends, or None."""
    if isinstance(value, ir.CastInstr) and value.opname == "zext" and \
            value.operands[0].type.width <= F32_EXACT_BITS:
        return value.operands[0]
    return None


def _compare(name: str) -> Lowering:
    def lower(ctx, op, args):
        a, c = args
        if a.type == F32:
            if name == "ne":
                return ctx.b.fcmp_unordered("!=", a, c)  # NaN != anything
            return ctx.b.fcmp_ordered(_FLOAT_PREDICATES[name], a, c)
        if name in ("eq", "ne"):
            narrowed = narrow_equality(ctx.b, name, a, c)
            if narrowed is not None:
                return narrowed
        predicate = {"eq": "==", "ne": "!=", **_FLOAT_PREDICATES}[name]
        if is_unsigned(_dtype(op)) or a.type == I1:
            return ctx.b.icmp_unsigned(predicate, a, c)
        return ctx.b.icmp_signed(predicate, a, c)

    return lower


def _atan2(ctx, op, args):
    return math_call(ctx.b, "atan2", *args, target=ctx.target)


def _where(ctx, op, args):
    return ctx.b.select(args[0], args[1], args[2])


def _clamp(ctx, op, args):
    """clamp's semantics (the IR op's): ``x < min ? min : x``, then ``> max ? max :``, a NaN element kept;
    every element NaN when a bound is NaN (a positive NaN, or with ``nan_from_bound`` the first NaN bound
    itself). A bound attribute is a constant (converted to the element type here); a bound operand (a lifted
    float: one kernel for every value) is loop-invariant, so its NaN test is one compare LLVM hoists out of the
    loop."""
    x, *bound_args = args
    b = ctx.b
    dtype = _dtype(op)
    from_bound = op.attrs["nan_from_bound"]
    bounds = {CLAMP_BOUNDS[k]: value for k, value in zip(op.attrs["lifted"], bound_args)}
    out, nan_bound, nan_fill = x, None, ir.Constant(F32, math.nan)
    for key, predicate in (("min", "<"), ("max", ">")):
        bound = op.attrs[key]
        if bound is None and key not in bounds:
            continue
        if x.type == F32:
            if key in bounds:
                limit = bounds[key]
                is_nan = b.fcmp_unordered("uno", limit, limit)
                if from_bound:  # (min's NaN if both are: the first NaN bound)
                    nan_fill = limit if nan_bound is None else b.select(nan_bound, nan_fill, limit)
                nan_bound = is_nan if nan_bound is None else b.or_(nan_bound, is_nan)
            elif math.isnan(bound):
                # eager fills the result with NaN (clamp_min/clamp_max: the bound itself, its sign kept)
                return ir.Constant(F32, float(bound) if from_bound else math.nan)
            else:
                limit = ir.Constant(F32, float(clamp_bound(bound, dtype)))
            out = b.select(b.fcmp_ordered(predicate, out, limit), limit, out)  # NaN compares false: kept
        else:
            # numpy compares against the float bound, then the cast back truncates it.
            threshold = math.ceil(bound) if key == "min" else math.floor(bound)
            compare = b.icmp_unsigned if is_unsigned(dtype) else b.icmp_signed
            out = b.select(compare(predicate, out, constant(dtype, threshold)), constant(dtype, int(bound)), out)
    if nan_bound is not None:
        out = b.select(nan_bound, nan_fill, out)
    return out


def _cast(ctx, op, args):
    return convert(ctx.b, args[0], _dtype(op), op.attrs["dtype"], ctx.rounding_needs_nan_case(op))


def _bitcast(ctx, op, args):
    b, (x,) = ctx.b, args
    target = op.attrs["dtype"]
    if target is DType.bf16:  # i16 bits -> the float32 holding the bf16 value: the bits in the high half
        word = widened_even(ctx, x)  # (``widening.py``)
        return b.bitcast(b.shl(b.zext(x, I32), ir.Constant(I32, 16)) if word is None else word, F32)
    if target is DType.i16 and x.type == F32:  # a bf16 value (its low half is zero): the high half
        return bf16_bits(b, x)
    return b.bitcast(x, compute_type(target))


def widens_bf16(op: Op) -> bool:
    """Whether ``op`` widens bf16 to float32: exact (the bits move to the high half), so a value it computes can be
    stored and read back in place of computing it again (``refine.widened_row_cache``)."""
    return op.name == "cast" and op.operands[0].type.dtype is DType.bf16 and op.attrs["dtype"] is DType.f32


def reinterprets_words_as_bf16(op: Op) -> bool:
    """Whether ``op`` reads 16-bit integer words as bf16 (a ``bitcast``: the same bits), so a loop summing the
    bf16 values may read the words themselves (``dot_sums.summed_words``)."""
    return op.name == "bitcast" and op.operands[0].type.dtype is DType.i16


def float_difference(op: Op) -> bool:
    """Whether ``op`` is ``a - b`` of float32 operands, lowered to one ``fsub`` without a rounding: the deviation a
    variance computes of its operand and its mean (``refine.deviation_row_cache``)."""
    return op.name == "sub" and all(v.type.dtype is DType.f32 for v in (*op.operands, op.results[0]))


#: Elementwise op -> lowering (one entry per op).
ELEMENTWISE: dict[str, Lowering] = {
    "neg": _neg,
    "abs": _abs,
    "sign": _sign,
    "relu": _relu,
    "exp": _math,
    "exp2": _math,
    "expm1": _math,
    "log": _math,
    "log2": _math,
    "log1p": _math,
    "sqrt": _intrinsic("sqrt"),
    "rsqrt": _rsqrt,
    "reciprocal": _reciprocal,
    "sin": _math,
    "cos": _math,
    "tan": _math,
    "tanh": _math,
    "atan": _math,
    "sigmoid": _math,
    "erf": _math,
    "gelu": _math,
    "floor": _intrinsic("floor"),
    "ceil": _intrinsic("ceil"),
    "round": _intrinsic("roundeven"),  # half to even, as torch.round
    "trunc": _intrinsic("trunc"),
    "isnan": _isnan,
    "isinf": _isinf,
    "logical_not": _logical_not,
    "bitwise_not": _bitwise_not,
    "add": _add,
    "sub": _arith("fsub", "sub"),
    "mul": _mul,
    "div": _div,
    "pow": _pow,
    "maximum": _max_min("maximum", "smax", "umax", "or_"),
    "minimum": _max_min("minimum", "smin", "umin", "and_"),
    "remainder": _remainder,
    "fmod": _fmod,
    "atan2": _atan2,
    "bitwise_and": _bitwise("and_"),
    "bitwise_or": _bitwise("or_"),
    "bitwise_xor": _bitwise("xor"),
    "bitwise_left_shift": shift_left,
    "bitwise_right_shift": shift_right,
    "logical_and": _logical("and_"),
    "logical_or": _logical("or_"),
    "logical_xor": _logical("xor"),
    "eq": _compare("eq"),
    "ne": _compare("ne"),
    "lt": _compare("lt"),
    "le": _compare("le"),
    "gt": _compare("gt"),
    "ge": _compare("ge"),
    "where": _where,
    "clamp": _clamp,
    "cast": _cast,
    "bitcast": _bitcast,  # f32 <-> i32, bf16 <-> i16: the same bits
}

#: Ops whose float results are exact (no bf16/f16 rounding needed after them).
EXACT = frozenset({"neg", "abs", "sign", "relu", "maximum", "minimum", "where", "clamp", "floor", "ceil", "round",
                   "trunc", "isnan", "isinf", "logical_not", "eq", "ne", "lt", "le", "gt", "ge", "logical_and",
                   "logical_or", "logical_xor", "cast", "bitcast"})
