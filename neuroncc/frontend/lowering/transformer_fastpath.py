"""Decompositions of PyTorch's fused transformer inference ops (the "fast path", BetterTransformer) into the ops
neuroncc compiles: linears, scaled dot-product attention, layer norms and elementwise math.

* ``aten._transformer_encoder_layer_fwd``: ``nn.TransformerEncoderLayer`` (and each layer of
  ``nn.TransformerEncoder``) calls it in eval mode without gradients (``torch.no_grad()`` or
  ``torch.inference_mode()``) when ``batch_first=True``, the head count is even and the activation is relu or
  gelu. TorchDynamo traces it into the graph as one op; on the ``neuron`` device it is one call.
* ``aten._native_multi_head_attention``: ``nn.MultiheadAttention``'s fast path (batch_first self-attention
  under the same conditions). TorchDynamo never meets it (the module takes its slow path while make_fx
  traces); the ``neuron`` device does.

Both are written as ATen's CPU kernels compute them (aten/src/ATen/native/transformers/attention.cpp and
transformer.cpp), so they match eager to rounding:

* self-attention without a mask whose weights are not asked for is the kernel's SDPA branch: one linear for
  q, k and v, ``scaled_dot_product_attention`` (the front end's flash-attention lowering,
  frontend/lowering/attention.py), the output linear;
* otherwise the kernel's explicit path: q scaled by 1/sqrt(head size) before ``q @ k^T``, a softmax that
  drops the masked keys, ``@ v``. The kernel reads the mask as booleans (``mask.to(bool)``): any nonzero entry
  of a float mask masks its key, not only ``-inf``; a query row whose keys are all masked is NaN, as the
  kernel's masked softmax leaves it. ``mask_type`` 1 is a [B, S] key-padding mask, 0 a [T, S] attention
  mask, 2 a mask of the scores' shape [B, H, T, S] (what ``MultiheadAttention.merge_masks`` builds).

Nested tensors (``nn.TransformerEncoder``'s ``enable_nested_tensor`` path) have no faithful decomposition:
their fake kernels refuse them before these run (the device refuses the op that makes them, device/fallback.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

aten = torch.ops.aten

#: ``mask_type`` values of the fused ops: which scores' dimensions the mask spans.
ATTENTION_MASK, KEY_PADDING_MASK = 0, 1


def native_multi_head_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, embed_dim: int,
                                num_head: int, qkv_weight: torch.Tensor, qkv_bias: torch.Tensor,
                                proj_weight: torch.Tensor, proj_bias: torch.Tensor, mask: torch.Tensor | None = None,
                                need_weights: bool = True, average_attn_weights: bool = True,
                                mask_type: int | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``aten._native_multi_head_attention``: (output [B, T, D], the attention weights or None)."""
    if query.numel() == 0:  # the kernel's early return
        return torch.empty_like(query), None
    q, k, v = _projected_heads(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias)
    if mask is None and not need_weights:
        context = F.scaled_dot_product_attention(q, k, v)
        weights = None
    else:
        weights = _attention_weights(q, k, mask, mask_type)
        context = weights @ v
        if need_weights and average_attn_weights:
            weights = weights.sum(1) / num_head
    batch, length = query.shape[:2]
    out = F.linear(context.transpose(1, 2).reshape(batch, length, embed_dim), proj_weight, proj_bias)
    return out, (weights if need_weights else None)


def _projected_heads(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, embed_dim: int, num_head: int,
                     qkv_weight: torch.Tensor, qkv_bias: torch.Tensor) -> list[torch.Tensor]:
    """q, k, v as [B, heads, length, head size]: one linear for self-attention, one per input otherwise."""
    if query is key and key is value:
        projected = F.linear(query, qkv_weight, qkv_bias).chunk(3, dim=-1)
    else:
        weights, biases = qkv_weight.chunk(3, dim=0), qkv_bias.chunk(3, dim=0)
        projected = [F.linear(x, w, b) for x, w, b in zip((query, key, value), weights, biases)]
    head_size = embed_dim // num_head
    return [x.reshape(x.shape[0], x.shape[1], num_head, head_size).transpose(1, 2) for x in projected]


def _attention_weights(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None,
                       mask_type: int | None) -> torch.Tensor:
    """softmax((q / sqrt(head size)) @ k^T) over the keys, masked keys dropped: [B, H, T, S]."""
    scores = (q * (1.0 / math.sqrt(q.shape[-1]))) @ k.transpose(-2, -1)
    if mask is not None:
        masked = mask != 0  # the kernel's mask.to(bool): any nonzero entry masks (NaN too)
        if mask_type == KEY_PADDING_MASK:
            masked = masked.reshape(masked.shape[0], 1, 1, masked.shape[-1])
        scores = scores.masked_fill(masked, float("-inf"))
    return torch.softmax(scores, dim=-1)


def transformer_encoder_layer_fwd(src: torch.Tensor, embed_dim: int, num_heads: int, qkv_weight: torch.Tensor,
                                  qkv_bias: torch.Tensor, proj_weight: torch.Tensor, proj_bias: torch.Tensor,
                                  use_gelu: bool, norm_first: bool, eps: float, norm_weight_1: torch.Tensor,
                                  norm_bias_1: torch.Tensor, norm_weight_2: torch.Tensor, norm_bias_2: torch.Tensor,
                                  ffn_weight_1: torch.Tensor, ffn_bias_1: torch.Tensor, ffn_weight_2: torch.Tensor,
                                  ffn_bias_2: torch.Tensor, mask: torch.Tensor | None = None,
                                  mask_type: int | None = None) -> torch.Tensor:
    """``aten._transformer_encoder_layer_fwd``: self-attention and the feed-forward block, each with its residual
    and layer norm (before the block with ``norm_first``, after the residual otherwise). The activation is
    relu or the exact gelu (the kernel's ``use_gelu``: ``nn.GELU(approximate="tanh")`` takes it too)."""
    if src.numel() == 0:
        return src.clone()

    def norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (embed_dim,), weight, bias, eps)

    x = norm(src, norm_weight_1, norm_bias_1) if norm_first else src
    x, _ = native_multi_head_attention(x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
                                       mask, need_weights=False, mask_type=mask_type)
    x = x + src
    if not norm_first:
        x = norm(x, norm_weight_1, norm_bias_1)
    residual = x
    if norm_first:
        x = norm(x, norm_weight_2, norm_bias_2)
    hidden = F.linear(x, ffn_weight_1, ffn_bias_1)
    hidden = F.gelu(hidden) if use_gelu else F.relu(hidden)
    x = F.linear(hidden, ffn_weight_2, ffn_bias_2) + residual
    return norm(x, norm_weight_2, norm_bias_2) if not norm_first else x


def fastpath_decompositions() -> dict[Any, Callable[..., Any]]:
    """The fused ops' entries of the front end's decomposition table (frontend/lowering/decompositions.py)."""
    return {
        aten._native_multi_head_attention.default: native_multi_head_attention,
        aten._transformer_encoder_layer_fwd.default: transformer_encoder_layer_fwd,
    }
