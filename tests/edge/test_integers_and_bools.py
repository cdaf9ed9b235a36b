"""int64 and bool tensors: exact integer arithmetic, promotion, bool reductions and masks."""

import pytest
import torch

from .helpers import assert_both_raise, assert_same


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


NKI_INT32 = pytest.mark.xfail(strict=True, reason="known bug: nki-sim narrows int64 to int32 (codegen/nki/source.py) "
                               "and returns wrapped values for int64 data outside int32's range, silently")


def test_int64_beyond_float_precision(target, request):
    if target == "nki-sim":
        request.node.add_marker(NKI_INT32)
    # 2**60 + small: exact in int64, rounded if anything goes through float32/float64.
    big = torch.tensor([2**60 + 1, -(2**60) - 3, 2**53 + 1])
    assert_same(lambda x: (x + 1, x * 2, x // 3, x.sum()), big, target=target)


def test_int64_overflow_wraps_like_eager(target, request):
    if target == "nki-sim":
        request.node.add_marker(NKI_INT32)
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


@pytest.mark.xfail(strict=True, reason="known gap: the IR defines no run-time error for integer division by zero; "
                   "eager raises ZeroDivisionError, neuroncc returns 0 (see docs/reliability.md)")
@pytest.mark.parametrize("op", ["floor_divide", "remainder"])
def test_integer_division_by_zero_raises_like_eager(op, target):
    fn = {"floor_divide": lambda x, y: x // y, "remainder": lambda x, y: x % y}[op]
    assert_both_raise(fn, torch.tensor([5, 3]), torch.tensor([0, 2]), target=target)
