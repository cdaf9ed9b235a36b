"""Test table entries for the attention library ops: the float64 references against ATen's CPU flash kernels.

Operands are drawn in [-1, 1] (scores of moderate size, as attention sees after its scaling), with grouped
key/value heads, causal masking, explicit scales and additive masks that hold -inf (a fully masked row
included now and then: zeros and logsumexp 0, as the kernel). The backward's out and logsumexp come from
ATen's forward on the same operands, as in a training graph. bf16/f16 kernels round the probabilities before
their second product, which the float64 references do not: hence the half-precision tolerances.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from hypothesis import strategies as st

from neuroncc.ir import DType, TensorType
from neuroncc.ir.dtypes import to_storage

from .spec import OpSpec
from .support import FLOATS, Case, Tol, rngs

F32, BF16, I64 = DType.f32, DType.bf16, DType.i64
aten = torch.ops.aten
ATTENTION_TOL = Tol(rtol=20, atol=20, half_atol=3e-2)


def t(shape, dtype=F32):
    return TensorType(tuple(shape), dtype)


def _array(rng: np.random.Generator, shape: tuple[int, ...], dtype: DType) -> np.ndarray:
    return to_storage(rng.uniform(-1, 1, shape), dtype)


@st.composite
def _problem(draw):
    """q, k, v (and maybe a mask) with attributes: the operands of flash_attention."""
    rng = draw(rngs())
    dtype = draw(st.sampled_from(FLOATS))
    batch, kv_heads, group = draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(1, 2))
    seq_q, seq_k, dim = draw(st.integers(1, 5)), draw(st.integers(1, 5)), draw(st.sampled_from([1, 4, 8]))
    heads = kv_heads * group
    shapes = ((batch, heads, seq_q, dim), (batch, kv_heads, seq_k, dim), (batch, kv_heads, seq_k, dim))
    operands = [(_array(rng, s, dtype), t(s, dtype)) for s in shapes]
    attrs = {"scale": draw(st.sampled_from([1 / math.sqrt(dim), 0.3, 1.7])), "is_causal": draw(st.booleans())}
    if draw(st.booleans()):
        shape = draw(st.sampled_from([(seq_q, seq_k), (batch, 1, seq_q, seq_k), (batch, heads, seq_q, seq_k)]))
        mask_dtype = draw(st.sampled_from([dtype, F32]))
        mask = rng.uniform(-2, 2, shape)
        mask[rng.random(shape) < 0.2] = -np.inf
        if draw(st.booleans()):
            mask[..., 0, :] = -np.inf  # a fully masked row
        operands.append((to_storage(mask, mask_dtype), t(shape, mask_dtype)))
    return operands, attrs


def _torch_forward(xs, a):
    return aten._scaled_dot_product_flash_attention_for_cpu(
        xs[0], xs[1], xs[2], 0.0, a["is_causal"], attn_mask=xs[3] if len(xs) > 3 else None, scale=a["scale"])


@st.composite
def _forward_cases(draw):
    operands, attrs = draw(_problem())
    return Case(operands, attrs)


@st.composite
def _backward_cases(draw):
    """grad_out, q, k, v, out, logsumexp (from ATen's forward) [, mask]."""
    operands, attrs = draw(_problem())
    rng = draw(rngs())
    (q, q_type), dtype = operands[0], operands[0][1].dtype
    tensors = [torch.from_numpy(np.array(a)).to({F32: torch.float32, BF16: torch.bfloat16}.get(ty.dtype, torch.float16))
               for a, ty in operands]
    out, lse = _torch_forward(tensors, attrs)
    grad_out = (_array(rng, q_type.shape, dtype), q_type)
    saved = [(to_storage(out.float().numpy(), dtype), q_type), (lse.numpy().copy(), t(q_type.shape[:3]))]
    return Case([grad_out, *operands[:3], *saved, *operands[3:]], attrs)


def _torch_backward(xs, a):
    return aten._scaled_dot_product_flash_attention_for_cpu_backward(
        *xs[:6], 0.0, a["is_causal"], attn_mask=xs[6] if len(xs) > 6 else None, scale=a["scale"])


Q, KV = t((1, 4, 3, 8)), t((1, 2, 5, 8))
_BAD_FORWARD = (
    ((t((4, 3, 8)), t((4, 5, 8)), t((4, 5, 8))), {"scale": 1.0}),  # 3-d operands
    ((Q, KV, t((1, 2, 5, 4))), {"scale": 1.0}),  # value head size differs
    ((Q, t((1, 3, 5, 8)), t((1, 3, 5, 8))), {"scale": 1.0}),  # 4 query heads, 3 kv heads
    ((Q, t((1, 2, 5, 8), BF16), KV), {"scale": 1.0}),  # mixed dtypes
    ((t((1, 4, 3, 8), I64), t((1, 2, 5, 8), I64), t((1, 2, 5, 8), I64)), {"scale": 1.0}),  # integers
    ((Q, KV, KV, t((3, 4))), {"scale": 1.0}),  # mask does not broadcast to [1, 4, 3, 5]
    ((Q, KV, KV, t((3, 5), DType.bool)), {"scale": 1.0}),  # bool masks are made additive by the front end
    ((t((1, 4, 0, 8)), KV, KV), {"scale": 1.0}),  # empty
    ((Q, KV, KV), {}),  # scale is required
)
_BAD_BACKWARD = (
    ((Q, Q, KV, KV, Q, t((1, 4, 3), BF16)), {"scale": 1.0}),  # logsumexp must be f32
    ((Q, Q, KV, KV, t((1, 4, 3, 4)), t((1, 4, 3))), {"scale": 1.0}),  # out does not match q
    ((t((1, 4, 3, 8), BF16), Q, KV, KV, Q, t((1, 4, 3))), {"scale": 1.0}),  # grad_out dtype
)

SPECS = {
    "flash_attention": OpSpec(_forward_cases, _torch_forward, ATTENTION_TOL, _BAD_FORWARD),
    "flash_attention_backward": OpSpec(_backward_cases, _torch_backward, ATTENTION_TOL, _BAD_BACKWARD),
}
