"""Discrete Fourier transforms (Category.EXTERN): ``fft_r2c``, ``fft_c2r``, ``fft_c2c``, as ATen's ``_fft_*``.

Each transforms over ``dims`` (distinct, non-negative). ``norm`` scales the result: ``none`` (1),
``by_root_n`` (1/sqrt(n)) or ``by_n`` (1/n), n the product of the signal sizes over ``dims`` (for ``fft_c2r``,
the real output's). The direction is the op's own: r2c is a forward transform (e^{-2 pi i jk/n}), c2r an
inverse one (e^{+2 pi i jk/n}), c2c either (``forward``); ``norm`` never depends on it (torch.fft's ``norm=``
is mapped onto it by the front end).

- ``fft_r2c``: f32 -> c64; with ``onesided`` the last of ``dims`` keeps n//2 + 1 frequencies (Hermitian).
- ``fft_c2r``: a one-sided c64 spectrum -> f32; the last of ``dims`` has n//2 + 1 entries for an output of
  ``last_dim_size`` = n (the imaginary parts of frequencies 0 and n/2 are ignored, as ATen does).
- ``fft_c2c``: c64 -> c64, forward or inverse.

The cpu target calls ATen (pocketfft); nki-sim lowers them to DFT matmuls (``lower-complex{fft=dft}``). The
references compute in complex128 with numpy.fft.
"""

from __future__ import annotations

import math

import numpy as np

from neuroncc.ir.attrs import Attrs
from neuroncc.ir.dtypes import DType
from neuroncc.ir.opdef import AttrSpec, Category, OpDef, fail, normalize_dim
from neuroncc.ir.types import TensorType

NORMS = ("none", "by_root_n", "by_n")


def _check(op: str, t: TensorType, attrs: Attrs, dtype: DType) -> tuple[int, ...]:
    if t.dtype is not dtype:
        raise fail(op, f"operand #0 must be {dtype.value}, got {t.dtype.value}")
    dims = attrs["dims"]
    if not dims:
        raise fail(op, "dims must name at least one dimension")
    for d in dims:
        if d != normalize_dim(op, d, t.rank) or t.rank == 0:
            raise fail(op, f"dims must be non-negative dimensions of a rank-{t.rank} tensor, got {list(dims)}")
    if len(set(dims)) != len(dims):
        raise fail(op, f"dims {list(dims)} repeat a dimension")
    if any(t.shape[d] == 0 for d in dims):
        raise fail(op, f"cannot transform over a dimension of size 0 (shape {list(t.shape)}, dims {list(dims)})")
    if attrs["norm"] not in NORMS:
        raise fail(op, f"norm must be one of {', '.join(NORMS)}, got {attrs['norm']!r}")
    return dims


def _infer_r2c(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
    (t,) = types
    dims = _check("fft_r2c", t, attrs, DType.f32)
    shape = list(t.shape)
    if attrs["onesided"]:
        shape[dims[-1]] = shape[dims[-1]] // 2 + 1
    return TensorType(tuple(shape), DType.c64)


def _infer_c2r(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
    (t,) = types
    dims = _check("fft_c2r", t, attrs, DType.c64)
    n = attrs["last_dim_size"]
    if n < 1:
        raise fail("fft_c2r", f"last_dim_size must be positive, got {n}")
    if t.shape[dims[-1]] != n // 2 + 1:
        raise fail("fft_c2r", f"dimension {dims[-1]} has {t.shape[dims[-1]]} frequencies, a real signal of "
                              f"{n} needs {n // 2 + 1}")
    shape = list(t.shape)
    shape[dims[-1]] = n
    return TensorType(tuple(shape), DType.f32)


def _infer_c2c(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
    (t,) = types
    _check("fft_c2c", t, attrs, DType.c64)
    return t.contiguous()


def norm_scale(norm: str, n: int) -> float:
    """The factor ``norm`` multiplies a transform of ``n`` points by."""
    return {"none": 1.0, "by_root_n": 1.0 / math.sqrt(n) if n else 1.0, "by_n": 1.0 / n if n else 1.0}[norm]


def _points(shape: tuple[int, ...], dims: tuple[int, ...]) -> int:
    return math.prod(shape[d] for d in dims)


def _fft_r2c(x: np.ndarray, dims, norm, onesided) -> np.ndarray:
    spectrum = np.fft.fftn(np.asarray(x, dtype=np.float64), axes=dims)
    if onesided:
        spectrum = np.take(spectrum, np.arange(x.shape[dims[-1]] // 2 + 1), axis=dims[-1])
    return (spectrum * norm_scale(norm, _points(x.shape, dims))).astype(np.complex64)


def _fft_c2r(x: np.ndarray, dims, norm, last_dim_size) -> np.ndarray:
    sizes = [x.shape[d] for d in dims[:-1]] + [last_dim_size]
    n = math.prod(sizes)
    signal = np.fft.irfftn(np.asarray(x, dtype=np.complex128), s=sizes, axes=dims) * n  # unnormalized
    return (signal * norm_scale(norm, n)).astype(np.float32)


def _fft_c2c(x: np.ndarray, dims, norm, forward) -> np.ndarray:
    x = np.asarray(x, dtype=np.complex128)
    n = _points(x.shape, dims)
    result = np.fft.fftn(x, axes=dims) if forward else np.fft.ifftn(x, axes=dims) * n
    return (result * norm_scale(norm, n)).astype(np.complex64)


_COMMON = {"dims": AttrSpec("ints"), "norm": AttrSpec("str", "none")}

OPS = (
    OpDef("fft_r2c", Category.EXTERN, (1, 1), _infer_r2c, _fft_r2c, {**_COMMON, "onesided": AttrSpec("bool", True)},
          "forward DFT of a real tensor over dims (one-sided: n//2+1 frequencies along the last of dims)",
          takes_complex=True),
    OpDef("fft_c2r", Category.EXTERN, (1, 1), _infer_c2r, _fft_c2r, {**_COMMON, "last_dim_size": AttrSpec("int")},
          "inverse DFT of a one-sided (Hermitian) spectrum over dims to a real tensor of last_dim_size along the "
          "last of dims", takes_complex=True),
    OpDef("fft_c2c", Category.EXTERN, (1, 1), _infer_c2c, _fft_c2c, {**_COMMON, "forward": AttrSpec("bool")},
          "forward or inverse DFT of a complex tensor over dims", takes_complex=True),
)
