"""``canonicalize``: dead-code elimination, common-subexpression elimination, constant folding and algebraic
simplification, applied to a fixed point by one driver (:func:`neuroncc.passes.rewrite.rewrite_to_fixed_point`).

The rules live in :mod:`neuroncc.passes.canonicalize_rules` as tables with one comment per rule. Kernel
regions are canonicalized too (their parameters and results stay as they are).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from neuroncc.ir import Function
from neuroncc.passes.canonicalize_rules import CANONICALIZE_RULES
from neuroncc.passes.manager import Pass, PassContext
from neuroncc.passes.rewrite import map_regions, rewrite_to_fixed_point


@dataclass(frozen=True)
class Canonicalize(Pass):
    """Simplify to a canonical form without changing any result.

    ``fold_limit``: fold ops on constants whose operands and results have at most this many elements
    (elementwise ops on splat constants fold at any size). ``signed_zeros=false`` also folds ``x + 0.0 -> x``
    for floats, as XLA does; exact except that ``-0.0 + 0.0`` then gives ``-0.0`` instead of ``0.0``.
    """

    name: ClassVar[str] = "canonicalize"
    fold_limit: int = 64
    signed_zeros: bool = True

    def __post_init__(self) -> None:
        if self.fold_limit < 0:
            raise ValueError(f"fold_limit must be non-negative, got {self.fold_limit}")

    def apply(self, fn: Function, ctx: PassContext) -> Function:
        fn = map_regions(fn, lambda region: self.apply(region, ctx))
        return rewrite_to_fixed_point(fn, CANONICALIZE_RULES, config=self)
