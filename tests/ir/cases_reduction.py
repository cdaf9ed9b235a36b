"""Test table entries for the reductions: sum, mean, prod, amax, amin, any, all, var, argmax, argmin.

The IR's ``dims`` are explicit, and ``dims=[]`` reduces over no dimension (the front end spells PyTorch's
"empty means all" out). Reducing over no dimension is reducing over a fresh size-1 dimension, which is how the
torch side computes it. Integer sums and products keep the operand's type in the IR (torch widens to int64
unless given ``dtype=``), so the torch side passes ``dtype``.
"""

from __future__ import annotations

import math
import warnings

import torch
from hypothesis import strategies as st

from neuroncc.ir import DType, TensorType

from .cases_elementwise import KINDS
from .spec import OpSpec
from .support import FLOATS, SPECIALS, SPECIALS_NOT_HUGE, Case, Tol, operand, rngs, shapes

F32, I64, BOOL = DType.f32, DType.i64, DType.bool


def t(shape, dtype):
    return TensorType(tuple(shape), dtype)


def _over_dims(fn, x: torch.Tensor, dims: tuple[int, ...], keepdim: bool, **kw) -> torch.Tensor:
    """Apply a single-dim torch reduction ``fn`` over several (or no) dims: move them last and flatten them."""
    rest = [d for d in range(x.dim()) if d not in dims]
    moved = x.permute(*rest, *dims) if x.dim() else x
    flat = moved.reshape(*[x.shape[d] for d in rest], math.prod(x.shape[d] for d in dims))
    out = fn(flat, dim=-1, **kw)
    if keepdim:
        out = out.reshape([1 if d in dims else s for d, s in enumerate(x.shape)])
    return out


def _reduction_cases(name: str, dtypes, *, nonempty: bool = False, extra=None):
    @st.composite
    def cases(draw: st.DrawFn) -> Case:
        rng = draw(rngs())
        dtype = draw(st.sampled_from(dtypes))
        shape = draw(shapes(min_size=1 if nonempty else 0))
        dims = tuple(sorted(draw(st.sets(st.sampled_from(range(len(shape))))))) if shape else ()
        attrs = {"dims": dims}
        if draw(st.booleans()):
            attrs["keepdim"] = draw(st.booleans())
        if extra:
            attrs.update(extra(draw))
        low, high = (-2, 2) if name == "prod" else (-4, 4)
        specials = draw(st.booleans()) and (SPECIALS if name in ("amax", "amin", "any", "all") else SPECIALS_NOT_HUGE)
        return Case([operand(rng, shape, dtype, low=low, high=high, specials=specials)], attrs)

    return cases


def _native(fn, *, keep_type: bool = False):
    """A torch reduction taking a tuple of dims (``dims=[]`` reduces a fresh size-1 dim)."""
    def run(xs, attrs):
        x, dims, keepdim = xs[0], attrs["dims"], attrs["keepdim"]
        kw = {"dtype": x.dtype} if keep_type else {}
        if not dims:
            return fn(x.unsqueeze(-1), dim=-1, keepdim=False, **kw)
        return fn(x, dim=dims, keepdim=keepdim, **kw)

    return run


def _as_bool(fn):
    """torch.any/all return uint8 for uint8 operands (a legacy quirk); the IR always returns bool."""
    native = _native(fn)
    return lambda xs, attrs: native(xs, attrs).to(torch.bool)


def _prod(xs, attrs):
    return _over_dims(torch.prod, xs[0], attrs["dims"], attrs["keepdim"], dtype=xs[0].dtype)


def _var(xs, attrs):
    x, dims = xs[0], attrs["dims"]
    with warnings.catch_warnings():  # "degrees of freedom is <= 0": the result (inf or NaN) is what is tested
        warnings.simplefilter("ignore", UserWarning)
        if not dims:
            return torch.var(x.unsqueeze(-1), dim=-1, correction=attrs["correction"])
        return torch.var(x, dim=dims, keepdim=attrs["keepdim"], correction=attrs["correction"])


def _correction(draw):
    return {"correction": draw(st.sampled_from([0.0, 1.0, 0.5, 2.0, 3.0]))} if draw(st.booleans()) else {}


def _arg_cases(draw_dtype):
    @st.composite
    def cases(draw: st.DrawFn) -> Case:
        rng = draw(rngs())
        dtype = draw(st.sampled_from(draw_dtype))
        shape = draw(shapes(min_size=1))
        attrs = {}
        if shape and draw(st.booleans()):
            attrs["dim"] = draw(st.integers(-len(shape), len(shape) - 1))
        elif not shape and draw(st.booleans()):
            attrs["dim"] = draw(st.sampled_from([0, -1]))
        if draw(st.booleans()):
            attrs["keepdim"] = draw(st.booleans())
        # ties are common with small integer ranges: the first index wins
        return Case([operand(rng, shape, dtype, low=-2, high=2, specials=draw(st.booleans()))], attrs)

    return cases


def _arg_torch(fn):
    return lambda xs, attrs: fn(xs[0], dim=attrs["dim"], keepdim=attrs["keepdim"])


_REDUCTION_INVALID = (
    ((t((2, 3), F32),), {}),  # dims is required
    ((t((2, 3), F32),), {"dims": (2,)}),  # out of range
    ((t((2, 3), F32),), {"dims": (1, 0)}),  # not sorted
    ((t((2, 3), F32),), {"dims": (-1,)}),  # not normalized
    ((t((2, 3), F32),), {"dims": (1, 1)}),
    ((t((), F32),), {"dims": (0,)}),
    ((t((2, 3), F32), t((2, 3), F32)), {"dims": (0,)}),
    ((t((2, 3), F32),), {"dims": (0,), "keepdim": 1}),
)
_FLOAT_ONLY = (((t((2, 3), I64),), {"dims": (0,)}),)
_NO_BOOL = (((t((2, 3), BOOL),), {"dims": (0,)}),)
_NO_COMPLEX = (((t((2, 3), DType.c64),), {"dims": (0,)}),)
_NONEMPTY = (((t((0, 3), F32),), {"dims": (0,)}),)
_ARG_INVALID = (
    ((t((2, 3), BOOL),), {}),
    ((t((2, 3), F32),), {"dim": 2}),
    ((t((0, 3), F32),), {"dim": 0}),
    ((t((0, 3), F32),), {}),
    ((t((2, 3), F32),), {"dim": (0,)}),
)

SPECS = {
    "sum": OpSpec(_reduction_cases("sum", KINDS["numeric"] + (DType.c64,)), _native(torch.sum, keep_type=True),
                  Tol(4, 4), _REDUCTION_INVALID + _NO_BOOL),
    "mean": OpSpec(_reduction_cases("mean", FLOATS + (DType.c64,)), _native(torch.mean), Tol(4, 4),
                   _REDUCTION_INVALID + _FLOAT_ONLY),
    "prod": OpSpec(_reduction_cases("prod", KINDS["numeric"]), _prod, Tol(4, 4),
                   _REDUCTION_INVALID + _NO_BOOL + _NO_COMPLEX),
    "amax": OpSpec(_reduction_cases("amax", KINDS["any"], nonempty=True), _native(torch.amax), Tol(),
                   _REDUCTION_INVALID + _NONEMPTY),
    "amin": OpSpec(_reduction_cases("amin", KINDS["any"], nonempty=True), _native(torch.amin), Tol(),
                   _REDUCTION_INVALID + _NONEMPTY),
    "any": OpSpec(_reduction_cases("any", KINDS["any"]), _as_bool(torch.any), Tol(), _REDUCTION_INVALID),
    "all": OpSpec(_reduction_cases("all", KINDS["any"]), _as_bool(torch.all), Tol(), _REDUCTION_INVALID),
    "var": OpSpec(_reduction_cases("var", FLOATS, extra=_correction), _var, Tol(8, 8),
                  _REDUCTION_INVALID + _FLOAT_ONLY + (((t((2, 3), F32),), {"dims": (0,), "correction": "1"}),)),
    "argmax": OpSpec(_arg_cases(KINDS["numeric"]), _arg_torch(torch.argmax), Tol(), _ARG_INVALID),
    "argmin": OpSpec(_arg_cases(KINDS["numeric"]), _arg_torch(torch.argmin), Tol(), _ARG_INVALID),
}
