"""Lowerings of the complex-number and FFT aten ops.

complex64 is an IR element type (``c64``, interleaved storage), so most complex arithmetic goes through the
ordinary elementwise lowerings (add, mul, div, where, sum, ...; the importer casts real operands to c64 as
PyTorch promotes them). This module holds what is specific to complex numbers:

- ``view_as_real``/``view_as_complex`` (the IR ops of the same names), ``aten.complex(re, im)`` and
  ``polar``, ``abs`` of a complex tensor (an f32 magnitude), ``exp`` of a complex tensor (from its
  parts; ``angle`` is a decomposition, lowering/coverage.py); other transcendental functions of complex tensors are refused by the IR (a typed error);
- ``_conj`` (PyTorch's lazily conjugated view) and ``conj_physical`` as the IR's ``conj``; ``resolve_conj``
  and ``resolve_neg`` are no-ops here (values are always materialized);
- ``_fft_r2c``, ``_fft_c2r``, ``_fft_c2c`` (what every ``torch.fft`` function and their backward formulas
  decompose to) as the IR's ``fft_*`` library ops; ATen's normalization code becomes the ``norm`` attribute.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx

from neuroncc.frontend.lowering.context import LoweringContext, normalize_dim
from neuroncc.frontend.lowering.elementwise import ELEMENTWISE_LOWERINGS
from neuroncc.ir import DType, Value

aten = torch.ops.aten
Lowering = Callable[..., Any]

#: ATen's fft_norm_mode codes -> the IR's ``norm`` attribute.
FFT_NORMS = {0: "none", 1: "by_root_n", 2: "by_n"}


def _complex_value(ctx: LoweringContext, arg: Any) -> Value:
    return ctx.operand(arg, DType.c64)


def _view_as_real(ctx: LoweringContext, node: fx.Node, self: Any) -> Value:
    return ctx.emit("view_as_real", ctx.value(self))


def _view_as_complex(ctx: LoweringContext, node: fx.Node, self: Any) -> Value:
    return ctx.emit("view_as_complex", ctx.operand(self, DType.f32))


def _conj(ctx: LoweringContext, node: fx.Node, self: Any) -> Value:
    if not isinstance(self, fx.Node):  # a Python scalar (autograd conjugates a scalar factor of mul)
        return ctx.scalar(complex(self).conjugate(), ctx.out_dtype(node))
    x = ctx.value(self)
    return ctx.emit("conj", x) if x.type.dtype.is_complex else x  # conj of a real tensor is itself


def _identity(ctx: LoweringContext, node: fx.Node, self: Any) -> Value:
    return ctx.value(self)


def _from_parts(ctx: LoweringContext, re: Value, im: Value) -> Value:
    rank = re.type.rank
    pairs = ctx.emit("cat", ctx.emit("unsqueeze", re, dim=rank), ctx.emit("unsqueeze", im, dim=rank), dim=rank)
    return ctx.emit("view_as_complex", pairs)


def _broadcast_pair(ctx: LoweringContext, node: fx.Node, a: Any, b: Any) -> tuple[Value, Value]:
    shape = ctx.out_shape(node)
    pair = []
    for arg in (a, b):
        x = ctx.operand(arg, DType.f32)
        pair.append(x if x.type.shape == shape else ctx.emit("expand", x, shape=shape))
    return pair[0], pair[1]


def _complex(ctx: LoweringContext, node: fx.Node, real: Any, imag: Any) -> Value:
    """torch.complex(re, im)."""
    return _from_parts(ctx, *_broadcast_pair(ctx, node, real, imag))


def _polar(ctx: LoweringContext, node: fx.Node, abs: Any, angle: Any) -> Value:
    """torch.polar(r, theta) = r cos(theta) + i r sin(theta)."""
    r, theta = _broadcast_pair(ctx, node, abs, angle)
    return _from_parts(ctx, ctx.emit("mul", r, ctx.emit("cos", theta)), ctx.emit("mul", r, ctx.emit("sin", theta)))


def _parts(ctx: LoweringContext, x: Value) -> tuple[Value, Value]:
    pairs = ctx.emit("view_as_real", x)
    rank = x.type.rank
    return ctx.emit("select", pairs, dim=rank, index=0), ctx.emit("select", pairs, dim=rank, index=1)


def _abs(ctx: LoweringContext, node: fx.Node, self: Any) -> Value:
    x = ctx.value(self)
    if x.type.dtype.is_complex:
        return ctx.emit("abs", x)  # the magnitude, an f32 tensor
    return _REAL_ABS(ctx, node, self)


_REAL_ABS = ELEMENTWISE_LOWERINGS[aten.abs.default]


def _exp(ctx: LoweringContext, node: fx.Node, self: Any) -> Value:
    """exp of a complex tensor: e^re (cos im + i sin im); of a real one, the real lowering."""
    if not isinstance(self, fx.Node) or not ctx.value(self).type.dtype.is_complex:
        return _REAL_EXP(ctx, node, self)
    re, im = _parts(ctx, ctx.value(self))
    scale = ctx.emit("exp", re)
    return _from_parts(ctx, ctx.emit("mul", scale, ctx.emit("cos", im)), ctx.emit("mul", scale, ctx.emit("sin", im)))


_REAL_EXP = ELEMENTWISE_LOWERINGS[aten.exp.default]


def _fft_dims(node: fx.Node, x: Value, dim: Any) -> tuple[int, ...]:
    return tuple(normalize_dim(int(d), x.type.rank) for d in dim)


def _fft_r2c(ctx: LoweringContext, node: fx.Node, self: Any, dim: Any, normalization: int, onesided: bool) -> Value:
    x = ctx.operand(self, DType.f32)
    return ctx.emit("fft_r2c", x, dims=_fft_dims(node, x, dim), norm=FFT_NORMS[int(normalization)],
                    onesided=bool(onesided))


def _fft_c2r(ctx: LoweringContext, node: fx.Node, self: Any, dim: Any, normalization: int,
             last_dim_size: int) -> Value:
    x = _complex_value(ctx, self)
    return ctx.emit("fft_c2r", x, dims=_fft_dims(node, x, dim), norm=FFT_NORMS[int(normalization)],
                    last_dim_size=int(last_dim_size))


def _fft_c2c(ctx: LoweringContext, node: fx.Node, self: Any, dim: Any, normalization: int, forward: bool) -> Value:
    x = _complex_value(ctx, self)
    return ctx.emit("fft_c2c", x, dims=_fft_dims(node, x, dim), norm=FFT_NORMS[int(normalization)],
                    forward=bool(forward))


COMPLEX_LOWERINGS: dict[Any, Lowering] = {
    aten.view_as_real.default: _view_as_real,  # c64[...] -> f32[..., 2], the same storage
    aten.view_as_complex.default: _view_as_complex,  # f32[..., 2] -> c64[...]
    aten._conj.default: _conj,  # the lazily conjugated view, materialized
    aten.conj_physical.default: _conj,
    aten.resolve_conj.default: _identity,  # values are always materialized
    aten.resolve_neg.default: _identity,
    aten.complex.default: _complex,  # re + i im
    aten.polar.default: _polar,  # r cos + i r sin
    aten.abs.default: _abs,  # of a complex tensor: its magnitude (f32)
    aten.exp.default: _exp,  # of a complex tensor: e^re (cos im + i sin im)
    aten._fft_r2c.default: _fft_r2c,  # -> fft_r2c
    aten._fft_c2r.default: _fft_c2r,  # -> fft_c2r
    aten._fft_c2c.default: _fft_c2c,  # -> fft_c2c
}
