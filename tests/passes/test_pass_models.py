"""The hand-built model graphs compute what PyTorch computes (forward and, for training, the gradients)."""

import math

import numpy as np
import torch
import torch.nn.functional as F

from neuroncc.ir import interpret
from neuroncc.testing import models
from neuroncc.testing.semantics import random_inputs

B, S, D, H = 2, 8, 16, 2


def torch_block(x, p):
    hd = D // H
    h = F.layer_norm(x, (D,), p["ln1_weight"], p["ln1_bias"], eps=1e-5)
    qkv = F.linear(h.reshape(B * S, D), p["qkv_weight"], p["qkv_bias"])
    q, k, v = (t.reshape(B * H, S, hd) for t in qkv.reshape(B, S, 3, H, hd).permute(2, 0, 3, 1, 4))
    scores = q @ k.transpose(1, 2) / math.sqrt(hd)
    causal = torch.arange(S)[:, None] >= torch.arange(S)[None, :]
    probs = scores.masked_fill(~causal, float("-inf")).softmax(-1)
    context = (probs @ v).reshape(B, H, S, hd).permute(0, 2, 1, 3).reshape(B * S, D)
    x1 = x + F.linear(context, p["out_weight"], p["out_bias"]).reshape(B, S, D)
    h2 = F.layer_norm(x1, (D,), p["ln2_weight"], p["ln2_bias"], eps=1e-5)
    hidden = F.gelu(F.linear(h2.reshape(B * S, D), p["fc1_weight"], p["fc1_bias"]))
    return x1 + F.linear(hidden, p["fc2_weight"], p["fc2_bias"]).reshape(B, S, D)


def test_transformer_training_graph_matches_torch_autograd():
    fn = models.transformer_block_training(batch=B, seq=S, d_model=D, heads=H)
    inputs = random_inputs(fn, seed=3)
    results = interpret(fn, inputs)
    names = [p.hint for p in fn.params]
    tensors = {n: torch.tensor(a, dtype=torch.float64, requires_grad=n != "grad_out") for n, a in zip(names, inputs)}
    out = torch_block(tensors["x"], tensors)
    out.backward(tensors["grad_out"])
    expected = [out.detach()] + [tensors[n].grad for n in names[:-1]]
    assert len(results) == len(expected) == 14
    for name, got, want in zip(["out"] + names[:-1], results, expected):
        np.testing.assert_allclose(got, want.numpy(), rtol=2e-4, atol=2e-4, err_msg=name)


def test_forward_graph_matches_torch():
    fn = models.transformer_block(batch=B, seq=S, d_model=D, heads=H)
    inputs = random_inputs(fn, seed=4)
    tensors = {p.hint: torch.tensor(a, dtype=torch.float64) for p, a in zip(fn.params, inputs)}
    (got,) = interpret(fn, inputs)
    np.testing.assert_allclose(got, torch_block(tensors["x"], tensors).numpy(), rtol=2e-4, atol=2e-4)
