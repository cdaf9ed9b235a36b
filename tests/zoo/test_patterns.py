"""Common training and inference patterns that compile as written (each compared with eager): bf16 autocast
training, a model in bf16, activation checkpointing, GPT-2 ``generate()`` with a compiled forward,
nn.MultiheadAttention, channels_last convolutions, ``torch.inference_mode()``."""

from __future__ import annotations

import copy

import torch
import torch.nn as nn
import torch.utils.checkpoint as checkpoint

import neuroncc

from .families import FAMILIES, build

TOL = {"rtol": 1e-4, "atol": 1e-4}


def _grads_match(eager: nn.Module, ours: nn.Module, **tol) -> None:
    for (name, p_eager), p_ours in zip(eager.named_parameters(), ours.parameters()):
        torch.testing.assert_close(p_ours.grad, p_eager.grad, **(tol or TOL), msg=lambda m, n=name: f"{n}: {m}")


def test_bf16_autocast_training():
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4))
    ours = copy.deepcopy(eager)
    compiled = torch.compile(ours, backend="neuron")
    x = torch.randn(8, 16)
    for model in (eager, compiled):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(x)
        assert out.dtype == torch.bfloat16
        out.float().square().mean().backward()
    _grads_match(eager, ours, rtol=2e-2, atol=2e-2)  # bf16 products: half-precision tolerances


def test_bf16_parameters_training():
    # a model cast to bf16 (not autocast): the weight gradient x^T @ grad is a product of a transposed operand that
    # the launcher runs a block of rows at a time (at these sizes; it took the stored rows and raised)
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Linear(256, 1024), nn.ReLU()).to(torch.bfloat16)
    ours = copy.deepcopy(eager)
    compiled = torch.compile(ours, backend="neuron", dynamic=False)
    x = torch.randn(128, 256, dtype=torch.bfloat16)
    for model in (eager, compiled):
        model(x).float().square().mean().backward()
    _grads_match(eager, ours, rtol=2e-2, atol=2e-2)


class _Checkpointed(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(16, 16), nn.Tanh()) for _ in range(3))

    def forward(self, x):
        for block in self.blocks:
            x = checkpoint.checkpoint(block, x, use_reentrant=False)
        return x


def test_activation_checkpointing():
    torch.manual_seed(0)
    eager = _Checkpointed()
    ours = copy.deepcopy(eager)
    x = torch.randn(4, 16)
    eager(x).sum().backward()
    torch.compile(ours, backend="neuron")(x).sum().backward()
    _grads_match(eager, ours)
    assert neuroncc.stats()["backward_graphs"] >= 1


def test_gpt2_generate_with_a_compiled_forward():
    """A 7-token prompt (under one AVX2 vector of floats) and 4 new tokens: the prefill graph, a static decode
    graph over a cache of 8 tokens, then TorchDynamo's symbolic decode graph specialized for 9 and 10 (over a
    vector, with a remainder). The test before session 22 (a 5-token prompt, 6 new tokens) compiled 6 graphs:
    two more specializations of the same decode graph."""
    model = build(FAMILIES["gpt2"], dropout=False).eval()
    ids = torch.randint(2, 128, (1, 7), generator=torch.Generator().manual_seed(0))
    expected = model.generate(ids, max_new_tokens=4, do_sample=False, pad_token_id=0)
    model.forward = torch.compile(model.forward, backend="neuron")
    got = model.generate(ids, max_new_tokens=4, do_sample=False, pad_token_id=0)
    torch.testing.assert_close(got, expected)
    counts = neuroncc.stats()
    assert counts["inference_graphs"] == 4 and counts["shape_specializations"] == 2, counts


def test_multihead_attention_training():
    torch.manual_seed(0)
    eager = nn.MultiheadAttention(16, 4, batch_first=True)
    ours = copy.deepcopy(eager)
    compiled = torch.compile(ours, backend="neuron")
    x = torch.randn(2, 6, 16)
    mask = torch.triu(torch.ones(6, 6, dtype=torch.bool), diagonal=1)
    out_e, weights_e = eager(x, x, x, attn_mask=mask)
    out_o, weights_o = compiled(x, x, x, attn_mask=mask)
    torch.testing.assert_close(out_o, out_e, **TOL)
    torch.testing.assert_close(weights_o, weights_e, **TOL)
    out_e.square().sum().backward()
    out_o.square().sum().backward()
    _grads_match(eager, ours)


def test_channels_last_convolutions():
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.Conv2d(8, 4, 3, stride=2)).to(memory_format=torch.channels_last)
    ours = copy.deepcopy(eager)
    x = torch.randn(2, 3, 8, 8).to(memory_format=torch.channels_last)
    out_e = eager(x)
    out_o = torch.compile(ours, backend="neuron")(x)
    torch.testing.assert_close(out_o, out_e, **TOL)
    out_e.square().mean().backward()
    out_o.square().mean().backward()
    _grads_match(eager, ours)


def test_inference_mode():
    model = build(FAMILIES["bert"], dropout=False).eval()
    compiled = torch.compile(model, backend="neuron")
    ids = torch.randint(2, 128, (2, 8), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        expected, got = model(input_ids=ids).logits, compiled(input_ids=ids).logits
    assert got.is_inference()
    torch.testing.assert_close(got, expected, **TOL)
