"""Lowerings of reductions (sum, mean, amax, var, argmax, ...) and contractions (mm, addmm, bmm, convolution).

aten's "no dims / empty dim list means every dim" is expanded here (the IR takes explicit sorted dims), and an
input whose dtype differs from the result (``sum`` of bool is int64, ``sum(dtype=...)``) is cast first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx

from neuroncc.frontend.lowering_context import LoweringContext, normalize_dim, normalize_dims
from neuroncc.ir import Value

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
        x = ctx.value(self)
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
        return ctx.emit(reduce_name, x, dims=dims, keepdim=keepdim), ctx.emit(arg_name, x, dim=d, keepdim=keepdim)

    return lower


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
}

