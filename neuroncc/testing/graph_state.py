"""The state a random graph grows in, and the building blocks every graph family draws with: small shapes and
dtypes, picking pool values, splat constants, broadcasting partners (see :mod:`neuroncc.testing.graphs`)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from hypothesis import strategies as st

from neuroncc.ir import Builder, DType, TensorType, Value

FLOAT_UNARY = ("neg", "abs", "relu", "exp", "tanh", "sigmoid", "gelu", "sqrt", "log", "floor", "sin", "rsqrt")
INT_UNARY = ("neg", "abs", "relu")
BINARY = ("add", "sub", "mul", "maximum", "minimum")
COMPARISONS = ("lt", "le", "gt", "ge", "eq", "ne")
SPLATS = (0.0, -0.0, 1.0, 2.0, 0.5, 0.1)  # 0.1 is not exact in any float type: rounding must agree
REDUCTIONS = ("sum", "amax", "amin", "mean", "prod")


@dataclass
class GraphState:
    """A graph under construction: its builder and the values new ops may read."""

    builder: Builder
    pool: list[Value] = field(default_factory=list)
    empty_dims: bool = True

    def add(self, value: Value | tuple) -> None:
        if isinstance(value, tuple):
            self.pool.extend(value)
        else:
            self.pool.append(value)


T = TypeVar("T")


def choose(draw, options: Sequence[T]) -> T:
    """``draw(st.sampled_from(options))``: the same choice (one integer in [0, len(options))), without a new
    strategy per call. Hypothesis validates every new strategy object on its first draw, and ``sampled_from``
    objects are never shared: building and validating them per draw was most of the time spent generating a
    random graph (a profile of the pass property tests: 240 of 287 samples in ``graphs``)."""
    return options[draw(st.integers(0, len(options) - 1))]


@functools.cache
def sizes(allow_empty: bool) -> st.SearchStrategy[int]:
    """Small dims; 0 about one time in ten when allowed (an empty param empties most of a graph)."""
    return st.sampled_from((2, 3, 1, 4, 2, 3, 4, 1, 3) + ((0,) if allow_empty else ()))


@functools.cache
def shapes(allow_empty: bool = True, max_rank: int = 3) -> st.SearchStrategy[tuple[int, ...]]:
    return st.lists(sizes(allow_empty), min_size=0, max_size=max_rank).map(tuple)


@functools.cache
def dtypes(mixed: bool = True) -> st.SearchStrategy[DType]:
    if not mixed:
        return st.just(DType.f32)
    return st.sampled_from((DType.f32, DType.f32, DType.f32, DType.bf16, DType.f16, DType.i32, DType.i64, DType.bool))


def pick(draw, state: GraphState, predicate: Callable[[Value], bool] = lambda v: True) -> Value | None:
    candidates = [v for v in state.pool if predicate(v)]
    if not candidates:
        return None
    # favour recent values so graphs grow into chains rather than stars
    drawn = draw(st.integers(0, len(candidates) - 1))  # mapped here, not by a new strategy per call: see choose
    return candidates[drawn if drawn % 3 else len(candidates) - 1]


def splat(b: Builder, value: float, dtype: DType, shape: tuple[int, ...] = ()) -> Value:
    if dtype.is_bool:
        return b.op("full", shape=shape, dtype=dtype, value=int(value != 0))
    if not dtype.is_float:
        return b.op("full", shape=shape, dtype=dtype, value=int(value))
    return b.op("full", shape=shape, dtype=dtype, value=value)


def broadcast_partner(draw, state: GraphState, x: Value, splats: Sequence[float] = SPLATS) -> Value:
    """A value of x's dtype whose shape broadcasts with x's: a pool value, a new parameter or a splat."""
    t = x.type
    choice = choose(draw, ("param", "pool", "splat", "splat"))  # a fresh parameter shrinks best
    if choice == "pool":
        found = pick(draw, state, lambda v: v is not x and v.type.dtype == t.dtype and broadcasts(v.type.shape, t.shape))
        if found is not None:
            return found
    if choice == "splat" or choice == "pool":
        value = choose(draw, splats)
        shape = choose(draw, ((), t.shape, tuple(1 for _ in t.shape)))
        return splat(state.builder, value, t.dtype, shape)
    drop = draw(st.integers(0, t.rank))
    shape = tuple(s if draw(st.booleans()) else 1 for s in t.shape[drop:])
    param = state.builder.param(TensorType(shape, t.dtype))
    state.pool.append(param)
    return param


def broadcasts(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    for x, y in zip(reversed(a), reversed(b)):
        if x != y and x != 1 and y != 1:
            return False
    return True


# ---- op families --------------------------------------------------------------------------------------
