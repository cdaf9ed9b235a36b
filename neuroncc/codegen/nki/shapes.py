"""How region values sit on a stage's iteration space: groupings and affine maps.

A *stage* iterates over a domain ``D`` (a shape). Every value a stage touches is related to ``D`` by an
:class:`AffineMap`: domain point ``d`` holds the value's element at flat (row-major) position
``offset + sum(coeffs[k] * d[k])``; a zero coefficient means the value is broadcast along that domain dim.
Two reads of the same value agree exactly when their maps are equal, which is how the emitter decides whether
an on-chip tile can be reused or the value has to be re-read from HBM.

An op's iteration shape ``S`` is attached to ``D`` by a *grouping*: each dim of ``S`` covers a run of
consecutive domain dims whose sizes multiply to it (``full``), or has size 1 and is broadcast over its run
(possibly empty). Leading domain dims no dim of ``S`` covers are broadcast. This lets one stage hold values
reshaped into each other (a ``[16, 16]`` matmul output and its ``[2, 8, 16]`` view) as long as the element
order is kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from neuroncc.ir import Op, Value
from neuroncc.ir.types import contiguous_strides
from neuroncc.ir.view_windows import StridedView, view_chain_layout


@dataclass(frozen=True, slots=True)
class DimGroup:
    """The domain dims one dim of an iteration shape covers; ``full`` unless it is a broadcast size-1 dim."""

    dims: tuple[int, ...]
    full: bool


Grouping = tuple[DimGroup, ...]


def find_grouping(shape: tuple[int, ...], domain: tuple[int, ...]) -> Grouping | None:
    """Attach ``shape`` to ``domain`` (see the module docstring), or None when it does not fit.

    Size-1 dims prefer broadcasting over one domain dim (numpy's right alignment) and otherwise cover nothing;
    larger dims take the shortest run of domain dims whose product matches.
    """
    return _match(tuple(shape), tuple(domain), len(shape), len(domain))


@lru_cache(maxsize=4096)
def _match(shape: tuple[int, ...], domain: tuple[int, ...], i: int, j: int) -> Grouping | None:
    if i == 0:
        return ()
    size = shape[i - 1]
    if size == 1:
        candidates = [(j - 1, False)] if j >= 1 else []
        candidates.append((j, False))
    else:
        candidates = []
        product = 1
        for k in range(j - 1, -1, -1):
            product *= domain[k]
            if product == size:
                candidates.append((k, True))
            if product > size and domain[k] != 1:
                break
    for start, full in candidates:
        rest = _match(shape, domain, i - 1, start)
        if rest is not None:
            return rest + (DimGroup(tuple(range(start, j)), full),)
    return None


@dataclass(frozen=True, slots=True)
class AffineMap:
    """Domain point ``d`` -> flat element ``offset + sum(coeffs[k] * d[k])`` of a tensor (see module doc)."""

    offset: int
    coeffs: tuple[int, ...]

    def normalized(self, domain: tuple[int, ...]) -> AffineMap:
        """The same map with coefficients of size-1 domain dims zeroed (they never vary)."""
        return AffineMap(self.offset, tuple(0 if n == 1 else c for c, n in zip(self.coeffs, domain)))

    def varies_along(self, dim: int) -> bool:
        return self.coeffs[dim] != 0


def index_coefficients(grouping: Grouping, domain: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, ...]:
    """Per domain dim, the flat step of a tensor whose dim ``j`` has stride ``strides[j]`` and sits on
    ``grouping[j]``: inside a group the row-major position of the covered domain dims is the index."""
    coeffs = [0] * len(domain)
    for group, stride in zip(grouping, strides):
        if not group.full:
            continue
        inner = 1
        for dim in reversed(group.dims):
            coeffs[dim] += stride * inner
            inner *= domain[dim]
    return tuple(coeffs)


def operand_grouping(op_grouping: Grouping, op_shape: tuple[int, ...], operand_shape: tuple[int, ...]) -> Grouping:
    """The grouping of an operand broadcast (numpy, right-aligned) into an op's iteration shape."""
    lead = len(op_shape) - len(operand_shape)
    groups = []
    for j, size in enumerate(operand_shape):
        group = op_grouping[lead + j]
        groups.append(DimGroup(group.dims, group.full and size == op_shape[lead + j]))
    return tuple(groups)


def map_through_window(grouping: Grouping, domain: tuple[int, ...], window: StridedView) -> AffineMap:
    """The map of a value read through ``window`` (its shape, strides and offset on the root's storage)."""
    return AffineMap(window.offset, index_coefficients(grouping, domain, window.strides)).normalized(domain)


def row_major_map(grouping: Grouping, domain: tuple[int, ...], shape: tuple[int, ...]) -> AffineMap:
    """The map of a contiguous value of ``shape`` attached to ``domain`` by ``grouping``."""
    return AffineMap(0, index_coefficients(grouping, domain, contiguous_strides(shape))).normalized(domain)


def view_window(value: Value, producers: dict[Value, Op]) -> tuple[Value, StridedView] | None:
    """The non-view value ``value`` reads (through pure views) and the window it reads, the root taken as
    contiguous (kernel arguments always are); None when a reshape of a non-contiguous window needs a copy."""
    return view_chain_layout(value, producers, contiguous_root=True)


def numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)
