"""Bessel-family special functions as decompositions into ops the IR has: i0, i0e, i1, i1e, the
special.modified_bessel_* / scaled_modified_bessel_* functions, bessel_j0/j1/y0/y1, spherical_bessel_j0 and
airy_ai.

Each is the float32 algorithm eager runs (ATen/native/Math.h, from Cephes), with the same coefficient tables
(``special_coefficients.py``): Chebyshev series (``chbevl``) or rational forms on each interval, the
intervals chosen elementwise with ``where``. The one loop with a data-dependent trip count (airy_ai's power
series, which stops when a term falls below float32's epsilon) is unrolled past its bound with a mask.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from neuroncc.frontend.lowering.special_coefficients import COEFFICIENTS
from neuroncc.frontend.lowering.special_gamma import float_math, polevl

aten = torch.ops.aten

_INF, _NAN = math.inf, math.nan


def chbevl(y: torch.Tensor, coefficients: Sequence[float]) -> torch.Tensor:
    """Cephes' chbevl: the Chebyshev series sum c_i T_i(y/2), coefficients highest order first (Clenshaw)."""
    b0, b1, b2 = torch.full_like(y, coefficients[0]), torch.zeros_like(y), torch.zeros_like(y)
    for c in coefficients[1:]:
        b2, b1 = b1, b0
        b0 = y * b1 - b2 + c
    return 0.5 * (b0 - b2)


def _with_sign_of(x: torch.Tensor, magnitude: torch.Tensor) -> torch.Tensor:
    return torch.where(x < 0, -magnitude, magnitude)


# ---- modified Bessel functions of the first kind (i0, i1 and their scaled forms) -------------------

_I0E_A = COEFFICIENTS["chebyshev_coefficients_i0e_A"]["coeff"]
_I0E_B = COEFFICIENTS["chebyshev_coefficients_i0e_B"]["coeff"]
_I1E_A = COEFFICIENTS["chebyshev_coefficients_i1e_A:float"]["coeff"]  # float's own, shorter tables
_I1E_B = COEFFICIENTS["chebyshev_coefficients_i1e_B:float"]["coeff"]
_MI0 = COEFFICIENTS["modified_bessel_i0_forward"]
_MI1 = COEFFICIENTS["modified_bessel_i1_forward"]


def _scaled_by_exp(x: torch.Tensor, small: Sequence[float], large: Sequence[float]) -> tuple[torch.Tensor, ...]:
    """(|x|, [0, 8] series at |x|/2 - 2, (8, inf) series at 32/|x| - 2 over sqrt|x|): exp(-|x|) I(|x|) pieces."""
    a = torch.abs(x)
    inner = chbevl(a / 2 - 2, small)
    outer = chbevl(32 / a - 2, large) / torch.sqrt(a)
    return a, inner, outer


def _i0e_parts(x: torch.Tensor, small: Sequence[float], large: Sequence[float]) -> tuple[torch.Tensor, torch.Tensor]:
    a, inner, outer = _scaled_by_exp(x, small, large)
    return a, torch.where(a <= 8, inner, outer)


@float_math
def i0(x: torch.Tensor) -> torch.Tensor:
    a, scaled = _i0e_parts(x, _I0E_A, _I0E_B)  # calc_i0
    return torch.exp(a) * scaled


@float_math
def i0e(x: torch.Tensor) -> torch.Tensor:
    return _i0e_parts(x, _I0E_A, _I0E_B)[1]  # calc_i0e


def _i1e_magnitude(x: torch.Tensor, small: Sequence[float], large: Sequence[float]) -> tuple[torch.Tensor, ...]:
    a, inner, outer = _scaled_by_exp(x, small, large)
    return a, torch.where(a <= 8, inner * a, outer)


@float_math
def i1(x: torch.Tensor) -> torch.Tensor:
    a, inner, outer = _scaled_by_exp(x, _I1E_A, _I1E_B)  # calc_i1: exp(x) x A(.) or exp(x) B(.) / sqrt(x)
    e = torch.exp(a)
    return _with_sign_of(x, torch.where(a <= 8, e * a * inner, e * outer))


@float_math
def i1e(x: torch.Tensor) -> torch.Tensor:
    a, magnitude = _i1e_magnitude(x, _I1E_A, _I1E_B)  # calc_i1e
    return _with_sign_of(x, magnitude)


def _modified_i0(x: torch.Tensor) -> torch.Tensor:
    a, inner, outer = _scaled_by_exp(x, _MI0["A"], _MI0["B"])  # modified_bessel_i0_forward: double tables
    return torch.exp(a) * torch.where(a <= 8, inner, outer)


def _modified_i1(x: torch.Tensor) -> torch.Tensor:
    a, inner, outer = _scaled_by_exp(x, _MI1["A"], _MI1["B"])
    e = torch.exp(a)
    return _with_sign_of(x, torch.where(a <= 8, inner * a * e, e * outer))


# ---- modified Bessel functions of the second kind (k0, k1 and their scaled forms) ------------------

_MK0 = COEFFICIENTS["modified_bessel_k0_forward"]
_MK1 = COEFFICIENTS["modified_bessel_k1_forward"]


def _second_kind(x: torch.Tensor, small: torch.Tensor, large_scaled: torch.Tensor, scaled: bool) -> torch.Tensor:
    """k0/k1 from their [0, 2] and (2, inf) forms; the large form is exp(x) k(x). inf at 0, NaN below."""
    result = torch.where(x <= 2, small * torch.exp(x) if scaled else small,
                         large_scaled if scaled else torch.exp(-x) * large_scaled)
    result = torch.where(x < 0, _NAN, result)
    return torch.where(x == 0, _INF, result)


def _k0(x: torch.Tensor, scaled: bool) -> torch.Tensor:
    small = chbevl(x * x - 2, _MK0["A"]) - torch.log(0.5 * x) * _modified_i0(x)
    large = chbevl(8 / x - 2, _MK0["B"]) / torch.sqrt(x)
    return _second_kind(x, small, large, scaled)


def _k1(x: torch.Tensor, scaled: bool) -> torch.Tensor:
    small = torch.log(0.5 * x) * _modified_i1(x) + chbevl(x * x - 2, _MK1["A"]) / x
    large = chbevl(8 / x - 2, _MK1["B"]) / torch.sqrt(x)
    return _second_kind(x, small, large, scaled)


# ---- Bessel functions of the first and second kind -----------------------------------------------

_J0, _J1 = COEFFICIENTS["bessel_j0_forward"], COEFFICIENTS["bessel_j1_forward"]
_Y0, _Y1 = COEFFICIENTS["bessel_y0_forward"], COEFFICIENTS["bessel_y1_forward"]
_SQRT_2_OVER_PI = 0.797884560802865355879892119868763737
_TWO_OVER_PI = 0.636619772367581343075535053490057448
_QUARTER_PI, _THREE_QUARTER_PI = 0.785398163397448309615660845819875721, 2.356194490192344928846982537459627163


def _asymptotic(x: torch.Tensor, w: torch.Tensor, table: dict, phase: float, second_kind: bool) -> torch.Tensor:
    """The x > 5 form: (P cos(x - phase) - 5/x Q sin(x - phase)) sqrt(2/pi) / sqrt(x), sin and cos swapped
    (and the sign) for the second kind. ``w`` is 25/x^2 written as eager writes it for this function."""
    p = polevl(w, table["PP"]) / polevl(w, table["PQ"])
    q = polevl(w, table["QP"]) / polevl(w, table["QQ"])
    c, s = torch.cos(x - phase), torch.sin(x - phase)
    value = p * s + 5 / x * q * c if second_kind else p * c - 5 / x * q * s
    return value * _SQRT_2_OVER_PI / torch.sqrt(x)


def _j0(x: torch.Tensor) -> torch.Tensor:
    x = torch.abs(x)
    x2 = x * x
    small = (x2 - 5.78318596294678452118) * (x2 - 30.4712623436620863991) * polevl(x2, _J0["RP"]) / polevl(
        x2, _J0["RQ"])
    small = torch.where(x < 0.00001, 1 - x2 / 4, small)
    return torch.where(x <= 5, small, _asymptotic(x, 25 / x2, _J0, _QUARTER_PI, False))


def _j1(x: torch.Tensor) -> torch.Tensor:
    a = torch.abs(x)  # j1 is odd
    a2 = a * a
    small = polevl(a2, _J1["RP"]) / polevl(a2, _J1["RQ"]) * a * (a2 - 14.6819706421238932572) * (
        a2 - 49.2184563216946036703)
    large = _asymptotic(a, 5 / a * (5 / a), _J1, _THREE_QUARTER_PI, False)
    return _with_sign_of(x, torch.where(a <= 5, small, large))


def _y0(x: torch.Tensor) -> torch.Tensor:
    x2 = x * x
    small = polevl(x2, _Y0["YP"]) / polevl(x2, _Y0["YQ"]) + _TWO_OVER_PI * torch.log(x) * _j0(x)
    small = torch.where(x < 0, _NAN, torch.where(x == 0, -_INF, small))
    return torch.where(x <= 5, small, _asymptotic(x, 25 / x2, _Y0, _QUARTER_PI, True))


def _y1(x: torch.Tensor) -> torch.Tensor:
    x2 = x * x
    small = x * (polevl(x2, _Y1["YP"]) / polevl(x2, _Y1["YQ"])) + _TWO_OVER_PI * (_j1(x) * torch.log(x) - 1 / x)
    small = torch.where(x < 0, _NAN, torch.where(x == 0, -_INF, small))
    return torch.where(x <= 5, small, _asymptotic(x, 5 / x * (5 / x), _Y1, _THREE_QUARTER_PI, True))


def _spherical_j0(x: torch.Tensor) -> torch.Tensor:
    x2 = x * x
    series = 1 + x2 * (-1 / 6 + x2 * (1 / 120 + x2 * (-1 / 5040 + x2 * (1 / 362880 + x2 * (
        -1 / 39916800 + x2 * (1 / 6227020800))))))
    result = torch.where(torch.abs(x) < 0.5, series, torch.sin(x) / x)
    return torch.where(torch.isinf(x), 0.0, result)


# ---- Airy Ai -----------------------------------------------------------------------------------------

_AIRY = COEFFICIENTS["airy_ai_forward"]
_AIRY_C1, _AIRY_C2 = 0.355028053887817239260, 0.258819403792806798405
_ONE_OVER_SQRT_PI = 5.64189583547756286948e-01
#: Unrolled iterations of airy_ai's power series (|x| < 2.09): it stops below float32's epsilon after 9.
_AIRY_SERIES_STEPS = 12


def _airy_ai(x: torch.Tensor) -> torch.Tensor:
    # x < -2.09: the oscillating asymptotic form
    root = torch.sqrt(torch.abs(x))
    zeta_neg = -2.0 * x * root / 3.0
    z = 1 / zeta_neg
    zz = z * z
    t = zeta_neg + 0.25 * math.pi
    oscillating = _ONE_OVER_SQRT_PI / torch.sqrt(root) * (
        torch.sin(t) * (1 + zz * polevl(zz, _AIRY["AFN"]) / polevl(zz, _AIRY["AFD"]))
        - torch.cos(t) * (z * polevl(zz, _AIRY["AGN"]) / polevl(zz, _AIRY["AGD"])))
    # x >= 2.09: the decaying asymptotic form
    zeta_pos = 2.0 * x * root / 3.0
    inv = 1 / zeta_pos
    decaying = _ONE_OVER_SQRT_PI * (polevl(inv, _AIRY["AN"]) / polevl(inv, _AIRY["AD"])) / (
        2.0 * torch.sqrt(root) * torch.exp(zeta_pos))
    # |x| < 2.09: the Maclaurin series f, g of Ai = c1 f - c2 g, until |m / f| <= float32 epsilon
    f, g, m, n, k = torch.ones_like(x), x, torch.ones_like(x), x, torch.ones_like(x)
    cube = x * x * x
    running = torch.ones_like(x, dtype=torch.bool)
    for _ in range(_AIRY_SERIES_STEPS):
        m_next = m * cube / (k + 1) / (k + 2)
        n_next = n * cube / (k + 2) / (k + 3)
        f_next, g_next = f + m_next, g + n_next
        m, n = torch.where(running, m_next, m), torch.where(running, n_next, n)
        f, g = torch.where(running, f_next, f), torch.where(running, g_next, g)
        k = torch.where(running, k + 3, k)
        running = running & (torch.abs(m / f) > torch.finfo(torch.float32).eps)
    series = _AIRY_C1 * f - _AIRY_C2 * g
    result = torch.where(x < -2.09, oscillating, torch.where(x >= 2.09, decaying, series))
    result = torch.where(x > 103.892, 0.0, result)
    return torch.where(torch.isinf(x), _NAN, result)


#: aten op -> decomposition (each the ATen function named in its comment).
BESSEL_FORMULAS: dict[Any, Any] = {
    aten.i0.default: i0,  # calc_i0
    aten.special_i0e.default: i0e,  # calc_i0e
    aten.special_i1.default: i1,  # calc_i1 (float tables)
    aten.special_i1e.default: i1e,  # calc_i1e (float tables)
    aten.special_modified_bessel_i0.default: float_math(_modified_i0),  # modified_bessel_i0_forward
    aten.special_modified_bessel_i1.default: float_math(_modified_i1),  # modified_bessel_i1_forward
    aten.special_modified_bessel_k0.default: float_math(lambda x: _k0(x, scaled=False)),
    aten.special_modified_bessel_k1.default: float_math(lambda x: _k1(x, scaled=False)),
    aten.special_scaled_modified_bessel_k0.default: float_math(lambda x: _k0(x, scaled=True)),
    aten.special_scaled_modified_bessel_k1.default: float_math(lambda x: _k1(x, scaled=True)),
    aten.special_bessel_j0.default: float_math(_j0),  # bessel_j0_forward
    aten.special_bessel_j1.default: float_math(_j1),  # bessel_j1_forward
    aten.special_bessel_y0.default: float_math(_y0),  # bessel_y0_forward
    aten.special_bessel_y1.default: float_math(_y1),  # bessel_y1_forward
    aten.special_spherical_bessel_j0.default: float_math(_spherical_j0),  # series below 1/2, sin(x)/x above
    aten.special_airy_ai.default: float_math(_airy_ai),  # airy_ai_forward
}
