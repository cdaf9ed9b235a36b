"""Reductions over a set of dimensions: sum, mean, prod, amax, amin, any, all, var, argmax, argmin.

``dims`` lists the reduced dimensions explicitly (the front end expands PyTorch's "empty means all").
The result keeps the operand's element type (floats accumulate in float64 in the reference), except
``any``/``all`` (bool) and ``argmax``/``argmin`` (i64).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from neuroncc.ir.attrs import Attrs
from neuroncc.ir.dtypes import DType
from neuroncc.ir.opdef import AttrSpec, Category, OpDef, Trait, fail, normalize_dim
from neuroncc.ir.types import TensorType


def reduced_shape(shape: tuple[int, ...], dims: tuple[int, ...], keepdim: bool) -> tuple[int, ...]:
    if keepdim:
        return tuple(1 if i in dims else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in dims)


def check_dims(op: str, t: TensorType, dims: tuple[int, ...]) -> tuple[int, ...]:
    if t.rank == 0 and dims:
        raise fail(op, f"a 0-dim tensor has no dimensions to reduce, got dims {list(dims)} (use dims=[])")
    normalized = tuple(normalize_dim(op, d, t.rank) for d in dims)
    if len(set(normalized)) != len(normalized):
        raise fail(op, f"dims {list(dims)} repeat a dimension")
    return normalized


def _listed_dims(attrs: Attrs, rank: int) -> tuple[int, ...]:
    """The dims a reduction with a ``dims`` attribute reduces (sorted and non-negative, as its type rule checks)."""
    return tuple(attrs["dims"])


def _arg_dims(attrs: Attrs, rank: int) -> tuple[int, ...]:
    """argmax/argmin reduce ``dim``, or every dim when it is None (dim 0 of a 0-dim operand names none)."""
    if attrs["dim"] is None or rank == 0:
        return tuple(range(rank))
    return (attrs["dim"] % rank,)


def _reduction(name: str, fn: Callable[..., np.ndarray], *, result: str = "same", nonempty: bool = False,
               extra_attrs: dict[str, AttrSpec] | None = None, doc: str = "",
               traits: frozenset[Trait] = frozenset(),
               complex: bool = False) -> OpDef:
    def infer(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
        (t,) = types
        dims = check_dims(name, t, attrs["dims"])
        if tuple(sorted(dims)) != attrs["dims"]:
            raise fail(name, f"dims must be sorted and non-negative, got {list(attrs['dims'])}")
        if nonempty and any(t.shape[d] == 0 for d in dims):
            raise fail(name, f"cannot reduce over a dimension of size 0 (shape {list(t.shape)})")
        if result == "same" and t.dtype.is_bool and name not in ("amax", "amin"):
            raise fail(name, "operand #0 is bool; cast it to a numeric type first")
        if result == "float" and not (t.dtype.is_float or (complex and t.dtype.is_complex)):
            raise fail(name, f"operand #0 must be a float type, got {t.dtype.value}")
        dtype = DType.bool if result == "bool" else t.dtype
        return TensorType(reduced_shape(t.shape, dims, attrs["keepdim"]), dtype)

    attrs = {"dims": AttrSpec("ints"), "keepdim": AttrSpec("bool", False), **(extra_attrs or {})}
    return OpDef(name, Category.REDUCTION, (1, 1), infer, fn, attrs, doc or f"{name} over dims", traits=traits,
                 reduces=_listed_dims, takes_complex=complex)


def _wide(x: np.ndarray) -> np.ndarray:
    if x.dtype.kind == "c":
        return x.astype(np.complex128)
    return x.astype(np.float64) if x.dtype.kind == "f" else x


def _sum(x, dims, keepdim):
    return np.sum(_wide(x), axis=dims, keepdims=keepdim)


def _count(x: np.ndarray, dims: tuple[int, ...]) -> int:
    return int(np.prod([x.shape[d] for d in dims])) if dims else 1


def _mean(x, dims, keepdim):
    # sum / count rather than np.mean, which warns "Mean of empty slice" (the mean of nothing is NaN here)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.sum(_wide(x), axis=dims, keepdims=keepdim) / _count(x, dims)


def _prod(x, dims, keepdim):
    return np.prod(_wide(x), axis=dims, keepdims=keepdim)


def _amax(x, dims, keepdim):
    return np.max(x, axis=dims, keepdims=keepdim)  # np.max propagates NaN, as torch.amax does


def _amin(x, dims, keepdim):
    return np.min(x, axis=dims, keepdims=keepdim)


def _any(x, dims, keepdim):
    return np.any(x, axis=dims, keepdims=keepdim)


def _all(x, dims, keepdim):
    return np.all(x, axis=dims, keepdims=keepdim)


def _var(x, dims, keepdim, correction):
    count = _count(x, dims)
    with np.errstate(invalid="ignore", divide="ignore"):
        x64 = x.astype(np.float64)
        mean = np.sum(x64, axis=dims, keepdims=True) / count
        sq = np.sum((x64 - mean) ** 2, axis=dims, keepdims=keepdim)
        return sq / max(count - correction, 0)


def _infer_arg(name: str) -> Callable[[tuple[TensorType, ...], Attrs], TensorType]:
    def infer(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
        (t,) = types
        if t.dtype.is_bool:
            raise fail(name, "operand #0 is bool; cast it to a numeric type first")
        dim = attrs["dim"]
        if dim is None:
            if t.numel == 0:
                raise fail(name, "cannot take the arg of an empty tensor")
            return TensorType((1,) * t.rank if attrs["keepdim"] else (), DType.i64)
        d = normalize_dim(name, dim, t.rank)
        if t.rank and t.shape[d] == 0:
            raise fail(name, f"cannot reduce over a dimension of size 0 (shape {list(t.shape)})")
        if t.rank == 0:
            return TensorType((), DType.i64)
        return TensorType(reduced_shape(t.shape, (d,), attrs["keepdim"]), DType.i64)

    return infer


def _arg(np_fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def reference(x, dim, keepdim):
        if dim is None:
            flat = np_fn(x.reshape(-1))
            return np.reshape(np.int64(flat), (1,) * x.ndim if keepdim else ())
        if x.ndim == 0:
            return np.int64(0)
        d = dim % x.ndim
        return np_fn(x, axis=d, keepdims=keepdim).astype(np.int64)

    return reference


_ARG_ATTRS = {"dim": AttrSpec("optional-int", None), "keepdim": AttrSpec("bool", False)}

OPS = (
    _reduction("sum", _sum, traits=frozenset({Trait.SUM_REDUCTION}), complex=True),
    _reduction("mean", _mean, result="float", traits=frozenset({Trait.SUM_REDUCTION}), complex=True),
    _reduction("prod", _prod),
    _reduction("amax", _amax, nonempty=True, doc="max over dims, NaN propagates"),
    _reduction("amin", _amin, nonempty=True, doc="min over dims, NaN propagates"),
    _reduction("any", _any, result="bool"),
    _reduction("all", _all, result="bool"),
    _reduction("var", _var, result="float", extra_attrs={"correction": AttrSpec("float", 1.0)},
               doc="variance over dims with Bessel correction"),
    OpDef("argmax", Category.REDUCTION, (1, 1), _infer_arg("argmax"), _arg(np.argmax), _ARG_ATTRS,
          "index of the max along dim (first one; NaN counts as max)", reduces=_arg_dims),
    OpDef("argmin", Category.REDUCTION, (1, 1), _infer_arg("argmin"), _arg(np.argmin), _ARG_ATTRS,
          "index of the min along dim (first one; NaN counts as min)", reduces=_arg_dims),
)
