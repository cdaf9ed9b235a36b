"""Acceptance: small models compiled with backend="neuron" match eager, forward and 3 training steps."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch

import neuroncc
from frontend import models

TOL = {"rtol": 1e-5, "atol": 1e-5}


def _randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(1))


#: name -> (model factory, example inputs)
CASES: dict[str, tuple[Callable[[], torch.nn.Module], Callable[[], tuple[torch.Tensor, ...]]]] = {
    "mlp": (models.MLP, lambda: (_randn(4, 8),)),
    "layernorm": (models.LayerNormNet, lambda: (_randn(4, 16),)),
    "gelu": (models.GeluNet, lambda: (_randn(4, 12),)),
    "softmax": (models.SoftmaxNet, lambda: (_randn(4, 10),)),
    "cross_entropy": (models.CrossEntropyNet, lambda: (_randn(6, 8), torch.tensor([0, 4, 2, 1, 3, 4]))),
    "embedding": (models.EmbeddingNet, lambda: (torch.tensor([[1, 5, 19, 5, 0], [7, 7, 2, 11, 3]]),)),
    "attention_sdpa": (lambda: models.CausalSelfAttention(sdpa=True), lambda: (_randn(2, 8, 16),)),
    "attention_masked": (lambda: models.CausalSelfAttention(sdpa=False), lambda: (_randn(2, 8, 16),)),
    "llama_mlp": (models.LlamaMLP, lambda: (_randn(2, 3, 12),)),
    "conv_bn_relu": (models.ConvBNReLU, lambda: (_randn(2, 3, 6, 6),)),
    "pooling_cnn": (models.PoolingCNN, lambda: (_randn(2, 2, 8, 8),)),
}

OPTIMIZERS = {
    "sgd": lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9),
    "adamw": lambda params: torch.optim.AdamW(params, lr=0.01),
}


def _loss(out: torch.Tensor) -> torch.Tensor:
    return out if out.dim() == 0 else out.square().mean()


@pytest.mark.parametrize("name", CASES)
def test_inference_matches_eager(name):
    make_model, make_inputs = CASES[name]
    model = make_model().eval()
    inputs = make_inputs()
    compiled = torch.compile(model, backend="neuron", dynamic=False)
    with torch.no_grad():
        torch.testing.assert_close(compiled(*inputs), model(*inputs), **TOL)
    assert neuroncc.stats()["inference_graphs"] == 1


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
@pytest.mark.parametrize("name", CASES)
def test_three_training_steps_match_eager(name, optimizer):
    make_model, make_inputs = CASES[name]
    eager_model = make_model()
    our_model = copy.deepcopy(eager_model)
    compiled = torch.compile(our_model, backend="neuron", dynamic=False)
    eager_opt = OPTIMIZERS[optimizer](eager_model.parameters())
    our_opt = OPTIMIZERS[optimizer](our_model.parameters())
    _train_side_by_side(eager_model, eager_opt, our_model, compiled, our_opt, make_inputs())
    counts = neuroncc.stats()
    assert counts["forward_graphs"] == 1 and counts["backward_graphs"] == 1


@pytest.mark.parametrize("causal", [True, False])
def test_attention_gradients_match_eager(causal):
    """SDPA is ATen's CPU flash op and its ATen backward (PyTorch's decomposition of the forward op, dropped from
    neuroncc's table, would feed that backward the attention probabilities as its logsumexp: wrong gradients)."""
    def attention(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

    inputs = [torch.randn(2, 2, 5, 4, requires_grad=True) for _ in range(3)]
    eager_inputs = [t.detach().clone().requires_grad_() for t in inputs]
    grad_out = torch.randn(2, 2, 5, 4)
    out = torch.compile(attention, backend="neuron", dynamic=False)(*inputs)
    out.backward(grad_out)
    reference = attention(*eager_inputs)
    reference.backward(grad_out)
    torch.testing.assert_close(out, reference, **TOL)
    for ours, eager in zip(inputs, eager_inputs):
        torch.testing.assert_close(ours.grad, eager.grad, **TOL)


def test_transformer_block_training_steps_match_eager():
    """benchmarks' row f2 (SGD) at a small size: its graphs' arenas reuse the slots of dead intermediates."""
    torch.manual_seed(0)
    eager_model = torch.nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0, batch_first=True)
    our_model = copy.deepcopy(eager_model)
    compiled = torch.compile(our_model, backend="neuron", dynamic=False)
    eager_opt, our_opt = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (eager_model, our_model))
    _train_side_by_side(eager_model, eager_opt, our_model, compiled, our_opt, (_randn(2, 8, 16),))


def _train_side_by_side(eager_model, eager_opt, our_model, compiled, our_opt, inputs, steps=3):
    """``steps`` training steps of the eager model and the compiled copy on the same inputs: each step's outputs,
    then the parameters and buffers after them (BatchNorm running statistics, updated in place as in eager),
    compared to eager's."""
    for _ in range(steps):
        outputs = []
        for fn, opt in ((eager_model, eager_opt), (compiled, our_opt)):
            opt.zero_grad()
            out = fn(*inputs)
            _loss(out).backward()
            opt.step()
            outputs.append(out.detach())
        torch.testing.assert_close(outputs[1], outputs[0], **TOL)
    ours = our_model.state_dict()
    for key, value in eager_model.state_dict().items():
        torch.testing.assert_close(ours[key], value, **TOL, msg=lambda m, key=key: f"{key}: {m}")
