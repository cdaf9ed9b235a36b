"""Scaled dot-product attention: which SDPA backend the front end traces under, and the lowering of ATen's CPU
flash-attention ops onto the ``flash_attention`` library ops (``neuroncc/ir/ops/library_attention.py``).

The decision is per target (:func:`attention_tracing`):

* ``cpu`` and ``interp`` trace with PyTorch's own SDPA choice (no override, so the user's ``sdpa_kernel``
  settings apply as in eager). Where eager would run the CPU flash kernel (4-d float operands, equal head
  sizes, no dropout, no mask that needs a gradient), the graphs hold
  ``aten._scaled_dot_product_flash_attention_for_cpu`` and, in training, its backward: each becomes ONE
  library op, run by ATen's kernel on the cpu target (eager's numerics and speed), except on small float32
  heads (:data:`SMALL_HEAD_SCORES`), which the lowering writes as bmm and softmax math (the flash backward's
  algebra from the forward's logsumexp, so the pair stays consistent): generated kernels, no ATen call.
  Everything else reaches ATen's math path, which AOTAutograd decomposes into bmm/softmax as before.
* ``nki-sim`` traces under ``sdpa_kernel(SDPBackend.MATH)``: attention stays matmuls and fused softmax kernels
  that run on the simulated device (a library op would be a host step there).

Why the forward op must stay undecomposed: PyTorch's core decomposition of
``_scaled_dot_product_flash_attention_for_cpu`` (torch/_decomp/decompositions.py) returns the attention
*probabilities* [B, H, L, S] of ``_scaled_dot_product_attention_math`` in the slot of the logsumexp [B, H, L].
The decomposition runs below autograd, so the backward is still the op's derivative formula, the ATen flash
backward kernel, which is then fed the probabilities as its logsumexp: wrong gradients (tens of units off on
random data). The front end's table drops that decomposition (``decompositions.REMOVED_DECOMPOSITIONS``), as
Inductor's does, so the forward and backward ops stay a consistent pair.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from neuroncc.errors import UnsupportedOpError
from neuroncc.frontend.lowering.context import LoweringContext
from neuroncc.ir import DType, Value

aten = torch.ops.aten

#: Targets whose graphs keep ATen's flash attention as one library op; the others trace the math backend.
FUSED_ATTENTION_TARGETS = frozenset({"cpu", "interp"})


@contextlib.contextmanager
def attention_tracing(target: str) -> Iterator[None]:
    """The SDPA backend choice to trace a graph for ``target`` under (see the module docstring)."""
    if target in FUSED_ATTENTION_TARGETS:
        yield
    else:
        with sdpa_kernel(SDPBackend.MATH):
            yield


def _scale(query: Value, scale: float | None) -> float:
    """ATen's ``sdp::calculate_scale``: the given scale, else 1/sqrt(head_dim) (in double, as ATen)."""
    return float(scale) if scale is not None else 1.0 / math.sqrt(query.type.shape[-1])


def _check_dropout(dropout_p: float) -> None:
    if dropout_p != 0.0:  # ATen's CPU flash kernel refuses dropout too: SDPA picks the math path for it
        raise UnsupportedOpError(f"CPU flash attention with dropout_p={dropout_p} (ATen's kernel has no dropout)")


def _operands(ctx: LoweringContext, *args: Any, attn_mask: Any) -> list[Value]:
    values = [ctx.value(a) for a in args]
    if attn_mask is not None:
        values.append(ctx.value(attn_mask))
    return values


def _flash_attention(ctx, node, query, key, value, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    _check_dropout(dropout_p)
    operands = _operands(ctx, query, key, value, attn_mask=attn_mask)
    if attn_mask is None and small_heads(*operands):
        return _math_forward(ctx, *operands, _scale(operands[0], scale), bool(is_causal))
    return ctx.emit("flash_attention", *operands, scale=_scale(operands[0], scale), is_causal=bool(is_causal))


def _flash_attention_backward(ctx, node, grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, *,
                              attn_mask=None, scale=None):
    _check_dropout(dropout_p)
    operands = _operands(ctx, grad_out, query, key, value, out, logsumexp, attn_mask=attn_mask)
    if attn_mask is None and small_heads(*operands[1:4]):
        return _math_backward(ctx, *operands, _scale(operands[1], scale), bool(is_causal))
    return ctx.emit("flash_attention_backward", *operands, scale=_scale(operands[1], scale),
                    is_causal=bool(is_causal))


# ---- small heads: the flash ops as bmm and softmax math --------------------------------------------------------

#: Heads whose score matrix (query length x key length) has at most this many elements are computed as
#: matmuls and fused softmax kernels instead of ATen's flash kernel: generated code, no ATen call from the
#: launcher. On such heads the library op's cost is its call, not its arithmetic: the classifier of issue #18
#: (32 x 4 heads of 16 x 16, head size 16) spent ~0.35 ms per step in the two calls' Python around ATen's
#: kernels, and the kernels themselves (~1.3 ms) run blocked loops sized for long sequences. Up to 64 x 64 the
#: scores of all heads of a batch stay small (16 KiB per head); longer heads keep the flash kernel, which never
#: stores them.
SMALL_HEAD_SCORES = 64 * 64


def small_heads(query: Value, key: Value, value: Value) -> bool:
    """Whether flash attention over these operands is lowered as math (float32, plain multi-head: the same
    batch and head count in q, k and v, 4-d; see :data:`SMALL_HEAD_SCORES`)."""
    q, k, v = (x.type for x in (query, key, value))
    if any(t.dtype is not DType.f32 or t.rank != 4 for t in (q, k, v)) or q.shape[:2] != k.shape[:2] \
            or k.shape[:3] != v.shape[:3] or q.shape[3] != k.shape[3]:
        return False
    return q.shape[2] * k.shape[2] <= SMALL_HEAD_SCORES


def _heads(ctx: LoweringContext, x: Value) -> Value:
    """[B, H, N, E] -> [B * H, N, E], the bmm operand (a copy where the layout does not merge B and H)."""
    b, h, n, e = x.type.shape
    return ctx.emit("reshape", x, shape=(b * h, n, e))


def _scores(ctx: LoweringContext, q: Value, k: Value, scale: float, is_causal: bool) -> Value:
    """scale * q @ k^T over [B * H, L, S], with the causal mask's -inf above the diagonal (top-left aligned, as
    ATen's flash kernel and its math path: query i sees keys 0..i)."""
    scores = ctx.emit("mul", ctx.emit("bmm", q, k, transpose_b=True), ctx.scalar(scale, DType.f32))
    if not is_causal:
        return scores
    length, keys = scores.type.shape[1:]
    rows = ctx.emit("reshape", ctx.emit("iota", length=length, dtype=DType.i32), shape=(length, 1))
    seen = ctx.emit("le", ctx.emit("iota", length=keys, dtype=DType.i32), rows)  # [L, S]: key j <= query i
    return ctx.emit("where", seen, scores, ctx.scalar(float("-inf"), DType.f32))


def _math_forward(ctx: LoweringContext, query: Value, key: Value, value: Value, scale: float,
                  is_causal: bool) -> tuple[Value, Value]:
    """(out [B, H, L, Ev], logsumexp [B, H, L]) as the flash op returns them, by softmax(scores) @ v."""
    b, h, length, _ = query.type.shape
    scores = _scores(ctx, _heads(ctx, query), _heads(ctx, key), scale, is_causal)
    row_max = ctx.emit("amax", scores, dims=(2,), keepdim=True)
    weights = ctx.emit("exp", ctx.emit("sub", scores, row_max))
    total = ctx.emit("sum", weights, dims=(2,), keepdim=True)
    out = ctx.emit("bmm", ctx.emit("div", weights, total), _heads(ctx, value))
    logsumexp = ctx.emit("add", row_max, ctx.emit("log", total))
    return (ctx.emit("reshape", out, shape=(b, h, length, value.type.shape[3])),
            ctx.emit("reshape", logsumexp, shape=(b, h, length)))


def _math_backward(ctx: LoweringContext, grad_out: Value, query: Value, key: Value, value: Value, out: Value,
                   logsumexp: Value, scale: float, is_causal: bool) -> tuple[Value, Value, Value]:
    """(grad q, grad k, grad v) from the forward's logsumexp: P = exp(scores - lse) recomputed, dV = P^T dO,
    dS = P * (dO V^T - rowsum(dO * O)), dQ = scale dS K, dK = scale dS^T Q (the flash backward's algebra)."""
    q, k, v = _heads(ctx, query), _heads(ctx, key), _heads(ctx, value)
    grad, output = _heads(ctx, grad_out), _heads(ctx, out)
    b, h, length = logsumexp.type.shape
    lse = ctx.emit("reshape", logsumexp, shape=(b * h, length, 1))
    weights = ctx.emit("exp", ctx.emit("sub", _scores(ctx, q, k, scale, is_causal), lse))
    grad_v = ctx.emit("bmm", weights, grad, transpose_a=True)
    row_dot = ctx.emit("sum", ctx.emit("mul", grad, output), dims=(2,), keepdim=True)
    grad_scores = ctx.emit("mul", weights, ctx.emit("sub", ctx.emit("bmm", grad, v, transpose_b=True), row_dot))
    scale_value = ctx.scalar(scale, DType.f32)
    grad_q = ctx.emit("mul", ctx.emit("bmm", grad_scores, k), scale_value)
    grad_k = ctx.emit("mul", ctx.emit("bmm", grad_scores, q, transpose_a=True), scale_value)
    return tuple(ctx.emit("reshape", g, shape=x.type.shape) for g, x in ((grad_q, query), (grad_k, key),
                                                                        (grad_v, value)))


ATTENTION_LOWERINGS: dict[Any, Callable[..., Any]] = {
    aten._scaled_dot_product_flash_attention_for_cpu.default: _flash_attention,
    aten._scaled_dot_product_flash_attention_for_cpu_backward.default: _flash_attention_backward,
}
