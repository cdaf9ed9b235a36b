"""PyTorch's device APIs around a training loop, used on ``neuron`` as a CUDA script uses them: pinned memory and
the DataLoader, torch.accelerator's memory counters, torch.neuron's CUDA-named helpers."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset


def test_pin_memory_makes_a_pinned_copy_with_the_same_values_and_strides():
    source = torch.randn(4, 6).t()
    pinned = source.pin_memory()
    assert pinned.is_pinned() and not source.is_pinned()
    assert pinned.device.type == "cpu" and pinned.stride() == source.stride()
    torch.testing.assert_close(pinned, source, rtol=0, atol=0)
    assert pinned[1:].is_pinned()  # a view of pinned memory is pinned
    assert torch.randn(3).pin_memory("neuron").is_pinned()
    on_device = pinned.to("neuron", non_blocking=True)
    torch.accelerator.synchronize()
    torch.testing.assert_close(on_device.cpu(), source, rtol=0, atol=0)


def test_dataloader_with_workers_and_pinned_memory_feeds_the_device():
    features, labels = torch.randn(24, 3, 4, 4), torch.randint(0, 5, (24,))
    loader = DataLoader(TensorDataset(features, labels), batch_size=8, num_workers=2, pin_memory=True)
    seen = []
    for x, y in loader:
        assert x.is_pinned() and y.is_pinned()
        x, y = x.to("neuron", non_blocking=True), y.to("neuron", non_blocking=True)
        seen.append((x.sum(dim=(1, 2, 3)).cpu(), y.cpu()))
    torch.accelerator.synchronize()
    torch.testing.assert_close(torch.cat([s for s, _ in seen]), features.sum(dim=(1, 2, 3)))
    assert torch.equal(torch.cat([y for _, y in seen]), labels)
