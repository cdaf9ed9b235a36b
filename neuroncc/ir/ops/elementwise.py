"""Elementwise ops: unary math, binary arithmetic and comparisons (numpy broadcasting), where, clamp, cast.

Binary ops take operands of one element type (the front end inserts casts for PyTorch's type promotion);
comparisons and logical ops return ``bool``. References compute floats in float32, as PyTorch's CPU kernels do.
Complex (c64) operands are taken by the arithmetic PyTorch defines on them: add, sub, mul, div, neg, abs (a
float32 result), conj, where, eq, ne and cast (real <-> complex; complex to real keeps the real part).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from neuroncc.ir.attrs import Attrs
from neuroncc.ir.dtypes import DType, bf16_from_words, bf16_words, round_to_bf16, to_storage
from neuroncc.ir.opdef import AttrSpec, Category, OpDef, Trait, broadcast_shapes, check_scalar, fail, same_dtype
from neuroncc.ir.types import TensorType

_erf = np.frompyfunc(math.erf, 1, 1)


def erf(x: np.ndarray) -> np.ndarray:
    """Correctly rounded erf (numpy has none; math.erf is exact to double precision)."""
    return np.asarray(_erf(np.asarray(x, dtype=np.float64)), dtype=np.float64)  # a 0-d ufunc call gives a float


def gelu(x: np.ndarray, approximate: str = "none") -> np.ndarray:
    x64 = np.asarray(x, dtype=np.float64)
    if approximate == "tanh":
        return 0.5 * x64 * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x64 + 0.044715 * x64**3)))
    return 0.5 * x64 * (1.0 + erf(x64 / math.sqrt(2.0)))


def sigmoid(x: np.ndarray) -> np.ndarray:
    x64 = np.asarray(x, dtype=np.float64)
    return np.exp(-np.logaddexp(0.0, -x64))


def _round_half_even(x: np.ndarray) -> np.ndarray:
    return np.round(x)  # numpy rounds half to even, as torch.round does


# ---- traits --------------------------------------------------------------------------------------------

POINTWISE = frozenset({Trait.POINTWISE})  # every op of this module
TRANSCENDENTAL = frozenset({Trait.TRANSCENDENTAL})
COMMUTATIVE = frozenset({Trait.COMMUTATIVE})

# ---- unary ---------------------------------------------------------------------------------------------

_ANY = "any"  # numeric or bool
_NUMERIC = "numeric"  # int or float
_FLOAT = "float"
_INTEGRAL = "integral"  # int or bool
_INTEGER = "integer"  # int only (PyTorch promotes a bool operand of a shift to int64 first)


def _check_kind(op: str, t: TensorType, kind: str) -> None:
    ok = {
        _ANY: True,
        _NUMERIC: not t.dtype.is_bool,
        _FLOAT: t.dtype.is_float,
        _INTEGRAL: t.dtype.is_int or t.dtype.is_bool,
        _INTEGER: t.dtype.is_int,
    }[kind]
    if not ok:
        raise fail(op, f"operand #0 has element type {t.dtype.value}, expected a {kind} type")


def _unary(name: str, fn: Callable[..., np.ndarray], kind: str, *, to_bool: bool = False,
           attrs: dict[str, AttrSpec] | None = None, doc: str = "", traits: frozenset[Trait] = frozenset(),
           complex: bool = False) -> OpDef:
    def infer(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
        (t,) = types
        _check_kind(name, t, kind)
        if name == "gelu" and attrs["approximate"] not in ("none", "tanh"):
            raise fail(name, f"approximate must be none or tanh, got {attrs['approximate']!r}")
        if name == "conj" and not t.dtype.is_complex:
            raise fail(name, f"operand #0 must be complex, got {t.dtype.value}")
        if name == "abs" and t.dtype.is_complex:
            return TensorType(t.shape, DType.f32)  # |re + i im|
        return TensorType(t.shape, DType.bool if to_bool else t.dtype)

    return OpDef(name, Category.ELEMENTWISE, (1, 1), infer, fn, attrs or {}, doc or f"elementwise {name}",
                 traits=POINTWISE | traits, takes_complex=complex)


def _sign(x: np.ndarray) -> np.ndarray:
    # (0 < x) - (x < 0), as PyTorch computes it: NaN compares false both ways, so its sign is 0 (np.sign gives NaN).
    return np.sign(x) if x.dtype.kind != "f" else np.where(np.isnan(x), np.zeros_like(x), np.sign(x))


def _relu(x: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(x), x, np.maximum(x, 0)) if x.dtype.kind == "f" else np.maximum(x, 0)


UNARY = (
    _unary("neg", np.negative, _NUMERIC, doc="-x", complex=True),
    _unary("abs", np.abs, _NUMERIC, doc="|x| (of a complex number: its magnitude, as f32)", complex=True),
    _unary("conj", np.conjugate, _ANY, doc="complex conjugate re - i im (c64 only)", complex=True),
    _unary("sign", _sign, _NUMERIC, doc="sign of x: -1, 0 or 1 (0 at +-0 and at NaN, as torch.sign)"),
    _unary("relu", _relu, _NUMERIC, doc="max(x, 0), NaN kept"),
    _unary("exp", np.exp, _FLOAT, traits=TRANSCENDENTAL),
    _unary("exp2", np.exp2, _FLOAT, traits=TRANSCENDENTAL),
    _unary("expm1", np.expm1, _FLOAT, traits=TRANSCENDENTAL),
    _unary("log", np.log, _FLOAT, traits=TRANSCENDENTAL),
    _unary("log2", np.log2, _FLOAT, traits=TRANSCENDENTAL),
    _unary("log1p", np.log1p, _FLOAT, traits=TRANSCENDENTAL),
    _unary("sqrt", np.sqrt, _FLOAT),
    _unary("rsqrt", lambda x: 1.0 / np.sqrt(np.asarray(x, dtype=np.float64)), _FLOAT, doc="1/sqrt(x)"),
    _unary("reciprocal", lambda x: 1.0 / np.asarray(x, dtype=np.float64), _FLOAT, doc="1/x"),
    _unary("sin", np.sin, _FLOAT, traits=TRANSCENDENTAL),
    _unary("cos", np.cos, _FLOAT, traits=TRANSCENDENTAL),
    _unary("tan", np.tan, _FLOAT, traits=TRANSCENDENTAL),
    _unary("tanh", np.tanh, _FLOAT, traits=TRANSCENDENTAL),
    _unary("atan", np.arctan, _FLOAT, traits=TRANSCENDENTAL),
    _unary("sigmoid", sigmoid, _FLOAT, doc="1/(1+exp(-x))", traits=TRANSCENDENTAL),
    _unary("erf", erf, _FLOAT, traits=TRANSCENDENTAL),
    _unary("gelu", gelu, _FLOAT, attrs={"approximate": AttrSpec("str", "none")},
           doc="x*Phi(x); approximate='tanh' uses the tanh formula", traits=TRANSCENDENTAL),
    _unary("floor", np.floor, _FLOAT),
    _unary("ceil", np.ceil, _FLOAT),
    _unary("round", _round_half_even, _FLOAT, doc="round half to even"),
    _unary("trunc", np.trunc, _FLOAT),
    _unary("isnan", np.isnan, _FLOAT, to_bool=True),
    _unary("isinf", np.isinf, _FLOAT, to_bool=True),
    _unary("logical_not", np.logical_not, _ANY, to_bool=True),
    _unary("bitwise_not", np.invert, _INTEGRAL),
)


# ---- binary --------------------------------------------------------------------------------------------


def _binary(name: str, fn: Callable[..., np.ndarray], kind: str, *, to_bool: bool = False,
            attrs: dict[str, AttrSpec] | None = None, doc: str = "", traits: frozenset[Trait] = frozenset(),
            complex: bool = False) -> OpDef:
    def infer(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
        a, b = types
        dtype = same_dtype(name, types)
        _check_kind(name, a, kind)
        if name == "div" and attrs["rounding_mode"] == "none" and not (dtype.is_float or dtype.is_complex):
            raise fail(name, "true division needs a float element type (cast integer operands first)")
        if name == "div" and attrs["rounding_mode"] != "none" and dtype.is_complex:
            raise fail(name, "complex division has no rounding mode")
        if name == "div" and attrs["rounding_mode"] not in ("none", "floor", "trunc"):
            raise fail(name, f"rounding_mode must be none, floor or trunc, got {attrs['rounding_mode']!r}")
        return TensorType(broadcast_shapes(name, a.shape, b.shape), DType.bool if to_bool else dtype)

    return OpDef(name, Category.ELEMENTWISE, (2, 2), infer, fn, attrs or {}, doc or f"elementwise {name}",
                 traits=POINTWISE | traits, wants_out_dtype=name == "div", takes_complex=complex)


def _div(a: np.ndarray, b: np.ndarray, rounding_mode: str = "none", out_dtype: DType = DType.f32) -> np.ndarray:
    if rounding_mode == "none":
        return np.true_divide(a, b)
    if a.dtype.kind in "iu":
        if rounding_mode == "floor":
            return np.floor_divide(a, b)
        quotient = np.floor_divide(a, b)  # truncate toward zero: fix up negative inexact quotients
        return quotient + ((quotient < 0) & (quotient * b != a))
    if rounding_mode == "floor":
        return _div_floor_float(a, b, out_dtype)
    # PyTorch's bf16/f16 trunc division rounds the quotient to the storage precision before truncating
    return np.trunc(to_storage(np.true_divide(a, b), out_dtype).astype(np.float32))


def _div_floor_float(a: np.ndarray, b: np.ndarray, out_dtype: DType = DType.f32) -> np.ndarray:
    """Python's ``a // b`` for floats, as PyTorch computes it: from fmod, not floor(a / b).

    floor(a / b) is wrong when a / b rounds up to an integer (1 // 0.1 is 9, but 1 / 0.1 rounds to 10.0), and
    fmod-based floor division of inf is NaN. Mirrors ``div_floor_floating_vec`` in ATen, which for bf16/f16 runs
    on half-precision vectors: every intermediate is rounded to ``out_dtype`` (as trunc division rounds its
    quotient), which matches PyTorch bit for bit.
    """
    def rounded(x: np.ndarray) -> np.ndarray:
        return x if out_dtype is DType.f32 else to_storage(x, out_dtype).astype(np.float32)

    a, b = np.broadcast_arrays(a, b)
    quotient = rounded(a / b)
    mod = rounded(np.fmod(a, b))
    # ATen's fix-up for an infinite quotient of finite operands: divide a itself, so the result stays inf
    numerator = np.where(np.isinf(quotient) & ~np.isinf(a), a, rounded(a - mod))
    div = rounded(numerator / b)
    div = np.where((mod != 0) & ((b < 0) != (mod < 0)), rounded(div - 1), div)
    floordiv = np.floor(div)
    floordiv = np.where(rounded(div - floordiv) > 0.5, rounded(floordiv + 1), floordiv)
    floordiv = np.where(div == 0, np.copysign(np.zeros_like(div), quotient), floordiv)
    return np.where(b == 0, quotient, floordiv)


def _pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f":
        return _pow_float(a, b)
    if a.dtype.kind == "b":
        return np.power(a, b)
    # Integer powers with a negative exponent are 1/a**|b| truncated, as PyTorch defines them: 1 for a == 1,
    # +-1 for a == -1, 0 otherwise (numpy refuses negative integer exponents).
    a, b = np.broadcast_arrays(a, b)
    positive = np.power(a, np.maximum(b, 0))
    unit = np.where(a == 1, 1, np.where(a == -1, np.where(b % 2 == 0, 1, -1), 0)).astype(a.dtype)
    return np.where(b < 0, unit, positive)


def _pow_float(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C99 pow (std::pow and SLEEF, which PyTorch uses), in float64.

    np.power alone is not a function of its inputs: with a scalar-like exponent it takes a shortcut
    (x ** 0.5 -> sqrt(x)) and pow(-inf, 0.5) is NaN, with a full array it is inf. So the special cases of C99
    (Annex F.9.4.4) are applied explicitly, one rule per line, later rules winning.
    """
    a, b = (np.array(v, dtype=np.float64) for v in np.broadcast_arrays(a, b))  # copies keep 0-d shapes
    out = np.power(a, b)
    odd = np.isfinite(b) & (np.fmod(b, 2) != 0) & (b == np.trunc(b))  # b is an odd integer
    rules = (
        (np.isneginf(a) & (b < 0), np.where(odd, -0.0, 0.0)),  # pow(-inf, y<0) = -0 for odd y, else +0
        (np.isneginf(a) & (b > 0), np.where(odd, -np.inf, np.inf)),  # pow(-inf, y>0) = -inf for odd y, else +inf
        (np.isposinf(a) & (b < 0), 0.0),  # pow(+inf, y<0) = +0
        (np.isposinf(a) & (b > 0), np.inf),  # pow(+inf, y>0) = +inf
        ((a == 0) & (b < 0), np.where(odd, np.copysign(np.inf, a), np.inf)),  # pow(+-0, y<0) = +-inf / +inf
        ((a == 0) & (b > 0), np.where(odd, a, 0.0)),  # pow(+-0, y>0) = +-0 for odd y, else +0
        (np.isposinf(b) & (np.abs(a) < 1), 0.0),  # pow(x, +inf) = +0 for |x| < 1
        (np.isposinf(b) & (np.abs(a) > 1), np.inf),  # ... and +inf for |x| > 1
        (np.isneginf(b) & (np.abs(a) < 1), np.inf),  # pow(x, -inf) = +inf for |x| < 1
        (np.isneginf(b) & (np.abs(a) > 1), 0.0),  # ... and +0 for |x| > 1 (NaN x stays NaN)
        ((a == -1) & np.isinf(b), 1.0),  # pow(-1, +-inf) = 1
        (a == 1, 1.0),  # pow(1, y) = 1, even for NaN y
        (b == 0, 1.0),  # pow(x, +-0) = 1, even for NaN x
    )
    for applies, value in rules:
        out = np.where(applies, value, out)
    return out


def _shift_amount(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The shift amount as PyTorch's CPU kernels read it: ``b`` in ``a``'s type taken as unsigned (a negative
    amount is a huge one): the amount clamped to width - 1, and where it was out of range (>= the width)."""
    bits = a.dtype.itemsize * 8
    amount = np.asarray(b).astype(f"uint{bits}")  # wraps negative amounts modulo 2**bits
    return np.minimum(amount, bits - 1).astype(a.dtype), amount >= bits


def _shift_left(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a << b wrapping in a's width; an amount out of range (negative or >= the width) gives 0 (measured on
    torch 2.13 CPU for u8, i8, i16, i32, i64)."""
    in_range, out_of_range = _shift_amount(a, b)
    return np.where(out_of_range, np.zeros((), a.dtype), np.left_shift(a, in_range)).astype(a.dtype)


def _shift_right(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a >> b, arithmetic for signed types and logical for u8; an amount out of range (negative or >= the width)
    fills with the sign (-1 for a negative signed a, else 0), as torch 2.13 CPU does."""
    in_range, out_of_range = _shift_amount(a, b)
    shifted = np.right_shift(a, in_range)  # a signed a shifted by width - 1 is its sign fill already
    if a.dtype.kind == "i":
        return shifted
    return np.where(out_of_range, np.zeros((), a.dtype), shifted).astype(a.dtype)


def _zero_divisor_raises(reference: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """``reference`` raising ``ZeroDivisionError`` for an integer division by zero, as eager's kernels do (numpy
    returns 0; floats keep IEEE's inf and NaN). The interpreter raises it as a typed run-time error."""

    def checked(a: np.ndarray, b: np.ndarray, *args: object, **kwargs: object) -> np.ndarray:
        # (a divisor broadcast into an empty result divides nothing: eager's kernel does not raise)
        if np.asarray(a).dtype.kind in "iu" and np.broadcast(a, b).size and not np.all(b):
            raise ZeroDivisionError("integer division by zero")
        return reference(a, b, *args, **kwargs)

    return checked


BINARY = (
    _binary("add", np.add, _ANY, traits=COMMUTATIVE, complex=True),
    _binary("sub", np.subtract, _NUMERIC, complex=True),
    _binary("mul", np.multiply, _ANY, traits=COMMUTATIVE, complex=True),
    _binary("div", _zero_divisor_raises(_div), _NUMERIC, attrs={"rounding_mode": AttrSpec("str", "none")},
            doc="a/b; rounding_mode floor or trunc rounds the quotient", complex=True),
    _binary("pow", _pow, _NUMERIC, doc="a ** b (integers: a negative exponent gives 1, -1 or 0, as torch.pow)",
            traits=TRANSCENDENTAL),
    _binary("maximum", np.maximum, _ANY, doc="elementwise max, NaN propagates", traits=COMMUTATIVE),
    _binary("minimum", np.minimum, _ANY, doc="elementwise min, NaN propagates", traits=COMMUTATIVE),
    _binary("remainder", _zero_divisor_raises(np.mod), _NUMERIC, doc="a - floor(a/b)*b (sign of b)"),
    _binary("fmod", _zero_divisor_raises(np.fmod), _NUMERIC, doc="C fmod (sign of a)"),
    _binary("atan2", np.arctan2, _FLOAT, traits=TRANSCENDENTAL),
    _binary("bitwise_and", np.bitwise_and, _INTEGRAL, traits=COMMUTATIVE),
    _binary("bitwise_or", np.bitwise_or, _INTEGRAL, traits=COMMUTATIVE),
    _binary("bitwise_xor", np.bitwise_xor, _INTEGRAL, traits=COMMUTATIVE),
    _binary("bitwise_left_shift", _shift_left, _INTEGER,
            doc="a << b in a's width; an amount < 0 or >= the width gives 0 (as torch on CPU)"),
    _binary("bitwise_right_shift", _shift_right, _INTEGER,
            doc="a >> b, arithmetic (signed) or logical (u8); an amount < 0 or >= the width fills with the sign"),
    _binary("logical_and", np.logical_and, _ANY, to_bool=True, traits=COMMUTATIVE),
    _binary("logical_or", np.logical_or, _ANY, to_bool=True, traits=COMMUTATIVE),
    _binary("logical_xor", np.logical_xor, _ANY, to_bool=True, traits=COMMUTATIVE),
    _binary("eq", np.equal, _ANY, to_bool=True, traits=COMMUTATIVE, complex=True),
    _binary("ne", np.not_equal, _ANY, to_bool=True, traits=COMMUTATIVE, complex=True),
    _binary("lt", np.less, _ANY, to_bool=True),
    _binary("le", np.less_equal, _ANY, to_bool=True),
    _binary("gt", np.greater, _ANY, to_bool=True),
    _binary("ge", np.greater_equal, _ANY, to_bool=True),
)


# ---- where, clamp, cast --------------------------------------------------------------------------------


def _infer_where(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
    cond, a, b = types
    if not cond.dtype.is_bool:
        raise fail("where", f"condition (operand #0) must be bool, got {cond.dtype.value}")
    dtype = same_dtype("where", (a, b))
    return TensorType(broadcast_shapes("where", cond.shape, a.shape, b.shape), dtype)


def _infer_clamp(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
    t, *bound_types = types
    if t.dtype.is_bool:
        raise fail("clamp", "operand #0 must be numeric, got bool")
    lifted = attrs["lifted"]
    if len(bound_types) != len(lifted) or sorted(set(lifted)) != list(lifted) or \
            not all(0 <= k < len(CLAMP_BOUNDS) for k in lifted):
        raise fail("clamp", f"lifted={list(lifted)} names {len(lifted)} of the bounds {CLAMP_BOUNDS} (each once, in "
                            f"order) as operands; {len(bound_types)} given")
    for k, bound_type in zip(lifted, bound_types):
        if not t.dtype.is_float or bound_type != TensorType((), t.dtype):
            raise fail("clamp", f"the {CLAMP_BOUNDS[k]} operand must be a 0-d {t.dtype.value} of a float tensor, "
                                f"got {bound_type}")
    for k, key in enumerate(CLAMP_BOUNDS):
        bound = attrs[key]
        if bound is None:
            continue
        if k in lifted:
            raise fail("clamp", f"{key} is both an attribute and an operand")
        if t.dtype.is_int and isinstance(bound, float):
            # torch.clamp(int_tensor, min=0.5) returns a float tensor: the front end casts first
            raise fail("clamp", f"{key}={bound} is a float bound for a {t.dtype.value} tensor (cast the operand)")
        check_scalar("clamp", key, bound, t.dtype)
    return t.contiguous()


#: clamp's bounds, in the order those given as operands follow ``x`` (its ``lifted`` attribute names them)
CLAMP_BOUNDS = ("min", "max")


def clamp_bound(bound: float | int, dtype: DType) -> float | int:
    """A bound attribute as clamp compares with it: converted to the element type, as eager converts it
    (``c10::checked_convert``, round to nearest even: a bf16 tensor's ``clamp(max=0.1)`` clamps at bf16's 0.1,
    the value its result then holds). A bound operand has the element type already."""
    if dtype is DType.bf16:
        return float(round_to_bf16(np.float32(bound)))
    if dtype is DType.f16:
        return float(np.float16(np.float32(bound)))  # through float32, as c10::Half(double) converts
    return bound


def _clamp(x: np.ndarray, *bound_operands: np.ndarray, min: float | None = None, max: float | None = None,
           lifted: tuple[int, ...] = (), nan_from_bound: bool = False, out_dtype: DType = DType.f32) -> np.ndarray:
    """x < min ? min : x, then > max ? max : (as eager: max wins where min > max, a NaN element is kept, and
    signed zeros compare equal, so ``clamp(-0.0, min=0.0)`` is -0.0); a NaN bound makes every element NaN
    (eager's clamp, clamp_min, clamp_max and hardtanh fill the result with NaN, torch 2.13): a positive NaN, or
    with ``nan_from_bound`` the NaN bound itself, its sign kept (eager's clamp_min and clamp_max on float32 and
    float16 tensors: ``clamp_min(x, -nan)`` is -nan everywhere)."""
    bounds = {key: None if value is None else clamp_bound(value, out_dtype)
              for key, value in (("min", min), ("max", max))}
    for k, operand in zip(lifted, bound_operands):
        bounds[CLAMP_BOUNDS[k]] = operand.item()
    out = x
    if bounds["min"] is not None:
        out = np.where(out < bounds["min"], bounds["min"], out)  # NaN compares false: kept
    if bounds["max"] is not None:
        out = np.where(out > bounds["max"], bounds["max"], out)
    nan_bounds = [b for b in bounds.values() if b is not None and isinstance(b, float) and math.isnan(b)]
    if nan_bounds:
        out = np.full_like(out, nan_bounds[0] if nan_from_bound else np.nan)
    return np.asarray(out, dtype=x.dtype)


def _infer_cast(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
    return TensorType(types[0].shape, attrs["dtype"])


def _cast(x: np.ndarray, dtype: DType) -> np.ndarray:
    if dtype.is_bool:
        return x != 0
    if x.dtype.kind == "c" and not dtype.is_complex:
        x = x.real  # PyTorch discards the imaginary part (with a warning)
    if (dtype.is_int) and x.dtype.kind == "f":
        # Truncate toward zero; wrap into the narrow types through int64 as PyTorch does (a direct float ->
        # uint8/int8/int16 conversion is undefined in C: x86 wraps, ARM saturates). Out-of-range values are
        # undefined for i32/i64 (C++, and so PyTorch): converted directly, as the host does.
        with np.errstate(invalid="ignore"):
            if dtype.itemsize < 4:
                return np.trunc(x).astype(np.int64).astype(dtype.numpy)
            return np.trunc(x).astype(dtype.numpy)
    return x.astype(dtype.compute)


#: bitcast's allowed (source, target) element types: same width. bf16 is stored as float32 holding a bf16 value
#: (dtypes.py), whose bits are the int16's in the high half and zeros in the low half.
BITCAST_PAIRS = frozenset({(DType.f32, DType.i32), (DType.i32, DType.f32), (DType.i16, DType.bf16),
                           (DType.bf16, DType.i16)})


def _infer_bitcast(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
    source, target = types[0].dtype, attrs["dtype"]
    if (source, target) not in BITCAST_PAIRS:
        raise fail("bitcast", f"cannot reinterpret {source.value} as {target.value} "
                              "(only f32 <-> i32 and bf16 <-> i16)")
    return TensorType(types[0].shape, target)


def _bitcast(x: np.ndarray, dtype: DType) -> np.ndarray:
    x = np.array(x, order="C", copy=True)  # (ascontiguousarray would make 0-d 1-d)
    if dtype is DType.bf16:  # int16 bits -> the float32 whose high half they are
        return bf16_from_words(x)
    if dtype is DType.i16 and x.dtype == np.float32:  # a bf16 value's high half
        return bf16_words(x)
    return x.view(dtype.numpy)


OTHER = (
    OpDef("where", Category.ELEMENTWISE, (3, 3), _infer_where, np.where, {}, "cond ? a : b", traits=POINTWISE,
          takes_complex=True),
    OpDef("clamp", Category.ELEMENTWISE, (1, 3), _infer_clamp, _clamp,
          {"min": AttrSpec("optional-number", None), "max": AttrSpec("optional-number", None),
           "lifted": AttrSpec("ints", ()), "nan_from_bound": AttrSpec("bool", False)},
          "min(max(x, min), max), a NaN element kept, every element NaN if a bound is NaN (a positive NaN, or with "
          "``nan_from_bound`` the bound itself: eager's clamp_min/clamp_max); bounds converted to the "
          "element type (integer bounds for integers); a float tensor's bounds may be 0-d operands instead "
          "(``lifted`` names them: a kernel argument, the device's lifted floats)",
          traits=POINTWISE, wants_out_dtype=True, operand_attrs=CLAMP_BOUNDS),
    OpDef("cast", Category.ELEMENTWISE, (1, 1), _infer_cast, _cast, {"dtype": AttrSpec("dtype")},
          "convert element type (float to int truncates toward zero; complex to real keeps the real part)",
          traits=POINTWISE, takes_complex=True),
    OpDef("bitcast", Category.ELEMENTWISE, (1, 1), _infer_bitcast, _bitcast, {"dtype": AttrSpec("dtype")},
          "reinterpret the bits of each element as another type of the same width (f32 <-> i32, bf16 <-> i16): "
          "sign bits, exponents and neighbouring floats (signbit, copysign, nextafter, frexp), bf16 tensors "
          "crossing the cpu target's boundary as their bits", traits=POINTWISE),
)

OPS = UNARY + BINARY + OTHER
