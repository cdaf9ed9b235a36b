"""Scaled dot-product attention as one library op (Category.EXTERN): ATen's CPU flash-attention kernel.

``flash_attention(q, k, v[, mask])`` is ``aten._scaled_dot_product_flash_attention_for_cpu``: q ``[B, Hq, L, E]``,
k and v ``[B, Hk, S, E]`` (grouped-query attention when ``Hk`` divides ``Hq``: query head ``h`` reads key/value
head ``h // (Hq / Hk)``), an optional additive float mask broadcastable to ``[B, Hq, L, S]`` (of q's dtype, or
f32 for bf16/f16 q), ``scale`` (the front end resolves PyTorch's default ``1/sqrt(E)``) and ``is_causal`` (the
top-left aligned lower triangle: query ``i`` sees keys ``j <= i``). Results: the attention output
``softmax(q k^T * scale + mask) v`` ``[B, Hq, L, E]`` and the f32 logsumexp of each score row ``[B, Hq, L]``
that the backward reads. A row whose scores are all masked (-inf) gives zeros and logsumexp 0, as the kernel.

``flash_attention_backward(grad_out, q, k, v, out, logsumexp[, mask])`` is
``aten._scaled_dot_product_flash_attention_for_cpu_backward`` (dropout 0): the gradients of q, k and v from the
saved output and logsumexp (FlashAttention's formulas: ``P = exp(s - lse)``, ``dS = P * (dO v^T - rowsum(dO
* out))``), k's and v's summed over the query heads of their group.

The cpu target calls ATen (:mod:`neuroncc.executors.cpu.extern_library`), so neuroncc's attention is eager's to the
bit; the numpy references compute in float64 (bf16/f16 kernels round intermediates, hence the per-dtype
tolerances of the tests). Dropout, 3-d operands, a value head size different from the query's and masks
that need a gradient are not this op: ATen itself picks its math path for them, which the front end
decomposes as before.
"""

from __future__ import annotations

import numpy as np

from neuroncc.ir.dtypes import DType
from neuroncc.ir.opdef import AttrSpec, Category, OpDef, broadcast_shapes, fail
from neuroncc.ir.types import TensorType

F32 = DType.f32
#: The dtypes ATen's CPU flash kernel takes (f64 computes as f32 in neuroncc, so it arrives as f32).
FLASH_DTYPES = (DType.f32, DType.bf16, DType.f16)


def _check_qkv(op: str, q: TensorType, k: TensorType, v: TensorType) -> None:
    for what, t in (("query", q), ("key", k), ("value", v)):
        if t.rank != 4:
            raise fail(op, f"{what} must be [batch, heads, seq, head_dim], got {t}")
        if t.dtype is not q.dtype or t.dtype not in FLASH_DTYPES:
            raise fail(op, f"query, key and value need one dtype of f32/bf16/f16, got {q}, {k}, {v}")
        if 0 in t.shape:
            raise fail(op, f"{what} {t} is empty (ATen's flash kernel needs non-empty operands)")
    (batch, heads, _, dim), (kb, kv_heads, _, kdim) = q.shape, k.shape
    if v.shape != k.shape or kb != batch or kdim != dim:
        raise fail(op, f"key {list(k.shape)} and value {list(v.shape)} must be [{batch}, kv_heads, seq, {dim}] "
                       f"for query {list(q.shape)}")
    if heads % kv_heads:
        raise fail(op, f"query heads ({heads}) must be a multiple of key/value heads ({kv_heads})")


def _check_mask(op: str, mask: TensorType, q: TensorType, k: TensorType) -> None:
    if mask.dtype is not q.dtype and mask.dtype is not F32:
        raise fail(op, f"the mask must be additive, of the query's dtype or f32, got {mask}")
    scores = (*q.shape[:3], k.shape[2])
    if mask.rank > 4 or broadcast_shapes(op, mask.shape, scores) != scores:
        raise fail(op, f"mask {list(mask.shape)} does not broadcast to the scores {list(scores)}")


def _infer_forward(types, attrs):
    q, k, v = types[:3]
    _check_qkv("flash_attention", q, k, v)
    if len(types) == 4:
        _check_mask("flash_attention", types[3], q, k)
    return TensorType(q.shape, q.dtype), TensorType(q.shape[:3], F32)


def _infer_backward(types, attrs):
    op = "flash_attention_backward"
    grad_out, q, k, v, out, lse = types[:6]
    _check_qkv(op, q, k, v)
    if grad_out.shape != q.shape or out.shape != q.shape or grad_out.dtype is not q.dtype or out.dtype is not q.dtype:
        raise fail(op, f"grad_out {grad_out} and out {out} must match the query {q}")
    if lse.shape != q.shape[:3] or lse.dtype is not F32:
        raise fail(op, f"logsumexp must be f32 {list(q.shape[:3])}, got {lse}")
    if len(types) == 7:
        _check_mask(op, types[6], q, k)
    return TensorType(q.shape, q.dtype), TensorType(k.shape, k.dtype), TensorType(v.shape, v.dtype)


# ---- references (float64) -----------------------------------------------------------------------------


def _by_query_head(x: np.ndarray, heads: int) -> np.ndarray:
    """Key/value heads repeated for their query-head group (query head h reads head h // group)."""
    return np.repeat(x, heads // x.shape[1], axis=1)


def _scores(q, k, mask, *, is_causal, scale):
    s = np.matmul(q, np.swapaxes(_by_query_head(k, q.shape[1]), -1, -2)) * scale
    if mask is not None:
        s = s + mask
    if is_causal:
        seq_q, seq_k = s.shape[-2:]
        s = np.where(np.tril(np.ones((seq_q, seq_k), bool)), s, -np.inf)
    return s


def _logsumexp(s: np.ndarray) -> np.ndarray:
    """Row logsumexp; 0 for a fully masked row (the kernel's choice: its output row is then zeros)."""
    peak = s.max(-1, keepdims=True)
    peak = np.where(np.isneginf(peak), 0.0, peak)
    total = np.exp(s - peak).sum(-1, keepdims=True)
    return (peak + np.log(np.where(total == 0, 1.0, total)))[..., 0]


def _flash_attention(q, k, v, mask=None, *, scale, is_causal=False):
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    s = _scores(q, k, None if mask is None else np.asarray(mask, np.float64), is_causal=is_causal, scale=scale)
    lse = _logsumexp(s)
    probabilities = np.exp(s - lse[..., None])
    return np.matmul(probabilities, _by_query_head(v, q.shape[1])), lse


def _group_sum(x: np.ndarray, kv_heads: int) -> np.ndarray:
    """Gradients of repeated key/value heads summed back onto each head."""
    batch, heads = x.shape[:2]
    return x.reshape(batch, kv_heads, heads // kv_heads, *x.shape[2:]).sum(2)


def _flash_attention_backward(grad_out, q, k, v, out, lse, mask=None, *, scale, is_causal=False):
    grad_out, q, k, v, out, lse = (np.asarray(a, np.float64) for a in (grad_out, q, k, v, out, lse))
    heads, kv_heads = q.shape[1], k.shape[1]
    s = _scores(q, k, None if mask is None else np.asarray(mask, np.float64), is_causal=is_causal, scale=scale)
    probabilities = np.exp(s - lse[..., None])
    k_rep, v_rep = _by_query_head(k, heads), _by_query_head(v, heads)
    grad_v = np.matmul(np.swapaxes(probabilities, -1, -2), grad_out)
    grad_p = np.matmul(grad_out, np.swapaxes(v_rep, -1, -2))
    row = (grad_out * out).sum(-1, keepdims=True)
    grad_s = probabilities * (grad_p - row)
    grad_q = np.matmul(grad_s, k_rep) * scale
    grad_k = np.matmul(np.swapaxes(grad_s, -1, -2), q) * scale
    return grad_q, _group_sum(grad_k, kv_heads), _group_sum(grad_v, kv_heads)


_ATTRS = {"scale": AttrSpec("float"), "is_causal": AttrSpec("bool", False)}

OPS = (
    OpDef("flash_attention", Category.EXTERN, (3, 4), _infer_forward, _flash_attention, _ATTRS,
          "softmax(q k^T * scale + mask, causal) v over [B, H, L, E] (grouped key/value heads allowed) and the "
          "f32 row logsumexp [B, H, L]: ATen's CPU flash-attention kernel"),
    OpDef("flash_attention_backward", Category.EXTERN, (6, 7), _infer_backward, _flash_attention_backward, _ATTRS,
          "gradients of q, k, v of flash_attention from grad_out, q, k, v, out, logsumexp (and the mask)"),
)
