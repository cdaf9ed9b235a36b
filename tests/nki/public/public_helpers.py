"""numpy references and input helpers shared by the public-style kernel tests."""

from __future__ import annotations

import numpy as np

from neuroncc.nki.dtypes import round_to_bfloat16


def bf16(values):
    """``values`` rounded to bfloat16, as float32."""
    return round_to_bfloat16(np.asarray(values, dtype=np.float32))


def matmul_bound(lhs_t, rhs, result, relative=2.0 ** -8):
    """``result`` matches ``lhs_t.T @ rhs`` within a summation bound proportional to ``|lhs_t|.T @ |rhs|``."""
    exact = lhs_t.astype(np.float64).T @ rhs.astype(np.float64)
    bound = relative * (np.abs(lhs_t.astype(np.float64)).T @ np.abs(rhs.astype(np.float64))) + 1e-6
    assert np.all(np.abs(result - exact) <= bound), float(np.max(np.abs(result - exact) - bound))


def softmax_attention(q, k, v):
    """``softmax(q.T @ k) @ v.T``-style reference for kernels taking ``q, k, v`` as ``[d_head, seqlen]``."""
    scores = q.astype(np.float64).T @ k.astype(np.float64)
    scores = np.exp(scores - scores.max(axis=1, keepdims=True))
    scores /= scores.sum(axis=1, keepdims=True)
    return scores @ v.astype(np.float64).T


def layernorm(x, gamma, beta, eps):
    x = x.astype(np.float64)
    mean, var = x.mean(axis=1, keepdims=True), x.var(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def rmsnorm(x, gamma, eps):
    x = x.astype(np.float64)
    return x / np.sqrt((x ** 2).mean(axis=1, keepdims=True) + eps) * gamma
