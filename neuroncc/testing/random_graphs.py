"""Hypothesis strategies for random well-typed IR graphs (for property tests of passes and backends).

    from hypothesis import given
    from neuroncc.testing.random_graphs import graphs

    @given(graphs())
    def test_my_pass(fn): ...

A graph grows from a few parameters by appending ops drawn from families: elementwise chains (unary, binary
with broadcasting and splat constants such as 0, 1, 2 that exercise algebraic rules), comparisons and
``where``, casts between dtypes, reductions, views (reshape, permute, expand, slice, select, squeeze,
unsqueeze), data movement (cat, flip, pad, copy), constants, gathers with in-range constant indices
(index_select, gather, embedding), and matmuls (mm / bmm, sometimes through a transposed operand). Shapes are small; size-0 dims and 0-dim tensors appear. Every op is built through
:class:`neuroncc.ir.Builder`, so every graph type-checks; an op whose random attributes do not fit is simply
not added. More families (advanced indexing and scatters, cat/pad/slice_scatter, clamp, multi-result ops,
the remaining elementwise ops, addmm) live in :mod:`neuroncc.testing.graph_families`. Extend a family by
adding a ``_draw_*`` function and listing it in :data:`FAMILIES` or ``MORE_FAMILIES``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from hypothesis import strategies as st

from neuroncc.errors import TypeInferenceError
from neuroncc.ir import REGISTRY, Builder, DenseAttr, DType, Function, TensorType, Trait
from neuroncc.testing.graph_families import MORE_FAMILIES, focused_family
from neuroncc.testing.graph_state import (
    BINARY, COMPARISONS, FLOAT_UNARY, INT_UNARY, REDUCTIONS, SPLATS, GraphState, broadcast_partner, choose,
    dtypes, pick, shapes, splat,
)


def _draw_unary(draw, state: GraphState) -> None:
    x = pick(draw, state, lambda v: not v.type.dtype.is_bool)
    if x is None:
        return
    names = FLOAT_UNARY if x.type.dtype.is_float else INT_UNARY
    state.add(state.builder.op(choose(draw, names), x))


def _draw_binary(draw, state: GraphState) -> None:
    x = pick(draw, state, lambda v: not v.type.dtype.is_bool)
    if x is None:
        return
    y = broadcast_partner(draw, state, x)
    names = BINARY + (("div", "pow") if x.type.dtype.is_float else ())
    name = choose(draw, names)
    commutative = REGISTRY.get(name).has(Trait.COMMUTATIVE)  # either order means the same
    operands = (y, x) if draw(st.booleans()) and commutative else (x, y)
    state.add(state.builder.op(name, *operands))


def _draw_where(draw, state: GraphState) -> None:
    x = pick(draw, state, lambda v: not v.type.dtype.is_bool)
    if x is None:
        return
    b = state.builder
    condition = b.op(choose(draw, COMPARISONS), x, broadcast_partner(draw, state, x))
    state.add(condition)
    other = broadcast_partner(draw, state, x)
    state.add(b.op("where", condition, x, other) if draw(st.booleans()) else b.op("where", condition, other, x))


def _draw_cast(draw, state: GraphState) -> None:
    x = pick(draw, state)
    if x is None:
        return
    target = draw(dtypes())
    state.add(state.builder.op("cast", x, dtype=target))


def _draw_reduction(draw, state: GraphState) -> None:
    x = pick(draw, state, lambda v: v.type.rank > 0 and not v.type.dtype.is_bool)
    if x is None:
        return
    name = choose(draw, REDUCTIONS)
    if name == "mean" and not x.type.dtype.is_float:
        name = "sum"
    dims = tuple(sorted(draw(st.sets(st.integers(0, x.type.rank - 1), min_size=1, max_size=x.type.rank))))
    state.add(state.builder.op(name, x, dims=dims, keepdim=draw(st.booleans())))


def _reshape_target(draw, shape: tuple[int, ...]) -> tuple[int, ...]:
    numel = math.prod(shape)
    options = [(numel,), shape + (1,), (1,) + shape]
    if numel == 0:
        options.append((0,) + tuple(s for s in shape if s))
    else:
        options += [(d, numel // d) for d in range(1, numel + 1) if numel % d == 0]
    return choose(draw, options)


def _draw_view(draw, state: GraphState) -> None:
    x = pick(draw, state)
    if x is None:
        return
    b, t = state.builder, x.type
    kind = choose(draw, ("reshape", "permute", "expand", "slice", "select", "squeeze", "unsqueeze"))
    if kind == "reshape":
        state.add(b.op("reshape", x, shape=_reshape_target(draw, t.shape)))
    elif kind == "permute" and t.rank >= 2:
        state.add(b.op("permute", x, dims=tuple(draw(st.permutations(range(t.rank))))))
    elif kind == "expand":
        shape = (choose(draw, (1, 2, 3)),) + tuple(choose(draw, (2, 3)) if s == 1 else s
                                                            for s in t.shape)
        state.add(b.op("expand", x, shape=shape))
    elif kind in ("slice", "select") and t.rank >= 1:
        dim = draw(st.integers(0, t.rank - 1))
        size = t.shape[dim]
        if kind == "select":
            if size:
                state.add(b.op("select", x, dim=dim, index=draw(st.integers(0, size - 1))))
            return
        start = draw(st.integers(0, size))
        end = draw(st.integers(start, size))
        state.add(b.op("slice", x, dim=dim, start=start, end=end, step=choose(draw, (1, 1, 2))))
    elif kind == "squeeze":
        state.add(b.op("squeeze", x, dims=tuple(d for d, s in enumerate(t.shape) if s == 1)))
    elif kind == "unsqueeze":
        state.add(b.op("unsqueeze", x, dim=draw(st.integers(0, t.rank))))


def _draw_movement(draw, state: GraphState) -> None:
    x = pick(draw, state, lambda v: v.type.rank > 0)
    if x is None:
        return
    b = state.builder
    kind = choose(draw, ("cat", "flip", "constant_pad", "copy"))
    if kind == "cat":
        state.add(b.op("cat", x, x, dim=draw(st.integers(0, x.type.rank - 1))))
    elif kind == "flip":
        state.add(b.op("flip", x, dims=(draw(st.integers(0, x.type.rank - 1)),)))
    elif kind == "constant_pad":
        value = 0.5 if x.type.dtype.is_float else 1
        state.add(b.op("constant_pad", x, pad=(draw(st.integers(0, 2)), draw(st.integers(0, 1))), value=value))
    else:
        state.add(b.op("copy", x))


def _draw_constant(draw, state: GraphState) -> None:
    b = state.builder
    dtype = draw(dtypes())
    shape = draw(shapes(state.empty_dims, max_rank=2))
    if draw(st.booleans()):
        state.add(splat(b, choose(draw, SPLATS), dtype, shape))
    else:
        state.add(b.op("iota", length=draw(st.integers(0, 6)), dtype=DType.i64 if not dtype.is_float else dtype))


def _draw_index(draw, state: GraphState) -> None:
    """index_select / gather / embedding with in-range constant indices (random inputs could not be)."""
    x = pick(draw, state, lambda v: v.type.rank >= 1 and v.type.numel > 0)
    if x is None:
        return
    b, t = state.builder, x.type
    dim = draw(st.integers(0, t.rank - 1))
    kind = choose(draw, ("index_select", "gather", "embedding"))
    if kind == "embedding" and t.rank == 2:
        shape = (draw(st.integers(0, 3)), draw(st.integers(1, 3)))
        bound = t.shape[0]
    elif kind == "gather":
        shape = tuple(draw(st.integers(1, 3)) if d == dim else s for d, s in enumerate(t.shape))
        bound = t.shape[dim]
    else:
        kind, shape, bound = "index_select", (draw(st.integers(0, 4)),), t.shape[dim]
    count = math.prod(shape)
    values = draw(st.lists(st.integers(-bound, bound - 1), min_size=count, max_size=count))
    index = b.op("constant", value=DenseAttr(np.array(values, dtype=np.int64).reshape(shape)))
    state.add(b.op(kind, x, index) if kind == "embedding" else b.op(kind, x, index, dim=dim))


def _draw_matmul(draw, state: GraphState) -> None:
    x = pick(draw, state, lambda v: v.type.rank in (2, 3) and v.type.dtype in (DType.f32, DType.bf16, DType.i32))
    if x is None:
        return
    b, t = state.builder, x.type
    n = choose(draw, (1, 2, 3))
    k = t.shape[-1]
    transposed = draw(st.booleans())
    batch = t.shape[:-2]
    stored = batch + ((n, k) if transposed else (k, n))
    w = b.param(TensorType(stored, t.dtype))
    if transposed:
        w = b.op("permute", w, dims=tuple(range(len(batch))) + (len(batch) + 1, len(batch)))
    state.add(b.op("bmm" if t.rank == 3 else "mm", x, w))


#: The op families a graph is grown from, with their relative weights.
FAMILIES: tuple[tuple[Callable, int], ...] = (
    (_draw_unary, 4), (_draw_binary, 5), (_draw_where, 1), (_draw_cast, 1), (_draw_reduction, 3),
    (_draw_view, 4), (_draw_movement, 1), (_draw_constant, 1), (_draw_index, 1), (_draw_matmul, 2),
)


def all_families() -> tuple[tuple[Callable, int], ...]:
    """:data:`FAMILIES` and the families of :mod:`neuroncc.testing.graph_families`."""
    return FAMILIES + MORE_FAMILIES


@st.composite
def graphs(draw, *, min_ops: int = 1, max_ops: int = 8, mixed_dtypes: bool = True, allow_empty: bool = True,
           families: Sequence[tuple[Callable, int]] | None = None, focus: Sequence[str] = ()) -> Function:
    """A random well-typed function of a few small parameters (see the module docstring).

    ``families`` (default: :func:`all_families`) are the op families to draw from, with their weights.
    ``focus`` names elementwise ops a pass under test rewrites (``focus=["div"]``): about one op in four is
    then one of them, on pool values, fresh parameters or splat constants (powers of two and others).
    """
    families = all_families() if families is None else families
    if focus:
        families = tuple(families) + ((focused_family(focus), 10),)
    b = Builder("random")
    state = GraphState(b, empty_dims=allow_empty)
    for _ in range(draw(st.integers(1, 3))):
        state.pool.append(b.param(TensorType(draw(shapes(allow_empty)), draw(dtypes(mixed_dtypes)))))
    weighted = [family for family, weight in families for _ in range(weight)]
    target = draw(st.integers(min_ops, max_ops))
    attempts = 0
    while len(b.ops) < target and attempts < 4 * max_ops:
        attempts += 1
        try:
            choose(draw, weighted)(draw, state)
        except TypeInferenceError:
            pass  # the random attributes did not fit the operand: try another op
    computed = [v for v in state.pool if v not in b.params] or state.pool
    outputs = [computed[-1]]
    for extra in (computed[i] for i in draw(st.lists(st.integers(0, len(computed) - 1), max_size=2))):
        if extra not in outputs:
            outputs.append(extra)
    return b.build(outputs)
