"""``div-to-mul``: divide by a constant -> multiply by its reciprocal.

``x / 8.0`` and ``x * 0.125`` are the same number in IEEE arithmetic: both round the exact value
``x * 2**-3`` once. So for a divisor that is a power of two (whose reciprocal the element type holds
exactly) the rewrite changes no bit, and a multiplication is cheaper than a division on every target.
``approximate=true`` also rewrites other divisors (``x / 3.0 -> x * 0.333...``), which can differ in the
last bit, as ``-ffast-math``'s reciprocal division does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from neuroncc.ir import DType, Function
from neuroncc.ir.dtypes import to_storage
from neuroncc.passes import Pass, PassContext
from neuroncc.passes.rewrite import Replacement, Rule, Site, rewrite_to_fixed_point


def reciprocal(divisor: object, dtype: DType, approximate: bool) -> float | None:
    """``1 / divisor`` if the rewrite may use it, else None."""
    if isinstance(divisor, bool) or not isinstance(divisor, (int, float)) or not dtype.is_float:
        return None
    divisor = float(to_storage(np.array(divisor), dtype))  # the value the tensor holds: 65536.0 is inf in f16
    if divisor == 0.0 or not math.isfinite(divisor):
        return None
    inverse = 1.0 / divisor
    if approximate:
        return inverse
    exact_power_of_two = math.frexp(divisor)[0] in (0.5, -0.5)
    representable = float(to_storage(np.array(inverse), dtype)) == inverse
    return inverse if exact_power_of_two and representable else None


def div_by_constant(site: Site) -> Replacement:
    x, divisor = site.operands
    if site.attrs["rounding_mode"] != "none":
        return None  # floor / trunc division rounds the quotient: not a multiplication
    inverse = reciprocal(site.splat(divisor), divisor.type.dtype, site.config.approximate)
    if inverse is None:
        return None
    scale = site.emit("full", shape=divisor.type.shape, dtype=divisor.type.dtype, value=inverse)
    return site.emit("mul", x, scale)


DIV_TO_MUL_RULES: tuple[Rule, ...] = (
    Rule("div", div_by_constant),  # x / c -> x * (1/c) when c is a splat constant (a power of two unless approximate)
)


@dataclass(frozen=True)
class DivToMul(Pass):
    """Replace division by a constant with multiplication by its reciprocal (exact for powers of two)."""

    name: ClassVar[str] = "div-to-mul"
    approximate: bool = False

    def apply(self, fn: Function, ctx: PassContext) -> Function:
        return rewrite_to_fixed_point(fn, DIV_TO_MUL_RULES, config=self)
