"""More op families for the random graphs of :mod:`neuroncc.testing.random_graphs`.

Advanced indexing and scatters with in-range constant indices (random inputs could not be), concatenation of
different tensors, padding and cropping, slice/select scatters, repeat, clamp, multi-result ``split``,
``argmax``/``argmin``/``var``, ``addmm``, and the rest of the elementwise ops (rounding, integer division and
remainders, bitwise and logical ops). Each ``_draw_*`` function appends at most a few ops to the graph under
construction; one whose random attributes do not fit raises ``TypeInferenceError`` and is skipped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from hypothesis import strategies as st

from neuroncc.ir import REGISTRY, Category, DenseAttr, DType, TensorType, Value
from neuroncc.ir.ops.indexing import index_result_shape
from neuroncc.testing.graph_state import SPLATS, GraphState, broadcast_partner, choose, pick, splat

MORE_FLOAT_UNARY = ("erf", "expm1", "log1p", "sign", "round", "reciprocal", "ceil", "trunc", "cos", "atan",
                    "exp2", "log2", "isnan", "isinf")
MORE_INT_UNARY = ("sign", "bitwise_not")
MORE_FLOAT_BINARY = ("atan2", "fmod", "remainder")
MORE_INT_BINARY = ("fmod", "remainder", "bitwise_and", "bitwise_or", "bitwise_xor")
LOGICAL = ("logical_and", "logical_or", "logical_xor")
#: Splat operands of focused ops: the usual ones plus values that are not powers of two, and large ones.
FOCUS_SPLATS = SPLATS + (3.0, -4.0, 0.1, 8.0, 1e-3, 65536.0)


def _same_shape_value(draw, state: GraphState, shape: tuple[int, ...], dtype: DType) -> Value:
    """A value of exactly this shape and dtype: from the pool when there is one, else a new parameter."""
    found = pick(draw, state, lambda v: v.type.shape == shape and v.type.dtype == dtype)
    if found is not None and draw(st.booleans()):
        return found
    param = state.builder.param(TensorType(shape, dtype))
    state.pool.append(param)
    return param


def _index_constant(draw, state: GraphState, shape: tuple[int, ...], bound: int) -> Value:
    """A constant i64 or i32 index tensor of ``shape`` with values in [-bound, bound) (negatives count back)."""
    count = math.prod(shape)
    values = draw(st.lists(st.integers(-bound, bound - 1), min_size=count, max_size=count))
    dtype = choose(draw, (np.int64, np.int32))
    return state.builder.op("constant", value=DenseAttr(np.array(values, dtype=dtype).reshape(shape)))


def _index_tensors(draw, state: GraphState, x: Value) -> tuple[tuple[int, ...], list[Value]]:
    """``dims`` and one broadcast-compatible index tensor per dim, for ``index`` / ``index_put`` on ``x``."""
    rank = x.type.rank
    dims = tuple(sorted(draw(st.sets(st.integers(0, rank - 1), min_size=1, max_size=min(2, rank)))))
    common = tuple(draw(st.lists(st.integers(0, 3), max_size=2)))  # sampled_from((0, 1, 2, 3))'s draws
    indices = []
    for d in dims:
        shape = tuple(s if draw(st.booleans()) else 1 for s in common)
        indices.append(_index_constant(draw, state, shape, x.type.shape[d]))
    return dims, indices


def _draw_indexing(draw, state: GraphState) -> None:
    """Advanced indexing, index_put (set or accumulate) and scatter (set or add)."""
    x = pick(draw, state, lambda v: v.type.rank >= 1 and v.type.numel > 0)
    if x is None:
        return
    b, t = state.builder, x.type
    kind = choose(draw, ("index", "index_put", "scatter"))
    if kind == "index":
        dims, indices = _index_tensors(draw, state, x)
        state.add(b.op("index", x, *indices, dims=dims))
    elif kind == "index_put":
        dims, indices = _index_tensors(draw, state, x)
        target = index_result_shape("index_put", t, dims, tuple(i.type for i in indices))
        shape = target[draw(st.integers(0, len(target))):]  # values broadcast from a suffix of it
        values = _same_shape_value(draw, state, shape, t.dtype)
        accumulate = draw(st.booleans()) and not t.dtype.is_bool
        state.add(b.op("index_put", x, values, *indices, dims=dims, accumulate=accumulate))
    else:
        dim = draw(st.integers(0, t.rank - 1))
        shape = tuple(draw(st.integers(0, s)) if d != dim else draw(st.integers(0, 3)) for d, s in enumerate(t.shape))
        index = _index_constant(draw, state, shape, t.shape[dim])
        src = _same_shape_value(draw, state, shape if draw(st.booleans()) else t.shape, t.dtype) \
            if all(i <= s for i, s in zip(shape, t.shape)) else _same_shape_value(draw, state, shape, t.dtype)
        reduce = "add" if draw(st.booleans()) and not t.dtype.is_bool else "none"
        state.add(b.op("scatter", x, index, src, dim=dim, reduce=reduce))


def _draw_combine(draw, state: GraphState) -> None:
    """cat of different tensors, pads and crops, slice/select scatters, repeat, flips over several dims."""
    x = pick(draw, state, lambda v: v.type.rank > 0)
    if x is None:
        return
    b, t = state.builder, x.type
    kind = choose(draw, ("cat", "pad", "slice_scatter", "select_scatter", "repeat", "flip"))
    if kind == "cat":
        dim = draw(st.integers(0, t.rank - 1))
        others = []
        for _ in range(draw(st.integers(1, 2))):
            shape = t.shape[:dim] + (choose(draw, (0, 1, 2, 3)),) + t.shape[dim + 1:]
            others.append(_same_shape_value(draw, state, shape, t.dtype))
        operands = [x, *others]
        state.add(b.op("cat", *draw(st.permutations(operands)), dim=dim))
    elif kind == "pad":
        pairs = draw(st.integers(1, min(2, t.rank)))
        pad = tuple(draw(st.integers(-1, 2)) for _ in range(2 * pairs))  # negative pads crop
        value = choose(draw, SPLATS) if t.dtype.is_float else choose(draw, (0, 1))
        state.add(b.op("constant_pad", x, pad=pad, value=value))
    elif kind == "slice_scatter":
        dim = draw(st.integers(0, t.rank - 1))
        start = draw(st.integers(0, t.shape[dim]))
        end = draw(st.integers(start, t.shape[dim]))
        step = choose(draw, (1, 1, 2))
        length = len(range(start, end, step))
        src = _same_shape_value(draw, state, t.shape[:dim] + (length,) + t.shape[dim + 1:], t.dtype)
        state.add(b.op("slice_scatter", x, src, dim=dim, start=start, end=end, step=step))
    elif kind == "select_scatter":
        dim = draw(st.integers(0, t.rank - 1))
        if t.shape[dim]:
            src = _same_shape_value(draw, state, t.shape[:dim] + t.shape[dim + 1:], t.dtype)
            state.add(b.op("select_scatter", x, src, dim=dim, index=draw(st.integers(0, t.shape[dim] - 1))))
    elif kind == "repeat":
        repeats = tuple(choose(draw, (1, 2, 0, 1)) for _ in range(t.rank + draw(st.integers(0, 1))))
        state.add(b.op("repeat", x, repeats=repeats))
    else:
        dims = tuple(sorted(draw(st.sets(st.integers(0, t.rank - 1), min_size=1))))
        state.add(b.op("flip", x, dims=dims))


def _draw_clamp(draw, state: GraphState) -> None:
    """clamp with a lower bound, an upper bound or both (possibly crossing: max wins, as in PyTorch)."""
    x = pick(draw, state, lambda v: not v.type.dtype.is_bool)
    if x is None:
        return
    bounds = (-1.0, -0.0, 0.0, 0.5, 1.0) if x.type.dtype.is_float else (-2, 0, 1, 3)
    low = draw(st.one_of(st.none(), st.sampled_from(bounds)))
    high = draw(st.one_of(st.none(), st.sampled_from(bounds)))
    state.add(state.builder.op("clamp", x, min=low, max=high))


def _draw_multi_result(draw, state: GraphState) -> None:
    """split (several results), argmax / argmin (i64 results) and var."""
    x = pick(draw, state, lambda v: v.type.rank > 0 and not v.type.dtype.is_bool)
    if x is None:
        return
    b, t = state.builder, x.type
    kind = choose(draw, ("split", "split", "arg", "var"))
    dim = draw(st.integers(0, t.rank - 1))
    if kind == "split":
        cuts = sorted(draw(st.lists(st.integers(0, t.shape[dim]), min_size=1, max_size=2)))
        sizes = tuple(end - start for start, end in zip([0, *cuts], [*cuts, t.shape[dim]]))
        state.add(b.op("split", x, dim=dim, sizes=sizes))
    elif kind == "arg":
        name = choose(draw, ("argmax", "argmin"))
        state.add(b.op(name, x, dim=draw(st.one_of(st.none(), st.just(dim))), keepdim=draw(st.booleans())))
    elif t.dtype.is_float:
        state.add(b.op("var", x, dims=(dim,), keepdim=draw(st.booleans()),
                       correction=choose(draw, (0.0, 1.0))))


def _draw_more_elementwise(draw, state: GraphState) -> None:
    """Rounding, reciprocal, predicates, divisions (by -3 too: inexact reciprocals), remainders, bitwise and
    logical ops."""
    x = pick(draw, state)
    if x is None:
        return
    b, dtype = state.builder, x.type.dtype
    if dtype.is_bool:
        other = pick(draw, state, lambda v: v.type.dtype.is_bool and v is not x) or x
        name = choose(draw, LOGICAL + ("logical_not",))
        state.add(b.op(name, x) if name == "logical_not" else b.op(name, x, other))
        return
    if draw(st.booleans()):
        state.add(b.op(choose(draw, MORE_FLOAT_UNARY if dtype.is_float else MORE_INT_UNARY), x))
        return
    other = _same_shape_value(draw, state, x.type.shape, dtype) if draw(st.booleans()) else \
        splat(b, choose(draw, (2.0, -3.0, 0.5)) if dtype.is_float else choose(draw, (2, -3, 0)),
               dtype)
    if draw(st.booleans()):
        mode = choose(draw, ("floor", "trunc") + (("none",) if dtype.is_float else ()))
        state.add(b.op("div", x, _nonzero_divisor(b, other), rounding_mode=mode))
    else:
        name = choose(draw, MORE_FLOAT_BINARY if dtype.is_float else MORE_INT_BINARY)
        state.add(b.op(name, x, _nonzero_divisor(b, other) if name in INT_DIVISIONS else other))


#: Ops that raise on an integer divisor of zero (as eager's ZeroDivisionError): random graphs divide by odd
#: integers (``divisor | 1``), so that every graph runs; tests/executors/test_zero_division.py tests the error.
INT_DIVISIONS = frozenset({"div", "fmod", "remainder"})


def _nonzero_divisor(b, divisor: Value) -> Value:
    """``divisor | 1`` for an integer divisor (never zero), the divisor itself for a float one."""
    dtype = divisor.type.dtype
    return b.op("bitwise_or", divisor, splat(b, 1, dtype)) if dtype.is_int else divisor


def _draw_addmm(draw, state: GraphState) -> None:
    """addmm(bias, x, w) with a broadcast bias and non-default alpha / beta."""
    x = pick(draw, state, lambda v: v.type.rank == 2 and v.type.dtype in (DType.f32, DType.bf16))
    if x is None:
        return
    b, (m, k) = state.builder, x.type.shape
    n = choose(draw, (1, 2, 3))
    w = _same_shape_value(draw, state, (k, n), x.type.dtype)
    bias = _same_shape_value(draw, state, choose(draw, ((n,), (m, n), (1, n))), x.type.dtype)
    state.add(b.op("addmm", bias, x, w, alpha=choose(draw, (1.0, 0.5)),
                   beta=choose(draw, (1.0, 0.0, 2.0))))


#: The families of this module with their relative weights (see :data:`neuroncc.testing.random_graphs.FAMILIES`).
MORE_FAMILIES: tuple[tuple[Callable, int], ...] = (
    (_draw_indexing, 1), (_draw_combine, 2), (_draw_clamp, 1), (_draw_multi_result, 1),
    (_draw_more_elementwise, 2), (_draw_addmm, 1),
)


def focused_family(names: Sequence[str]) -> Callable:
    """A family that applies one of the elementwise ops ``names`` (unary or binary) to graph values."""
    for name in names:
        if name not in REGISTRY or REGISTRY.get(name).category is not Category.ELEMENTWISE or \
                REGISTRY.get(name).arity[0] not in (1, 2):
            raise ValueError(f"graphs(focus=...): '{name}' is not a unary or binary elementwise op")
    names = tuple(names)

    def _draw_focused(draw, state: GraphState) -> None:
        name = choose(draw, names)
        x = pick(draw, state, lambda v: not v.type.dtype.is_bool)
        if x is None:
            return
        if REGISTRY.get(name).arity[0] == 1:
            state.add(state.builder.op(name, x))
        else:
            partner = broadcast_partner(draw, state, x, FOCUS_SPLATS)
            if name in INT_DIVISIONS:
                partner = _nonzero_divisor(state.builder, partner)
            state.add(state.builder.op(name, x, partner))

    return _draw_focused
