"""A hand-built MLP training step (forward, cross-entropy, backward) on the cpu target vs torch autograd."""

from __future__ import annotations

import numpy as np
import torch

from neuroncc.codegen.llvm.regions import make_kernel
from neuroncc.ir import Builder, DType, TensorType, verify
from neuroncc.driver.compile import compile_graph

N, D, H, C = 64, 128, 256, 10


def mlp_training_graph(fused: bool):
    b = Builder("mlp_step")
    x = b.param(TensorType((N, D), DType.f32), "x")
    w1 = b.param(TensorType((H, D), DType.f32), "w1")
    b1 = b.param(TensorType((H,), DType.f32), "b1")
    w2 = b.param(TensorType((C, H), DType.f32), "w2")
    labels = b.param(TensorType((N,), DType.i64), "labels")
    pre = b.op("addmm", b1, x, b.op("permute", w1, dims=(1, 0)))
    hidden = b.op("gelu", pre)
    logits = b.op("mm", hidden, b.op("permute", w2, dims=(1, 0)))
    # cross entropy (mean) and its gradient
    m = b.op("amax", logits, dims=(1,), keepdim=True)
    shifted = b.op("sub", logits, m)
    lse = b.op("log", b.op("sum", b.op("exp", shifted), dims=(1,), keepdim=True))
    picked = b.op("gather", shifted, b.op("unsqueeze", labels, dim=1), dim=1)
    loss = b.op("mean", b.op("sub", lse, picked), dims=(0, 1))
    probs = b.op("exp", b.op("sub", shifted, lse))
    onehot = b.op("cast", b.op("eq", b.op("unsqueeze", labels, dim=1), b.op("iota", length=C, dtype=DType.i64)),
                  dtype=DType.f32)
    dlogits = b.op("div", b.op("sub", probs, onehot), b.op("full", shape=(), dtype=DType.f32, value=float(N)))
    dw2 = b.op("mm", b.op("permute", dlogits, dims=(1, 0)), hidden)
    dhidden = b.op("mm", dlogits, w2)
    # d gelu(pre) / d pre = Phi(pre) + pre * phi(pre)
    cdf = b.op("mul", b.op("add", b.op("erf", b.op("mul", pre, b.op("full", shape=(), dtype=DType.f32,
                                                                       value=0.7071067811865476))),
                            b.op("full", shape=(), dtype=DType.f32, value=1.0)),
               b.op("full", shape=(), dtype=DType.f32, value=0.5))
    pdf = b.op("mul", b.op("exp", b.op("mul", b.op("mul", pre, pre), b.op("full", shape=(), dtype=DType.f32,
                                                                           value=-0.5))),
               b.op("full", shape=(), dtype=DType.f32, value=0.3989422804014327))
    dpre = b.op("mul", dhidden, b.op("add", cdf, b.op("mul", pre, pdf)))
    dw1 = b.op("mm", b.op("permute", dpre, dims=(1, 0)), x)
    db1 = b.op("sum", dpre, dims=(0,))
    fn = b.build([loss, dw1, db1, dw2])
    if fused:  # the addmm + gelu epilogue as one kernel, as the fusion pass would
        ops = list(fn.ops)
        first = make_kernel(ops[:3], [x, w1, b1], [pre, hidden], "linear_gelu")
        rest = Builder("mlp_step")
        rest.params = list(fn.params)
        rest.ops = [first] + ops[3:]
        fn = rest.build([loss, dw1, db1, dw2]).replace_uses(dict(zip([pre, hidden], first.results)))
    verify(fn)
    return fn


def test_mlp_training_step_matches_torch_autograd():
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(np.float32) * 0.1 for s in [(N, D), (H, D), (H,), (C, H)]]
    labels = rng.integers(0, C, N)
    tensors = [torch.from_numpy(a.copy()).requires_grad_(i > 0) for i, a in enumerate(arrays)]
    x, w1, b1, w2 = tensors
    loss = torch.nn.functional.cross_entropy(
        torch.nn.functional.linear(torch.nn.functional.gelu(torch.nn.functional.linear(x, w1, b1)), w2),
        torch.from_numpy(labels))
    loss.backward()
    want = [loss.detach(), w1.grad, b1.grad, w2.grad]
    for fused in (False, True):
        exe = compile_graph(mlp_training_graph(fused))
        assert exe.stats["interpreted_kernels"] == 0
        got = exe(*arrays, labels)
        for g, w in zip(got, want):
            torch.testing.assert_close(torch.from_numpy(np.asarray(g)), w, rtol=1e-4, atol=1e-6)
