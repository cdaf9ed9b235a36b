"""Test table entries for data-dependent addressing: gather, scatter, index_select, index, index_put, embedding.

Indices are drawn in [-size, size): the IR counts negative indices from the end for every index op, while
torch accepts them only in advanced indexing, so the torch side is handed the wrapped (non-negative) indices.
Writes with duplicate indices are only drawn where the result does not depend on the order (accumulating).
"""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import strategies as st

from neuroncc.ir import DType, TensorType

from .cases_elementwise import KINDS
from .spec import OpSpec
from .support import Case, operand, rngs, shapes

F32, I64, I32, BOOL = DType.f32, DType.i64, DType.i32, DType.bool
ANY = KINDS["any"]
INDEX_DTYPES = (I64, I32)


def t(shape, dtype=F32):
    return TensorType(tuple(shape), dtype)


def _indices(rng, shape, size: int, dtype: DType, *, negative: bool = True):
    data = rng.integers(-size if negative else 0, max(size, 1), size=shape) if size else np.zeros(shape, np.int64)
    return data.astype(dtype.numpy), t(shape, dtype)


def _wrapped(index: torch.Tensor, size: int) -> torch.Tensor:
    return torch.where(index < 0, index + size, index).to(torch.int64)


@st.composite
def _gather_cases(draw: st.DrawFn) -> Case:
    rng = draw(rngs())
    shape = draw(shapes(min_rank=1, min_size=1))
    dim = draw(st.integers(0, len(shape) - 1))
    # the index may be smaller than the input outside dim, and any size along dim
    index_shape = tuple(draw(st.integers(0, 4)) if d == dim else draw(st.integers(0, s)) for d, s in enumerate(shape))
    x = operand(rng, shape, draw(st.sampled_from(ANY)))
    return Case([x, _indices(rng, index_shape, shape[dim], draw(st.sampled_from(INDEX_DTYPES)))],
                {"dim": dim - len(shape) if draw(st.booleans()) else dim})


def _gather_torch(xs, a):
    x, index = xs
    dim = a["dim"] % x.dim()
    return torch.gather(x, dim, _wrapped(index, x.shape[dim]))


@st.composite
def _scatter_cases(draw: st.DrawFn) -> Case:
    rng = draw(rngs())
    dtype = draw(st.sampled_from(ANY))
    shape = draw(shapes(min_rank=1, min_size=1))
    dim = draw(st.integers(0, len(shape) - 1))
    reduce = draw(st.sampled_from(["none", "add"])) if not dtype.is_bool else "none"
    index_shape = tuple(draw(st.integers(0, s)) for s in shape)
    if reduce == "none":  # distinct targets along dim for every position: a slice of a permutation
        perm = np.argsort(rng.random((*index_shape[:dim], shape[dim], *index_shape[dim + 1:])), axis=dim)
        index = np.take(perm, range(index_shape[dim]), axis=dim) - (shape[dim] if draw(st.booleans()) else 0)
        index = (index.astype(np.int64), t(index_shape, I64))
    else:
        index = _indices(rng, index_shape, shape[dim], draw(st.sampled_from(INDEX_DTYPES)))
    src_shape = tuple(i + draw(st.integers(0, 1)) for i in index_shape)
    attrs = {"dim": dim}
    if reduce != "none" or draw(st.booleans()):
        attrs["reduce"] = reduce
    return Case([operand(rng, shape, dtype), index, operand(rng, src_shape, dtype)], attrs)


def _scatter_torch(xs, a):
    x, index, src = xs
    index = _wrapped(index, x.shape[a["dim"]])
    if a["reduce"] == "add":
        return torch.scatter_add(x, a["dim"], index, src)
    return torch.scatter(x, a["dim"], index, src)


@st.composite
def _index_select_cases(draw: st.DrawFn) -> Case:
    rng = draw(rngs())
    shape = draw(shapes(min_rank=1, min_size=1))
    dim = draw(st.integers(0, len(shape) - 1))
    index_shape = draw(st.sampled_from([(), (draw(st.integers(0, 4)),)]))
    return Case([operand(rng, shape, draw(st.sampled_from(ANY))),
                 _indices(rng, index_shape, shape[dim], draw(st.sampled_from(INDEX_DTYPES)))],
                {"dim": dim})


def _index_select_torch(xs, a):
    x, index = xs
    return torch.index_select(x, a["dim"], _wrapped(index, x.shape[a["dim"]]))


@st.composite
def _index_cases(draw: st.DrawFn, *, put: bool) -> Case:
    rng = draw(rngs())
    dtype = draw(st.sampled_from(ANY))
    shape = draw(shapes(min_rank=1, min_size=1))
    dims = tuple(sorted(draw(st.sets(st.sampled_from(range(len(shape))), min_size=1))))
    accumulate = put and not dtype.is_bool and draw(st.booleans())
    if put and not accumulate:  # distinct coordinates: every position is written at most once
        sizes = [shape[d] for d in dims]
        count = draw(st.integers(0, int(np.prod(sizes))))
        coords = np.unravel_index(rng.permutation(int(np.prod(sizes)))[:count], sizes)
        indices = [(np.asarray(c, np.int64), t((count,), I64)) for c in coords]
    else:  # index tensors of broadcastable shapes, with repeats and negative indices
        full = draw(shapes(max_rank=2, max_size=3))
        indices = [_indices(rng, full[draw(st.integers(0, len(full))):], shape[d], draw(st.sampled_from(INDEX_DTYPES)))
                   for d in dims]
    x = operand(rng, shape, dtype)
    if not put:
        return Case([x, *indices], {"dims": dims})
    key = tuple(np.zeros(indices[dims.index(d)][1].shape, np.int64) if d in dims else slice(None)
                for d in range(len(shape)))
    indexed = np.empty(shape)[key].shape  # numpy's advanced indexing has the same result shape as torch's
    attrs = {"dims": dims}
    if accumulate or draw(st.booleans()):
        attrs["accumulate"] = accumulate
    return Case([x, operand(rng, indexed[draw(st.integers(0, len(indexed))):], dtype), *indices], attrs)


def _index_key(x: torch.Tensor, dims, indices):
    key: list = [None] * x.dim()
    for d, index in zip(dims, indices):
        key[d] = index.to(torch.int64)
    return key


def _index_torch(xs, a):
    x, *indices = xs
    return torch.ops.aten.index.Tensor(x, _index_key(x, a["dims"], indices))


def _index_put_torch(xs, a):
    x, values, *indices = xs
    return torch.ops.aten.index_put(x, _index_key(x, a["dims"], indices), values, a["accumulate"])


@st.composite
def _embedding_cases(draw: st.DrawFn) -> Case:
    rng = draw(rngs())
    rows, width = draw(st.integers(1, 5)), draw(st.integers(0, 4))
    index_shape = draw(shapes(max_rank=2))
    weight = operand(rng, (rows, width), draw(st.sampled_from(ANY)))
    return Case([weight, _indices(rng, index_shape, rows, draw(st.sampled_from(INDEX_DTYPES)))])


def _embedding_torch(xs, a):
    weight, index = xs
    return torch.nn.functional.embedding(_wrapped(index, weight.shape[0]), weight)


SPECS = {
    "gather": OpSpec(_gather_cases, _gather_torch, invalid=(
        ((t((2, 3)), t((2, 3), F32)), {"dim": 0}),  # index dtype
        ((t((2, 3)), t((2, 3), BOOL)), {"dim": 0}),
        ((t((2, 3)), t((2,), I64)), {"dim": 0}),  # rank
        ((t((2, 3)), t((2, 4), I64)), {"dim": 0}),  # larger than the input outside dim
        ((t((2, 3)), t((2, 3), I64)), {"dim": 2}),
    )),
    "scatter": OpSpec(_scatter_cases, _scatter_torch, invalid=(
        ((t((2, 3)), t((2, 3), I64), t((2, 3), I64)), {"dim": 0}),  # src dtype
        ((t((2, 3)), t((2, 3), I64), t((1, 3))), {"dim": 0}),  # index larger than src
        ((t((2, 3)), t((2, 4), I64), t((2, 4))), {"dim": 0}),  # index larger than the input outside dim
        ((t((2, 3)), t((2, 3), I64), t((2, 3))), {"dim": 0, "reduce": "mul"}),
        ((t((2, 3)), t((2, 3), F32), t((2, 3))), {"dim": 0}),
    )),
    "index_select": OpSpec(_index_select_cases, _index_select_torch, invalid=(
        ((t((2, 3)), t((2, 2), I64)), {"dim": 0}),
        ((t((2, 3)), t((2,), F32)), {"dim": 0}),
        ((t((2, 3)), t((2,), I64)), {"dim": 2}),
    )),
    "index": OpSpec(lambda: _index_cases(put=False), _index_torch, invalid=(
        ((t((2, 3)), t((2,), I64)), {"dims": ()}),
        ((t((2, 3)), t((2,), I64)), {"dims": (2,)}),
        ((t((2, 3)), t((2,), I64), t((3,), I64)), {"dims": (0, 1)}),  # indices do not broadcast
        ((t((2, 3)), t((2,), I64), t((2,), I64)), {"dims": (1, 0)}),
        ((t((2, 3)), t((2,), BOOL)), {"dims": (0,)}),
        ((t((2, 3)), t((2,), F32)), {"dims": (0,)}),
    )),
    "index_put": OpSpec(lambda: _index_cases(put=True), _index_put_torch, invalid=(
        ((t((2, 3)), t((3,), I64), t((2,), I64)), {"dims": (0,)}),  # values dtype
        ((t((2, 3)), t((4,)), t((2,), I64)), {"dims": (0,)}),  # values do not broadcast
        ((t((2, 3)), t((3,))), {"dims": (0,)}),
    )),
    "embedding": OpSpec(_embedding_cases, _embedding_torch, invalid=(
        ((t((2, 3, 4)), t((2,), I64)), {}),
        ((t((2, 3)), t((2,), F32)), {}),
    )),
}
