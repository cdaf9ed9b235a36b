"""Test table entries for views and data movement (reshape ... repeat)."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from hypothesis import strategies as st

from neuroncc.ir import DType, TensorType

from .cases_elementwise import KINDS
from .spec import OpSpec
from .support import Case, operand, rngs, shapes

F32, I64, BOOL = DType.f32, DType.i64, DType.bool
ANY = KINDS["any"]


def t(shape, dtype=F32):
    return TensorType(tuple(shape), dtype)


@st.composite
def _tensor(draw: st.DrawFn, *, min_rank: int = 0, max_rank: int = 3, min_size: int = 0):
    rng = draw(rngs())
    shape = draw(shapes(min_rank=min_rank, max_rank=max_rank, min_size=min_size))
    return rng, operand(rng, shape, draw(st.sampled_from(ANY)), specials=draw(st.booleans()))


def _one(extra):
    """Cases with one operand of random shape/dtype; ``extra(draw, shape)`` draws the attributes."""
    @st.composite
    def cases(draw: st.DrawFn, min_rank: int = 0, min_size: int = 0) -> Case:
        _, x = draw(_tensor(min_rank=min_rank, min_size=min_size))
        if extra is _pad_attrs:
            return Case([x], extra(draw, x[1].shape, x[1].dtype))
        return Case([x], extra(draw, x[1].shape))

    return cases


def _reshape_attrs(draw, shape):
    numel = math.prod(shape)
    dims, rest = [], numel
    for _ in range(draw(st.integers(0, 3))):
        divisors = [d for d in range(1, 7) if rest % d == 0] if rest else [0, 1, 2, 3]
        dims.append(draw(st.sampled_from(divisors)))
        rest = rest // dims[-1] if dims[-1] else rest
    if math.prod(dims) != numel:
        dims.append(numel // math.prod(dims) if math.prod(dims) else 0)
    if math.prod(dims) != numel:  # a size-0 shape cannot be reached from factors of another: spell it out
        dims = list(shape)
    return {"shape": tuple(dims)}


def _expand_attrs(draw, shape):
    lead = tuple(draw(st.lists(st.integers(0, 3), max_size=2)))
    return {"shape": lead + tuple(draw(st.integers(0, 3)) if s == 1 else s for s in shape)}


def _slice_attrs(draw, shape):
    dim = draw(st.integers(0, len(shape) - 1))
    start = draw(st.integers(0, shape[dim]))
    end = draw(st.integers(start, shape[dim]))
    attrs = {"dim": dim, "start": start, "end": end}
    if draw(st.booleans()):
        attrs["step"] = draw(st.integers(1, 3))
    return attrs


def _select_attrs(draw, shape):
    dim = draw(st.integers(0, len(shape) - 1))
    return {"dim": dim, "index": draw(st.integers(0, shape[dim] - 1))}


def _squeeze_attrs(draw, shape):
    ones = [d for d, s in enumerate(shape) if s == 1]
    picked = draw(st.lists(st.sampled_from(ones), unique=True)) if ones else []
    if shape:
        picked = [d - len(shape) if draw(st.booleans()) else d for d in picked]  # negative dims are accepted
    return {"dims": tuple(picked)}


def _pad_attrs(draw, shape, dtype):
    pad = []
    for d in reversed(range(draw(st.integers(0, len(shape))))):
        size = shape[len(shape) - 1 - (len(pad) // 2)]
        before = draw(st.integers(-size, 3))
        after = draw(st.integers(-(size + min(before, 0)), 3))  # crop at most what is there
        pad += [before, after]
    return {"pad": tuple(pad), "value": draw(st.sampled_from([0, 1] if dtype == DType.u8 else [0, 1, -2]))}


def _flip_attrs(draw, shape):
    dims = draw(st.lists(st.integers(0, len(shape) - 1), unique=True)) if shape else []
    return {"dims": tuple(d - len(shape) if draw(st.booleans()) else d for d in dims)}


def _as_strided_attrs(draw, shape):
    numel = math.prod(shape)
    rank = draw(st.integers(0, 3))
    view = tuple(draw(st.integers(1 if numel else 0, 3)) for _ in range(rank))
    strides = tuple(draw(st.integers(0, 3)) for _ in range(rank))
    reach = sum((n - 1) * s for n, s in zip(view, strides)) if math.prod(view) else 0
    if math.prod(view) and reach >= numel:
        view, strides, reach = (), (), 0  # fall back to a 0-dim view of one element
        if not numel:
            view, strides = (0,), (1,)
    offset = draw(st.integers(0, max(numel - 1 - reach, 0))) if math.prod(view) else 0
    return {"shape": view, "strides": strides, "offset": offset}


def _repeat_attrs(draw, shape):
    return {"repeats": tuple(draw(st.integers(0, 3)) for _ in range(len(shape) + draw(st.integers(0, 2))))}


@st.composite
def _cat_cases(draw: st.DrawFn) -> Case:
    rng = draw(rngs())
    dtype = draw(st.sampled_from(ANY))
    shape = draw(shapes(min_rank=1))
    dim = draw(st.integers(0, len(shape) - 1))
    operands = []
    for _ in range(draw(st.integers(1, 3))):
        piece = shape[:dim] + (draw(st.integers(0, 3)),) + shape[dim + 1:]
        operands.append(operand(rng, piece, dtype))
    return Case(operands, {"dim": dim - len(shape) if draw(st.booleans()) else dim})


@st.composite
def _split_cases(draw: st.DrawFn) -> Case:
    _, x = draw(_tensor(min_rank=1))
    shape = x[1].shape
    dim = draw(st.integers(0, len(shape) - 1))
    cuts = sorted(draw(st.lists(st.integers(0, shape[dim]), max_size=3)))
    bounds = [0, *cuts, shape[dim]]
    return Case([x], {"dim": dim, "sizes": tuple(b - a for a, b in zip(bounds, bounds[1:]))})


@st.composite
def _scatter_cases(draw: st.DrawFn, kind: str) -> Case:
    rng = draw(rngs())
    dtype = draw(st.sampled_from(ANY))
    shape = draw(shapes(min_rank=1, min_size=1 if kind == "select" else 0))
    base = operand(rng, shape, dtype)
    attrs = _slice_attrs(draw, shape) if kind == "slice" else _select_attrs(draw, shape)
    probe = np.empty(shape)
    view = probe[(slice(None),) * attrs["dim"] + (
        slice(attrs["start"], attrs["end"], attrs.get("step", 1)) if kind == "slice" else attrs["index"],)]
    return Case([base, operand(rng, view.shape, dtype)], attrs)


def _pad_torch(xs, attrs):
    x = xs[0]
    if x.dim() == 0 or not attrs["pad"]:
        return x.clone()
    return F.pad(x, list(attrs["pad"]), value=attrs["value"])


def _slice_torch(x, attrs):
    key = (slice(None),) * attrs["dim"] + (slice(attrs["start"], attrs["end"], attrs["step"]),)
    return x[key]


SPECS = {
    "reshape": OpSpec(_one(_reshape_attrs), lambda xs, a: xs[0].reshape(a["shape"]), invalid=(
        ((t((2, 3)),), {"shape": (4, 2)}),
        ((t((2, 3)),), {"shape": (-1, 2)}),
        ((t((2, 3)),), {}),
    )),
    "permute": OpSpec(_one(lambda draw, shape: {"dims": tuple(draw(st.permutations(range(len(shape)))))}),
                      lambda xs, a: xs[0].permute(a["dims"]), invalid=(
        ((t((2, 3)),), {"dims": (0, 0)}),
        ((t((2, 3)),), {"dims": (0,)}),
        ((t((2, 3)),), {"dims": (-1, 0)}),
    )),
    "expand": OpSpec(_one(_expand_attrs), lambda xs, a: xs[0].expand(a["shape"]).clone(), invalid=(
        ((t((2, 3)),), {"shape": (3,)}),
        ((t((2, 3)),), {"shape": (2, 4)}),
        ((t((2, 1)),), {"shape": (2, -1)}),
    )),
    "slice": OpSpec(lambda: _one(_slice_attrs)(min_rank=1), lambda xs, a: _slice_torch(xs[0], a), invalid=(
        ((t((2, 3)),), {"dim": 1, "start": 2, "end": 4}),
        ((t((2, 3)),), {"dim": 1, "start": 2, "end": 1}),
        ((t((2, 3)),), {"dim": 1, "start": 0, "end": 3, "step": 0}),
        ((t((2, 3)),), {"dim": 2, "start": 0, "end": 1}),
        ((t(()),), {"dim": 0, "start": 0, "end": 0}),
    )),
    "select": OpSpec(lambda: _one(_select_attrs)(min_rank=1, min_size=1),
                     lambda xs, a: xs[0].select(a["dim"], a["index"]), invalid=(
        ((t((2, 3)),), {"dim": 1, "index": 3}),
        ((t((2, 3)),), {"dim": 1, "index": -1}),
        ((t(()),), {"dim": 0, "index": 0}),
    )),
    "squeeze": OpSpec(_one(_squeeze_attrs), lambda xs, a: xs[0].squeeze(a["dims"]) if a["dims"] else xs[0].clone(),
                      invalid=(
        ((t((2, 1)),), {"dims": (0,)}),
        ((t((2, 1)),), {"dims": (2,)}),
    )),
    "unsqueeze": OpSpec(_one(lambda draw, shape: {"dim": draw(st.integers(-len(shape) - 1, len(shape)))}),
                        lambda xs, a: xs[0].unsqueeze(a["dim"]), invalid=(
        ((t((2, 1)),), {"dim": 3}),
        ((t((2, 1)),), {"dim": -4}),
    )),
    "cat": OpSpec(_cat_cases, lambda xs, a: torch.cat(xs, a["dim"]), invalid=(
        ((t((2, 3)), t((2, 4))), {"dim": 0}),
        ((t((2, 3)), t((2, 3), I64)), {"dim": 0}),
        ((t((2, 3)), t((2, 3, 1))), {"dim": 0}),
        ((t(()), t(())), {"dim": 0}),
        ((t((2, 3)),), {"dim": 2}),
        ((), {"dim": 0}),
    )),
    "split": OpSpec(_split_cases, lambda xs, a: torch.split_with_sizes(xs[0], list(a["sizes"]), a["dim"]), invalid=(
        ((t((2, 3)),), {"dim": 1, "sizes": (1, 1)}),
        ((t((2, 3)),), {"dim": 1, "sizes": (4, -1)}),
        ((t(()),), {"dim": 0, "sizes": (1,)}),
    )),
    "constant_pad": OpSpec(_one(_pad_attrs), _pad_torch, invalid=(
        ((t((2, 3)),), {"pad": (1,)}),
        ((t((2, 3)),), {"pad": (1, 1, 1, 1, 1, 1)}),
        ((t((2, 3)),), {"pad": (-2, -2)}),
        ((t((2, 3)),), {"pad": (-4, 5)}),  # crops more than the dimension holds
        ((t((2, 3), I64),), {"pad": (1, 1), "value": 0.5}),
    )),
    "copy": OpSpec(_one(lambda draw, shape: {}), lambda xs, a: xs[0].clone(), invalid=(
        ((t((2,)), t((2,))), {}),
    )),
    "flip": OpSpec(_one(_flip_attrs), lambda xs, a: torch.flip(xs[0], a["dims"]), invalid=(
        ((t((2, 3)),), {"dims": (2,)}),
        ((t((2, 3)),), {"dims": (0, 0)}),
        ((t((2, 3)),), {"dims": (1, -1)}),
    )),
    "slice_scatter": OpSpec(lambda: _scatter_cases("slice"), lambda xs, a: torch.slice_scatter(
        xs[0], xs[1], a["dim"], a["start"], a["end"], a["step"]), invalid=(
        ((t((2, 3)), t((2, 2))), {"dim": 1, "start": 0, "end": 1}),
        ((t((2, 3)), t((2, 1), I64)), {"dim": 1, "start": 0, "end": 1}),
    )),
    "select_scatter": OpSpec(lambda: _scatter_cases("select"), lambda xs, a: torch.select_scatter(
        xs[0], xs[1], a["dim"], a["index"]), invalid=(
        ((t((2, 3)), t((3,))), {"dim": 1, "index": 0}),
        ((t((2, 3)), t((2,))), {"dim": 1, "index": 3}),
    )),
    "as_strided": OpSpec(_one(_as_strided_attrs), lambda xs, a: torch.as_strided(
        xs[0].contiguous(), a["shape"], a["strides"], a["offset"]).clone(), invalid=(
        ((t((2, 3)),), {"shape": (2, 3), "strides": (3, 2)}),  # reads past the end
        ((t((2, 3)),), {"shape": (2,), "strides": (1, 1)}),
        ((t((2, 3)),), {"shape": (2,), "strides": (-1,)}),
        ((t((2, 3)),), {"shape": (-2,), "strides": (1,)}),
        ((t((2, 3)),), {"shape": (2,), "strides": (1,), "offset": 5}),
    )),
    "repeat": OpSpec(_one(_repeat_attrs), lambda xs, a: xs[0].repeat(a["repeats"]) if a["repeats"] else xs[0].clone(),
                     invalid=(
        ((t((2, 3)),), {"repeats": (2,)}),
        ((t((2, 3)),), {"repeats": (2, -1)}),
    )),
}
