"""Attention (mm -> softmax -> mm) emitted as one flash-style kernel with an online softmax."""

from __future__ import annotations

import numpy as np
import pytest

from emit_helpers import check_against_interpreter, compile_nki, lower
from neuroncc.executors.nki_sim.costs import estimate_costs
from neuroncc.executors.nki_sim.executable import nki_source
from neuroncc.ir import Builder, TensorType
from neuroncc.ir.dtypes import DType, to_storage


def attention_graph(seq_q, seq_k, dtype, q_rows_major=False, v_keys_major=False, d=128, dv=128):
    """softmax(q.T @ k) @ v.T as the public attention tutorial writes it (q, k, v as [d_head, seqlen]), or
    with q given as rows [seq_q, d] and v as [seq_k, dv]."""
    b = Builder("attention")
    q = b.param(TensorType((seq_q, d) if q_rows_major else (d, seq_q), dtype), "q")
    k = b.param(TensorType((d, seq_k), dtype), "k")
    v = b.param(TensorType((seq_k, dv) if v_keys_major else (dv, seq_k), dtype), "v")
    scores = b.op("mm", q if q_rows_major else b.op("permute", q, dims=[1, 0]), k)
    shifted = b.op("sub", scores, b.op("amax", scores, dims=(1,), keepdim=True))
    exps = b.op("exp", shifted)
    probs = b.op("div", exps, b.op("sum", exps, dims=(1,), keepdim=True))
    return b.build([b.op("mm", probs, v if v_keys_major else b.op("permute", v, dims=[1, 0]))])


def test_attention_becomes_one_flash_kernel():
    source = nki_source(attention_graph(256, 1024, DType.bf16), target="trn2")
    assert source.count("@nki.jit") == 1 and "def attention_" in source
    assert "softmax" not in source.split("def attention_")[0]
    # online softmax: per block the running max, the rescale exp(old - new), the row sum and output updated
    assert "nisa.activation(dst=rescale, op=nl.exp, data=neg_max, bias=new_max, scale=-1.0)" in source
    assert "nl.sequential_range(1, 2)" in source


@pytest.mark.parametrize("seq_q, seq_k, q_rows_major, v_keys_major", [
    (256, 1024, False, False), (384, 256, True, True), (128, 512, False, True),
])
def test_flash_attention_matches_the_interpreter_fp32(seq_q, seq_k, q_rows_major, v_keys_major, rng):
    fn = attention_graph(seq_q, seq_k, DType.f32, q_rows_major, v_keys_major)
    exe = check_against_interpreter(fn, rng, atol=1e-4)
    assert exe.stats["kernels"] == 1


def test_flash_attention_bf16_is_close_to_the_exact_result(rng):
    fn = attention_graph(256, 1024, DType.bf16)
    inputs = [to_storage(rng.standard_normal(p.type.shape).astype(np.float32), DType.bf16) for p in fn.params]
    q, k, v = (a.astype(np.float64) for a in inputs)
    scores = q.T @ k
    probs = np.exp(scores - scores.max(axis=1, keepdims=True))
    exact = (probs / probs.sum(axis=1, keepdims=True)) @ v.T
    (got,) = compile_nki(fn)(*inputs)
    np.testing.assert_allclose(got.astype(np.float64), exact, atol=2e-2)


def test_other_patterns_keep_the_separate_kernels():
    b = Builder("scaled")
    q, k = b.param(TensorType((128, 512), DType.f32), "q"), b.param(TensorType((128, 512), DType.f32), "k")
    scores = b.op("mm", b.op("permute", q, dims=[1, 0]), k)
    both = b.op("add", scores, scores)  # the scores feed something else too: no fusion
    shifted = b.op("sub", both, b.op("amax", both, dims=(1,), keepdim=True))
    fn = b.build([b.op("mm", b.op("exp", shifted), b.op("permute", k, dims=[1, 0]))])
    assert "def attention_" not in nki_source(fn, target="trn2")
    assert len(estimate_costs(lower(fn), "trn2").kernels) >= 2
