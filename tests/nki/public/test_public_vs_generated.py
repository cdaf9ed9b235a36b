"""neuroncc's generated kernels against the public-style kernels of the same op and shape, on the cost model
(benchmarks/nki_public_vs_generated.py prints the full tables)."""

from __future__ import annotations

import kernels_nki01 as k1
import pytest
import kernels_nki02 as k2
import nki
from neuroncc.executors.nki_sim.costs import estimate_costs
from neuroncc.ir import Builder, TensorType
from neuroncc.ir.dtypes import DType
from neuroncc.passes import PassContext, default_pipeline, run_pipeline


def _attention(seqlen):
    b = Builder("attention")
    q, k, v = (b.param(TensorType((128, seqlen), DType.bf16), n) for n in "qkv")
    scores = b.op("mm", b.op("permute", q, dims=[1, 0]), k)
    exps = b.op("exp", b.op("sub", scores, b.op("amax", scores, dims=(1,), keepdim=True)))
    probs = b.op("div", exps, b.op("sum", exps, dims=(1,), keepdim=True))
    return b.build([b.op("mm", probs, b.op("permute", v, dims=[1, 0]))])


def test_generated_flash_attention_beats_the_public_style_fused_kernel():
    seqlen = 2048
    spec = [nki.TensorSpec.of((128, seqlen), "bfloat16")] * 3
    public = nki.benchmark(k1.attention_blocked, target="trn2", execute=False)(*spec).profile
    (generated,) = estimate_costs(_attention(seqlen), "trn2").kernels
    assert generated.latency_us < 0.95 * public.latency_us, (generated.latency_us, public.latency_us)
    assert generated.tensor_flops == public.tensor_flops  # the same matmul work


@pytest.mark.parametrize("m, k, n", [(512, 1024, 1024), (2048, 4096, 2048)])
def test_generated_bf16_matmul_beats_the_best_tutorial_kernel(m, k, n):
    """The benchmark's two shapes: ``lhsT.T @ rhs`` through the nki pipeline (the layout pass folds the
    transpose, both operands load K-major, in partition-major K groups where that lengthens the DMA runs)
    against the best of the tutorial kernels, including the fully blocked one with its large-shape blocks."""
    spec = (nki.TensorSpec.of((k, m), "bfloat16"), nki.TensorSpec.of((k, n), "bfloat16"))
    kernels = [(k2.mm_tiled, {}), (k2.mm_hoisted, {}), (k2.mm_blocked_free, {}), (k2.mm_blocked_all, {})]
    if m % 2048 == 0 and n % 1024 == 0 and k % 1024 == 0:
        kernels.append((k2.mm_blocked_all, dict(blocks_m=16, blocks_n=2, blocks_k=8)))
    best = min(nki.benchmark(kernel, target="trn2", execute=False)(*spec, **meta).latency_us
               for kernel, meta in kernels)
    b = Builder("mm_lhsT")
    lhs_t, rhs = b.param(TensorType((k, m), DType.bf16), "lhsT"), b.param(TensorType((k, n), DType.bf16), "rhs")
    fn = run_pipeline(default_pipeline("nki"), b.build([b.op("mm", b.op("permute", lhs_t, dims=[1, 0]), rhs)]),
                      PassContext())
    (generated,) = estimate_costs(fn, "trn2").kernels
    assert generated.latency_us < best, (generated.latency_us, best)
    assert generated.tensor_flops == 2 * m * k * n
