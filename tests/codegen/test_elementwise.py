"""Every elementwise op through the LLVM path against the reference interpreter (one module per test)."""

from __future__ import annotations

import numpy as np
import pytest

from neuroncc.ir import Builder, DType, TensorType, round_to_bf16

from codegen_helpers import run_both, special_floats
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.ir.interpreter import interpret

FLOAT_UNARY = ["neg", "abs", "sign", "relu", "exp", "exp2", "expm1", "log", "log2", "log1p", "sqrt", "rsqrt",
               "reciprocal", "sin", "cos", "tan", "tanh", "atan", "sigmoid", "erf", "gelu", "floor", "ceil", "round",
               "trunc", "isnan", "isinf", "logical_not"]
BINARY_ANY = ["add", "mul", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or",
              "logical_xor"]
BINARY_NUMERIC = ["sub", "div", "pow", "remainder", "fmod"]


def _inputs_for(dtype: DType, shape, rng):
    if dtype.is_float:
        x = special_floats(rng, shape)
        return round_to_bf16(x) if dtype is DType.bf16 else x.astype(dtype.numpy)
    if dtype.is_bool:
        return rng.random(shape) < 0.5
    info = np.iinfo(dtype.numpy)
    low, high = max(info.min, -50), min(info.max, 50)
    return rng.integers(low, high, shape).astype(dtype.numpy)


@pytest.mark.parametrize("dtype", [DType.f32, DType.bf16, DType.f16])
def test_float_unary_ops(dtype, rng):
    b = Builder("unary")
    x = b.param(TensorType((7, 33), dtype), "x")
    outs = [b.op(name, x, hint=name) for name in FLOAT_UNARY]
    outs.append(b.op("gelu", x, approximate="tanh", hint="gelu_tanh"))
    run_both(b.build(outs), [_inputs_for(dtype, (7, 33), rng)])


def test_unary_accuracy_over_wide_range():
    x = np.concatenate([np.linspace(-110, 110, 20001), np.linspace(-3, 3, 20001),
                        np.geomspace(1e-38, 1e38, 2001)]).astype(np.float32)
    b = Builder("accuracy")
    p = b.param(TensorType(x.shape, DType.f32), "x")
    outs = [b.op(name, p, hint=name) for name in ["exp", "exp2", "log", "log2", "tanh", "sigmoid", "erf", "gelu"]]
    outs.append(b.op("gelu", p, approximate="tanh"))
    outs.append(b.op("log", b.op("abs", p)))
    run_both(b.build(outs), [x])


@pytest.mark.parametrize("dtype", [DType.f32, DType.bf16, DType.i64, DType.i32, DType.u8, DType.i8, DType.bool])
def test_binary_ops_with_broadcasting(dtype, rng):
    b = Builder("binary")
    x = b.param(TensorType((5, 1, 17), dtype), "x")
    y = b.param(TensorType((3, 17), dtype), "y")
    names = BINARY_ANY + ([] if dtype.is_bool else BINARY_NUMERIC)
    if dtype.is_int:
        names.remove("pow")  # integer pow needs non-negative exponents: tested below
    outs = []
    for name in names:
        if name == "div" and not dtype.is_float:
            outs += [b.op("div", x, y, rounding_mode="floor", hint="floordiv"),
                     b.op("div", x, y, rounding_mode="trunc", hint="truncdiv")]
        else:
            outs.append(b.op(name, x, y, hint=name))
    if dtype.is_float:
        outs += [b.op("atan2", x, y), b.op("div", x, y, rounding_mode="floor"), b.op("div", x, y, rounding_mode="trunc")]
    if dtype.is_int or dtype.is_bool:
        outs += [b.op("bitwise_and", x, y), b.op("bitwise_or", x, y), b.op("bitwise_xor", x, y),
                 b.op("bitwise_not", x)]
    xs, ys = _inputs_for(dtype, (5, 1, 17), np.random.default_rng(1)), _inputs_for(dtype, (3, 17), np.random.default_rng(2))
    if dtype.is_int:
        ys[ys == 0] = 1  # a zero divisor raises (tests/executors/test_zero_division.py)
        ys[0, :4] = [1, -1 if dtype is not DType.u8 else 1, 2, 3]  # division by -1
    run_both(b.build(outs), [xs, ys])


@pytest.mark.parametrize("dtype", [DType.i64, DType.i32, DType.u8])
def test_integer_pow(dtype, rng):
    b = Builder("ipow")
    x = b.param(TensorType((4, 9), dtype), "x")
    e = b.param(TensorType((9,), dtype), "e")
    xs = rng.integers(0 if dtype is DType.u8 else -6, 7, (4, 9)).astype(dtype.numpy)
    run_both(b.build([b.op("pow", x, e)]), [xs, np.arange(9).astype(dtype.numpy)])


def test_where_clamp_and_nan_propagation(rng):
    b = Builder("where")
    c = b.param(TensorType((4, 1), DType.bool), "c")
    x = b.param(TensorType((4, 9), DType.f32), "x")
    y = b.param(TensorType((9,), DType.f32), "y")
    i = b.param(TensorType((4, 9), DType.i32), "i")
    outs = [b.op("where", c, x, y), b.op("clamp", x, min=-0.5, max=0.5), b.op("clamp", x, min=1.0),
            b.op("clamp", x, max=-1.0), b.op("clamp", i, min=-3, max=4), b.op("clamp", i, min=1, max=2),
            b.op("maximum", x, y), b.op("minimum", x, y), b.op("relu", x)]
    xs = special_floats(rng, (4, 9))
    ys = special_floats(rng, (9,))
    ys[0] = np.nan
    run_both(b.build(outs), [rng.random((4, 1)) < 0.5, xs, ys, rng.integers(-9, 9, (4, 9)).astype(np.int32)])


#: (min, max) bounds: NaN (every element NaN), min > max (max wins), signed zeros, infinities
@pytest.mark.parametrize("dtype", [DType.f32, DType.f16])
def test_clamp_nan_from_bound_gives_the_bound_itself(dtype, rng):
    """clamp's ``nan_from_bound`` (eager's clamp_min/clamp_max): a NaN bound fills the result with the bound
    itself, its sign kept (-nan), as an operand (a lifted float) and as an attribute; without it a positive NaN,
    natively and in the interpreter."""
    negative_nan = np.copysign(np.array(np.nan, dtype.numpy), np.array(-1.0, dtype.numpy))
    b = Builder("clamp_nan_from_bound")
    x = b.param(TensorType((5, 13), dtype), "x")
    low = b.param(TensorType((), dtype), "low")
    kept = [b.op("clamp", x, low, lifted=(0,), nan_from_bound=True),
            b.op("clamp", x, max=float(negative_nan), nan_from_bound=True)]
    positive = [b.op("clamp", x, low, lifted=(0,)), b.op("clamp", x, max=float(negative_nan))]
    fn = b.build(kept + positive)
    exe = build_cpu_executable(fn, {"threads": 1})
    xs = _inputs_for(dtype, (5, 13), rng)
    for got in (exe(xs, negative_nan), interpret(fn, [xs, negative_nan])):
        got = [np.asarray(g) for g in got]
        for result in got[:2]:
            assert np.isnan(result).all() and np.signbit(result).all()
        for result in got[2:]:
            assert np.isnan(result).all() and not np.signbit(result).any()


CLAMP_BOUNDS = [(np.nan, 1.0), (-1.0, np.nan), (np.nan, np.nan), (1.0, -1.0), (0.0, -0.0), (-0.0, 0.0),
                (-np.inf, np.inf), (0.1, 0.7), (-0.3, 0.3)]


@pytest.mark.parametrize("dtype", [DType.f32, DType.bf16, DType.f16])
def test_clamp_bounds_as_operands_compute_as_bound_attributes(dtype, rng):
    """clamp's bounds as 0-d operands (the device's lifted floats: one kernel for every value) give the bits of the
    same bounds as attributes, NaN bounds included (a runtime test in the kernel, where an attribute's is made
    when compiling), natively and in the interpreter."""
    b = Builder("clamp_operands")
    x = b.param(TensorType((5, 13), dtype), "x")
    low, high = b.param(TensorType((), dtype), "low"), b.param(TensorType((), dtype), "high")
    outs = [b.op("clamp", x, low, high, lifted=(0, 1)), b.op("clamp", x, low, lifted=(0,)),
            b.op("clamp", x, high, lifted=(1,))]
    fn = b.build(outs)
    exe = build_cpu_executable(fn, {"threads": 1})
    xs = _inputs_for(dtype, (5, 13), rng)
    for bounds in CLAMP_BOUNDS:
        lo, hi = (np.array(v, np.float32) for v in bounds)  # each in x's storage type
        lo, hi = (round_to_bf16(v) if dtype is DType.bf16 else v.astype(xs.dtype) for v in (lo, hi))
        a = Builder("clamp_attributes")
        y = a.param(TensorType((5, 13), dtype), "x")
        attributes = a.build([a.op("clamp", y, min=float(lo), max=float(hi)), a.op("clamp", y, min=float(lo)),
                              a.op("clamp", y, max=float(hi))])
        expected = interpret(attributes, [xs])
        for got in (exe(xs, lo, hi), interpret(fn, [xs, lo, hi])):
            for position, (actual, wanted) in enumerate(zip(got, expected)):
                actual, wanted = np.asarray(actual), np.asarray(wanted)
                assert np.array_equal(np.isnan(actual), np.isnan(wanted)), (bounds, position)
                numbers = ~np.isnan(wanted)
                assert np.array_equal(np.signbit(actual[numbers]), np.signbit(wanted[numbers])), (bounds, position)
                assert np.array_equal(actual[numbers], wanted[numbers]), (bounds, position)
        if np.isnan(lo) or np.isnan(hi):
            assert np.isnan(np.asarray(expected[0])).all()


ALL = [DType.f32, DType.bf16, DType.f16, DType.i64, DType.i32, DType.i16, DType.i8, DType.u8, DType.bool]


@pytest.mark.parametrize("source", ALL)
def test_cast_matrix(source, rng):
    b = Builder("cast")
    x = b.param(TensorType((3, 11), source), "x")
    outs = [b.op("cast", x, dtype=target, hint=str(target)) for target in ALL]
    xs = _inputs_for(source, (3, 11), rng)
    if source.is_float:  # keep float -> int casts defined (no NaN/Inf/out of range: implementation-defined)
        xs = np.where(np.isfinite(xs), np.clip(xs, -100, 100), 1.5).astype(xs.dtype)
        xs.reshape(-1)[:3] = [2.75, -2.75, 0.5]
    run_both(b.build(outs), [xs])


def test_strided_inputs_and_zero_size_and_scalars(rng):
    b = Builder("layouts")
    xt = b.param(TensorType((6, 5), DType.f32, strides=(1, 6)), "xt")  # a transposed input
    e = b.param(TensorType((0, 5), DType.f32), "empty")
    s = b.param(TensorType((), DType.f32), "scalar")
    outs = [b.op("exp", xt), b.op("add", e, s), b.op("mul", s, s), b.op("add", xt, s)]
    x = rng.standard_normal((5, 6)).astype(np.float32).T
    exe, got = run_both(b.build(outs), [x, np.zeros((0, 5), np.float32), np.float32(2.0)])
    assert got[1].shape == (0, 5) and got[2].shape == ()
    # a contiguous array where the type says transposed is re-laid out, not misread
    run_both(b.build(outs), [np.ascontiguousarray(x), np.zeros((0, 5), np.float32), np.float32(2.0)])


@pytest.mark.parametrize("threads", [1, 2])
def test_silu_of_a_nan_is_that_nan(threads):
    # sigmoid(NaN) is the same NaN (its -x is 0 - x: fneg flipped the NaN's sign), so x * sigmoid(x) multiplies a
    # NaN by itself and its bits do not depend on the multiply's operand order (which the register allocator
    # chooses: the quick and the optimized code of silu had given NaNs of opposite signs)
    b = Builder("silu")
    x = b.param(TensorType((4, 256), DType.f32), "x")
    fn = b.build([b.op("mul", x, b.op("sigmoid", x)), b.op("sigmoid", x)])
    nans = np.array([0x7FC00000, 0xFFC00000, 0x7FC12345, 0xFFC54321], np.uint32).view(np.float32)
    xs = np.resize(nans, (4, 256))
    silu, sigmoid = run_both(fn, [xs], threads=threads)[1]
    np.testing.assert_array_equal(silu.view(np.uint32), xs.view(np.uint32))
    np.testing.assert_array_equal(sigmoid.view(np.uint32), xs.view(np.uint32))


def test_vectorized_assembly():
    from neuroncc.codegen.llvm import jit
    from neuroncc.codegen.llvm.views import Layout
    from neuroncc.codegen.llvm.emit import emit_kernel
    from neuroncc.codegen.llvm.schedule import plan_kernel

    b = Builder("vec")
    x = b.param(TensorType((64, 256), DType.f32), "x")
    y = b.op("mul", b.op("gelu", x), b.op("sigmoid", x))
    fn = b.build([y, b.op("sum", y, dims=(1,))])
    plan = plan_kernel(fn, [Layout.of(0, x.type)], [Layout.of(1, v.type) for v in fn.outputs])
    texts, _ = emit_kernel(plan, "vec")
    asm = jit.assembly(texts)
    assert "zmm" in asm or "ymm" in asm
    assert "call" not in asm.split("vec_p0:")[1].split(".Lfunc_end")[0]  # exp/erf inlined, no libm calls


@pytest.mark.parametrize("columns", [8, 3])  # a vector loop and a scalar one (they use different estimates)
def test_true_division_by_zero_and_infinity_is_ieee(columns):
    # The x * (1/y) form must not turn x / +-0 or x / +-inf into NaN (its Newton step computes 0 * inf).
    b = Builder("divide")
    x = b.param(TensorType((4, columns), DType.f32), "x")
    y = b.param(TensorType((4, columns), DType.f32), "y")
    thirty_two = b.op("full", shape=(), dtype=DType.f32, value=32.0)
    two = b.op("full", shape=(), dtype=DType.f32, value=2.0)
    # (32 / y - 2) / sqrt(|y|): a constant numerator, and a numerator computed in the same loop
    chained = b.op("div", b.op("sub", b.op("div", thirty_two, y), two), b.op("sqrt", b.op("abs", y)))
    fn = b.build([b.op("div", x, y), chained])
    xs = np.array([1.5, -2.0, 0.0, -0.0, np.inf, -np.inf, np.nan, 3e38], np.float32)[:columns]
    ys = np.array([0.0, -0.0, np.inf, -np.inf], np.float32)
    xx, yy = (a.astype(np.float32) for a in np.meshgrid(xs, ys))  # every numerator against every special divisor
    _, (got, got_chained) = run_both(fn, [xx, yy])
    with np.errstate(divide="ignore", invalid="ignore"):
        np.testing.assert_array_equal(np.signbit(got), np.signbit(xx / yy))
        np.testing.assert_array_equal(got_chained, (np.float32(32.0) / yy - 2) / np.sqrt(np.abs(yy)))


def test_a_chain_of_many_elementwise_ops_compiles():
    # An unrolled recurrence (the orthogonal polynomials' decompositions) fuses into one kernel whose values
    # depend on each other hundreds deep: code generation must not recurse once per op.
    b = Builder("chain")
    x = b.param(TensorType((3, 5), DType.f32), "x")
    p, q = x, b.op("mul", x, x)
    for _ in range(400):
        p, q = q, b.op("sub", b.op("mul", x, q), p)
    fn = b.build([q])
    run_both(fn, [np.linspace(-1, 1, 15, dtype=np.float32).reshape(3, 5)])


def test_a_complex_value_without_lower_complex_is_a_typed_error():
    """A c64 constant reaching LLVM code generation (a pipeline without lower-complex, e.g. ``neuroncc opt -p
    canonicalize --emit llvm``) is a CodegenError naming the pass, not a KeyError from the type tables."""
    from neuroncc.codegen.llvm.views import Layout
    from neuroncc.codegen.llvm.emit import emit_kernel
    from neuroncc.codegen.llvm.schedule import plan_kernel
    from neuroncc.errors import CodegenError

    b = Builder("complex_full")
    x = b.param(TensorType((3,), DType.c64), "x")
    fn = b.build([b.op("add", x, b.op("full", shape=(3,), dtype=DType.c64, value=2.0))])
    with pytest.raises(CodegenError, match="c64 value reached LLVM code generation.*lower-complex"):
        emit_kernel(plan_kernel(fn, [Layout.of(0, x.type)], [Layout.of(1, fn.outputs[0].type)]), "complex_full")
