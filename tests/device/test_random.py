"""The device's generator: torch.manual_seed makes rand*/dropout on neuron tensors reproducible."""

from __future__ import annotations

import torch

import neuroncc


def _draws() -> list[torch.Tensor]:
    return [torch.rand(5, device="neuron"), torch.randn(2, 3, device="neuron"),
            torch.randint(0, 10, (6,), device="neuron"), torch.empty(4, device="neuron").uniform_(-1, 1),
            torch.nn.functional.dropout(torch.ones(8, device="neuron"), p=0.5),
            torch.bernoulli(torch.full((6,), 0.3, device="neuron")), torch.randperm(7, device="neuron")]


def test_manual_seed_makes_device_randomness_reproducible():
    torch.manual_seed(123)
    first = _draws()
    torch.manual_seed(123)
    second = _draws()
    for a, b in zip(first, second):
        assert a.device.type == "neuron"
        assert torch.equal(a.cpu(), b.cpu())
    torch.manual_seed(124)
    assert not torch.equal(torch.rand(5, device="neuron").cpu(), first[0].cpu())


def test_the_device_generator_is_its_own():
    torch.manual_seed(5)
    on_device = torch.rand(4, device="neuron")
    torch.manual_seed(5)
    torch.rand(100)  # draws from the CPU generator do not move the device's
    assert torch.equal(torch.rand(4, device="neuron").cpu(), on_device.cpu())


def test_dropout_in_training_scales_and_masks():
    torch.manual_seed(0)
    x = torch.randn(1000, device="neuron", requires_grad=True)
    y = torch.nn.functional.dropout(x, p=0.25, training=True)
    kept = y.detach().cpu() != 0
    assert 0.6 < kept.float().mean().item() < 0.9
    torch.testing.assert_close(y.detach().cpu()[kept], x.detach().cpu()[kept] / 0.75)
    y.sum().backward()
    torch.testing.assert_close(x.grad.cpu(), kept.float() / 0.75)
    assert torch.equal(torch.nn.functional.dropout(x, p=0.25, training=False).cpu(), x.detach().cpu())


def test_random_ops_run_on_the_device():
    torch.rand(3, device="neuron")
    assert neuroncc.get_fallback_ops() == {}
    assert any("uniform_" in name for name in neuroncc.get_executed_ops())


def test_fork_rng_restores_the_device_generator():
    torch.manual_seed(1)
    with torch.random.fork_rng(device_type="neuron"):
        torch.rand(3, device="neuron")
    after = torch.rand(3, device="neuron")
    torch.manual_seed(1)
    assert torch.equal(torch.rand(3, device="neuron").cpu(), after.cpu())
