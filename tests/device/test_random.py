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


# ---- random ops inside torch.compile(backend="neuron") on neuron tensors ---------------------------------

_N = 1 << 20  # >= 1M draws: 3 sigma of a fraction p is 3 sqrt(p (1 - p) / N) ~ 0.0014 at p = 0.3


def test_compiled_dropout_on_device_tensors_matches_eagers_statistics():
    """The graph's Philox state lives on the device with its tensors (a CPU state made the fake tensors'
    devices disagree); the kept fraction is 1 - p within 3 sigma, kept values are x / (1 - p) exactly, and the
    backward's gradient is zero exactly where the forward dropped."""
    neuroncc.clear_op_tracking()
    p = 0.3
    x = torch.randn(_N, device="neuron", requires_grad=True)
    compiled = torch.compile(lambda t: torch.nn.functional.dropout(t, p, training=True), backend="neuron")
    torch.manual_seed(0)
    y = compiled(x)
    assert y.device.type == "neuron"
    y.sum().backward()
    out, grad, data = y.detach().cpu(), x.grad.cpu(), x.detach().cpu()
    kept = out != 0
    assert abs(kept.float().mean().item() - (1 - p)) <= 3 * (p * (1 - p) / _N) ** 0.5
    torch.testing.assert_close(out[kept], data[kept] / (1 - p), rtol=1e-6, atol=0)
    assert torch.equal(grad != 0, kept)
    torch.testing.assert_close(grad[kept], torch.full_like(grad[kept], 1 / (1 - p)))
    assert neuroncc.get_fallback_ops() == {}


def test_compiled_rand_and_randn_on_device_tensors_have_eagers_moments():
    """rand_like/randn on device tensors compile (no fallback) and draw U[0, 1) and N(0, 1): mean and variance
    within 5 standard errors of eager's, and of the distribution's, over 1M draws."""
    neuroncc.clear_op_tracking()
    compiled = torch.compile(lambda t: (torch.rand_like(t), torch.randn(t.shape, device=t.device)), backend="neuron")
    x = torch.empty(_N, device="neuron")
    torch.manual_seed(1)
    uniform, normal = (v.cpu().double() for v in compiled(x))
    eager_uniform, eager_normal = torch.rand(_N, device="neuron").cpu().double(), torch.randn(_N).double()
    for ours, eager, mean, var, fourth in ((uniform, eager_uniform, 0.5, 1 / 12, 1 / 80), (normal, eager_normal, 0, 1, 3)):
        se_mean, se_var = (var / _N) ** 0.5, ((fourth - var**2) / _N) ** 0.5
        for sample in (ours, eager):
            assert abs(sample.mean().item() - mean) <= 5 * se_mean
            assert abs(sample.var().item() - var) <= 5 * se_var
        assert abs(ours.mean().item() - eager.mean().item()) <= 5 * 2**0.5 * se_mean
    assert 0 <= uniform.min() and uniform.max() < 1
    assert neuroncc.get_fallback_ops() == {}


def test_compiled_random_ops_on_the_device_follow_its_generator():
    """torch.manual_seed replays a compiled call on the device; successive calls draw fresh numbers; the key
    comes from the device's generator (CPU draws in between do not move it)."""
    compiled = torch.compile(lambda t: torch.nn.functional.dropout(t, 0.5, training=True), backend="neuron")
    x = torch.ones(4096, device="neuron")
    torch.manual_seed(7)
    first, second = compiled(x).cpu(), compiled(x).cpu()
    torch.manual_seed(7)
    torch.rand(100)
    replay = compiled(x).cpu()
    assert torch.equal(first, replay)
    assert not torch.equal(first, second)
