"""Test table entries for the elementwise ops: unary math, binary arithmetic/comparison, where, clamp, cast."""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch
import torch.nn.functional as F
from hypothesis import strategies as st

from neuroncc.ir import DType, TensorType
from neuroncc.ir.dtypes import to_storage

from .spec import OpSpec
from .support import (
    COMPLEX, FLOATS, INTEGRAL, INTS, MAIN, NARROW_INTS, NUMERIC, SPECIALS, TORCH_DTYPES, Case, Tol, broadcast_pair,
    operand, random_array, rngs, shapes,
)

#: The dtypes each kind of operand is drawn from (the narrow integer types exercise wrap-around).
KINDS = {
    "any": MAIN + NARROW_INTS,
    "numeric": NUMERIC + NARROW_INTS,
    "float": FLOATS,
    "integral": INTEGRAL + NARROW_INTS,
    "integer": INTS + NARROW_INTS,
}


def t(shape: tuple[int, ...], dtype: DType) -> TensorType:
    return TensorType(shape, dtype)


F32, I64, BOOL = DType.f32, DType.i64, DType.bool

#: Elementwise ops that also take complex operands (drawn with c64 too).
COMPLEX_OPS = frozenset({"neg", "abs", "add", "sub", "mul", "div", "eq", "ne"})


def _dtypes(name: str, kind: str) -> tuple[DType, ...]:
    return KINDS[kind] + (COMPLEX if name in COMPLEX_OPS else ())

# ---- unary ---------------------------------------------------------------------------------------------

_UNARY = {
    # name: (operand kind, torch function)
    "neg": ("numeric", torch.neg),
    "abs": ("numeric", torch.abs),
    "sign": ("numeric", torch.sign),
    "relu": ("numeric", torch.relu),
    "exp": ("float", torch.exp),
    "exp2": ("float", torch.exp2),
    "expm1": ("float", torch.expm1),
    "log": ("float", torch.log),
    "log2": ("float", torch.log2),
    "log1p": ("float", torch.log1p),
    "sqrt": ("float", torch.sqrt),
    "rsqrt": ("float", torch.rsqrt),
    "reciprocal": ("float", torch.reciprocal),
    "sin": ("float", torch.sin),
    "cos": ("float", torch.cos),
    "tan": ("float", torch.tan),
    "tanh": ("float", torch.tanh),
    "atan": ("float", torch.atan),
    "sigmoid": ("float", torch.sigmoid),
    "erf": ("float", torch.erf),
    "gelu": ("float", None),
    "floor": ("float", torch.floor),
    "ceil": ("float", torch.ceil),
    "round": ("float", torch.round),
    "trunc": ("float", torch.trunc),
    "isnan": ("float", torch.isnan),
    "isinf": ("float", torch.isinf),
    "logical_not": ("any", torch.logical_not),
    "bitwise_not": ("integral", torch.bitwise_not),
}


def _unary_cases(name: str, kind: str):
    @st.composite
    def cases(draw: st.DrawFn) -> Case:
        rng = draw(rngs())
        dtype = draw(st.sampled_from(_dtypes(name, kind)))
        shape = draw(shapes())
        attrs = {}
        if name == "gelu" and draw(st.booleans()):
            attrs["approximate"] = draw(st.sampled_from(["none", "tanh"]))
        if name == "round" and draw(st.booleans()):  # exact .5 ties: round half to even
            data = (rng.integers(-16, 16, size=shape) / 2).astype(np.float32)
            return Case([(to_storage(data, dtype), t(shape, dtype))], attrs)
        wants_specials = draw(st.booleans()) and not dtype.is_complex
        specials = (MODERATE_SPECIALS if name == "gelu" else True) if wants_specials else False
        return Case([operand(rng, shape, dtype, specials=specials)], attrs)

    return cases


#: torch's gelu disagrees with itself at the extremes (the vectorized path gives inf for 3e38 and NaN for inf,
#: the scalar path 3e38 and inf); the reference gives the mathematical limits, so gelu is compared without them.
MODERATE_SPECIALS = SPECIALS[np.isnan(SPECIALS) | (np.abs(SPECIALS) < 1e38)]


def _unary_torch(name: str, fn):
    if name == "gelu":
        return lambda xs, attrs: F.gelu(xs[0], approximate=attrs["approximate"])
    return lambda xs, attrs: fn(xs[0])


def _unary_invalid(name: str, kind: str):
    bad = {"numeric": BOOL, "float": I64, "integral": F32, "integer": BOOL, "any": None}[kind]
    invalid = [((t((2,), F32), t((2,), F32)), {}), ((), {})]
    if bad is not None:
        invalid.append(((t((2, 3), bad),), {}))
    if name == "gelu":
        invalid.append(((t((2,), F32),), {"approximate": "fast"}))
    return tuple(invalid)


UNARY_SPECS = {
    name: OpSpec(_unary_cases(name, kind), _unary_torch(name, fn), Tol(rtol=2.0), _unary_invalid(name, kind))
    for name, (kind, fn) in _UNARY.items()
}

# ---- binary --------------------------------------------------------------------------------------------

_BINARY = {
    "add": ("any", torch.add),
    "sub": ("numeric", torch.sub),
    "mul": ("any", torch.mul),
    "div": ("numeric", None),
    "pow": ("numeric", torch.pow),
    "maximum": ("any", torch.maximum),
    "minimum": ("any", torch.minimum),
    "remainder": ("numeric", torch.remainder),
    "fmod": ("numeric", torch.fmod),
    "atan2": ("float", torch.atan2),
    "bitwise_and": ("integral", torch.bitwise_and),
    "bitwise_or": ("integral", torch.bitwise_or),
    "bitwise_xor": ("integral", torch.bitwise_xor),
    "bitwise_left_shift": ("integer", torch.bitwise_left_shift),
    "bitwise_right_shift": ("integer", torch.bitwise_right_shift),
    "logical_and": ("any", torch.logical_and),
    "logical_or": ("any", torch.logical_or),
    "logical_xor": ("any", torch.logical_xor),
    "eq": ("any", torch.eq),
    "ne": ("any", torch.ne),
    "lt": ("any", torch.lt),
    "le": ("any", torch.le),
    "gt": ("any", torch.gt),
    "ge": ("any", torch.ge),
}

_NONZERO_DIVISOR = ("div", "remainder", "fmod")  # integer division by zero is an error in PyTorch
_SHIFTS = ("bitwise_left_shift", "bitwise_right_shift")


def _binary_cases(name: str, kind: str):
    @st.composite
    def cases(draw: st.DrawFn) -> Case:
        rng = draw(rngs())
        dtype = draw(st.sampled_from(_dtypes(name, kind)))
        attrs = {}
        if name == "div" and dtype.is_complex:
            attrs["rounding_mode"] = "none"
        elif name == "div":
            mode = draw(st.sampled_from(["none", "floor", "trunc"] if dtype.is_float else ["floor", "trunc"]))
            if mode != "none" or draw(st.booleans()):
                attrs["rounding_mode"] = mode
        sa, sb = draw(broadcast_pair())
        # complex NaN/inf results differ between formulas (torch's vectorized complex kernels vs numpy)
        specials = draw(st.booleans()) and not dtype.is_complex
        if name == "pow" and dtype.is_int:
            a = random_array(rng, sa, dtype, low=-3, high=3)
            b = random_array(rng, sb, dtype, low=-2 if dtype != DType.u8 else 0, high=4)
        elif name in _SHIFTS:
            # every value, and amounts around the edges: negative, 0, width - 1, width and beyond
            a = random_array(rng, sa, dtype, low=-1e6, high=1e6)
            bits = np.dtype(dtype.numpy).itemsize * 8
            b = rng.integers(-bits - 3, 2 * bits + 4, size=sb).astype(dtype.numpy)  # u8: -1 wraps to 255
        elif name in _NONZERO_DIVISOR and dtype.is_int:
            a = random_array(rng, sa, dtype, low=-20, high=20)
            b = random_array(rng, sb, dtype, low=-6, high=6)
            b = np.where(b == 0, np.ones_like(b), b)
        elif name in ("div", "remainder", "fmod") and dtype.is_float and draw(st.booleans()):
            # quotients close to integers: the floor/trunc rounding modes are decided by the last bit
            b = random_array(rng, sb, dtype, low=-1, high=1)
            k = rng.integers(-8, 9, size=np.broadcast_shapes(sa, sb)).astype(np.float32)
            a = np.broadcast_to(k * b, np.broadcast_shapes(sa, sb))
            a = to_storage(np.ascontiguousarray(a).reshape(np.broadcast_shapes(sa, sb)), dtype)
            sa = a.shape
        else:
            a = random_array(rng, sa, dtype, specials=specials)
            b = random_array(rng, sb, dtype, specials=specials)
        return Case([(a, t(sa, dtype)), (b, t(sb, dtype))], attrs)

    return cases


def _scalar_path(fn):
    """``fn`` one element at a time: PyTorch's vectorized fmod (SLEEF) returns NaN for subnormal or relatively
    tiny divisors where its scalar path (C fmod) is exact; the reference is exact, like the scalar path."""
    def run(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a, b = torch.broadcast_tensors(a, b)
        flat = [fn(x.reshape(1), y.reshape(1)) for x, y in zip(a.reshape(-1), b.reshape(-1))]
        return torch.cat(flat).reshape(a.shape) if flat else fn(a, b)

    return run


def _vector_path(fn):
    """``fn`` on contiguous operands of two or more elements: PyTorch's bf16/f16 floor/trunc division round
    intermediates to half precision in its vectorized kernel, which the IR follows, but a 1-element tensor
    takes a scalar path that computes in float32."""
    def run(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a, b = torch.broadcast_tensors(a, b)
        pad = torch.ones(1, dtype=a.dtype)
        out = fn(torch.cat([a.reshape(-1), pad]), torch.cat([b.reshape(-1), pad]))
        return out[:-1].reshape(a.shape)

    return run


def _binary_torch(name: str, fn):
    if name in ("fmod", "remainder"):
        return lambda xs, attrs: _scalar_path(fn)(xs[0], xs[1])
    if name == "div":
        def div(xs, attrs):
            mode = None if attrs["rounding_mode"] == "none" else attrs["rounding_mode"]
            fn = lambda a, b: torch.div(a, b, rounding_mode=mode)  # noqa: E731
            reduced = xs[0].dtype in (torch.bfloat16, torch.float16)
            return _vector_path(fn)(*xs) if mode and reduced else fn(*xs)
        return div
    return lambda xs, attrs: fn(xs[0], xs[1])


def _binary_invalid(name: str, kind: str):
    invalid = [
        ((t((2,), F32), t((2,), DType.f16)), {}),  # one element type for both operands
        ((t((2,), I64), t((2,), DType.i32)), {}),
        ((t((2, 3), F32), t((3, 2), F32)), {}),  # shapes that do not broadcast
        ((t((2,), F32),), {}),  # arity
    ]
    bad = {"numeric": BOOL, "float": I64, "integral": F32, "integer": BOOL, "any": None}[kind]
    if bad is not None:
        invalid.append(((t((2,), bad), t((2,), bad)), {}))
    if name == "div":
        invalid.append(((t((2,), I64), t((2,), I64)), {}))  # true division of integers
        invalid.append(((t((2,), F32), t((2,), F32)), {"rounding_mode": "ceil"}))
    return tuple(invalid)


BINARY_SPECS = {
    name: OpSpec(_binary_cases(name, kind), _binary_torch(name, fn), Tol(rtol=2.0), _binary_invalid(name, kind))
    for name, (kind, fn) in _BINARY.items()
}

# ---- where, clamp, cast --------------------------------------------------------------------------------


@st.composite
def _where_cases(draw: st.DrawFn) -> Case:
    rng = draw(rngs())
    dtype = draw(st.sampled_from(KINDS["any"] + COMPLEX))
    full = draw(shapes())
    derived = [tuple(1 if draw(st.booleans()) else s for s in full[draw(st.integers(0, len(full))):]) for _ in range(2)]
    sc, sa, sb = draw(st.permutations([full, *derived]))
    cond = operand(rng, sc, BOOL)
    specials = draw(st.booleans())
    return Case([cond, operand(rng, sa, dtype, specials=specials), operand(rng, sb, dtype, specials=specials)])


def _bound(draw: st.DrawFn, dtype: DType):
    if dtype.is_float:
        # (a NaN bound makes every element NaN, as eager's clamp; infinities and signed zeros are bounds too)
        return draw(st.one_of(st.none(), st.floats(-3, 3, width=32), st.integers(-3, 3),
                              st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 0.0])))
    info = np.iinfo(dtype.numpy)
    return draw(st.one_of(st.none(), st.integers(max(info.min, -5), min(info.max, 5))))


@st.composite
def _clamp_cases(draw: st.DrawFn) -> Case:
    rng = draw(rngs())
    dtype = draw(st.sampled_from(KINDS["numeric"]))
    attrs = {k: v for k in ("min", "max") if (v := _bound(draw, dtype)) is not None or draw(st.booleans())}
    return Case([operand(rng, draw(shapes()), dtype, specials=draw(st.booleans()))], attrs)


def _clamp_torch(xs, attrs):
    if attrs["min"] is None and attrs["max"] is None:
        return xs[0].clone()
    return torch.clamp(xs[0], min=attrs["min"], max=attrs["max"])


@st.composite
def _cast_cases(draw: st.DrawFn) -> Case:
    rng = draw(rngs())
    source = draw(st.sampled_from(KINDS["any"]))
    target = draw(st.sampled_from(KINDS["any"]))
    if draw(st.integers(0, 4)) == 0:  # real <-> complex (complex to real keeps the real part)
        source, target = draw(st.permutations([draw(st.sampled_from(FLOATS)), DType.c64]))
    shape = draw(shapes())
    if source.is_float and target.is_int:
        # Out-of-range float->int conversion is undefined in C++ (and so in PyTorch); wrap-around of
        # in-range values through int64 is what PyTorch does for the narrow types.
        limit = 1000.0 if target in NARROW_INTS else 6e4 if source is DType.f16 else 1e6  # f16 tops at 65504
        data = operand(rng, shape, source, low=-limit, high=limit)
    else:
        data = operand(rng, shape, source, low=-300, high=300, specials=draw(st.booleans()))
    return Case([data], {"dtype": target})


@st.composite
def _bitcast_cases(draw: st.DrawFn) -> Case:
    rng = draw(rngs())
    pairs = {F32: DType.i32, DType.i32: F32, DType.bf16: DType.i16, DType.i16: DType.bf16}
    source = draw(st.sampled_from(sorted(pairs, key=lambda d: d.value)))
    data = operand(rng, draw(shapes()), source, specials=draw(st.booleans()))
    return Case([data], {"dtype": pairs[source]})


def _torch_cast(x: torch.Tensor, dtype: DType) -> torch.Tensor:
    with warnings.catch_warnings():  # "casting complex values to real discards the imaginary part": tested
        warnings.simplefilter("ignore", UserWarning)
        return x.to(TORCH_DTYPES[dtype])


OTHER_SPECS = {
    "where": OpSpec(_where_cases, lambda xs, attrs: torch.where(*xs), invalid=(
        ((t((2,), F32), t((2,), F32), t((2,), F32)), {}),  # condition must be bool
        ((t((2,), BOOL), t((2,), F32), t((2,), I64)), {}),
        ((t((3,), BOOL), t((2,), F32), t((2,), F32)), {}),
    )),
    "clamp": OpSpec(_clamp_cases, _clamp_torch, invalid=(
        ((t((2,), BOOL),), {"min": 0}),
        ((t((2,), F32),), {"min": "zero"}),
    )),
    "cast": OpSpec(_cast_cases, lambda xs, attrs: _torch_cast(xs[0], attrs["dtype"]), invalid=(
        ((t((2,), F32),), {}),  # dtype is required
        ((t((2,), F32),), {"dtype": "f32"}),
    )),
    "bitcast": OpSpec(_bitcast_cases, lambda xs, attrs: xs[0].contiguous().view(TORCH_DTYPES[attrs["dtype"]]),
                      invalid=(
        ((t((2,), F32),), {}),  # dtype is required
        ((t((2,), F32),), {"dtype": I64}),  # widths differ
        ((t((2,), DType.bf16),), {"dtype": DType.i32}),  # bf16 is 2 bytes (stored in a float32's high half)
        ((t((2,), I64),), {"dtype": F32}),
    )),
}


SPECS = {**UNARY_SPECS, **BINARY_SPECS, **OTHER_SPECS}
