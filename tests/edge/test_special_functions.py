"""Special functions (neuroncc/frontend/lowering/special_gamma.py, special_bessel.py, special_polynomials.py) against
eager at their hard points: poles, branch boundaries of ATen's piecewise algorithms, tails, huge arguments,
infinities and NaN. Each family compiles as one function per target (one kernel), to keep the tests fast."""

import math

import pytest
import torch

from .helpers import assert_same, assert_same_grads, compile_neuron

INF, NAN = math.inf, math.nan
S = torch.special


def _gamma_family(x):
    return (torch.lgamma(x), torch.digamma(x), torch.polygamma(1, x), torch.polygamma(2, x),
            torch.polygamma(3, x), torch.mvlgamma(x.abs() + 2.5, 3))


# Points: poles and near-poles, the recurrence/asymptotic switch of digamma (10), lgamma's roots (1, 2),
# negative arguments (reflection), tiny and huge magnitudes, lgamma's overflow (4e36), inf and NaN.
# Not here: trigamma at exact non-positive integers, where eager returns pi^2 / sinf(pi * x)^2 of a rounded
# pi * x (a large finite number) and neuroncc the limit +inf (see test_documented_differences).
GAMMA_POINTS = [-8.5, -4.49, -2.5, -1.5, -0.5, -1e-3, 1e-30, 1e-6, 0.25, 1.0, 1.4616321, 2.0, 3.7, 9.99, 10.0,
                10.01, 30.0, 1e3, 1e6, 1e17, 1e30, 5e36, INF, NAN]


def test_gamma_family_at_hard_points(target):
    x = torch.tensor(GAMMA_POINTS)
    assert_same(_gamma_family, x, target=target, rtol=1e-5, atol=2e-6)


def test_lgamma_and_digamma_at_their_poles(target):
    # lgamma: +inf at 0, -0 and every non-positive integer (even past 2^23, where all floats are integers);
    # digamma: -inf at +0, +inf at -0, NaN at negative integers and -inf.
    x = torch.tensor([0.0, -0.0, -1.0, -2.0, -7.0, -1e30, -3e38, -INF, -2.9999998, -3.0000002])
    assert_same(lambda t: (torch.lgamma(t), torch.digamma(t)), x, target=target, rtol=1e-5, atol=1e-6)


def test_hurwitz_zeta(target):
    # q > 0 (nine direct terms), q <= 0 with integer x (the direct sum runs longer; odd x cancels), poles at
    # non-positive integer q, NaN for x < 1 or non-integer x with q < 0, and inf at x = 1.
    x = torch.tensor([2.0, 3.0, 4.5, 8.0, 50.0, 3.0, 5.0, 4.0, 2.5, 0.5, 1.0, 2.0, 3.0, 9.0])
    q = torch.tensor([0.5, 1e-3, 7.0, 2.0, 1.5, -2.5, -4.5, -8.7, -1.5, 2.0, 2.0, -3.0, 9.5, 1e4])
    assert_same(S.zeta, x, q, target=target, rtol=2e-5, atol=1e-6)


def test_erfinv_and_ndtri(target):
    # erfinv: the central/tail switch at 0.7, +-1, outside [-1, 1]; ndtri: both switches (exp(-2), x = 8), 0, 1.
    y = torch.tensor([-1.0, -0.99999994, -0.9, -0.7, -0.69999, 0.0, 1e-30, 0.3, 0.70001, 0.999, 1.0, 1.5, NAN])
    p = torch.tensor([0.0, 1e-38, 1e-20, 1e-10, 0.1353352, 0.1353353, 0.5, 0.8646647, 0.99, 0.99999994, 1.0,
                      -0.5, 2.0, NAN])
    assert_same(lambda a, b: (torch.erfinv(a), S.ndtri(b)), y, p, target=target, rtol=1e-5, atol=1e-6)


def _bessel_family(x):
    return (torch.i0(x), S.i0e(x), S.i1(x), S.i1e(x), S.modified_bessel_i0(x), S.modified_bessel_i1(x),
            S.modified_bessel_k0(x), S.modified_bessel_k1(x), S.scaled_modified_bessel_k0(x),
            S.scaled_modified_bessel_k1(x), S.bessel_j0(x), S.bessel_j1(x), S.bessel_y0(x), S.bessel_y1(x),
            S.spherical_bessel_j0(x), S.airy_ai(x))


# The interval switches (2, 5, 8; airy's -2.09, 2.09, 8.32, 103.9), 0 and -0, the small-argument series
# (1e-5, 0.5), exp overflow of i0/i1 (past 88.7), negatives (odd/even symmetry, NaN for k and y), inf, NaN.
BESSEL_POINTS = [-100.0, -20.0, -8.0, -5.0, -2.09, -2.0, -0.3, -1e-6, -0.0, 0.0, 1e-6, 0.49, 0.5, 1.0, 2.0, 2.01,
                 2.09, 4.99, 5.0, 5.01, 7.99, 8.0, 8.01, 8.3203353, 12.0, 30.0, 85.0, 89.0, 103.0, 104.0, INF,
                 -INF, NAN]


def test_bessel_family_at_hard_points(target):
    x = torch.tensor(BESSEL_POINTS)
    # atol: j0/j1/y0/y1 cross zero (their relative error is unbounded there) and airy_ai decays to 1e-40
    assert_same(_bessel_family, x, target=target, rtol=2e-5, atol=2e-6)


CHEBYSHEV = [S.chebyshev_polynomial_t, S.chebyshev_polynomial_u, S.chebyshev_polynomial_v,
             S.chebyshev_polynomial_w, S.shifted_chebyshev_polynomial_t, S.shifted_chebyshev_polynomial_u,
             S.shifted_chebyshev_polynomial_v, S.shifted_chebyshev_polynomial_w]


def _grid(xs, ns):
    x, n = torch.tensor(xs), torch.tensor(ns)
    return x[:, None].expand(len(xs), len(ns)).contiguous(), n[None, :].expand(len(xs), len(ns)).contiguous()


def test_chebyshev_families(target):
    # x covers |y| < 1 (the trigonometric form past n = 4..8), y = +-1 (special values), |y| > 1 (the
    # recurrence, and the hyperbolic form past the unrolled steps) for both y = x and y = 2x - 1; n covers
    # negatives, fractions (truncated), 0, 1, each branch switch, and inf/NaN (0, as ATen's cast gives).
    x, n = _grid([-3.0, -1.0, -0.7, -0.2, 0.0, 0.3, 0.5, 0.9, 1.0, 1.2, 2.5, NAN],
                 [-2.0, -0.5, 0.0, 0.9, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 12.0, 13.0, 30.0, INF, NAN])
    assert_same(lambda a, b: tuple(f(a, b) for f in CHEBYSHEV), x, n, target=target, rtol=2e-5, atol=1e-5)


def test_hermite_laguerre_legendre(target):
    # Each unrolls 128 recurrence steps; nki-sim (the slowest to compile) checks one of them, Legendre (the
    # division in its step): the others share its selection of the step equal to n.
    x, n = _grid([-9.0, -2.5, -1.0, -0.3, 0.0, 0.4, 1.0, 1.7, 8.0, NAN],
                 [-1.0, 0.0, 1.0, 2.0, 3.5, 5.0, 9.0, 16.0, 30.0, INF])
    fns = (S.hermite_polynomial_h, S.hermite_polynomial_he, S.laguerre_polynomial_l, S.legendre_polynomial_p)
    fns = fns[-1:] if target == "nki-sim" else fns
    assert_same(lambda a, b: tuple(f(a, b) for f in fns), x, n, target=target, rtol=2e-5, atol=1e-5)


def test_hermite_past_atens_limit_is_nan():
    # ATen's float32 Hermite returns NaN past n = 128; the unrolled recurrence ends at that same limit.
    x, n = _grid([0.1, 1.0], [127.0, 128.0, 129.0, 1000.0])
    assert_same(lambda a, b: (S.hermite_polynomial_h(a, b), S.hermite_polynomial_he(a, b)), x, n)


def test_documented_differences():
    """Where neuroncc deliberately differs from eager (each documented in the module that implements it)."""
    run = compile_neuron(lambda x, n, q: (torch.polygamma(1, x), S.legendre_polynomial_p(torch.full_like(n, 0.5), n),
                                          S.zeta(torch.full_like(q, 3.0), q)))
    trigamma, legendre, zeta = run(torch.tensor([-9.0, 0.0, -1.0]), torch.tensor([129.0, 128.0, 2.0]),
                                   torch.tensor([-11.5, -20.5, -10.5]))
    # trigamma at its poles: the limit, not eager's finite pi^2 / sinf(rounded pi x)^2
    assert torch.equal(trigamma, torch.full((3,), INF))
    # Legendre/Laguerre past the 128 unrolled steps: NaN, never a truncated recurrence
    assert torch.isnan(legendre[0])
    assert legendre[1].item() == pytest.approx(S.legendre_polynomial_p(torch.tensor(0.5), 128.0).item(), rel=1e-4)
    # zeta at a negative q past the unrolled direct sum (q < -11): NaN, never a truncated sum
    assert torch.isnan(zeta[:2]).all() and zeta[2] == pytest.approx(S.zeta(3.0, torch.tensor(-10.5)).item(), 1e-4)


@pytest.mark.parametrize("name", ["lgamma", "digamma", "polygamma", "i0", "i1e", "erfinv", "ndtri"])
def test_gradients_use_the_same_decompositions(name):
    # Gradients come from PyTorch's derivative formulas (digamma' = polygamma(1), i0' = i1, ...), which call
    # these same ops after autograd: they must be decomposed too.
    fns = {"lgamma": torch.lgamma, "digamma": torch.digamma, "polygamma": lambda t: torch.polygamma(2, t),
           "i0": torch.i0, "i1e": S.i1e, "erfinv": torch.erfinv, "ndtri": S.ndtri}
    x = torch.tensor([0.05, 0.3, 0.6, 0.9]) if name in ("erfinv", "ndtri") else torch.tensor([-2.5, 0.7, 3.0, 12.0])
    assert_same_grads(fns[name], x, rtol=1e-5, atol=1e-5)


def test_division_by_zero_and_infinity_in_a_fused_kernel(target):
    # Found by the Bessel decompositions: the cpu target's reciprocal estimate made 32/0 and c/inf NaN.
    x = torch.tensor([INF, 0.0, 4.0, -0.0, -INF])
    assert_same(lambda t: (32 / t - 2) / torch.sqrt(t.abs()), x, target=target, rtol=1e-6, atol=0.0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.int64])
def test_bf16_and_integer_inputs(dtype, target):
    x = torch.tensor([1, 2, 3, 7]).to(dtype)
    assert_same(lambda t: (torch.lgamma(t), torch.digamma(t), torch.i0(t), S.i1e(t), torch.erfinv(t / 8)),
                x, target=target, rtol=1e-2 if dtype == torch.bfloat16 else 1e-5, atol=1e-5)


BIT_X = [INF, -INF, NAN, -NAN, 0.0, -0.0, 1e-45, -3e-39, 1.17549435e-38, 3.4028235e38, 1.0, -0.75, 5.0, -7.3]
BIT_Y = [1.0, -1.0, 2.0, 3.0, -1.0, 1.0, 0.0, 5.0, -INF, INF, 1.0, -INF, NAN, -7.3]


def test_bit_functions(target):
    # Signed zeros and NaNs, subnormals (frexp scales them), the largest float (nextafter to inf), x == y.
    x, y = torch.tensor(BIT_X), torch.tensor(BIT_Y)

    def bit_functions(a, b):
        copied = torch.copysign(a, b)
        mantissa, exponent = torch.frexp(a)
        return (torch.signbit(a), copied, torch.signbit(copied), torch.copysign(a, -2.0), torch.nextafter(a, b),
                mantissa, exponent)

    assert_same(bit_functions, x, y, target=target, rtol=0.0, atol=0.0)


def test_bit_functions_in_bf16_and_on_integers(target):
    xb, yb = torch.tensor([1.0, 0.0, -2.5, 3.0]).bfloat16(), torch.tensor([2.0, -1.0, 0.0, 3.0]).bfloat16()
    assert_same(lambda a, b: (torch.nextafter(a, b), *torch.frexp(a), torch.signbit(a), torch.copysign(a, b)),
                xb, yb, target=target, rtol=0.0, atol=0.0)
    i, j = torch.tensor([-1, 0, 3]), torch.tensor([1, -2, -3])
    assert_same(lambda a, b: (torch.signbit(a), torch.copysign(a, b)), i, j, target=target, rtol=0.0, atol=0.0)


def test_bit_views_other_than_float32_int32_are_refused():
    from neuroncc.errors import UnsupportedOpError

    with pytest.raises(Exception) as caught:
        compile_neuron(lambda t: t.view(torch.int16) + 1)(torch.ones(4, dtype=torch.float16))
    cause = caught.value
    while cause is not None and not isinstance(cause, UnsupportedOpError):
        cause = getattr(cause, "inner_exception", None) or cause.__cause__
    assert cause is not None and "int16" in str(cause)
