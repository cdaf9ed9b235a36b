"""NKI 0.1 index expressions: ``nl.arange``, ``nl.mgrid``, the affine expressions built from them, and masks.

``i_p = nl.arange(128)[:, None]`` is an index over axis 0 of a 2-D tile; ``2 * i_f + 1`` is still affine.
Indexing a tensor with them (``x[i_p, 2 * i_f + 1]``) gives a strided view (``advanced_view``): each result
axis steps every indexed dimension by its coefficient, so even/odd columns, pooling windows
(``x[i_p, 2 * i_h + i_kh]``) and free-axis transposes are ordinary views. Comparing expressions gives a
``Mask`` (``(i_p < 64) & (i_f < 256)``) for the ``mask=`` argument of NKI 0.1 calls (see ``masking``).

An expression keeps its values as a broadcastable numpy array (shape 1 along the axes it does not use) and,
while it is affine, ``const + sum(coef[a] * position[a])``. ``//`` and ``%`` make it non-affine: usable in masks
and ``nisa.iota``, not as a tensor index.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from neuroncc.nki.errors import NKISimulationError
from neuroncc.nki.tensor import Axis, Tensor, _added, _is_int_index, _scaled


class IndexExpr:
    """An integer expression over the positions of a tile's axes (NKI 0.1's ``Index``)."""

    __slots__ = ("shape", "coefs", "const", "_values")

    def __init__(self, shape: tuple[int, ...], coefs: tuple[int, ...] | None, const: int,
                 values: np.ndarray | None = None):
        self.shape = shape
        self.coefs = coefs  # None once the expression is not affine
        self.const = const
        self._values = values

    @property
    def affine(self) -> bool:
        return self.coefs is not None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def values(self) -> np.ndarray:
        """The expression's value at every position (broadcastable, int64)."""
        if self._values is None:
            result = np.full((1,) * len(self.shape), self.const, dtype=np.int64)
            for axis, (n, coef) in enumerate(zip(self.shape, self.coefs or ())):
                if coef and n > 1:
                    ramp = np.arange(n, dtype=np.int64).reshape([n if i == axis else 1 for i in range(len(self.shape))])
                    result = result + coef * ramp
            self._values = np.broadcast_to(result, self.shape) if result.shape != self.shape else result
        return self._values

    def __repr__(self) -> str:
        if self.affine:
            terms = " + ".join(f"{c}*i{a}" for a, c in enumerate(self.coefs or ()) if c)
            return f"IndexExpr({terms or '0'} + {self.const}, shape={self.shape})"
        return f"IndexExpr(<non-affine>, shape={self.shape})"

    # ----------------------------------------------------------------------------- new axes
    def __getitem__(self, key: Any) -> IndexExpr:
        """``[:, None]``-style reshaping: ``:`` keeps an axis, ``None`` inserts a new axis of size 1."""
        keys = key if isinstance(key, tuple) else (key,)
        kept = [k for k in keys if k is not None]
        if len(kept) != self.ndim or any(not (isinstance(k, slice) and k == slice(None)) for k in kept):
            raise NKISimulationError(f"index expressions take only ':' and None when adding axes, got {key!r}")
        shape, coefs, source = [], [], iter(range(self.ndim))
        for k in keys:
            if k is None:
                shape.append(1)
                coefs.append(0)
            else:
                axis = next(source)
                shape.append(self.shape[axis])
                coefs.append(self.coefs[axis] if self.coefs else 0)
        values = None if self.affine else self.values().reshape(shape)
        return IndexExpr(tuple(shape), tuple(coefs) if self.affine else None, self.const, values)

    # ----------------------------------------------------------------------------- arithmetic
    def _combine(self, other: object, op: str) -> IndexExpr:
        if isinstance(other, IndexExpr):
            a, b = _aligned(self, other)
            shape = tuple(np.broadcast_shapes(a.shape, b.shape))
            if op in ("add", "sub") and a.affine and b.affine:
                sign = 1 if op == "add" else -1
                coefs = tuple(x + sign * y for x, y in zip(a.coefs, b.coefs))  # type: ignore[arg-type]
                return IndexExpr(shape, coefs, a.const + sign * b.const)
            return IndexExpr(shape, None, 0, _apply(op, a.values(), b.values()))
        if not _is_int_index(other):
            return NotImplemented  # type: ignore[return-value]
        k = int(other)  # type: ignore[call-overload]
        if self.affine and op == "add":
            return IndexExpr(self.shape, self.coefs, self.const + k)
        if self.affine and op == "sub":
            return IndexExpr(self.shape, self.coefs, self.const - k)
        if self.affine and op == "mul":
            return IndexExpr(self.shape, tuple(c * k for c in self.coefs), self.const * k)  # type: ignore[union-attr]
        return IndexExpr(self.shape, None, 0, _apply(op, self.values(), np.int64(k)))

    def _rcombine(self, other: object, op: str) -> IndexExpr:
        if not _is_int_index(other):
            return NotImplemented  # type: ignore[return-value]
        if op in ("add", "mul"):
            return self._combine(other, op)
        if op == "sub":
            return (-self)._combine(other, "add")
        left = np.int64(int(other))  # type: ignore[call-overload]
        return IndexExpr(self.shape, None, 0, _apply(op, left, self.values()))

    def __add__(self, other: object) -> IndexExpr:
        return self._combine(other, "add")

    def __radd__(self, other: object) -> IndexExpr:
        return self._rcombine(other, "add")

    def __sub__(self, other: object) -> IndexExpr:
        return self._combine(other, "sub")

    def __rsub__(self, other: object) -> IndexExpr:
        return self._rcombine(other, "sub")

    def __mul__(self, other: object) -> IndexExpr:
        return self._combine(other, "mul")

    def __rmul__(self, other: object) -> IndexExpr:
        return self._rcombine(other, "mul")

    def __floordiv__(self, other: object) -> IndexExpr:
        return self._combine(other, "floordiv")

    def __mod__(self, other: object) -> IndexExpr:
        return self._combine(other, "mod")

    def __neg__(self) -> IndexExpr:
        return self._combine(-1, "mul")

    # ----------------------------------------------------------------------------- comparisons
    def _compare(self, other: object, op: str) -> Mask:
        right = other.values() if isinstance(other, IndexExpr) else np.int64(int(other))  # type: ignore[call-overload]
        return Mask(_apply(op, self.values(), right))

    def __lt__(self, other: object) -> Mask:  # type: ignore[override]
        return self._compare(other, "lt")

    def __le__(self, other: object) -> Mask:  # type: ignore[override]
        return self._compare(other, "le")

    def __gt__(self, other: object) -> Mask:  # type: ignore[override]
        return self._compare(other, "gt")

    def __ge__(self, other: object) -> Mask:  # type: ignore[override]
        return self._compare(other, "ge")

    def __eq__(self, other: object) -> Mask:  # type: ignore[override]
        return self._compare(other, "eq")

    def __ne__(self, other: object) -> Mask:  # type: ignore[override]
        return self._compare(other, "ne")

    __hash__ = None  # type: ignore[assignment]

    def advanced_view(self, tensor: Tensor, keys: Sequence[object]) -> Tensor:
        """``tensor[keys]`` where some keys are index expressions (``Tensor.__getitem__`` calls this)."""
        return advanced_view(tensor, keys)


_OPS = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "floordiv": np.floor_divide, "mod": np.mod,
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
    "ne": np.not_equal,
}


def _apply(op: str, a: np.ndarray | np.int64, b: np.ndarray | np.int64) -> np.ndarray:
    return np.asarray(_OPS[op](a, b))


def _aligned(a: IndexExpr, b: IndexExpr) -> tuple[IndexExpr, IndexExpr]:
    """Left-pad the shorter expression with size-1 axes, as numpy broadcasting does."""
    def pad(e: IndexExpr, ndim: int) -> IndexExpr:
        extra = ndim - e.ndim
        if extra == 0:
            return e
        values = None if e.affine else e.values().reshape((1,) * extra + e.shape)
        return IndexExpr((1,) * extra + e.shape, ((0,) * extra + e.coefs) if e.coefs is not None else None,
                         e.const, values)
    ndim = max(a.ndim, b.ndim)
    return pad(a, ndim), pad(b, ndim)


class Mask:
    """A predicate over tile positions (``(i_p < 64) & (i_f < 256)``), for NKI 0.1's ``mask=``."""

    __slots__ = ("values",)

    def __init__(self, values: np.ndarray):
        self.values = np.asarray(values, dtype=bool)

    def __and__(self, other: Mask) -> Mask:
        return Mask(self.values & _mask_values(other))

    def __or__(self, other: Mask) -> Mask:
        return Mask(self.values | _mask_values(other))

    def __xor__(self, other: Mask) -> Mask:
        return Mask(self.values ^ _mask_values(other))

    def __invert__(self) -> Mask:
        return Mask(~self.values)

    __rand__, __ror__, __rxor__ = __and__, __or__, __xor__

    def __bool__(self) -> bool:
        raise NKISimulationError("a mask is a predicate over tile positions, not a Python bool; pass it as mask=")

    def __repr__(self) -> str:
        return f"Mask(shape={self.values.shape}, {int(self.values.sum())} of {self.values.size} set)"


def _mask_values(other: object) -> np.ndarray:
    if isinstance(other, Mask):
        return other.values
    if isinstance(other, (bool, np.bool_)):
        return np.asarray(other)
    raise NKISimulationError(f"cannot combine a mask with {type(other).__name__}")


def arange(*args: int) -> IndexExpr:
    """``nl.arange([start,] stop[, step])``: a 1-D index over one tile axis; add axes with ``[:, None]``."""
    if not 1 <= len(args) <= 3 or not all(_is_int_index(a) for a in args):
        raise NKISimulationError(f"nl.arange takes 1 to 3 integers, got {args!r}")
    start, stop, step = (0, int(args[0]), 1) if len(args) == 1 else (int(args[0]), int(args[1]),
                                                                      int(args[2]) if len(args) == 3 else 1)
    if step == 0:
        raise NKISimulationError("nl.arange step must not be zero")
    count = max(0, -(-(stop - start) // step))
    if count <= 0:
        raise NKISimulationError(f"nl.arange({', '.join(map(str, args))}) is empty")
    return IndexExpr((count,), (step,), start)


class IndexGrid(tuple):  # type: ignore[type-arg]
    """The index expressions of ``nl.mgrid[...]``; unpack it, or use ``.p`` (axis 0), ``.x``, ``.y``, ``.z``."""

    @property
    def p(self) -> IndexExpr:
        return self[0]

    @property
    def x(self) -> IndexExpr:
        return self[1]

    @property
    def y(self) -> IndexExpr:
        return self[2]

    @property
    def z(self) -> IndexExpr:
        return self[3]


class _MGrid:
    """``nl.mgrid[0:128, 0:512]``: one index expression per axis, each varying along its own axis only."""

    def __getitem__(self, key: Any) -> IndexGrid:
        keys = key if isinstance(key, tuple) else (key,)
        exprs = []
        for axis, k in enumerate(keys):
            if not isinstance(k, slice) or k.stop is None:
                raise NKISimulationError(f"nl.mgrid takes slices with an end, like nl.mgrid[0:128, 0:512]; got {k!r}")
            start, step = k.start or 0, k.step or 1
            ramp = arange(start, k.stop, step)
            exprs.append(ramp[tuple(slice(None) if i == axis else None for i in range(len(keys)))])
        return IndexGrid(exprs)

    def __repr__(self) -> str:
        return "nl.mgrid"


mgrid = _MGrid()


def advanced_view(tensor: Tensor, keys: Sequence[object]) -> Tensor:
    """``tensor[e0, e1, ...]`` for affine index expressions (and integers): a strided view.

    The result has the broadcast shape of the expressions; result axis ``a`` steps each indexed dimension
    ``j`` by ``coef_j[a]``. Dimensions after the indexed ones stay as they are (numpy's rule). The view is
    not bounds-checked here: NKI 0.1 kernels index past a tensor's end and mask those elements off, so the
    check happens when the (masked, trimmed) view is read or written.
    """
    if len(keys) > len(tensor.axes):
        raise NKISimulationError(
            f"too many indices for tensor '{tensor.name}' of shape {tensor.shape}: got {len(keys)}")
    exprs: list[IndexExpr] = []
    for position, key in enumerate(keys):
        if isinstance(key, IndexExpr):
            if not key.affine:
                raise NKISimulationError(
                    f"index {position} of tensor '{tensor.name}' is not an affine expression of nl.arange "
                    f"(// and % are allowed in masks and nisa.iota only)")
            exprs.append(key)
        elif _is_int_index(key):
            exprs.append(IndexExpr((), (), int(key)))  # type: ignore[call-overload]
        elif isinstance(key, Tensor):
            raise NKISimulationError(
                f"tensor '{tensor.name}' indexed by the values of tile '{key.name}' (index {position}): indirect "
                f"DMA (data-dependent addressing) is not supported by neuroncc's simulator")
        else:
            raise NKISimulationError(
                f"tensor '{tensor.name}': NKI does not mix basic indexing ({key!r}) with nl.arange index "
                f"expressions in one index tuple")
    ndim = max(e.ndim for e in exprs)
    exprs = [_aligned(e, IndexExpr((1,) * ndim, (0,) * ndim, 0))[0] for e in exprs]
    shape = tuple(np.broadcast_shapes(*(e.shape for e in exprs)))
    layout_dims = len(tensor.layout)
    offset = tensor.offset
    for expr, axis in zip(exprs, tensor.axes):
        offset = _added(offset, _scaled(axis.steps, expr.const))
    axes = []
    for a, n in enumerate(shape):
        steps = (0,) * layout_dims
        for expr, axis in zip(exprs, tensor.axes):
            if expr.coefs and expr.coefs[a] and expr.shape[a] > 1:
                steps = _added(steps, _scaled(axis.steps, expr.coefs[a]))
        axes.append(Axis(n, steps))
    axes.extend(tensor.axes[len(keys):])
    return Tensor(tensor.storage, tensor.layout, offset, tuple(axes))
