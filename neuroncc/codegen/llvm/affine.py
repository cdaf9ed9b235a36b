"""Affine index forms: what the emitter knows about an i64 index besides its IR value.

Every index the emitter computes is, as far as it can tell, ``const + sum(coef * var)`` where a var is a loop
counter with a known range or an opaque value (a dynamic loop counter, a loaded index, a division it could not
fold) with a known divisibility. Knowing the form lets floor division and remainder by a constant fold into
affine arithmetic whenever the low part of the index provably stays below the divisor: a reshape that splits
a loop dim (``c // 512``, ``c % 512`` over a loop ``c = c0 * 512 + c1``) then costs nothing per element, and
the innermost loop stays unit-stride, hence vectorizable.

When a division does not fold because one loop counter straddles the divisor, :func:`split_wishes` says where
that loop should be cut into two (the emitter re-emits the phase with the loop factored, see ``indexing``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


class Var:
    """An index the emitter cannot see through (identity-compared).

    ``lo``/``hi`` bound it (inclusive; None: unknown, but indices are never negative), ``align`` divides it.
    A counter of a static loop also carries ``key`` (which logical loop of the phase), ``stride`` (its weight
    in that loop's index) and ``extent`` (its trip count): what a wish to split or unroll it refers to. The
    result of a division the emitter could not fold carries ``divided``: (the dividend's form, the divisor,
    whether it is the quotient, whether the division is exact), so that a sum holding both ``x // n * n`` and
    ``x % n`` becomes ``x`` again (:func:`_recombine`)."""

    __slots__ = ("value", "serial", "lo", "hi", "align", "key", "stride", "extent", "origin", "divided")

    def __init__(self, value: Any, serial: int, lo: int | None = None, hi: int | None = None, align: int = 1,
                 key: Any = None, stride: int = 1, extent: int = 0, origin: tuple = (),
                 divided: tuple | None = None):
        self.value, self.serial, self.lo, self.hi, self.align = value, serial, lo, hi, max(align, 1)
        self.key, self.stride, self.extent = key, stride, extent
        self.origin = origin  # for a division result: the cuts that would have made it a loop counter
        self.divided = divided


@dataclass(frozen=True)
class Affine:
    """``const + sum(coef * var for var, coef in terms)``; terms sorted by var serial, no zero coefficient."""

    terms: tuple[tuple[Var, int], ...] = ()
    const: int = 0

    @staticmethod
    def of(var: Var) -> Affine:
        return Affine(((var, 1),), 0)

    def __add__(self, other: Affine) -> Affine:
        coefs: dict[Var, int] = dict(self.terms)
        for var, coef in other.terms:
            coefs[var] = coefs.get(var, 0) + coef
        for var in coefs:  # a loop, not any(): this runs on every sum the emitter forms (~5 ms on f2's compile)
            if var.divided is not None:
                return _recombine(coefs, self.const + other.const)
        terms = tuple(sorted(((v, c) for v, c in coefs.items() if c), key=lambda t: t[0].serial))
        return Affine(terms, self.const + other.const)

    def scale(self, k: int) -> Affine:
        if k == 0:
            return Affine()
        return Affine(tuple((v, c * k) for v, c in self.terms), self.const * k)

    def __sub__(self, other: Affine) -> Affine:
        return self + other.scale(-1)

    @property
    def bounds(self) -> tuple[int, int] | None:
        """(min, max) over the vars' ranges, or None when a var is unbounded."""
        lo = hi = self.const
        for var, coef in self.terms:
            if var.lo is None or var.hi is None:
                return None
            a, b = coef * var.lo, coef * var.hi
            lo, hi = lo + min(a, b), hi + max(a, b)
        return lo, hi

    @property
    def alignment(self) -> int:
        """The largest number known to divide every value of the form (0 for the constant 0)."""
        g = abs(self.const)
        for var, coef in self.terms:
            g = math.gcd(g, abs(coef) * var.align)
        return g

    @property
    def non_negative(self) -> bool:
        """Every term is non-negative (vars are indices: an unknown lower bound still means >= 0)."""
        return self.const >= 0 and all(c > 0 and (v.lo is None or v.lo >= 0) for v, c in self.terms)


def _recombine(coefs: dict[Var, int], const: int) -> Affine:
    """The sum of ``coefs`` and ``const`` with every ``c * n * (x // n) + c * (x % n)`` replaced by ``c * x``, and
    ``c * n * (x // n)`` by ``c * x`` when ``n`` divides ``x`` (exact). An identity of unsigned (and of wrapping)
    arithmetic, so always exact. Why: a row split into (batch, position) digits by a division that does not fold
    (the parallel loop's chunk start ``s``, with ``s % 256`` and ``s // 256``) and then flattened again by the
    strides of a contiguous array (``131072 * q + 512 * r``) would otherwise address memory through the
    division's two results; the address is then not an affine function of the loop counters for LLVM's scalar
    evolution, and Loop Strength Reduction spends most of a LayerNorm backward module's code generation on
    those address expressions (session 19 coldo3: half its object emission time)."""
    rest = Affine()
    for var in [v for v, c in coefs.items() if c and v.divided is not None]:
        coef = coefs.get(var, 0)
        dividend, n, quotient, exact = var.divided
        if not quotient or not coef:
            continue
        partner = next((v for v, c in coefs.items() if c and v.divided is not None and v.divided[1] == n
                        and not v.divided[2] and v.divided[0] == dividend), None)
        if partner is not None and coef == n * coefs[partner]:
            rest = rest + dividend.scale(coefs[partner])
            coefs[var] = coefs[partner] = 0
        elif partner is None and exact and coef % n == 0:
            rest = rest + dividend.scale(coef // n)
            coefs[var] = 0
    terms = tuple(sorted(((v, c) for v, c in coefs.items() if c), key=lambda t: t[0].serial))
    # nothing recombined: the sum as it is (adding an empty rest would recombine again, endlessly)
    return Affine(terms, const) + rest if rest.terms else Affine(terms, const + rest.const)


@dataclass(frozen=True)
class DivFold:
    """``x // d == quotient + high // d`` and ``x % d == low + high % d``: ``low`` is in [0, m), ``high`` a
    multiple of m, m divides d. ``high`` is what must still be divided in IR (nothing when it has no terms
    and no constant); it holds only terms the low part could not absorb."""

    quotient: Affine
    low: Affine
    high: Affine
    m: int


def fold_divmod(x: Affine, d: int) -> DivFold | None:
    """Split ``x`` for floor division by ``d`` > 0 (None when ``x`` may be negative: no folding then)."""
    if not x.non_negative:
        return None
    q_terms = tuple((v, c // d) for v, c in x.terms if c % d == 0)
    r_terms = tuple((v, c) for v, c in x.terms if c % d)
    quotient = Affine(q_terms, x.const // d)
    rest = Affine(r_terms, x.const % d)
    # The largest divisor m of d such that the terms not divisible by m (plus the constant's residue) stay
    # below m: then the rest is (a multiple of m) + (something in [0, m)), and dividing by d only needs the
    # multiple of m (often loop-invariant, or nothing at all).
    candidates = {math.gcd(d, c * v.align) for v, c in r_terms} | {d, 1}
    for m in sorted(candidates, reverse=True):
        low = Affine(tuple((v, c) for v, c in r_terms if (c * v.align) % m), rest.const % m)
        high = Affine(tuple((v, c) for v, c in r_terms if (c * v.align) % m == 0), rest.const - rest.const % m)
        bounds = low.bounds
        if bounds is not None and 0 <= bounds[0] and bounds[1] < m:
            return DivFold(quotient, low, high, m)
    raise AssertionError("m = 1 always fits")  # pragma: no cover


def split_wishes(high: Affine, d: int) -> list[tuple[Any, int]]:
    """(loop key, cut) pairs that would let ``high // d`` fold: a counter with ``coef`` dividing ``d`` whose
    range crosses a multiple of ``d`` is better iterated as two loops, the inner one of ``d // coef``."""
    wishes = []
    for var, coef in high.terms:
        if var.key is None or coef <= 0 or d % coef:
            continue
        cut = d // coef
        if 1 < cut < var.extent and var.extent % cut == 0:
            wishes.append((var.key, var.stride * cut))
    return wishes
