"""Acceptance: the front end's model zoo compiled for the nki-sim target matches eager, in inference and in a
training step (forward, gradients, the optimizer's update and BatchNorm's running statistics).

The zoo is tests/frontend's 11 models: MLP, LayerNorm, GELU, softmax, cross-entropy, embedding, SDPA causal
attention, masked attention, RMSNorm + SiLU MLP, conv2d + BatchNorm + ReLU (train mode) and a pooling CNN.
Every kernel of every graph (inference, forward and backward) runs as generated NKI code in the simulator.
fp32 models use rtol 1e-4 (the simulator computes in fp32 with its own summation order), bf16 1e-2.
"""

from __future__ import annotations

import copy

import pytest
import torch

import neuroncc
from frontend.test_models import CASES

NKI = {"target": "nki-sim"}
TOL = {"rtol": 1e-4, "atol": 1e-5}


def _loss(out: torch.Tensor) -> torch.Tensor:
    return out if out.dim() == 0 else out.square().mean()


def test_the_zoo_is_the_front_ends_eleven_models():
    assert len(CASES) == 11


@pytest.mark.parametrize("name", sorted(CASES))
def test_inference_matches_eager(name):
    make_model, make_inputs = CASES[name]
    model = make_model().eval()
    inputs = make_inputs()
    compiled = torch.compile(model, backend="neuron", dynamic=False, options=NKI)
    with torch.no_grad():
        torch.testing.assert_close(compiled(*inputs), model(*inputs), **TOL)
    assert neuroncc.stats()["inference_graphs"] == 1


@pytest.mark.parametrize("name", sorted(CASES))
def test_training_step_matches_eager(name):
    """Forward, gradients, one SGD step (momentum) on both, then the parameters and buffers."""
    make_model, make_inputs = CASES[name]
    eager = make_model()
    ours = copy.deepcopy(eager)
    compiled = torch.compile(ours, backend="neuron", dynamic=False, options=NKI)
    inputs = make_inputs()
    out, expected = compiled(*inputs), eager(*inputs)
    torch.testing.assert_close(out, expected, **TOL)
    _loss(out).backward()
    _loss(expected).backward()
    for (key, ours_p), (_, eager_p) in zip(ours.named_parameters(), eager.named_parameters()):
        torch.testing.assert_close(ours_p.grad, eager_p.grad, **TOL, msg=lambda m, key=key: f"{key}: {m}")
    for module in (ours, eager):
        torch.optim.SGD(module.parameters(), lr=0.1, momentum=0.9).step()
    state = ours.state_dict()  # parameters after the step; BatchNorm's running stats, updated in the graph
    for key, value in eager.state_dict().items():
        torch.testing.assert_close(state[key], value, **TOL, msg=lambda m, key=key: f"{key}: {m}")
    counts = neuroncc.stats()
    assert counts["forward_graphs"] == 1 and counts["backward_graphs"] == 1


def test_bf16_training_step_matches_eager_at_bf16_tolerance():
    model = torch.nn.Sequential(torch.nn.Linear(24, 40), torch.nn.LayerNorm(40), torch.nn.GELU(),
                                torch.nn.Linear(40, 8)).to(torch.bfloat16)
    ours = copy.deepcopy(model)
    compiled = torch.compile(ours, backend="neuron", dynamic=False, options=NKI)
    x = torch.randn(6, 24, dtype=torch.bfloat16)
    out, expected = compiled(x), model(x)
    torch.testing.assert_close(out, expected, rtol=1e-2, atol=1e-2)
    out.float().square().mean().backward()
    expected.float().square().mean().backward()
    for (key, ours_p), (_, eager_p) in zip(ours.named_parameters(), model.named_parameters()):
        torch.testing.assert_close(ours_p.grad, eager_p.grad, rtol=2e-2, atol=2e-2,
                                   msg=lambda m, key=key: f"{key}: {m}")
