"""The reference interpreter: bf16/f16 storage and rounding semantics, input checking, typed run-time errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from neuroncc.ir import Attrs, Builder, DType, Function, InterpreterError, Op, TensorType, Value, interpret
from neuroncc.ir.dtypes import round_to_bf16

from .support import fuzz_settings

F32, BF16, F16 = DType.f32, DType.bf16, DType.f16

# ---- bf16 rounding, bit for bit against PyTorch --------------------------------------------------------

SPECIAL_BITS = np.array([
    0x00000000, 0x80000000,  # +-0
    0x7F800000, 0xFF800000,  # +-inf
    0x00000001, 0x807FFFFF, 0x00008000, 0x00018000,  # subnormals, including ties at the bf16 boundary
    0x3F808000, 0x3F818000, 0xBF808000, 0xBF818000,  # exact ties: round to even (down, up)
    0x3F807FFF, 0x3F808001,  # just below / above a tie
    0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F7FFF, 0x7F7F8000,  # near the largest finite value (overflow rounds to inf)
    0x3F800000, 0x40490FDB, 0x3DCCCCCD,  # 1, pi, 0.1
], dtype=np.uint32)
NAN_BITS = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0x7FBFFFFF], dtype=np.uint32)


def _ours(bits: np.ndarray) -> np.ndarray:
    rounded = round_to_bf16(bits.view(np.float32))
    assert not (rounded.view(np.uint32) & 0xFFFF).any(), "bf16 storage must leave the low 16 bits zero"
    return (rounded.view(np.uint32) >> 16).astype(np.uint16)


def _torch_vectorized(bits: np.ndarray) -> np.ndarray:
    return torch.from_numpy(bits.view(np.float32).copy()).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


def _torch_scalar(bits: np.ndarray) -> np.ndarray:
    """c10::BFloat16(float), one value at a time (PyTorch's scalar conversion path)."""
    return np.array([torch.tensor(float(v), dtype=torch.bfloat16).view(torch.int16).item() & 0xFFFF
                     for v in bits.view(np.float32)], dtype=np.uint16)


def test_round_to_bf16_matches_torch_on_special_values():
    expected = _torch_vectorized(SPECIAL_BITS)
    np.testing.assert_array_equal(_ours(SPECIAL_BITS), expected)
    np.testing.assert_array_equal(_torch_scalar(SPECIAL_BITS), expected)  # both torch paths agree here


def test_round_to_bf16_keeps_nan_a_nan():
    # Signalling NaNs with a payload only in the low bits (0x7F800001) would round to inf if rounded as
    # numbers. PyTorch itself gives 0xFFFF (tensor conversion) or 0x7FC0 (scalar conversion) for every NaN, so
    # only NaN-ness is specified; the reference keeps the sign and sets the quiet bit.
    def as_float(bf16_bits: np.ndarray) -> np.ndarray:
        return torch.from_numpy(bf16_bits.view(np.int16)).view(torch.bfloat16).float().numpy()

    ours = _ours(NAN_BITS)
    assert np.isnan(as_float(ours)).all() and np.isnan(as_float(_torch_vectorized(NAN_BITS))).all()
    np.testing.assert_array_equal(ours >> 15, NAN_BITS >> 31)


@fuzz_settings(20)
@given(st.integers(0, 2**32 - 1))
def test_round_to_bf16_matches_torch_on_random_bit_patterns(seed):
    bits = np.random.default_rng(seed).integers(0, 2**32, size=4096, dtype=np.uint64).astype(np.uint32)
    bits = bits[~np.isnan(bits.view(np.float32))]
    np.testing.assert_array_equal(_ours(bits), _torch_vectorized(bits))


def test_round_to_bf16_matches_torch_scalar_conversion_on_random_values():
    bits = np.random.default_rng(1).integers(0, 2**32, size=300, dtype=np.uint64).astype(np.uint32)
    bits = bits[~np.isnan(bits.view(np.float32))]
    np.testing.assert_array_equal(_ours(bits), _torch_scalar(bits))


# ---- bf16 and f16 arithmetic ---------------------------------------------------------------------------


def _graph(build, *types: TensorType) -> Function:
    b = Builder()
    params = [b.param(t) for t in types]
    return b.build(list(np.atleast_1d(build(b, *params))))


def _bf16(values: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(values).to(torch.bfloat16)


@pytest.mark.parametrize("op, torch_op", [("add", torch.add), ("sub", torch.sub), ("mul", torch.mul),
                                          ("div", torch.div), ("maximum", torch.maximum)])
def test_bf16_binary_ops_round_once_like_torch_bit_for_bit(op, torch_op):
    rng = np.random.default_rng(0)
    a, b = (round_to_bf16((rng.standard_normal(2000) * 10 ** rng.uniform(-3, 3, 2000)).astype(np.float32))
            for _ in range(2))
    t = TensorType((2000,), BF16)
    (out,) = interpret(_graph(lambda bld, x, y: bld.op(op, x, y), t, t), [a, b])
    expected = torch_op(_bf16(a), _bf16(b)).float().numpy()
    np.testing.assert_array_equal(out.view(np.uint32), expected.view(np.uint32))


def test_bf16_chains_round_after_every_op_like_eager_torch():
    rng = np.random.default_rng(1)
    a, b, c = (round_to_bf16(rng.standard_normal(1000).astype(np.float32)) for _ in range(3))
    t = TensorType((1000,), BF16)
    fn = _graph(lambda bld, x, y, z: bld.op("mul", bld.op("add", x, y), bld.op("exp", z)), t, t, t)
    (out,) = interpret(fn, [a, b, c])
    expected = ((_bf16(a) + _bf16(b)) * torch.exp(_bf16(c))).float().numpy()
    np.testing.assert_array_equal(out, expected)
    assert out.dtype == np.float32


def test_f16_reductions_accumulate_in_f32_like_torch():
    # 60000 + 60000 overflows f16 (max 65504); PyTorch accumulates f16 in f32, and so does the reference
    x = np.array([60000, 60000, -60000, -60000, 1], np.float16)
    t = TensorType((5,), F16)
    for op in ("sum", "mean"):
        (out,) = interpret(_graph(lambda bld, v: bld.op(op, v, dims=(0,)), t), [x])
        expected = getattr(torch, op)(torch.from_numpy(x)).numpy()
        assert out.dtype == np.float16 and out == expected and np.isfinite(out)


def test_f16_results_are_rounded_to_f16_after_each_op():
    x = np.array([300.0, 0.1], np.float16)
    t = TensorType((2,), F16)
    fn = _graph(lambda bld, v: bld.op("div", bld.op("mul", v, v), v), t)  # 300*300 overflows f16: inf / 300
    (out,) = interpret(fn, [x])
    expected = (torch.from_numpy(x) * torch.from_numpy(x)) / torch.from_numpy(x)
    np.testing.assert_array_equal(out, expected.numpy())
    assert np.isinf(out[0]) and out.dtype == np.float16


def test_bf16_inputs_are_rounded_on_the_way_in():
    (out,) = interpret(_graph(lambda bld, v: bld.op("copy", v), TensorType((2,), BF16)),
                       [np.array([1.00390625, 0.1], np.float64)])
    np.testing.assert_array_equal(out, _bf16(np.array([1.00390625, 0.1], np.float32)).float().numpy())


# ---- inputs, outputs, run-time errors ------------------------------------------------------------------


def test_input_count_and_shape_are_checked():
    fn = _graph(lambda bld, x, y: bld.op("add", x, y), TensorType((2, 3), F32), TensorType((3,), F32))
    with pytest.raises(InterpreterError, match="takes 2 inputs, got 1"):
        interpret(fn, [np.zeros((2, 3))])
    with pytest.raises(InterpreterError, match=r"input #1 has shape \[2\], the graph expects \[3\]"):
        interpret(fn, [np.zeros((2, 3)), np.zeros(2)])
    with pytest.raises(InterpreterError, match=r"input #0 has shape \[\], the graph expects \[2, 3\]"):
        interpret(fn, [1.0, np.zeros(3)])


def test_inputs_are_converted_and_outputs_are_fresh_arrays():
    b = Builder()
    x = b.param(TensorType((3,), F32))
    fn = b.build([x, b.op("relu", x)])
    given_input = [1, -2, 3]  # a list of Python ints
    passthrough, relu = interpret(fn, [given_input])
    assert passthrough.dtype == relu.dtype == np.float32
    passthrough[0] = 99
    assert given_input[0] == 1 and relu[0] == 1 and passthrough.flags.writeable


INDEX_CASES = [
    ("gather", [(np.zeros((2, 3), np.float32), F32), (np.array([[0, 2, 5]]), DType.i64)], {"dim": 1}),
    ("index_select", [(np.zeros((2, 3), np.float32), F32), (np.array([2]), DType.i32)], {"dim": 0}),
    ("index", [(np.zeros((2, 3), np.float32), F32), (np.array([-3]), DType.i64)], {"dims": (0,)}),
    ("embedding", [(np.zeros((2, 3), np.float32), F32), (np.array([[1, 2]]), DType.i64)], {}),
    ("scatter", [(np.zeros((2, 3), np.float32), F32), (np.array([[3]]), DType.i64),
                 (np.ones((1, 1), np.float32), F32)], {"dim": 1}),
    ("index_put", [(np.zeros((2, 3), np.float32), F32), (np.ones(1, np.float32), F32), (np.array([7]), DType.i64)],
     {"dims": (1,), "accumulate": True}),
]


@pytest.mark.parametrize("name, operands, attrs", INDEX_CASES, ids=[c[0] for c in INDEX_CASES])
def test_an_index_out_of_range_is_a_typed_error(name, operands, attrs):
    b = Builder()
    params = [b.param(TensorType(a.shape, dtype)) for a, dtype in operands]
    fn = b.build(list(b.emit(name, params, Attrs(attrs)).results))
    with pytest.raises(InterpreterError, match=f"op '{name}': index out of range"):
        interpret(fn, [a for a, _ in operands])


def test_an_op_producing_the_wrong_number_of_results_is_an_error():
    # A hand-assembled split claiming one result (the verifier would refuse it; the interpreter must not
    # silently drop the second piece).
    x = Value(TensorType((4,), F32))
    bogus = Op("split", (x,), (Value(TensorType((2,), F32)),), Attrs(dim=0, sizes=(2, 2)))
    with pytest.raises(InterpreterError, match="op 'split' produced 2 results, its type says 1"):
        interpret(Function("f", (x,), (bogus,), bogus.results), [np.zeros(4)])
