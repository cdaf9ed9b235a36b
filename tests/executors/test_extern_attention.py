"""The attention library ops on every target: the cpu launcher's ATen call and nki-sim's host step against the
reference interpreter, between fused kernels, forward and backward, with a mask and grouped key/value heads."""

from __future__ import annotations

import numpy as np
import pytest

from neuroncc.ir import Builder, DType, TensorType, interpret
from neuroncc.executors.executable import build_executable

F32 = DType.f32


def _attention_graph():
    b = Builder("attention")
    q = b.param(TensorType((2, 4, 5, 8), F32), hint="q")
    k = b.param(TensorType((2, 2, 6, 8), F32), hint="k")
    mask = b.param(TensorType((5, 6), F32), hint="mask")
    grad = b.param(TensorType((2, 4, 5, 8), F32), hint="grad")
    v = b.op("mul", k, k)  # a fused kernel before the library op
    out, lse = b.op("flash_attention", q, k, v, mask, scale=0.3, is_causal=True)
    grads = b.op("flash_attention_backward", grad, q, k, v, out, lse, mask, scale=0.3, is_causal=True)
    return b.build([b.op("exp", out), lse, *grads])  # and one after it


@pytest.mark.parametrize("target", ["cpu", "nki-sim"])
def test_attention_ops_match_the_reference(target):
    fn = _attention_graph()
    rng = np.random.default_rng(0)
    mask = rng.uniform(-1, 1, (5, 6)).astype(np.float32)
    mask[1, 2] = -np.inf
    inputs = [rng.uniform(-1, 1, s).astype(np.float32) for s in ((2, 4, 5, 8), (2, 2, 6, 8))]
    inputs += [mask, rng.uniform(-1, 1, (2, 4, 5, 8)).astype(np.float32)]
    expected = interpret(fn, inputs)
    got = build_executable(fn, target)(*inputs)
    for ours, reference in zip(got, expected):
        np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-5)
