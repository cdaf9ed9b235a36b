"""Memory formats on the ``neuron`` device propagate as on CPU: each op's result has CPU eager's strides (and
values), so ``is_contiguous(memory_format=torch.channels_last)`` answers as on CPU through a channels_last CNN,
forward and backward (``neuroncc/device/layouts.py``).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

CL, CL3 = torch.channels_last, torch.channels_last_3d


def _on(device, tensor, fmt=CL):
    return tensor.to(device, memory_format=fmt if tensor.dim() in (4, 5) else torch.contiguous_format)


def _same_layout(expected: torch.Tensor, got: torch.Tensor) -> None:
    """Same values, and the same strides in every dim of size above 1 (where strides mean something)."""
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-5)
    assert [s for n, s in zip(got.shape, got.stride()) if n != 1] == \
        [s for n, s in zip(expected.shape, expected.stride()) if n != 1], (got.stride(), expected.stride())


WEIGHTS = {"w": torch.randn(6, 4, 3, 3), "wd": torch.randn(4, 1, 3, 3), "wt": torch.randn(4, 6, 3, 3),
           "b": torch.randn(6), "indices": F.max_pool2d(torch.randn(2, 4, 8, 8), 2, return_indices=True)[1]}

OPS = {
    "conv2d": lambda x, w: F.conv2d(x, w["w"], w["b"], padding=1),
    "conv2d_depthwise": lambda x, w: F.conv2d(x, w["wd"], stride=2, groups=4),
    "conv_transpose2d": lambda x, w: F.conv_transpose2d(x, w["wt"]),
    "max_pool2d": lambda x, w: F.max_pool2d(x, 3, 2, 1),
    "max_pool2d_indices": lambda x, w: F.max_pool2d(x, 2, return_indices=True)[1],
    "adaptive_avg_pool2d": lambda x, w: F.adaptive_avg_pool2d(x, 3),
    "abs": lambda x, w: torch.abs(x),  # reaches the device as abs.out into an empty tensor
    "reflection_pad": lambda x, w: F.pad(x, (1, 2, 1, 2), mode="reflect"),
    "replication_pad": lambda x, w: F.pad(x, (1, 2, 1, 2), mode="replicate"),
    "channel_shuffle": lambda x, w: F.channel_shuffle(x, 2),
    "max_unpool2d": lambda x, w: F.max_unpool2d(F.max_pool2d(x, 2), w["indices"], 2),
    "mse_loss_backward": lambda x, w: torch.ops.aten.mse_loss_backward(x, x, x * 0.5, 1),  # CPU: contiguous
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_channels_last_result_has_cpus_strides(name):
    x = torch.randn(2, 4, 8, 8)
    expected = OPS[name](_on("cpu", x), {k: _on("cpu", v) for k, v in WEIGHTS.items()})
    got = OPS[name](_on("neuron", x), {k: _on("neuron", v) for k, v in WEIGHTS.items()})
    _same_layout(expected, got)


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 8, 3, padding=1, groups=2), nn.BatchNorm2d(8)
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        y = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        z = F.relu(self.bn2(self.conv2(y))) + y
        z = F.interpolate(z, scale_factor=2, mode="bilinear")
        return self.head(F.adaptive_avg_pool2d(z, 1).flatten(1))


def _train_step(device):
    torch.manual_seed(0)
    model = _Block().to(device, memory_format=CL)
    seen = {}
    for name, module in model.named_children():
        module.register_forward_hook(lambda m, i, out, name=name: seen.setdefault(name, out))
    x = torch.randn(4, 3, 16, 16).to(device, memory_format=CL).requires_grad_()
    model(x).square().sum().backward()
    grads = {name: p.grad for name, p in model.named_parameters()}
    return seen, x.grad, grads


def test_channels_last_cnn_activations_and_gradients_match_cpu():
    expected, expected_grad, expected_grads = _train_step("cpu")
    got, got_grad, got_grads = _train_step("neuron")
    for name in ("conv1", "bn1", "conv2", "bn2"):
        assert got[name].is_contiguous(memory_format=CL) and not got[name].is_contiguous(), name
        _same_layout(expected[name], got[name])
    _same_layout(expected_grad, got_grad)
    for name, grad in expected_grads.items():
        torch.testing.assert_close(got_grads[name].cpu(), grad, rtol=1e-4, atol=1e-4)
        assert got_grads[name].stride() == grad.stride(), name


def test_channels_last_3d_convolution_and_pooling():
    x, w = torch.randn(2, 3, 4, 6, 6), torch.randn(4, 3, 3, 3, 3)
    for op in (lambda x, w: F.conv3d(x, w, padding=1), lambda x, w: F.max_pool3d(F.conv3d(x, w), 2),
               lambda x, w: F.pad(x, (1,) * 6, mode="replicate")):
        expected = op(_on("cpu", x, CL3), _on("cpu", w, CL3))
        got = op(_on("neuron", x, CL3), _on("neuron", w, CL3))
        assert got.is_contiguous(memory_format=CL3) == expected.is_contiguous(memory_format=CL3)
        _same_layout(expected, got)


def test_formats_set_by_the_user_are_kept():
    x = torch.randn(2, 4, 8, 8)
    for device_op in (lambda t: t.contiguous(), lambda t: t.to(memory_format=CL), lambda t: t.clone(),
                      lambda t: torch.empty_like(t).zero_(), lambda t: t.clone(memory_format=torch.contiguous_format),
                      lambda t: torch.zeros_like(t, memory_format=torch.preserve_format)):
        _same_layout(device_op(_on("cpu", x)), device_op(_on("neuron", x)))
