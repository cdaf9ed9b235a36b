"""``torch.compile(..., backend="neuron")`` of CNN pieces on neuron tensors: the same values and gradients as
eager on CPU.

The front end's pooling decompositions (``frontend/lowering/coverage_pooling.py``) built their window matrices
and divisors on CPU: traced over neuron fake tensors they mixed devices, and adaptive pools to a size other
than 1 (VGG's ``AdaptiveAvgPool2d((7, 7))``), ceil-mode or divisor-override average pools, 3-d pools and
their backwards failed to compile (``FakeTensorDeviceMismatchError``, or an abort inside autograd's engine).
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

POOLS = {
    "adaptive_avg_3": lambda x: F.adaptive_avg_pool2d(x, 3),
    "adaptive_max_3": lambda x: F.adaptive_max_pool2d(x, 3),
    "avg_ceil_mode": lambda x: F.avg_pool2d(x, 3, 2, ceil_mode=True),
    "avg_divisor": lambda x: F.avg_pool2d(x, 2, divisor_override=3),
    "adaptive_avg_3d": lambda x: F.adaptive_avg_pool3d(x.unsqueeze(2).expand(-1, -1, 4, -1, -1), 3),
    "adaptive_avg_1d": lambda x: F.adaptive_avg_pool1d(x.flatten(2), 5),
    "bilinear_antialias": lambda x: F.interpolate(x, size=(5, 3), mode="bilinear", antialias=True),
}


@pytest.mark.parametrize("name", sorted(POOLS))
def test_compiled_pooling_on_the_device_matches_cpu(name):
    pool = POOLS[name]
    x = torch.randn(2, 3, 8, 8)
    expected_x = x.clone().requires_grad_()
    expected = pool(expected_x)
    expected.square().sum().backward()
    torch._dynamo.reset()
    device_x = x.to("neuron").requires_grad_()
    got = torch.compile(pool, backend="neuron")(device_x)
    got.square().sum().backward()
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(device_x.grad.cpu(), expected_x.grad, rtol=1e-5, atol=1e-6)


def test_compiled_channels_last_convolutions_on_the_device_return_eagers_strides():
    """PyTorch's fake convolution on a PrivateUse1 device is contiguous; the device's eager convolution gives
    CPU's channels_last (neuroncc/device/fake_convolution.py): the compiled graph's outputs are laid out as
    eager's, with eager's values and gradients."""
    torch.manual_seed(0)
    block = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 3, stride=2))
    _compiled_on_the_device_matches_cpu(block, [0, 3], dynamic=False)


def _compiled_on_the_device_matches_cpu(block: nn.Module, weighted: list[int], dynamic: bool) -> None:
    """``block`` in channels_last, eager on CPU and compiled on the device: the output's, the input's gradient's
    and the ``weighted`` layers' weight gradients' values and strides."""
    cl = torch.channels_last
    x = torch.randn(2, 3, 10, 10).to(memory_format=cl)
    results = {}
    for device in ("cpu", "neuron"):
        torch._dynamo.reset()
        model = copy.deepcopy(block).to(device, memory_format=cl)
        a = x.detach().to(device).requires_grad_()
        forward = torch.compile(model, backend="neuron", dynamic=dynamic) if device == "neuron" else model
        y = forward(a)
        y.square().sum().backward()
        results[device] = [y, a.grad, *(model[i].weight.grad for i in weighted)]
    for expected, got in zip(results["cpu"], results["neuron"]):
        torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-4)
        assert got.stride() == expected.stride(), (got.stride(), expected.stride())


def test_compiled_channels_last_specialization_on_the_device_matches_cpu():
    """A channels_last block compiled with symbolic sizes (one static specialization per shape,
    frontend/specializations.py; tests/frontend/test_saved_layouts.py checks its saved layouts): eager's values,
    gradients and strides."""
    torch.manual_seed(0)
    block = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 3),
                          nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))
    _compiled_on_the_device_matches_cpu(block, [0, 3, 7], dynamic=True)
