"""Cross-entropy forward + backward: the gradient's one-hot is elementwise (``nll_loss_backward_one_hot``), so
the backward is one fused kernel that reads the logits once, with eager's gradients for every reduction,
class weights and ignored targets."""

from __future__ import annotations

import pytest
import torch

import neuroncc

F = torch.nn.functional


def _step(logits: torch.Tensor, target: torch.Tensor, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    logits = logits.detach().requires_grad_()
    loss = F.cross_entropy(logits, target, **kwargs)
    loss.sum().backward()
    return loss.detach(), logits.grad


@pytest.mark.parametrize("kwargs", [
    {}, {"reduction": "sum"}, {"reduction": "none"}, {"ignore_index": 3},
    {"weight": torch.linspace(0.5, 2.0, 37)}, {"weight": torch.linspace(0.5, 2.0, 37), "ignore_index": 0},
], ids=["mean", "sum", "none", "ignore", "weight", "weight-ignore"])
def test_cross_entropy_step_matches_eager(kwargs):
    generator = torch.Generator().manual_seed(1)
    logits = torch.randn(24, 37, generator=generator) * 3
    target = torch.randint(0, 37, (24,), generator=generator)
    target[:4] = torch.tensor([3, 0, 36, 3])
    compiled = torch.compile(_step, backend="neuron", dynamic=False)
    got = compiled(logits, target, **kwargs)
    for g, e in zip(got, _step(logits, target, **kwargs), strict=True):
        torch.testing.assert_close(g, e, rtol=1.3e-6, atol=1e-6)


def test_cross_entropy_backward_is_one_kernel_over_the_logits():
    logits, target = torch.randn(64, 1000, requires_grad=True), torch.randint(0, 1000, (64,))
    torch.compile(F.cross_entropy, backend="neuron", dynamic=False)(logits, target).backward()
    counts = neuroncc.stats()
    # the forward (amax, sum of exp, log, gather, mean) and the backward (softmax minus the one-hot): a
    # scatter of the one-hot into zeros made the backward three kernels and a [64, 1000] buffer
    assert (counts["forward_graphs"], counts["backward_graphs"], counts["inference_graphs"]) == (1, 1, 0)
    assert counts["kernels"] == 2
