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


@pytest.mark.parametrize("loss", ["target", "mean_square"])
def test_transformer_layer_adamw_steps_differ_from_eager_only_as_adam_amplifies_rounding(loss):
    """A TransformerEncoderLayer trained with AdamW (lr 1e-3) ends up 1e-4..5e-3 away from eager after a few
    steps (2.6e-3 seen in session 13), while SGD's steps match to 1e-5. Not a bug, AdamW's normalization:

    * its first update is lr * g / (|g| + eps), eps = 1e-8: a gradient of size near or below eps moves its
      parameter by a fraction of lr that float32 rounding decides, sign included, and later updates stay
      normalized the same way;
    * the key bias's gradient is exactly 0 in exact arithmetic (it adds q . b_k to every score of a query's
      row, which the softmax cancels), so float32 leaves only rounding noise (1e-12..1e-9), which eager and
      the compiled layer round differently: with a loss against a target ("target"), every parameter but
      those 32 matches eager to 1e-5, the key bias drifts apart by ~5e-5 a step;
    * with ``out.square().mean()`` ("mean_square", tests above), the loss is nearly flat: a post-norm layer's
      output has a mean square of ~1 per token whatever the parameters before its last LayerNorm, so 8k of
      the 8.5k gradients are < 1e-7 (they come from LayerNorm's eps), all in Adam's amplifying range.

    Eager's own float32 trajectory strays from the float64 one by the same mechanism ("mean_square": eager
    4.9e-3 after 4 steps, the compiled layer 1.0e-4). So the test checks what the mechanism leaves to check:
    (1) at equal parameters, every step's gradients are as accurate as eager's (against float64; a wrong
    gradient, which Adam's scale invariance could hide in (2), fails here); (2) after 4 free-running steps the
    compiled layer's parameters are as close to the float64 trajectory as eager's (3x eager's error,
    neuroncc.testing.compare), and with "target" every parameter but the key bias matches eager to 1e-5."""
    from neuroncc.testing.compare import float64_judgement

    torch.manual_seed(1)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    x = torch.randn(2, 8, 32, generator=torch.Generator().manual_seed(2))
    target = torch.randn(2, 8, 32, generator=torch.Generator().manual_seed(3))
    eager, ours, exact = layer, copy.deepcopy(layer), copy.deepcopy(layer).double()
    compiled = torch.compile(ours, backend="neuron", dynamic=False)
    sides = ((eager, eager, torch.float32), (ours, compiled, torch.float32), (exact, exact, torch.float64))

    def flat(model, grads=False):
        return torch.cat([(p.grad if grads else p).detach().flatten() for p in model.parameters()])

    def load(model, values):
        with torch.no_grad():
            for p, value in zip(model.parameters(), values.split([p.numel() for p in model.parameters()])):
                p.copy_(value.view_as(p))

    def gradients(model, fn, dtype):
        model.zero_grad()
        out = fn(x.to(dtype))
        (_loss(out) if loss == "mean_square" else (out - target.to(dtype)).square().mean()).backward()
        return flat(model, grads=True)

    start = flat(eager)
    eager_opt = torch.optim.AdamW(eager.parameters(), lr=1e-3)
    for step in range(4):  # (1): eager trains; ours and float64 take gradients at its parameters
        for model, _, _ in sides[1:]:
            load(model, flat(eager))
        want, got, best = (gradients(*side) for side in sides)
        problem = float64_judgement(got, want, best)
        assert problem is None, f"step {step} gradients at equal parameters: {problem}"
        eager_opt.step()

    for model, _, _ in sides:  # (2): each trains on its own from the same start
        load(model, start)
    optimizers = [torch.optim.AdamW(model.parameters(), lr=1e-3) for model, _, _ in sides]
    for _ in range(4):
        for side, opt in zip(sides, optimizers):
            gradients(*side)
            opt.step()
    problem = float64_judgement(flat(ours), flat(eager), flat(exact))
    assert problem is None, f"parameters after 4 AdamW steps: {problem}"
    if loss == "target":
        for (name, want), got in zip(eager.named_parameters(), ours.parameters()):
            if name == "self_attn.in_proj_bias":  # [q; k; v]: all but the key bias
                want, got = torch.cat([want[:32], want[64:]]), torch.cat([got[:32], got[64:]])
            torch.testing.assert_close(got, want, **TOL, msg=lambda m, name=name: f"{name}: {m}")
