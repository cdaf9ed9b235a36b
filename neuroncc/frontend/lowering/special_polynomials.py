"""Orthogonal polynomials of torch.special as decompositions into ops the IR has: chebyshev_polynomial_t/u/v/w,
their shifted forms, hermite_polynomial_h/he, laguerre_polynomial_l and legendre_polynomial_p.

Each takes x and an integer-valued n, both tensors. ATen (Math.h) truncates n to int64 (n < 0 gives 0), picks
special values, sometimes a closed trigonometric form, and otherwise runs the three-term recurrence n - 1
times. n is data here, so the recurrence is unrolled to a bound and the step equal to n is selected per
element; every case up to the bound is ATen's own arithmetic, in ATen's order:

- Chebyshev (and shifted): ATen uses the cos/sin form for |y| < 1 and n past 4..8, so the recurrence only
  matters for n <= 8 there; for |y| > 1 and n past ``CHEBYSHEV_STEPS`` the hyperbolic closed form
  (cosh(n acosh y) and kin) replaces it: within 1e-5 relative of the recurrence up to float32's overflow,
  where it gives inf (and NaN from the step after, as the recurrence's inf - inf does).
- Hermite: ATen itself returns NaN past n = 128, and the unrolled bound is that limit: exact for every n.
- Legendre and Laguerre: unrolled to ``RECURRENCE_STEPS``; beyond it the result is NaN, not a truncated or
  approximated value (the one difference from eager, for n > 128).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from neuroncc.frontend.lowering.special_gamma import float_math

aten = torch.ops.aten

_NAN = math.nan

#: Unrolled recurrence steps of the Chebyshev families (closed forms beyond).
CHEBYSHEV_STEPS = 12
#: Unrolled recurrence steps of Hermite (ATen's own float32 limit), Legendre and Laguerre.
RECURRENCE_STEPS = 128


def _degree(n: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(n truncated toward zero as ATen's static_cast<int64_t>, whether the result is 0: n < 0, or n not
    finite (the cast gives INT64_MIN on x86; Hermite maps it to -1 explicitly))."""
    finite = torch.isfinite(n)
    whole = torch.trunc(torch.where(finite, n, -1.0))
    return whole, whole < 0


def _odd(n: torch.Tensor) -> torch.Tensor:
    return torch.remainder(n, 2) == 1


def _alternating(n: torch.Tensor, value: Any) -> torch.Tensor:
    """(-1)^n value."""
    return torch.where(_odd(n), -value, value)


def _select_recurrence(n: torch.Tensor, first: torch.Tensor, steps: int,
                       step: Callable[[int, torch.Tensor, torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """The value at degree n of p0 = 1, p1 = first, p_{k} = step(k, p_{k-1}, p_{k-2}) for 2 <= n <= steps
    (NaN where n is larger); degrees 0 and 1 are the caller's. NaN propagates as ATen's loop, which stops at
    a NaN q and returns it."""
    p, q = torch.ones_like(first), first
    result = torch.full_like(first, _NAN)
    for k in range(2, steps + 1):
        r = step(k, q, p)
        result = torch.where(n == k, r, result)
        p, q = q, r
    return result


# ---- Chebyshev T, U, V, W and their shifted forms ----------------------------------------------------


@dataclass(frozen=True)
class _Chebyshev:
    """One Chebyshev family as Math.h writes it, in y (= x, or 2x - 1 for the shifted forms)."""
    kind: str  # t, u, v or w
    trig_from: int  # the cos/sin form for |y| < 1 and n > trig_from
    shifted: bool

    def first(self, y: torch.Tensor, two_y: torch.Tensor) -> torch.Tensor:
        return {"t": y, "u": two_y, "v": two_y - 1, "w": two_y + 1}[self.kind]

    def at_one(self, n: torch.Tensor) -> torch.Tensor:
        return {"t": torch.ones_like(n), "u": n + 1, "v": torch.ones_like(n), "w": n + n + 1}[self.kind]

    def at_minus_one(self, n: torch.Tensor) -> torch.Tensor:
        return _alternating(n, {"t": torch.ones_like(n), "u": n + 1, "v": n + n + 1, "w": torch.ones_like(n)}[
            self.kind])

    def trig(self, y: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        theta = torch.acos(y)
        if self.kind == "t":
            return torch.cos(n * theta)
        if self.kind == "u":  # sin(theta) is never 0 for |y| < 1 in float32: ATen's other branch is dead
            return torch.sin((n + 1) * theta) / torch.sin(theta)
        if self.kind == "v":
            half_sin = torch.sin(theta / 2)
            value = torch.cos((n + 0.5) * theta) / torch.cos(theta / 2)
            return torch.where(half_sin != 1, value, _alternating(n, n + n + 1))
        half_cos = torch.cos(theta / 2)
        value = torch.sin((n + 0.5) * theta) / torch.sin(theta / 2)
        fallback = _alternating(n, torch.ones_like(n))
        if not self.shifted:  # the unshifted form returns 2n + 1 there for x > 0; the shifted one does not
            fallback = torch.where(y > 0, n + n + 1, fallback)
        return torch.where(half_cos != 1, value, fallback)

    def hyperbolic(self, y: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        """The closed form for |y| > 1: cosh/sinh of multiples of acosh|y|, with the parity for y < -1."""
        t = torch.acosh(torch.abs(y))
        negative = y < 0
        if self.kind == "t":
            value = torch.cosh(n * t)
        elif self.kind == "u":
            value = torch.sinh((n + 1) * t) / torch.sinh(t)
        else:  # V(-y) = (-1)^n W(y) and W(-y) = (-1)^n V(y)
            v_form = torch.cosh((n + 0.5) * t) / torch.cosh(t / 2)
            w_form = torch.sinh((n + 0.5) * t) / torch.sinh(t / 2)
            value = torch.where(negative, w_form, v_form) if self.kind == "v" else torch.where(
                negative, v_form, w_form)
        return torch.where(negative, _alternating(n, value), value)

    def __call__(self, x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        x, n = torch.broadcast_tensors(x, n)
        n, zero = _degree(n)
        y = x + x - 1 if self.shifted else x
        two_y = y + y
        first = self.first(y, two_y)
        result = _select_recurrence(n, first, CHEBYSHEV_STEPS, lambda k, q, p: two_y * q - p)
        # Past the unrolled steps (only |y| > 1 gets there): the closed form, NaN once the previous degree
        # overflowed too (the recurrence's inf - inf).
        beyond = torch.where(torch.isinf(self.hyperbolic(y, n - 1)), _NAN, self.hyperbolic(y, n))
        result = torch.where(n > CHEBYSHEV_STEPS, beyond, result)
        result = torch.where(n == 1, first, result)
        result = torch.where(n == 0, 1.0, result)
        result = torch.where((n > self.trig_from) & (torch.abs(y) < 1), self.trig(y, n), result)
        result = torch.where(y == 1, self.at_one(n), torch.where(y == -1, self.at_minus_one(n), result))
        return torch.where(zero, 0.0, result)


# ---- Hermite, Laguerre, Legendre ---------------------------------------------------------------------


def _finish(result: torch.Tensor, n: torch.Tensor, zero: torch.Tensor, first: torch.Tensor) -> torch.Tensor:
    result = torch.where(n == 1, first, result)
    result = torch.where(n == 0, 1.0, result)
    return torch.where(zero, 0.0, result)


def _hermite_h(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    x, n = torch.broadcast_tensors(x, n)
    n, zero = _degree(n)
    two_x = x + x
    # r = 2x q - k p with k = 2, 4, ... (the loop's k runs over even numbers); NaN past 128 as ATen
    result = _select_recurrence(n, two_x, RECURRENCE_STEPS, lambda k, q, p: two_x * q - float(2 * (k - 1)) * p)
    return _finish(result, n, zero, two_x)


def _hermite_he(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    x, n = torch.broadcast_tensors(x, n)
    n, zero = _degree(n)
    result = _select_recurrence(n, x, RECURRENCE_STEPS, lambda k, q, p: x * q - float(k - 1) * p)
    return _finish(result, n, zero, x)


def _laguerre_l(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    x, n = torch.broadcast_tensors(x, n)
    n, zero = _degree(n)
    one_minus_x = 1.0 - x
    # ATen's loop index j = k - 1: r = ((2j + (1 - x)) q - j p) / (j + 1)
    result = _select_recurrence(n, one_minus_x, RECURRENCE_STEPS,
                                lambda k, q, p: ((float(2 * (k - 1)) + one_minus_x) * q - float(k - 1) * p) / float(k))
    result = _finish(result, n, zero, one_minus_x)
    return torch.where((x == 0) & ~zero, 1.0, result)


def _legendre_p(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    x, n = torch.broadcast_tensors(x, n)
    n, zero = _degree(n)
    # ATen's loop index j = k - 1: r = ((2j + 1) x q - j p) / (j + 1)
    result = _select_recurrence(n, x, RECURRENCE_STEPS,
                                lambda k, q, p: (float(2 * k - 1) * x * q - float(k - 1) * p) / float(k))
    result = _finish(result, n, zero, x)
    at_one = torch.where((x > 0) | ~_odd(n), 1.0, -1.0)
    return torch.where((torch.abs(x) == 1) & ~zero, at_one, result)


def _polynomial(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> dict[str, Callable[..., Any]]:
    """The three overloads (tensor x and n, scalar x, scalar n), all promoted as a binary float op."""
    tensor_form = float_math(fn)

    def x_scalar(x: Any, n: torch.Tensor) -> torch.Tensor:
        return tensor_form(torch.scalar_tensor(x, dtype=torch.result_type(x, n)), n)

    def n_scalar(x: torch.Tensor, n: Any) -> torch.Tensor:
        return tensor_form(x, torch.scalar_tensor(n, dtype=torch.result_type(x, n)))

    return {"default": tensor_form, "x_scalar": x_scalar, "n_scalar": n_scalar}


_FAMILIES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "chebyshev_polynomial_t": _Chebyshev("t", 6, shifted=False),
    "chebyshev_polynomial_u": _Chebyshev("u", 8, shifted=False),
    "chebyshev_polynomial_v": _Chebyshev("v", 8, shifted=False),
    "chebyshev_polynomial_w": _Chebyshev("w", 8, shifted=False),
    "shifted_chebyshev_polynomial_t": _Chebyshev("t", 6, shifted=True),
    "shifted_chebyshev_polynomial_u": _Chebyshev("u", 6, shifted=True),
    "shifted_chebyshev_polynomial_v": _Chebyshev("v", 6, shifted=True),
    "shifted_chebyshev_polynomial_w": _Chebyshev("w", 4, shifted=True),
    "hermite_polynomial_h": _hermite_h,
    "hermite_polynomial_he": _hermite_he,
    "laguerre_polynomial_l": _laguerre_l,
    "legendre_polynomial_p": _legendre_p,
}

#: aten op -> decomposition, for every overload of every family above.
POLYNOMIAL_FORMULAS: dict[Any, Any] = {
    getattr(getattr(aten, f"special_{name}"), overload): decomposition
    for name, fn in _FAMILIES.items()
    for overload, decomposition in _polynomial(fn).items()
}
