"""``static-shape``: prove every shape static and concrete, and fold what the shapes alone determine.

Every IR shape is a tuple of ints, so "static" means: the graph verifies, no size or stride is negative or
absurd (over ``max_dim`` per dimension or ``max_numel`` elements), and the metadata does not mark the graph as
traced with dynamic or symbolic shapes. Anything else is a :class:`PassError` naming the value.

Then values fixed by their shapes fold to constants: an op producing only empty tensors becomes ``full`` of
that shape, a reduction over an empty extent becomes its identity (sum 0, prod 1, any false, all true, mean
and var NaN), and a matrix product with an empty contraction becomes zeros.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from neuroncc.errors import PassError
from neuroncc.ir import REGISTRY, Category, Function, Value, verify
from neuroncc.ir.graph import format_attr, value_names
from neuroncc.passes.manager import Pass, PassContext
from neuroncc.passes.rewrite import Replacement, Rule, Site, map_regions, rewrite_to_fixed_point, scalar_attr


def empty_result_is_full(site: Site) -> Replacement:
    op = site.op
    if not op.results or REGISTRY.get(op.name).category is Category.CONSTANT:
        return None
    if any(r.type.numel for r in op.results):
        return None
    if REGISTRY.get(op.name).category is Category.EXTERN and any(v.type.numel for v in op.operands):
        return None  # a library call with an empty result can still raise (linalg_check_errors)
    fulls = tuple(site.emit("full", shape=r.type.shape, dtype=r.type.dtype, value=scalar_attr(0, r.type.dtype))
                  for r in op.results)
    return fulls if len(fulls) > 1 else fulls[0]


#: The value of each reduction over zero elements.
_EMPTY_REDUCTION = {"sum": 0, "prod": 1, "any": 0, "all": 1, "mean": float("nan"), "var": float("nan")}


def empty_reduction(site: Site) -> Replacement:
    x = site.operands[0]
    if site.result.type.numel == 0 or all(x.type.shape[d] for d in site.attrs["dims"]):
        return None
    return site.full(_EMPTY_REDUCTION[site.op.name])


def empty_contraction(site: Site) -> Replacement:
    a, b = site.operands
    return site.full(0) if site.result.type.numel and (a.type.numel == 0 or b.type.numel == 0) else None


STATIC_SHAPE_RULES: tuple[Rule, ...] = (
    Rule("*", empty_result_is_full),  # an op producing only empty tensors -> full of that shape
    Rule("mm", empty_contraction),  # [M,0] @ [0,N] -> zeros
    Rule("bmm", empty_contraction),  # [B,M,0] @ [B,0,N] -> zeros
) + tuple(
    Rule(name, empty_reduction)  # a reduction over an empty extent -> its identity (0, 1, false, true, NaN)
    for name in _EMPTY_REDUCTION
)


@dataclass(frozen=True)
class StaticShape(Pass):
    """Reject graphs whose shapes are not static and concrete; fold shape-determined values."""

    name: ClassVar[str] = "static-shape"
    max_dim: int = 2**31 - 1
    max_numel: int = 2**40

    def apply(self, fn: Function, ctx: PassContext) -> Function:
        verify(fn)
        check_metadata(fn)
        for value, where in _values(fn):
            problem = self.shape_problem(value)
            if problem:  # values are named only for the message: naming them all costs a print of the graph
                name = value_names(fn).get(value, str(value.type))
                raise PassError(f"static-shape: {where}: {name} {problem}")
        return self.fold(fn)

    def fold(self, fn: Function) -> Function:
        fn = map_regions(fn, self.fold)
        return rewrite_to_fixed_point(fn, STATIC_SHAPE_RULES)

    def shape_problem(self, value: Value) -> str | None:
        """What makes ``value``'s type not static and concrete (completing "<value name> ..."), or None."""
        t = value.type
        big = [s for s in t.shape if s > self.max_dim]
        if big:
            return f"has a dimension of size {big[0]} (more than {self.max_dim}); is a size unresolved?"
        if t.numel > self.max_numel:
            return f"has {t.numel} elements (more than {self.max_numel})"
        if t.strides is not None and any(s < 0 for s in t.strides):
            return f"has negative strides {list(t.strides)}"
        return None


def check_metadata(fn: Function) -> None:
    """Metadata keys ``dynamic*`` / ``symbolic*`` with a true or non-empty value mark symbolic tracing."""
    for key, value in fn.metadata.items():
        if key.startswith(("dynamic", "symbolic")) and _truthy(value):
            raise PassError(f"static-shape: func @{fn.name} is marked {key} = {format_attr(value)}: neuroncc compiles "
                            "static shapes only (compile with dynamic=False)")


def _truthy(value: Any) -> bool:
    return value not in (None, False, 0, "", ())


def _values(fn: Function, where: str | None = None) -> Iterator[tuple[Value, str]]:
    where = where or f"func @{fn.name}"
    for param in fn.params:
        yield param, where
    for op in fn.ops:
        for result in op.results:
            yield result, f"{where}: op '{op.name}'"
        for region in op.regions:
            yield from _values(region, f"{where}: region of '{op.name}'")
