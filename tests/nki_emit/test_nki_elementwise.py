"""Elementwise ops and reductions through the nki pipeline, emitted and simulated, against the interpreter."""

from __future__ import annotations

import pytest

from emit_helpers import BF16, BOOL, F32, I32, I64, check_against_interpreter, graph

POSITIVE_ONLY = {"log", "log2", "sqrt", "rsqrt", "log1p"}
UNARY = ["neg", "abs", "sign", "relu", "exp", "exp2", "expm1", "log", "log2", "log1p", "sqrt", "rsqrt",
         "reciprocal", "sin", "cos", "tan", "tanh", "sigmoid", "erf", "gelu", "floor", "ceil", "round", "trunc",
         "isnan", "isinf", "logical_not"]


@pytest.mark.parametrize("name", UNARY)
def test_unary(name, rng):
    b, (x,) = graph(name, ((37, 20), F32))
    check_against_interpreter(b.build([b.op(name, x)]), rng, positive=name in POSITIVE_ONLY)


def test_gelu_tanh_and_bf16_activations(rng):
    b, (x, y) = graph("act", ((33, 16), F32), ((33, 16), BF16))
    check_against_interpreter(b.build([b.op("gelu", x, approximate="tanh"), b.op("sigmoid", y)]), rng)


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "maximum", "minimum", "pow", "eq", "ne", "lt", "le",
                                  "gt", "ge", "remainder", "fmod"])
def test_binary_with_a_broadcast_row(name, rng):
    b, (x, y) = graph(name, ((30, 20), F32), ((20,), F32))
    check_against_interpreter(b.build([b.op(name, x, y)]), rng, positive=name == "pow")


@pytest.mark.parametrize("mode", ["floor", "trunc"])
def test_rounding_division_by_a_column(mode, rng):
    b, (x, y) = graph("div", ((30, 20), F32), ((30, 1), F32))
    check_against_interpreter(b.build([b.op("div", x, y, rounding_mode=mode)]), rng)


@pytest.mark.parametrize("name", ["bitwise_and", "bitwise_or", "bitwise_xor", "logical_and", "logical_or",
                                  "logical_xor", "add", "mul", "maximum", "sub"])
def test_integer_binary(name, rng):
    b, (x, y) = graph(name, ((12, 9), I64), ((12, 9), I64))
    check_against_interpreter(b.build([b.op(name, x, y)]), rng)


def test_where_clamp_and_numbers(rng):
    b, (c, x, y) = graph("select", ((16, 8), BOOL), ((16, 8), F32), ((8,), F32))
    inf = b.op("full", shape=[], dtype=F32, value=float("-inf"))
    masked = b.op("where", c, inf, x)
    clamped = b.op("clamp", y, min=-0.5, max=0.5)
    scaled = b.op("mul", b.op("sub", b.op("full", shape=[], dtype=F32, value=1.0), x), clamped)
    check_against_interpreter(b.build([b.op("where", c, x, y), masked, scaled]), rng)


@pytest.mark.parametrize("source, target", [(F32, I64), (F32, BOOL), (I64, F32), (BOOL, F32), (F32, BF16),
                                            (I64, I32), (BF16, F32)])
def test_cast(source, target, rng):
    b, (x,) = graph("cast", ((16, 8), source))
    check_against_interpreter(b.build([b.op("cast", x, dtype=target)]), rng)


@pytest.mark.parametrize("name", ["sum", "mean", "prod", "amax", "amin", "var"])
@pytest.mark.parametrize("dims, keepdim", [((2,), True), ((0,), False), ((0, 1), False), ((1, 2), True),
                                           ((1,), False), ((0, 1, 2), False)])
def test_reductions_over_any_dims(name, dims, keepdim, rng):
    b, (x,) = graph(name, ((6, 5, 7), F32))
    extra = {"correction": 1.0} if name == "var" else {}
    check_against_interpreter(b.build([b.op(name, x, dims=list(dims), keepdim=keepdim, **extra)]), rng)


@pytest.mark.parametrize("name", ["any", "all"])
def test_boolean_reductions(name, rng):
    b, (x, y) = graph(name, ((6, 5), BOOL), ((6, 5), F32))
    check_against_interpreter(b.build([b.op(name, x, dims=[1], keepdim=False), b.op(name, y, dims=[0])]), rng)


def test_scalars_and_zero_dim_values(rng):
    b, (x, s) = graph("scalars", ((5, 4), F32), ((), F32))
    total = b.op("sum", x, dims=[0, 1])
    check_against_interpreter(b.build([b.op("exp", s), b.op("mul", x, s), b.op("div", total, s)]), rng)


def test_partial_row_blocks_and_wide_rows(rng):
    """300 rows: three partition blocks, the last one partial; 3000 columns."""
    b, (x, w) = graph("rows", ((300, 3000), F32), ((3000,), F32))
    centered = b.op("sub", x, b.op("mean", x, dims=[1], keepdim=True))
    check_against_interpreter(b.build([b.op("mul", centered, w)]), rng)


def test_bf16_softmax(rng):
    b, (x,) = graph("softmax", ((64, 96), BF16))
    shifted = b.op("sub", x, b.op("amax", x, dims=[1], keepdim=True))
    exps = b.op("exp", shifted)
    check_against_interpreter(b.build([b.op("div", exps, b.op("sum", exps, dims=[1], keepdim=True))]), rng)
