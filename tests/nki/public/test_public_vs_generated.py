"""neuroncc's generated kernels against the public-style kernels of the same op and shape, on the cost model
(benchmarks/nki_public_vs_generated.py prints the full tables)."""

from __future__ import annotations

import kernels_nki01 as k1
import kernels_nki02 as k2
import nki
from neuroncc.executors.nki_sim.costs import estimate_costs
from neuroncc.ir import Builder, TensorType
from neuroncc.ir.dtypes import DType


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


def test_generated_bf16_matmul_beats_the_tutorial_kernels_at_a_tutorial_shape():
    k, m, n = 1024, 512, 1024
    spec = (nki.TensorSpec.of((k, m), "bfloat16"), nki.TensorSpec.of((k, n), "bfloat16"))
    best = min(nki.benchmark(kernel, target="trn2", execute=False)(*spec).latency_us
               for kernel in (k2.mm_tiled, k2.mm_hoisted, k2.mm_blocked_free, k2.mm_blocked_all))
    b = Builder("mm_lhsT")
    lhs_t, rhs = b.param(TensorType((k, m), DType.bf16), "lhsT"), b.param(TensorType((k, n), DType.bf16), "rhs")
    (generated,) = estimate_costs(b.build([b.op("mm", b.op("permute", lhs_t, dims=[1, 0]), rhs)]), "trn2").kernels
    assert generated.latency_us < best, (generated.latency_us, best)
