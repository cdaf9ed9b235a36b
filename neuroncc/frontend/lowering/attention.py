"""Scaled dot-product attention: which SDPA backend the front end traces under, and the lowering of ATen's CPU
flash-attention ops onto the ``flash_attention`` library ops (``neuroncc/ir/ops/library_attention.py``).

The decision is per target (:func:`attention_tracing`):

* ``cpu`` and ``interp`` trace with PyTorch's own SDPA choice (no override, so the user's ``sdpa_kernel``
  settings apply as in eager). Where eager would run the CPU flash kernel (4-d float operands, equal head
  sizes, no dropout, no mask that needs a gradient), the graphs hold
  ``aten._scaled_dot_product_flash_attention_for_cpu`` and, in training, its backward: each becomes ONE
  library op, run by ATen's kernel on the cpu target (eager's numerics and speed). Everything else reaches
  ATen's math path, which AOTAutograd decomposes into bmm/softmax as before.
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
from neuroncc.ir import Value

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
    return ctx.emit("flash_attention", *operands, scale=_scale(operands[0], scale), is_causal=bool(is_causal))


def _flash_attention_backward(ctx, node, grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, *,
                              attn_mask=None, scale=None):
    _check_dropout(dropout_p)
    operands = _operands(ctx, grad_out, query, key, value, out, logsumexp, attn_mask=attn_mask)
    return ctx.emit("flash_attention_backward", *operands, scale=_scale(operands[1], scale),
                    is_causal=bool(is_causal))


ATTENTION_LOWERINGS: dict[Any, Callable[..., Any]] = {
    aten._scaled_dot_product_flash_attention_for_cpu.default: _flash_attention,
    aten._scaled_dot_product_flash_attention_for_cpu_backward.default: _flash_attention_backward,
}
