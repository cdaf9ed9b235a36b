"""The FFTs as DFT matrix products, for targets whose fast path is a matrix engine (``lower-complex{fft=dft}``).

A transform over several dimensions is one 1-d transform per dimension (the DFT is separable); a 1-d
transform of length n along dimension d moves d last, flattens the rest into rows and multiplies by an
[n_in, n_out] table of cosines or sines (``mm``), which is then moved back. Complex data are (re, im) pairs of
f32 values; multiplying by e^{s i theta} (s = -1 forward, +1 inverse) takes four real products:

    (a + i b)(C + i s S) = (a C - s b S) + i (b C + s a S)

``fft_r2c`` starts with the real transform of the last of its dims (n//2 + 1 outputs when one-sided),
``fft_c2r`` ends with the Hermitian one: x_j = sum_k w_k (Re X_k cos - Im X_k sin)(2 pi jk/n), w_k = 2 except
w_0 = 1 and w_{n/2} = 1 for even n (the imaginary parts of those two never count, as in ATen). The ``norm``
factor is folded into the first table. Tables are computed in float64 and rounded to float32 once.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from neuroncc.ir import DenseAttr, DType, Op, Value
from neuroncc.ir.ops.library_fft import norm_scale

F32 = DType.f32
Pair = tuple[Value, Value]


def _tables(n_in: int, n_out: int, n: int, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of 2 pi j k / n for j < n_in (input index), k < n_out (output index), times ``scale``."""
    angle = 2 * math.pi * np.outer(np.arange(n_in), np.arange(n_out)) / n
    return np.cos(angle) * scale, np.sin(angle) * scale


def _along(p: Any, x: Value, dim: int, table: np.ndarray) -> Value:
    """``x`` with dimension ``dim`` (size table.shape[0]) multiplied by ``table`` (size table.shape[1])."""
    shape, rank = x.type.shape, x.type.rank
    order = [d for d in range(rank) if d != dim] + [dim]
    moved = x if dim == rank - 1 else p.op("permute", x, dims=tuple(order))
    rows = math.prod(shape[d] for d in order[:-1])
    flat = p.op("reshape", moved, shape=(rows, shape[dim]))
    matrix = p.op("constant", value=DenseAttr(table.astype(np.float32), F32))
    product = p.op("reshape", p.op("mm", flat, matrix), shape=tuple(shape[d] for d in order[:-1]) + (table.shape[1],))
    if dim == rank - 1:
        return product
    return p.op("permute", product, dims=tuple(order.index(d) for d in range(rank)))


def _complex_along(p: Any, x: Pair, dim: int, sign: int, scale: float) -> Pair:
    """One complex DFT of (re, im) along ``dim``: multiplied by e^{sign 2 pi i jk/n}."""
    a, b = x
    n = a.type.shape[dim]
    cos, sin = _tables(n, n, n, scale)
    re = p.op("sub" if sign > 0 else "add", _along(p, a, dim, cos), _along(p, b, dim, sin))
    im = p.op("add" if sign > 0 else "sub", _along(p, b, dim, cos), _along(p, a, dim, sin))
    return re, im


def _fft_r2c(p: Any, x: Value, op: Op) -> Pair:
    dims, shape = op.attrs["dims"], x.type.shape
    scale = norm_scale(op.attrs["norm"], math.prod(shape[d] for d in dims))
    last, n = dims[-1], shape[dims[-1]]
    cos, sin = _tables(n, n // 2 + 1 if op.attrs["onesided"] else n, n, scale)
    pair = (_along(p, x, last, cos), _along(p, x, last, -sin))  # x e^{-i theta} = x cos - i x sin
    for dim in dims[:-1]:
        pair = _complex_along(p, pair, dim, -1, 1.0)
    return pair


def _fft_c2c(p: Any, x: Pair, op: Op) -> Pair:
    dims = op.attrs["dims"]
    scale = norm_scale(op.attrs["norm"], math.prod(x[0].type.shape[d] for d in dims))
    sign = -1 if op.attrs["forward"] else 1
    for index, dim in enumerate(dims):
        x = _complex_along(p, x, dim, sign, scale if index == 0 else 1.0)
    return x


def _fft_c2r(p: Any, x: Pair, op: Op) -> Value:
    dims, n = op.attrs["dims"], op.attrs["last_dim_size"]
    sizes = [x[0].type.shape[d] for d in dims[:-1]] + [n]
    scale = norm_scale(op.attrs["norm"], math.prod(sizes))
    for dim in dims[:-1]:
        x = _complex_along(p, x, dim, 1, 1.0)
    m = n // 2 + 1
    weights = np.full(m, 2.0)
    weights[0] = 1.0
    if n % 2 == 0:
        weights[-1] = 1.0
    cos, sin = _tables(m, n, n, scale)
    cos, sin = cos * weights[:, None], sin * weights[:, None]
    return p.op("sub", _along(p, x[0], dims[-1], cos), _along(p, x[1], dims[-1], sin))


#: library op -> its DFT lowering: (Parts helper, the operand (f32 value or (re, im)), the op) -> result.
DFT_LOWERINGS: dict[str, Callable[..., Any]] = {
    "fft_r2c": _fft_r2c,  # real table along the last dim, then complex tables along the others
    "fft_c2c": _fft_c2c,  # complex tables along each dim
    "fft_c2r": _fft_c2r,  # complex tables along the leading dims, then the Hermitian table along the last
}
