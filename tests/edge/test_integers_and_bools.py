"""int64 and bool tensors: exact integer arithmetic, promotion, bool reductions and masks."""

import pytest
import torch

from .helpers import assert_both_raise, assert_same, compile_neuron


def _ints():
    return torch.tensor([[7, -3, 0, 12], [-8, 5, 2, -1], [3, 3, -6, 9]])


def _bools():
    return torch.tensor([[True, False, True, True], [False, False, True, False], [True, True, True, True]])


INT_PROGRAMS = {
    "arith": lambda x: x * 3 - x + 7,
    "floor_divide": lambda x: x // 4,
    "trunc_divide": lambda x: torch.div(x, 4, rounding_mode="trunc"),
    "remainder": lambda x: x % 5,
    "true_divide_promotes": lambda x: x / 2,
    "float_promotion": lambda x: x + 0.5,
    "sum_keeps_int64": lambda x: x.sum(1),
    "amax_argmax": lambda x: (x.amax(0), x.argmax(1)),
    "comparisons": lambda x: (x > 0) & (x < 8),
    "abs_neg": lambda x: (torch.abs(x), -x),
    "matmul": lambda x: x @ x.t(),
    "bitwise": lambda x: (x & 6, x | 1, x ^ 3),
    "pow": lambda x: x.abs() ** 2,
    "to_float_and_back": lambda x: (x.float() * 1.5).to(torch.int64),
    "where": lambda x: torch.where(x > 0, x, 0),
}


@pytest.mark.parametrize("name", sorted(INT_PROGRAMS))
def test_int64(name, target):
    assert_same(INT_PROGRAMS[name], _ints(), target=target)


def test_int64_beyond_float_precision(target):
    # 2**60 + small: exact in int64, rounded if anything goes through float32/float64.
    big = torch.tensor([2**60 + 1, -(2**60) - 3, 2**53 + 1])
    assert_same(lambda x: (x + 1, x * 2, x // 3, x.sum()), big, target=target)


def test_int64_overflow_wraps_like_eager(target):
    assert_same(lambda x: x * 4, torch.tensor([2**62, -(2**62) - 1]), target=target)


BOOL_PROGRAMS = {
    "logical": lambda m: (m & m.flip(0), m | ~m, m ^ m.flip(1)),
    "sum_of_bools_is_int64": lambda m: m.sum(1),
    "any_all": lambda m: (m.any(1), m.all(0), m.all()),
    "mask_arith": lambda m: m.float() * 2 - 1,
    "masked_fill": lambda m: torch.ones(3, 4).masked_fill(m, -1.0),
    "bool_plus_bool": lambda m: m + m,
    "eq": lambda m: m == m.flip(0),
}


@pytest.mark.parametrize("name", sorted(BOOL_PROGRAMS))
def test_bool(name, target):
    assert_same(BOOL_PROGRAMS[name], _bools(), target=target)


def test_mean_of_integers_raises_like_eager(target):
    assert_both_raise(lambda x: x.mean(), _ints(), target=target)


INT_DIVISIONS = {
    "floor_divide": lambda x, y: x // y,
    "remainder": lambda x, y: x % y,
    "fmod": torch.fmod,
    "div_trunc": lambda x, y: torch.div(x, y, rounding_mode="trunc"),
    "div_floor": lambda x, y: torch.div(x, y, rounding_mode="floor"),
    "scalar_divisor": lambda x, y: x // 0,
}


@pytest.mark.parametrize("op", sorted(INT_DIVISIONS))
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8])
def test_integer_division_by_zero_raises_like_eager(op, dtype, target):
    x, y = torch.tensor([5, 3], dtype=dtype), torch.tensor([0, 2], dtype=dtype)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        INT_DIVISIONS[op](x, y)
    with pytest.raises(ZeroDivisionError, match="integer division by zero") as raised:
        compile_neuron(INT_DIVISIONS[op], target=target)(x, y)
    assert isinstance(raised.value, RuntimeError)  # as eager's is


def test_integer_true_division_by_zero_is_ieee_like_eager(target):
    # true division promotes integers to float: inf and NaN, no error, as eager
    assert_same(lambda x, y: (x / y, torch.div(x, y)), torch.tensor([5, 0, -3]), torch.tensor([0, 0, 0]),
                target=target)


def test_float_division_by_zero_keeps_ieee(target):
    x, y = torch.tensor([5.0, 0.0, -3.0, 2.0]), torch.tensor([0.0, 0.0, 0.0, -0.0])
    assert_same(lambda x, y: (x / y, x // y, x % y, torch.fmod(x, y)), x, y, target=target)


def test_integer_division_without_zero_divisors_is_exact(target):
    x = torch.tensor([[7, -7, 0, 2**40 + 3], [-(2**62), 9, -1, 5]])
    y = torch.tensor([[2, -2, 3, -7], [-1, 4, 5, 1]])
    assert_same(lambda x, y: (x // y, x % y, torch.fmod(x, y), torch.div(x, y, rounding_mode="trunc")), x, y,
                target=target)
