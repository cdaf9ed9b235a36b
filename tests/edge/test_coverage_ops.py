"""Ops added for OpInfo coverage (neuroncc/frontend/lowering/coverage.py), at their hard points: poles, tails,
infinities, NaN, huge arguments, integer inputs. Accuracy is checked in relative terms (rtol only), which is
stricter than the OpInfo sweep's tolerances for values near zero."""

import math

import pytest
import torch

from .helpers import assert_same

INF, NAN = math.inf, math.nan

UNARY = {
    "acos": (torch.acos, [-1.0, -0.999999, -0.5, 0.0, 1e-7, 0.5, 0.999999, 1.0, 1.5, NAN]),
    "asin": (torch.asin, [-1.0, -0.5, -1e-30, 0.0, 1e-7, 0.999999, 1.0, -1.5, NAN]),
    "acosh": (torch.acosh, [1.0, 1.0 + 1e-6, 1.5, 10.0, 1e10, 3e38, INF, 0.5, NAN]),
    "asinh": (torch.asinh, [-3e38, -1e20, -2.0, -1e-20, 0.0, 1e-7, 0.5, 3.0, 1e19, INF, -INF, NAN]),
    "atanh": (torch.atanh, [-1.0, -0.999999, -1e-8, 0.0, 1e-8, 0.5, 0.999999, 1.0, 2.0, NAN]),
    "sinh": (torch.sinh, [-89.0, -20.0, -1.0, -1e-6, 0.0, 1e-6, 0.999, 1.001, 88.5, 89.3, INF, NAN]),
    "cosh": (torch.cosh, [-89.3, -20.0, -1e-6, 0.0, 0.5, 88.0, 89.0, INF, -INF, NAN]),
    "log10": (torch.log10, [1e-38, 1e-3, 1.0, 10.0, 1000.0, 3e38, 0.0, -1.0, INF, NAN]),
    "angle": (torch.angle, [-2.0, -0.0, 0.0, 3.0, -INF, INF, NAN]),
    "erfc": (torch.erfc, [-INF, -5.0, -1.0, 0.0, 1e-6, 0.5, 2.0, 5.0, 9.0, 10.0, 12.0, INF, NAN]),
    "erfcx": (torch.special.erfcx, [-5.0, -1.0, 0.0, 0.5, 3.0, 30.0, 1e5, INF, NAN]),
    "log_ndtr": (torch.special.log_ndtr, [-INF, -1e4, -40.0, -5.0, -0.5, 0.0, 1.0, 6.0, 12.0, INF, NAN]),
    "round_decimals_2": (lambda x: torch.round(x, decimals=2), [1.005, 2.675, -3.14159, 0.125, 1e30, NAN]),
    "round_decimals_neg1": (lambda x: torch.round(x, decimals=-1), [15.0, 25.0, -35.0, 44.9, INF]),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_at_hard_points(name, target):
    fn, values = UNARY[name]
    # atol only forgives float32 subnormals (erfc(10) = 2e-45 is one subnormal step from 0)
    assert_same(fn, torch.tensor(values, dtype=torch.float32), target=target, rtol=2e-6, atol=1e-44)


@pytest.mark.parametrize("name", ["acos", "asinh", "erfc", "log10", "sinh"])
def test_unary_in_bf16_and_on_integers(name, target):
    fn, _ = UNARY[name]
    assert_same(fn, torch.linspace(-0.9, 0.9, 12).to(torch.bfloat16) + 1.5 * (name == "log10"), target=target,
                rtol=1e-2, atol=0.0)
    assert_same(fn, torch.tensor([1, 2, 3]) if name != "acos" else torch.tensor([-1, 0, 1]), target=target,
                rtol=2e-6, atol=0.0)


BINARY = {
    "fmax": torch.fmax,
    "fmin": torch.fmin,
    "hypot": torch.hypot,
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_nan_and_inf_aware_binary(name, target):
    a = torch.tensor([1.0, NAN, NAN, -2.0, INF, 3e38, 0.0, -INF, 1e-30])
    b = torch.tensor([NAN, 2.0, NAN, 5.0, NAN, 3e38, 0.0, 4.0, 1e-30])
    assert_same(BINARY[name], a, b, target=target, rtol=2e-6, atol=0.0)


def test_fmax_on_integers(target):
    assert_same(torch.fmax, torch.tensor([1, -5, 7]), torch.tensor([3, -6, 7]), target=target)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cumsum_and_cumprod(dim, target):
    x = torch.randn(4, 5)
    assert_same(lambda t: (torch.cumsum(t, dim), torch.cumprod(t, dim)), x, target=target, rtol=1e-5, atol=1e-6)


def test_cumsum_of_integers_and_bools_is_int64(target):
    assert_same(lambda i, m: (torch.cumsum(i, 0), torch.cumsum(m, 1), torch.cumsum(i, 1, dtype=torch.float32)),
                torch.randint(-5, 5, (3, 4)), torch.rand(3, 4) > 0.5, target=target)


def test_cumsum_gradient():
    from .helpers import assert_same_grads

    assert_same_grads(lambda x: torch.cumsum(x * x, 1), torch.randn(3, 6))


def test_long_cumsum_is_refused_not_quadratic():
    from .helpers import compile_neuron
    from neuroncc.errors import UnsupportedOpError

    with pytest.raises(Exception) as caught:
        compile_neuron(lambda x: torch.cumsum(x, 0))(torch.randn(5000))
    cause = caught.value
    while cause is not None and not isinstance(cause, UnsupportedOpError):
        cause = getattr(cause, "inner_exception", None) or cause.__cause__
    assert cause is not None and "cumsum" in str(cause)


@pytest.mark.parametrize("reduce", ["sum", "mean"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(reduce, include_self, target):
    index = torch.tensor([[0, 1, 2, 0, 0], [2, 0, 0, 1, 2]])
    assert_same(lambda s, i, x: s.scatter_reduce(0, i, x, reduce, include_self=include_self),
                torch.randn(3, 5), index, torch.randn(2, 5), target=target, rtol=1e-5, atol=1e-6)


def test_addbmm_ignores_input_when_beta_is_zero(target):
    nan_input = torch.full((3, 4), NAN)
    assert_same(lambda a, b1, b2: (torch.addbmm(a, b1, b2, beta=0), torch.addbmm(a.nan_to_num(), b1, b2, alpha=2)),
                nan_input, torch.randn(5, 3, 2), torch.randn(5, 2, 4), target=target, rtol=1e-5, atol=1e-5)


def test_data_dependent_shapes_are_refused():
    # combinations() is written with masked_select: its gradient needs a value-dependent size in AOTAutograd,
    # a refusal, not a crash. (take() was the example here until it got a lowering without that guard.)
    from neuroncc.testing.opinfo import SweepConfig, float32_opinfos, op_key, run_sample, samples_for

    op = next(o for o in float32_opinfos() if op_key(o) == "combinations")
    sample = list(samples_for(op, "bwd", seed=0, limit=1))[0]
    letter, note = run_sample(op, sample, "bwd", 0, SweepConfig(baseline=None))
    assert letter == "U" and "depend on tensor values" in note, note
