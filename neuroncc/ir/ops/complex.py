"""Complex views: ``view_as_real`` and ``view_as_complex`` (torch's), the bridge between c64 and its storage.

A c64 tensor is stored interleaved, (real, imaginary) float32 pairs, so ``view_as_real`` of a ``c64[...]`` is
the ``f32[..., 2]`` over the same storage (last dimension: real, imaginary) and ``view_as_complex`` is its
inverse. Both are views in PyTorch's semantics. The ``lower-complex`` pass rewrites complex arithmetic into
float32 arithmetic on these views, so code generators only ever reinterpret c64 buffers, never compute on them.
"""

from __future__ import annotations

import numpy as np

from neuroncc.ir.attrs import Attrs
from neuroncc.ir.dtypes import DType
from neuroncc.ir.opdef import Category, OpDef, Trait, fail
from neuroncc.ir.types import TensorType


def _infer_view_as_real(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
    (t,) = types
    if not t.dtype.is_complex:
        raise fail("view_as_real", f"operand #0 must be complex (c64), got {t.dtype.value}")
    return TensorType(t.shape + (2,), DType.f32)


def _infer_view_as_complex(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
    (t,) = types
    if t.dtype is not DType.f32:
        raise fail("view_as_complex", f"operand #0 must be f32, got {t.dtype.value}")
    if not t.shape or t.shape[-1] != 2:
        raise fail("view_as_complex", f"the last dimension must have size 2 (real, imaginary), got shape "
                                      f"{list(t.shape)}")
    return TensorType(t.shape[:-1], DType.c64)


def _view_as_real(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.complex64)
    pairs = x if x.ndim and x.strides[-1] == x.itemsize else np.ascontiguousarray(x)
    return pairs.view(np.float32).reshape(x.shape + (2,))  # the same storage, as a view is


def _view_as_complex(x: np.ndarray) -> np.ndarray:
    # the bits reinterpreted (re + 1j * im would turn an infinite im into a NaN re)
    return np.ascontiguousarray(x, dtype=np.float32).view(np.complex64)[..., 0]


_REINTERPRETING = frozenset({Trait.VIEW, Trait.REINTERPRET})

OPS = (
    OpDef("view_as_real", Category.MOVEMENT, (1, 1), _infer_view_as_real, _view_as_real, {},
          "c64[...] as f32[..., 2] (real, imaginary) over the same storage", traits=_REINTERPRETING),
    OpDef("view_as_complex", Category.MOVEMENT, (1, 1), _infer_view_as_complex, _view_as_complex, {},
          "f32[..., 2] (real, imaginary) as c64[...] over the same storage", traits=_REINTERPRETING),
)
