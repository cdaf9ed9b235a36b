"""``fold-one-hot-sums``: the sum of a one-hot row becomes one select per row.

Cross-entropy's gradient (AOTAutograd's decomposition of ``nll_loss_backward``) builds the one-hot rows
``where(iota == target, -1, 0) * scale`` over the classes and sums each row again; over a 32000-class vocabulary
that sum is a pass over every element of every row (~14% of the gradient kernel's compute, docs/performance-history.md,
session 11) for what is one term. Along the summed dim the iota takes each value once, so at most one element
of a row is picked; the others are all the same value (``0 * scale``: a zero, or NaN when the scale is inf or
NaN). So, for a sum over the iota's dim of length ``n``:

    sum(where(iota == t, a, z) * s)  ->  where(0 <= t < n, a * s, z * s) + (z * s + 0.0)     (n > 1)

with ``t``, ``a``, ``s`` constant along that dim, ``z`` a constant zero (without ``* s`` when there is no scale).
The result is exactly the sum's in IEEE arithmetic, in any order of summation: a sum starts from +0.0 (so that
a sum of -0.0s is +0.0), and adding more copies of one zero (or NaN) to a value changes nothing after the first.
The one-hot rows stay where something else reads them (the gradient itself).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from neuroncc.ir import Function, Value
from neuroncc.passes.manager import Pass, PassContext
from neuroncc.passes.rewrite import Replacement, Rule, Site, map_regions, rewrite_to_fixed_point, scalar_attr


def _constant_along(value: Value, dim: int, rank: int) -> bool:
    """Whether ``value``, broadcast (numpy-style, right-aligned) to rank ``rank``, is constant along ``dim``."""
    shape = value.type.shape
    own = dim - (rank - len(shape))
    return own < 0 or shape[own] == 1


def _counting_axis(site: Site, value: Value) -> tuple[int, int] | None:
    """(axis counted from the right, length) along which integer ``value`` is 0, 1, ..., length - 1 (the same
    along its other dims): an ``iota`` from 0 by 1 (or a constant of its values), reshaped to put its one non-1
    dim anywhere, or expanded."""
    op = site.producer(value)
    if op is None or not value.type.dtype.is_int:
        return None
    if op.name == "iota":
        return (-1, op.attrs["length"]) if op.attrs["start"] == 0 and op.attrs["step"] == 1 else None
    if op.name == "constant":  # (canonicalize folds a short iota, reshaped, to its values)
        counted = [axis for axis, size in enumerate(value.type.shape) if size != 1]
        values = op.attrs["value"].array.reshape(-1)
        if len(counted) == 1 and np.array_equal(values, np.arange(values.size)):
            return counted[0] - len(value.type.shape), values.size
        return None
    if op.name == "expand":
        return _counting_axis(site, op.operands[0])
    if op.name == "reshape":
        inner = _counting_axis(site, op.operands[0])
        shape = value.type.shape
        counted = [axis for axis, size in enumerate(shape) if size != 1]
        if inner is None or op.operands[0].type.numel != inner[1] or len(counted) != 1:
            return None
        return counted[0] - len(shape), inner[1]
    return None


def _one_hot(site: Site, value: Value, dim: int, rank: int) -> tuple[Value, Value, Value] | None:
    """(t, a, z) when ``value`` is ``where(iota == t, a, z)`` with the iota counting along ``dim`` over its whole
    length, ``t`` of the iota's type and ``a`` constant along ``dim``, ``z`` a constant zero."""
    where = site.producer_named(value, "where")
    if where is None:
        return None
    condition, picked, other = where.operands
    equal = site.producer_named(condition, "eq")
    found = site.splat(other)
    if equal is None or found is None or isinstance(found, bool) or found != 0 \
            or not _constant_along(picked, dim, rank):
        return None
    for counter, target in (equal.operands, reversed(equal.operands)):
        axis = _counting_axis(site, counter)
        if axis == (dim - rank, value.type.shape[dim]) and target.type.dtype == counter.type.dtype \
                and _constant_along(target, dim, rank):
            return target, picked, other
    return None


def fold_one_hot_sum(site: Site) -> Replacement:
    summed = site.operands[0]
    if len(site.attrs["dims"]) != 1 or site.result.type.dtype != summed.type.dtype:
        return None
    (dim,) = site.attrs["dims"]
    if summed.type.shape[dim] < 2:  # (a sum over one element is canonicalize's)
        return None
    rank, length = len(summed.type.shape), summed.type.shape[dim]
    candidates = [(summed, None)]
    product = site.producer_named(summed, "mul")
    if product is not None:
        x, y = product.operands
        candidates += [(x, y), (y, x)]
    for one_hot_value, scale in candidates:
        if scale is not None and (not _constant_along(scale, dim, rank)
                                  or one_hot_value.type.shape != summed.type.shape):
            continue
        found = _one_hot(site, one_hot_value, dim, rank)
        if found is not None:
            return _select(site, *found, scale, dim, length)
    return None


def _select(site: Site, target: Value, picked: Value, zero: Value, scale: Value | None, dim: int,
            length: int) -> Value:
    """where(0 <= target < length, picked * scale, zero * scale) + (zero * scale + 0), shaped as the sum's result."""
    integer = target.type.dtype
    inside = site.emit("logical_and",
                       site.emit("ge", target, site.emit("full", shape=(), dtype=integer, value=0)),
                       site.emit("lt", target, site.emit("full", shape=(), dtype=integer, value=length)))
    if scale is not None:
        picked, zero = site.emit("mul", picked, scale), site.emit("mul", zero, scale)
    start = site.emit("full", shape=(), dtype=zero.type.dtype, value=scalar_attr(0, zero.type.dtype))
    total = site.emit("add", site.emit("where", inside, picked, zero), site.emit("add", zero, start))
    rank = len(site.operands[0].type.shape)
    kept = tuple(1 if axis == dim else size for axis, size in enumerate(site.operands[0].type.shape))
    if total.type.shape != kept:
        aligned = (1,) * (rank - len(total.type.shape)) + total.type.shape
        if aligned != total.type.shape:
            total = site.emit("reshape", total, shape=aligned)
        if aligned != kept:
            total = site.emit("expand", total, shape=kept)
    if site.result.type.shape != kept:
        total = site.emit("reshape", total, shape=site.result.type.shape)
    return total


RULES: tuple[Rule, ...] = (
    Rule("sum", fold_one_hot_sum),  # sum(where(iota == t, a, 0) [* s]) over the iota's dim -> one select per row
)


@dataclass(frozen=True)
class FoldOneHotSums(Pass):
    """Replace each sum of one-hot rows over their classes by one select per row (see the module docstring)."""

    name: ClassVar[str] = "fold-one-hot-sums"

    def apply(self, fn: Function, ctx: PassContext) -> Function:
        fn = map_regions(fn, lambda region: self.apply(region, ctx))
        return rewrite_to_fixed_point(fn, RULES)
