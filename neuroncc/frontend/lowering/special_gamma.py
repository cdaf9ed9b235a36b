"""Gamma-family special functions as decompositions into ops the IR has: lgamma, digamma, polygamma
(trigamma and the Hurwitz zeta), special.zeta, erfinv and ndtri.

Each follows the float32 algorithm eager runs (PyTorch's ATen/native/Math.h, derived from Cephes) step by
step, so poles, signs and special values come out as eager's. The loops in those algorithms have data-
dependent trip counts; here they are unrolled to their bound with a mask per element (an element that has
left the loop keeps its value), which is exact as long as the bound holds. Where the C++ loop is unbounded
(zeta at a negative non-integer ``q`` far from 0), elements past the unrolled bound come out NaN rather than
a truncated sum.

``lgamma`` is the one function eager takes from libm; it is written here as Stirling's series after shifting
the argument past 8 (with the reflection formula for negatives): within 2e-6 absolute of libm everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from neuroncc.frontend.lowering.special_coefficients import COEFFICIENTS

aten = torch.ops.aten

_INF, _NAN = math.inf, math.nan


def float_math(formula: Any) -> Any:
    """A float function as PyTorch computes it: integers promote to the default float dtype, bf16/f16
    compute in float32 and round once. Works for any number of tensor arguments (promoted together)."""
    def decomposition(*args: Any, **kwargs: Any) -> Any:
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        dtype = torch.result_type(*args) if len(args) > 1 else tensors[0].dtype
        out_dtype = dtype if dtype.is_floating_point else torch.get_default_dtype()
        compute = torch.float32 if out_dtype in (torch.bfloat16, torch.float16) else out_dtype
        widened = [a.to(compute) if isinstance(a, torch.Tensor) else a for a in args]
        result = formula(*widened, **kwargs)
        return tuple(r.to(out_dtype) for r in result) if isinstance(result, tuple) else result.to(out_dtype)

    decomposition.__name__ = getattr(formula, "__name__", type(formula).__name__)
    return decomposition


def polevl(x: torch.Tensor, coefficients: Sequence[float]) -> torch.Tensor:
    """Horner's rule, highest power first (Cephes' polevl)."""
    result = torch.full_like(x, coefficients[0])
    for c in coefficients[1:]:
        result = result * x + c
    return result


def positive_zero(x: torch.Tensor) -> torch.Tensor:
    """x == +0.0 (1/x tells the signed zeros apart)."""
    return (x == 0) & (1 / x > 0)


def sin_pi(r: torch.Tensor) -> torch.Tensor:
    """sin(pi r) for |r| <= 1/2, accurate in relative terms near 0 on every target (a target's sin may be
    accurate only in absolute terms): the Taylor series below |pi r| = 1/4, sin elsewhere."""
    u = math.pi * r
    u2 = u * u
    taylor = u * (1 - u2 / 6 * (1 - u2 / 20 * (1 - u2 / 42 * (1 - u2 / 72 * (1 - u2 / 110)))))
    return torch.where(torch.abs(u) < 0.25, taylor, torch.sin(u))


# ---- lgamma --------------------------------------------------------------------------------------------

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
_STIRLING_FROM = 8.0


def _lgamma_positive(x: torch.Tensor) -> torch.Tensor:
    """lgamma for x >= 0: shift past 8 (lgamma(x) = lgamma(x + k) - log(x (x+1) ... (x+k-1))), then
    Stirling's series; (z - 1/2)(log z - 1) keeps the huge arguments finite until lgamma itself overflows."""
    z, product = x, torch.ones_like(x)
    for _ in range(int(_STIRLING_FROM)):
        below = z < _STIRLING_FROM
        product = torch.where(below, product * z, product)
        z = torch.where(below, z + 1, z)
    w = 1 / (z * z)
    series = (1 / z) * (1 / 12 - w * (1 / 360 - w * (1 / 1260 - w * (1 / 1680))))
    stirling = (z - 0.5) * (torch.log(z) - 1) + (_HALF_LOG_2PI - 0.5) + series
    return stirling - torch.log(product)


@float_math
def lgamma(x: torch.Tensor) -> torch.Tensor:
    # Reflection for x < 0: lgamma(x) = log(pi / |sin(pi x)|) - lgamma(1 - x); sin(pi x) from x - round(x),
    # which is exact, so the poles (non-positive integers) give |sin| = 0 and +inf.
    negative = x < 0
    positive_part = _lgamma_positive(torch.where(negative, 1 - x, x))
    r = x - torch.round(x)
    reflected = math.log(math.pi) - torch.log(torch.abs(sin_pi(r))) - positive_part
    result = torch.where(negative, reflected, positive_part)
    return torch.where(torch.isinf(x) | (negative & (r == 0)), _INF, result)  # poles: inf - inf would be NaN


# ---- digamma, trigamma, polygamma ----------------------------------------------------------------------

_PSI_10 = 2.25175258906672110764
_DIGAMMA_A = COEFFICIENTS["calc_digamma"]["A"]


def _digamma_nonnegative(x: torch.Tensor) -> torch.Tensor:
    # As calc_digamma: push x to >= 10 subtracting 1/x (at most 10 steps for x > 0), then the asymptotic series.
    result = torch.zeros_like(x)
    for _ in range(10):
        below = x < 10
        result = torch.where(below, result - 1 / x, result)
        x = torch.where(below, x + 1, x)
    z = 1 / (x * x)
    tail = torch.where(x < 1.0e17, z * polevl(z, _DIGAMMA_A), 0.0)
    asymptotic = result + torch.log(x) - 0.5 / x - tail
    return torch.where(x == 10, result + _PSI_10, asymptotic)


@float_math
def digamma(x: torch.Tensor) -> torch.Tensor:
    negative = x < 0
    r = x - torch.round(x)  # tan(pi r) = tan(pi x), and exact to compute from r in [-1/2, 1/2]
    pi_over_tan = math.pi * torch.cos(math.pi * r) / sin_pi(r)
    positive_part = _digamma_nonnegative(torch.where(negative, 1 - x, x))
    result = torch.where(negative, positive_part - pi_over_tan, positive_part)
    result = torch.where(negative & (x == torch.trunc(x)), _NAN, result)  # negative integers (and -inf)
    return torch.where(x == 0, torch.where(positive_zero(x), -_INF, _INF), result)  # copysign(inf, -x)


def _trigamma(x: torch.Tensor) -> torch.Tensor:
    # As ATen's float trigamma: reflection below 1/2, six recurrence steps, then the asymptotic series.
    reflect = x < 0.5
    sin_pi_x = sin_pi(x - torch.round(x))  # the square has period 1
    result = torch.where(reflect, -(math.pi * math.pi) / (sin_pi_x * sin_pi_x), 0.0)
    x = torch.where(reflect, 1 - x, x)
    for _ in range(6):
        result = result + 1 / (x * x)
        x = x + 1
    ixx = 1 / (x * x)
    result = result + (1 + 1 / (2 * x) + ixx * (1 / 6 - ixx * (1 / 30 - ixx * (1 / 42)))) / x
    return torch.where(reflect, -result, result)


def _polygamma(n: int, x: torch.Tensor) -> Any:
    if n < 0:
        return NotImplemented  # eager raises; leave it to the importer's refusal
    if n == 0:
        return digamma(x)
    return _polygamma_positive_order(x, n=n)


@float_math
def _polygamma_positive_order(x: torch.Tensor, *, n: int) -> torch.Tensor:
    if n == 1:
        return _trigamma(x)
    # (-1)^(n+1) n! zeta(n + 1, x), as calc_polygamma
    return (1.0 if n % 2 else -1.0) * float(math.factorial(n)) * hurwitz_zeta(torch.full_like(x, n + 1.0), x)


# ---- Hurwitz zeta --------------------------------------------------------------------------------------

_ZETA_A = COEFFICIENTS["zeta"]["A"]
_MACHEP = 1.11022302462515654042e-16
#: Unrolled steps of zeta's direct sum. The C++ loop runs max(9, 10 - q) steps: 9 for q > 0, more for the
#: negative q that an integer x allows (q > -11 here); past this bound the result is NaN (never a truncated sum).
_ZETA_DIRECT_STEPS = 20


def _compensated_add(total: torch.Tensor, error: torch.Tensor, term: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Neumaier's summation step: (total + term, the rounding error it made added to ``error``)."""
    new = total + term
    lost = torch.where(torch.abs(total) >= torch.abs(term), (total - new) + term, (term - new) + total)
    return new, error + lost


def hurwitz_zeta(x: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """zeta(x, q) = sum_k (q + k)^-x, as ATen's zeta (Cephes): a direct sum until q + k > 9 (and at least 9
    terms), then Euler-Maclaurin with 12 terms; both loops stop when a term no longer changes the sum.

    ATen sums in double; here the direct sum is compensated (Neumaier), which keeps the float32 result
    accurate where terms of both signs cancel (negative q with odd x: polygamma of even order at negative
    arguments). The direct loop's early exit (a term below 1e-16 of the sum) is tested once, after the loop:
    the terms past it change no float32 sum, and the test then holds exactly when it held in the loop."""
    x, q = torch.broadcast_tensors(x, q)
    s = torch.pow(q, -x)
    c = torch.zeros_like(s)  # the compensation: the rounding errors of the sum so far
    a, b = q, torch.zeros_like(q)
    looping = torch.ones_like(q, dtype=torch.bool)
    for i in range(_ZETA_DIRECT_STEPS):
        if i >= 9:  # while (i < 9 || a <= 9)
            looping = looping & (a <= 9.0)
        a = torch.where(looping, a + 1, a)
        term = torch.where(looping, torch.pow(a, -x), 0.0)
        b = torch.where(looping, term, b)
        s, c = _compensated_add(s, c, term)
    unfinished = looping & (a <= 9.0)  # needed more direct steps than unrolled
    returned = (-_MACHEP * s < b) & (b < _MACHEP * s)
    s = torch.where(torch.isfinite(s), s + c, s)  # an overflowed sum has no meaningful compensation
    w = a
    s = torch.where(returned, s, s + b * w / (x - 1) - 0.5 * b)
    # Euler-Maclaurin: t_i = a_i b_i / A_i with a_i = x (x+1) ... (x+2i) and b_i = b / w^(2i+1); the product
    # a_i b_i is carried as one factor so that neither overflows on its own.
    ab, k = b, 0.0
    for i in range(12):
        ab = ab * ((x + k) / w)
        t = ab / _ZETA_A[i]
        s = torch.where(returned, s, s + t)
        returned = returned | (torch.abs(t / s) < _MACHEP)
        ab = ab * ((x + (k + 1)) / w)
        k += 2.0
    s = torch.where(unfinished, _NAN, s)
    s = torch.where((q <= 0) & (x != torch.floor(x)), _NAN, s)
    s = torch.where((q <= 0) & (q == torch.floor(q)), _INF, s)
    s = torch.where(x < 1, _NAN, s)
    return torch.where(x == 1, _INF, s)


@float_math
def _zeta(x: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    return hurwitz_zeta(x, q)


def _zeta_scalar_first(x: Any, q: torch.Tensor) -> torch.Tensor:
    return _zeta(torch.scalar_tensor(x, dtype=torch.result_type(x, q)), q)


def _zeta_scalar_second(x: torch.Tensor, q: Any) -> torch.Tensor:
    return _zeta(x, torch.scalar_tensor(q, dtype=torch.result_type(x, q)))


# ---- erfinv, ndtri -------------------------------------------------------------------------------------

_ERFINV_A = (0.886226899, -1.645349621, 0.914624893, -0.140543331)
_ERFINV_B = (-2.118377725, 1.442710462, -0.329097515, 0.012229801)
_ERFINV_C = (-1.970840454, -1.624906493, 3.429567803, 1.641345311)
_ERFINV_D = (3.543889200, 1.637067800)
_TWO_OVER_SQRT_PI = 2 / math.sqrt(math.pi)


@float_math
def erfinv(y: torch.Tensor) -> torch.Tensor:
    # calc_erfinv: a rational first guess (central range |y| <= 0.7, a log form outside), then two Newton steps.
    a = torch.abs(y)
    z = y * y
    num = ((_ERFINV_A[3] * z + _ERFINV_A[2]) * z + _ERFINV_A[1]) * z + _ERFINV_A[0]
    dem = (((_ERFINV_B[3] * z + _ERFINV_B[2]) * z + _ERFINV_B[1]) * z + _ERFINV_B[0]) * z + 1.0
    central = y * num / dem
    t = torch.sqrt(-torch.log((1.0 - torch.where(a < 1, a, 0.5)) / 2.0))  # |y| >= 1 is set below
    num = ((_ERFINV_C[3] * t + _ERFINV_C[2]) * t + _ERFINV_C[1]) * t + _ERFINV_C[0]
    dem = (_ERFINV_D[1] * t + _ERFINV_D[0]) * t + 1.0
    tail = torch.where(y < 0, -num, num) / dem
    x = torch.where(a <= 0.7, central, tail)
    for _ in range(2):
        x = x - (torch.erf(x) - y) / (_TWO_OVER_SQRT_PI * torch.exp(-x * x))
    x = torch.where(a == 1, torch.where(y < 0, -_INF, _INF), x)
    return torch.where(a > 1, _NAN, x)


_NDTRI = COEFFICIENTS["calc_ndtri"]
_EXP_MINUS_2 = 0.13533528323661269189
_SQRT_2PI = 2.50662827463100050242


@float_math
def ndtri(y0: torch.Tensor) -> torch.Tensor:
    # calc_ndtri: a rational form around 1/2, two others in the tails (split at x = 8), mirrored for y > 1 - e^-2.
    upper = y0 > 1 - _EXP_MINUS_2
    y = torch.where(upper, 1 - y0, y0)
    c = y - 0.5
    c2 = c * c
    central = (c + c * (c2 * polevl(c2, _NDTRI["P0"]) / polevl(c2, _NDTRI["Q0"]))) * _SQRT_2PI
    safe = torch.where((y > 0) & (y <= _EXP_MINUS_2), y, _EXP_MINUS_2)
    x = torch.sqrt(-2.0 * torch.log(safe))
    x0 = x - torch.log(x) / x
    z = 1 / x
    near = z * polevl(z, _NDTRI["P1"]) / polevl(z, _NDTRI["Q1"])
    far = z * polevl(z, _NDTRI["P2"]) / polevl(z, _NDTRI["Q2"])
    tail = x0 - torch.where(x < 8.0, near, far)
    tail = torch.where(upper, tail, -tail)
    result = torch.where(y > _EXP_MINUS_2, central, tail)
    result = torch.where((y0 < 0) | (y0 > 1) | torch.isnan(y0), _NAN, result)
    result = torch.where(y0 == 1, _INF, result)
    return torch.where(y0 == 0, -_INF, result)


#: aten op -> decomposition (each follows the ATen algorithm named in its docstring or comment).
GAMMA_FORMULAS: dict[Any, Any] = {
    aten.lgamma.default: lgamma,  # Stirling past 8 after shifting, reflection below 0
    aten.digamma.default: digamma,  # calc_digamma: shift to 10, asymptotic series, reflection
    aten.polygamma.default: _polygamma,  # digamma, trigamma, or (-1)^(n+1) n! zeta(n+1, x)
    aten.special_polygamma.default: _polygamma,
    aten.special_zeta.default: _zeta,  # Cephes' Hurwitz zeta, loops unrolled with masks
    aten.special_zeta.self_scalar: _zeta_scalar_first,
    aten.special_zeta.other_scalar: _zeta_scalar_second,
    aten.erfinv.default: erfinv,  # rational guess + two Newton steps on erf
    aten.special_ndtri.default: ndtri,  # Cephes' three rational forms
}
