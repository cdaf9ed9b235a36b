"""Lowerings of reductions (sum, mean, amax, var, argmax, ...) and contractions (mm, addmm, bmm, convolution,
and avg_pool2d, which is a depthwise convolution with a constant kernel).

aten's "no dims / empty dim list means every dim" is expanded here (the IR takes explicit sorted dims), and an
input whose dtype differs from the result (``sum`` of bool is int64, ``sum(dtype=...)``) is cast first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.fx as fx

from neuroncc.errors import UnsupportedOpError
from neuroncc.frontend.lowering.context import LoweringContext, normalize_dim, normalize_dims
from neuroncc.ir import DenseAttr, DType, Value
from neuroncc.ir.ops.linalg import conv_output_size

aten = torch.ops.aten
Lowering = Callable[..., Any]


def reduction(ir_name: str) -> Lowering:
    """``x -> ir_name(x)`` over ``dim`` (None or [] = all dims), computed in the result dtype."""
    def lower(ctx: LoweringContext, node: fx.Node, self: Any, dim: Any = None, keepdim: bool = False,
              *, dtype: Any = None) -> Value:
        x = ctx.operand(self, ctx.out_dtype(node))
        return ctx.emit(ir_name, x, dims=normalize_dims(dim, x.type.rank), keepdim=keepdim)

    return lower


def truth_reduction(ir_name: str) -> Lowering:
    """any/all: bool result over ``dim`` (None or [] = all dims), reading the input in its own dtype."""
    def lower(ctx: LoweringContext, node: fx.Node, self: Any, dim: Any = None, keepdim: bool = False) -> Value:
        x = ctx.value(self)
        return ctx.emit(ir_name, x, dims=normalize_dims(dim, x.type.rank), keepdim=keepdim)

    return lower


def arg_reduction(ir_name: str) -> Lowering:
    """argmax/argmin along ``dim`` (None = over the flattened tensor)."""
    def lower(ctx: LoweringContext, node: fx.Node, self: Any, dim: int | None = None, keepdim: bool = False) -> Value:
        x = _arg_operand(ctx, ctx.value(self))
        if dim is not None:
            dim = normalize_dim(dim, x.type.rank)
        return ctx.emit(ir_name, x, dim=dim, keepdim=keepdim)

    return lower


def value_and_index(reduce_name: str, arg_name: str) -> Lowering:
    """max.dim / min.dim: the (values, indices) pair."""
    def lower(ctx: LoweringContext, node: fx.Node, self: Any, dim: int, keepdim: bool = False) -> tuple[Value, Value]:
        x = ctx.value(self)
        d = normalize_dim(dim, x.type.rank)
        dims = (d,) if x.type.rank else ()
        return (ctx.emit(reduce_name, x, dims=dims, keepdim=keepdim),
                ctx.emit(arg_name, _arg_operand(ctx, x), dim=d, keepdim=keepdim))

    return lower


def _arg_operand(ctx: LoweringContext, x: Value) -> Value:
    """argmax/argmin take numbers: a bool tensor as u8 (same order, same first maximum)."""
    return ctx.cast(x, DType.u8) if x.type.dtype is DType.bool else x


def _correction(correction: Any, unbiased: Any) -> float:
    if correction is not None:
        return float(correction)
    return 1.0 if unbiased is None or unbiased else 0.0


def _var(ctx: LoweringContext, node: fx.Node, self: Any, dim: Any = None, unbiased: Any = None,
         keepdim: bool = False, *, correction: Any = None) -> Value:
    x = ctx.value(self)
    return ctx.emit("var", x, dims=normalize_dims(dim, x.type.rank), keepdim=keepdim,
                    correction=_correction(correction, unbiased))


def _var_mean(ctx: LoweringContext, node: fx.Node, self: Any, dim: Any = None, unbiased: Any = None,
              keepdim: bool = False, *, correction: Any = None) -> tuple[Value, Value]:
    x = ctx.value(self)
    dims = normalize_dims(dim, x.type.rank)
    variance = ctx.emit("var", x, dims=dims, keepdim=keepdim, correction=_correction(correction, unbiased))
    return variance, ctx.emit("mean", x, dims=dims, keepdim=keepdim)


# ---- contractions --------------------------------------------------------------------------------------


def matmul(ir_name: str) -> Lowering:
    """mm / bmm with both operands in the result dtype."""
    def lower(ctx: LoweringContext, node: fx.Node, self: Any, mat2: Any) -> Value:
        dtype = ctx.out_dtype(node)
        return ctx.emit(ir_name, ctx.operand(self, dtype), ctx.operand(mat2, dtype))

    return lower


def _addmm(ctx: LoweringContext, node: fx.Node, self: Any, mat1: Any, mat2: Any, *, beta: Any = 1,
           alpha: Any = 1) -> Value:
    dtype = ctx.out_dtype(node)
    return ctx.emit("addmm", *ctx.tensors((self, mat1, mat2), dtype), beta=float(beta), alpha=float(alpha))


def _conv_attrs(stride: Any, padding: Any, dilation: Any, transposed: bool, output_padding: Any,
                groups: int) -> dict[str, Any]:
    return {"stride": tuple(stride), "padding": tuple(padding), "dilation": tuple(dilation),
            "transposed": bool(transposed), "output_padding": tuple(output_padding), "groups": int(groups)}


def _convolution(ctx: LoweringContext, node: fx.Node, input: Any, weight: Any, bias: Any, stride: Any,
                 padding: Any, dilation: Any, transposed: bool, output_padding: Any, groups: int) -> Value:
    dtype = ctx.out_dtype(node)
    operands = ctx.tensors([a for a in (input, weight, bias) if a is not None], dtype)
    return ctx.emit("convolution", *operands,
                    **_conv_attrs(stride, padding, dilation, transposed, output_padding, groups))


def _convolution_backward(ctx: LoweringContext, node: fx.Node, grad_output: Any, input: Any, weight: Any,
                          bias_sizes: Any, stride: Any, padding: Any, dilation: Any, transposed: bool,
                          output_padding: Any, groups: int, output_mask: Any) -> tuple[Value | None, ...]:
    dtype = ctx.promoted_dtype(grad_output, input, weight)
    mask = tuple(int(bool(m)) for m in output_mask)
    if not any(mask):
        return (None, None, None)
    results = ctx.emit("convolution_backward", *ctx.tensors((grad_output, input, weight), dtype),
                       output_mask=mask, **_conv_attrs(stride, padding, dilation, transposed, output_padding, groups))
    results = iter(results if isinstance(results, tuple) else (results,))
    return tuple(next(results) if wanted else None for wanted in mask)


def _pool_window(ctx: LoweringContext, x: Value, kernel_size: Any, stride: Any, padding: Any, ceil_mode: bool,
                 divisor_override: Any) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
    """avg_pool2d's (kernel, stride, padding) as pairs; the cases a convolution computes exactly."""
    def pair(values: Any, default: Any) -> tuple[int, int]:
        values = tuple(values) if values else tuple(default)
        return (values[0], values[0]) if len(values) == 1 else (values[0], values[1])

    if ceil_mode or divisor_override is not None or x.type.rank != 4:
        raise UnsupportedOpError("avg_pool2d with ceil_mode, divisor_override or a non-batched input")
    kernel = pair(kernel_size, ())
    return kernel, pair(stride, kernel), pair(padding, (0,))


def _window_counts(size: tuple[int, int], kernel: tuple[int, int], stride: tuple[int, int],
                   padding: tuple[int, int], out: tuple[int, int]) -> np.ndarray:
    """How many input elements (padding excluded) each output window covers: [OH, OW]."""
    per_dim = []
    for n, k, st, pad, length in zip(size, kernel, stride, padding, out):
        starts = np.arange(length) * st - pad
        per_dim.append(np.minimum(starts + k, n) - np.maximum(starts, 0))
    return np.outer(per_dim[0], per_dim[1]).astype(np.float32)


def _avg_pool_conv(ctx: LoweringContext, x: Value, kernel: tuple[int, int], stride: tuple[int, int],
                   padding: tuple[int, int], count_include_pad: bool) -> tuple[Value, dict[str, Any], Value | None]:
    """The depthwise ones-kernel convolution avg_pool2d is, and the divisor map when padding is not counted."""
    channels = x.type.shape[1]
    scale = 1.0 if not count_include_pad else 1.0 / (kernel[0] * kernel[1])
    weight = ctx.emit("constant", value=DenseAttr(np.full((channels, 1, *kernel), scale, np.float32), x.type.dtype))
    attrs = {"stride": stride, "padding": padding, "dilation": (1, 1), "groups": channels}
    counts = None
    if not count_include_pad:
        out = tuple(conv_output_size(n, k, s, p, 1, False, 0) for n, k, s, p in zip(x.type.shape[2:], kernel,
                                                                                  stride, padding))
        counts = ctx.emit("constant", value=DenseAttr(_window_counts(x.type.shape[2:], kernel, stride, padding, out),
                                                      x.type.dtype))
    return weight, attrs, counts


def _avg_pool2d(ctx: LoweringContext, node: fx.Node, self: Any, kernel_size: Any, stride: Any = (),
                padding: Any = 0, ceil_mode: bool = False, count_include_pad: bool = True,
                divisor_override: Any = None) -> Value:
    """avg_pool2d as a depthwise convolution with a constant kernel."""
    x = ctx.value(self)
    kernel, strides, pads = _pool_window(ctx, x, kernel_size, stride, (padding,) if isinstance(padding, int)
                                         else padding, ceil_mode, divisor_override)
    weight, attrs, counts = _avg_pool_conv(ctx, x, kernel, strides, pads, count_include_pad)
    summed = ctx.emit("convolution", x, weight, **attrs)
    return summed if counts is None else ctx.emit("div", summed, counts)


def _avg_pool2d_backward(ctx: LoweringContext, node: fx.Node, grad_output: Any, self: Any, kernel_size: Any,
                         stride: Any, padding: Any, ceil_mode: bool, count_include_pad: bool,
                         divisor_override: Any) -> Value:
    """The input gradient of that convolution (divided by the window counts first when they vary)."""
    x, grad = ctx.value(self), ctx.value(grad_output)
    kernel, strides, pads = _pool_window(ctx, x, kernel_size, stride, padding, ceil_mode, divisor_override)
    weight, attrs, counts = _avg_pool_conv(ctx, x, kernel, strides, pads, count_include_pad)
    if counts is not None:
        grad = ctx.emit("div", grad, counts)
    return ctx.emit("convolution_backward", grad, x, weight, output_mask=(1, 0, 0), **attrs)


REDUCTION_LOWERINGS: dict[Any, Lowering] = {
    aten.sum.dim_IntList: reduction("sum"),
    aten.sum.default: reduction("sum"),
    aten.mean.dim: reduction("mean"),
    aten.mean.default: reduction("mean"),
    aten.prod.dim_int: reduction("prod"),
    aten.prod.default: reduction("prod"),
    aten.amax.default: reduction("amax"),
    aten.amin.default: reduction("amin"),
    aten.max.default: reduction("amax"),  # max() of the whole tensor
    aten.min.default: reduction("amin"),
    aten.any.default: truth_reduction("any"),
    aten.any.dim: truth_reduction("any"),
    aten.any.dims: truth_reduction("any"),
    aten.all.default: truth_reduction("all"),
    aten.all.dim: truth_reduction("all"),
    aten.all.dims: truth_reduction("all"),
    aten.argmax.default: arg_reduction("argmax"),
    aten.argmin.default: arg_reduction("argmin"),
    aten.max.dim: value_and_index("amax", "argmax"),
    aten.min.dim: value_and_index("amin", "argmin"),
    aten.var.correction: _var,
    aten.var.dim: _var,
    aten.var_mean.correction: _var_mean,
    aten.mm.default: matmul("mm"),
    aten.bmm.default: matmul("bmm"),
    aten.addmm.default: _addmm,
    aten.convolution.default: _convolution,
    aten.convolution_backward.default: _convolution_backward,
    aten.avg_pool2d.default: _avg_pool2d,
    aten.avg_pool2d_backward.default: _avg_pool2d_backward,
}

