"""The text form round-trips: ``parse(print(f)) == f`` and ``print(parse(print(f))) == print(f)``.

Every one-op graph of the op tests is round-tripped there (test_ops_torch.py); this file covers random
multi-op graphs, multi-result ops, kernels with regions, resources, special float values, awkward strings and
hints, and the determinism of printing (same graph -> same text; canonical text ignores names).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from neuroncc.errors import ParseError
from neuroncc.ir import (
    Attrs, Builder, DenseAttr, DType, Function, TensorType, clone_function, collect_resources, interpret, parse,
    print_function, verify,
)

from .support import fuzz_settings, random_array, round_trip

F32 = DType.f32
NUMERIC = (DType.f32, DType.bf16, DType.f16, DType.i64, DType.i32)


# ---- random multi-op graphs ----------------------------------------------------------------------------


def _identity_region(t: TensorType, op: str) -> Function:
    rb = Builder("region")
    a = rb.param(t, "a")
    return rb.build([rb.op(op, a)])


@st.composite
def graphs(draw: st.DrawFn) -> Function:
    """A random, valid graph built from a menu of ops (multi-result ops and kernels included)."""
    b = Builder(draw(st.sampled_from(["main", "g.1", "forward"])))
    values = []
    for i in range(draw(st.integers(1, 3))):
        shape = tuple(draw(st.lists(st.integers(0, 3), max_size=3)))
        values.append(b.param(TensorType(shape, draw(st.sampled_from(NUMERIC + (DType.bool,)))),
                              draw(st.sampled_from([None, "x", "x", "input", "x_1", "0", "weird name"]))))
    for _ in range(draw(st.integers(1, 8))):
        v = draw(st.sampled_from(values))
        t = v.type
        hint = draw(st.sampled_from([None, None, "y", "x", "tmp.1"]))
        step = draw(st.sampled_from(["unary", "binary", "cast", "sum", "reshape", "split", "constant", "kernel",
                                     "full", "where"]))
        if step == "unary":
            values.append(b.op("logical_not" if t.dtype.is_bool else "neg" if t.dtype.is_int else "exp", v, hint=hint))
        elif step == "binary":
            same = [w for w in values if w.type == t]
            values.append(b.op("mul", v, draw(st.sampled_from(same)), hint=hint))
        elif step == "cast":
            values.append(b.op("cast", v, dtype=draw(st.sampled_from(NUMERIC)), hint=hint))
        elif step == "sum" and not t.dtype.is_bool:
            dims = tuple(sorted(draw(st.sets(st.sampled_from(range(t.rank)))))) if t.rank else ()
            values.append(b.op("sum", v, dims=dims, keepdim=draw(st.booleans()), hint=hint))
        elif step == "reshape":
            values.append(b.op("reshape", v, shape=(t.numel,), hint=hint))
        elif step == "split" and t.rank and t.shape[0] >= 1:
            first = draw(st.integers(0, t.shape[0]))
            values.extend(b.op("split", v, dim=0, sizes=(first, t.shape[0] - first), hint=hint))
        elif step == "constant":
            shape = draw(st.sampled_from([(), (3,), (9, 9)]))  # (9, 9) prints as a resource
            dtype = draw(st.sampled_from(NUMERIC + (DType.bool,)))
            rng = np.random.default_rng(draw(st.integers(0, 1000)))
            values.append(b.op("constant", value=DenseAttr(random_array(rng, shape, dtype, specials=True), dtype)))
        elif step == "kernel":
            op = "logical_not" if t.dtype.is_bool else "abs"
            values.append(b.op("kernel", v, name=draw(st.sampled_from(["fused_0", "k\u00fc\"\n"])),
                               regions=[_identity_region(t, op)], hint=hint))
        elif step == "full":
            value = draw(st.sampled_from([0.5, -0.0, math.inf, -math.inf, math.nan, 1e-45, 3]))
            values.append(b.op("full", shape=t.shape, dtype=F32, value=value))
        elif step == "where" and t.dtype.is_bool:
            other = draw(st.sampled_from([w for w in values if w.type.shape == t.shape]))
            values.append(b.op("where", v, other, other))
    outputs = draw(st.lists(st.sampled_from(values), min_size=1, max_size=4))
    return b.build(outputs)


@fuzz_settings(60)
@given(graphs(), st.integers(0, 2**32 - 1))
def test_random_graphs_round_trip_and_run_the_same(fn, seed):
    verify(fn)
    text = round_trip(fn)
    again = parse(text, resources=collect_resources(fn))
    rng = np.random.default_rng(seed)
    inputs = [random_array(rng, p.type.shape, p.type.dtype) for p in fn.params]
    for ours, theirs in zip(interpret(fn, inputs), interpret(again, inputs)):
        np.testing.assert_array_equal(ours, theirs)  # NaN == NaN for array_equal


@fuzz_settings(30)
@given(graphs())
def test_printing_is_deterministic_and_canonical_text_ignores_names(fn):
    copy = clone_function(fn)
    assert print_function(copy) == print_function(fn)
    renamed = clone_function(fn)
    for value in renamed.params:
        value.hint = "renamed"
    for op in renamed.walk():
        for value in op.results:
            value.hint = None
    assert print_function(renamed, canonical=True) == print_function(fn, canonical=True)
    assert hash(renamed) == hash(fn)
    assert "%renamed" not in print_function(renamed, canonical=True)


def _build_twice(make) -> tuple[str, str]:
    return print_function(make()), print_function(make())


def test_the_same_graph_built_twice_prints_the_same():
    def make() -> Function:
        b = Builder("f")
        x = b.param(TensorType((4, 4), F32), "x")
        big = b.op("constant", value=DenseAttr(np.linspace(0, 1, 100, dtype=np.float32).reshape(10, 10)))
        parts = b.op("split", x, dim=0, sizes=(1, 3))
        return b.build([b.op("add", parts[1], parts[1]), big])

    first, second = _build_twice(make)
    assert first == second


def test_canonical_text_differs_when_the_structure_does():
    def make(op: str) -> Function:
        b = Builder("f")
        x = b.param(TensorType((4,), F32), "x")
        return b.build([b.op(op, x)])

    assert print_function(make("exp"), canonical=True) != print_function(make("log"), canonical=True)


# ---- multi-result ops, kernels -------------------------------------------------------------------------


def test_multi_result_ops_round_trip():
    b = Builder("grads")
    x = b.param(TensorType((1, 2, 5), F32), "x")
    w = b.param(TensorType((3, 2, 2), F32), "w")
    g = b.param(TensorType((1, 3, 4), F32), "g")
    gx, gw, gb = b.op("convolution_backward", g, x, w, stride=(1,), padding=(0,), dilation=(1,))
    pieces = b.op("split", x, dim=2, sizes=(2, 0, 3))
    fn = b.build([gx, gw, gb, *pieces])
    text = round_trip(fn)
    assert "%0, %1, %2 = convolution_backward %g, %x, %w" in text
    assert "%3, %4, %5 = split %x" in text


def test_nested_kernels_and_a_kernel_without_results_round_trip():
    inner_b = Builder("inner")
    a = inner_b.param(TensorType((2,), F32), "a")
    inner = inner_b.build([inner_b.op("exp", a)])
    outer_b = Builder("outer")
    p = outer_b.param(TensorType((2,), F32), "p")
    nested = outer_b.op("kernel", p, name="inner", regions=[inner])
    outer = outer_b.build([outer_b.op("add", nested, p)])
    empty_b = Builder("empty")
    empty_b.param(TensorType((2,), F32), "e")
    b = Builder("f")
    x = b.param(TensorType((2,), F32), "x")
    y = b.op("kernel", x, name="outer", target="trn2", regions=[outer])
    b.emit("kernel", [], Attrs(name="nothing"), regions=[Builder("k").build([])])  # no operands, no results
    b.emit("kernel", [x], Attrs(name="sink"), regions=[empty_b.build([])])  # an operand, no results
    fn = b.build([y])
    text = round_trip(fn)
    assert 'kernel %x {name = "outer", target = "trn2"}' in text
    assert text.count("region(") == 4


def test_types_with_strides_round_trip():
    b = Builder("f")
    x = b.param(TensorType((4, 8), F32, strides=(1, 4)), "x")
    e = b.param(TensorType((3, 5), DType.bf16, strides=(0, 1)), "e")
    fn = b.build([b.op("relu", x), e])
    text = round_trip(fn)
    assert "tensor<4x8xf32, strides=[1, 4]>" in text and "tensor<3x5xbf16, strides=[0, 1]>" in text


# ---- resources -----------------------------------------------------------------------------------------


def _with_big_constant(dtype: DType = F32) -> Function:
    b = Builder("f")
    data = np.arange(1000, dtype=np.float32).reshape(10, 100) / 3
    return b.build([b.op("constant", value=DenseAttr(data, dtype))])


@pytest.mark.parametrize("dtype", [F32, DType.bf16, DType.f16, DType.i64, DType.bool])
def test_big_constants_travel_as_resources(dtype):
    fn = _with_big_constant(dtype)
    resources = collect_resources(fn)
    (name,) = resources
    text = round_trip(fn)
    assert f'resource<10x100x{dtype.value}: "{name}">' in text and len(text) < 400
    again = parse(text, resources=resources)
    np.testing.assert_array_equal(again.ops[0].attrs["value"].array, fn.ops[0].attrs["value"].array)
    assert again.ops[0].attrs["value"].digest == fn.ops[0].attrs["value"].digest


def test_missing_or_misshapen_resources_are_parse_errors():
    fn = _with_big_constant()
    text = print_function(fn)
    with pytest.raises(ParseError, match="unknown resource 'c_[0-9a-f]{16}' \\(its data was not supplied\\)"):
        parse(text)
    (name,) = collect_resources(fn)
    with pytest.raises(ParseError, match="has shape \\[1000\\], expected \\[10, 100\\]"):
        parse(text, resources={name: np.zeros(1000, np.float32)})


# ---- special values, strings, hints --------------------------------------------------------------------

SPECIAL_FLOATS = [math.nan, math.inf, -math.inf, -0.0, 0.0, 1e-45, 5e-324, 1e-40, 3.4028234663852886e38, 1e38,
                  -2.5, 0.1, 1 / 3]


def _same_float(mine: float, other: float) -> bool:
    """The same value and sign; NaN only where the original is NaN (``mine == other or isnan(other)`` let a
    finite attribute that came back NaN pass)."""
    return math.copysign(1, mine) == math.copysign(1, other) and (
        mine == other or math.isnan(mine) and math.isnan(other))


def test_a_finite_attribute_that_comes_back_nan_is_not_the_same():
    assert not _same_float(0.1, math.nan) and not _same_float(-2.5, -math.nan)
    assert _same_float(math.nan, math.nan) and _same_float(-0.0, -0.0) and not _same_float(0.0, -0.0)


@pytest.mark.parametrize("value", SPECIAL_FLOATS, ids=repr)
def test_special_float_attributes_round_trip_bit_exactly(value):
    b = Builder("f")
    x = b.param(TensorType((2,), F32), "x")
    filled = b.op("full", shape=(2,), dtype=F32, value=value)
    clamped = b.op("clamp", x, min=value if not math.isnan(value) else None, max=None)
    counted = b.op("iota", length=2, start=value, step=value, dtype=DType.f32)
    fn = b.build([filled, clamped, counted])
    again = parse(round_trip(fn))
    for ours, theirs in zip(fn.ops, again.ops):
        for key in ours.attrs:
            mine, other = ours.attrs[key], theirs.attrs[key]
            if isinstance(mine, float):
                assert _same_float(mine, other), (key, mine, other)


@pytest.mark.parametrize("dtype", [F32, DType.bf16, DType.f16])
def test_special_values_in_dense_constants_round_trip_bit_exactly(dtype):
    values = np.array([np.nan, np.inf, -np.inf, -0.0, 1e-45, 1e-40, 6e-8, 65504, 3.3895e38, 0.1, -1 / 3, 1.0],
                      np.float32)
    attr = DenseAttr(values, dtype)
    b = Builder("f")
    fn = b.build([b.op("constant", value=attr)])
    again = parse(round_trip(fn)).ops[0].attrs["value"]
    assert again.digest == attr.digest  # same dtype, shape and bytes (NaN included)
    assert np.signbit(again.array[3])


@pytest.mark.parametrize("dtype", [DType.i64, DType.i32, DType.i16, DType.i8, DType.u8, DType.bool])
def test_extreme_integers_and_bools_in_dense_constants_round_trip(dtype):
    info = np.iinfo(dtype.numpy) if not dtype.is_bool else None
    values = np.array([info.min, info.max, 0, 1], dtype.numpy) if info else np.array([True, False, True])
    b = Builder("f")
    fn = b.build([b.op("constant", value=DenseAttr(values, dtype))])
    again = parse(round_trip(fn)).ops[0].attrs["value"]
    np.testing.assert_array_equal(again.array, values)


STRINGS = ["", "plain", "ünïcödé", 'quote " and backslash \\', "newline\nand\ttab", "nul \x00 byte",
           "emoji \U0001d11e", "lone surrogate \ud800", "// not a comment", "%0 = relu", "}{"]


@pytest.mark.parametrize("text", STRINGS, ids=repr)
def test_strings_in_attributes_and_metadata_round_trip(text):
    b = Builder("f", metadata={"note": text, "list": (text, 1, 2.5, None, True, DType.bf16)})
    x = b.param(TensorType((2,), F32), "x")
    y = b.op("kernel", x, name=text, regions=[_identity_region(x.type, "relu")])
    fn = b.build([y])
    printed = round_trip(fn)
    assert "\n" not in printed.split("\n")[0]  # the header (metadata included) is one line
    again = parse(printed)
    assert again.ops[0].attrs["name"] == text and again.metadata["note"] == text


HINTS = ["x", "x", "x_1", "0", "1abc", "with space", "ünï", "", "%", "a.b", "return", "func", "tensor", None]


def test_colliding_and_non_identifier_hints_get_unique_names():
    b = Builder("f")
    params = [b.param(TensorType((2,), F32), hint) for hint in HINTS]
    results = [b.op("relu", p, hint=hint) for p, hint in zip(params, HINTS)]
    fn = b.build(results)
    text = round_trip(fn)
    header = text.split("\n")[0]
    names = [part.split(":")[0].strip() for part in header[header.index("(") + 1:header.index(")")].split(",")]
    assert len(set(names)) == len(names) == len(HINTS)
    assert names[:3] == ["%x", "%x_1", "%x_1_1"]
    assert "%return" in names and "%a.b" in names


def test_function_equality_is_printed_text_equality():
    def make(hint: str) -> Function:
        b = Builder("f")
        x = b.param(TensorType((2,), F32), hint)
        return b.build([b.op("relu", x)])

    assert make("x") == make("x") and hash(make("x")) == hash(make("x"))
    assert make("x") != make("y")  # hints show in the text ...
    assert hash(make("x")) == hash(make("y"))  # ... but not in the canonical text that is hashed
