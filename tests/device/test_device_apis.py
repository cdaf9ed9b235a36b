"""PyTorch's device APIs around a training loop, used on ``neuron`` as a CUDA script uses them: pinned memory and
the DataLoader, torch.accelerator's memory counters, torch.neuron's CUDA-named helpers."""

from __future__ import annotations

import copy

import pytest
import torch
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader, TensorDataset

from device.conftest import run_python


@pytest.mark.filterwarnings("ignore:.*device.*pin_memory.*:DeprecationWarning", "ignore:.*pin_memory.*device.*")
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


def test_memory_counters_move_by_what_a_tensor_takes_and_drop_when_it_goes():
    memory = torch.accelerator.memory
    memory.empty_cache()
    memory.reset_peak_memory_stats()
    before = memory.memory_allocated()
    assert memory.max_memory_allocated() == before == torch.neuron.memory_allocated("neuron:0")
    tensor = torch.empty(1 << 20, device="neuron")  # 4 MiB: a multiple of the allocator's rounding
    assert memory.memory_allocated() - before == 4 << 20
    assert memory.max_memory_allocated() == before + (4 << 20)
    assert memory.memory_reserved() >= before + (4 << 20)
    del tensor
    assert memory.memory_allocated() == before
    assert memory.max_memory_allocated() == before + (4 << 20)  # the peak stays until it is reset
    memory.reset_peak_memory_stats()
    assert memory.max_memory_allocated() == before
    memory.empty_cache()
    assert memory.memory_reserved() == memory.memory_stats()["reserved_bytes.all.current"] >= before


def test_accelerator_empty_host_cache_after_device_ops_does_not_crash():
    # was a segmentation fault (in torch's C++) once the device had run an op: a fresh process
    result = run_python("import torch; torch.ones(2, device='neuron'); torch.accelerator.memory.empty_host_cache(); "
                        "print('done')")
    assert result.returncode == 0 and result.stdout.split() == ["done"], (result.returncode, result.stderr[-2000:])


def test_accelerator_capability_answers_for_the_device():
    dtypes = torch.accelerator.get_device_capability()["supported_dtypes"]  # raised RuntimeError
    assert {torch.float32, torch.bfloat16, torch.int64, torch.bool} <= dtypes and torch.float64 not in dtypes
    for dtype in dtypes:
        assert torch.zeros(2, dtype=dtype, device="neuron").dtype == dtype


def test_torch_neuron_has_the_cuda_helpers_scripts_call():
    tensor = torch.empty(1 << 18, device="neuron")  # 1 MiB
    properties = torch.neuron.get_device_properties(0)
    assert properties.total_memory == torch.neuron.mem_get_info()[1] and properties.name
    summary = torch.neuron.memory_summary()
    assert "Allocated memory" in summary and "1.00 MiB" in summary
    torch.neuron.reset_max_memory_allocated()
    assert torch.neuron.max_memory_allocated() == torch.neuron.memory_allocated()
    del tensor


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_checkpoint_recomputes_dropout_with_the_forwards_mask(use_reentrant):
    """Gradients through a checkpointed block with dropout equal those without checkpointing, as on CPU."""
    inputs = torch.randn(6, 4)
    layer = torch.nn.Linear(4, 8)

    def grads(device, checkpointed):
        model = copy.deepcopy(layer).to(device)
        x = inputs.clone().to(device).requires_grad_(True)
        block = lambda t: torch.nn.functional.dropout(torch.tanh(model(t)), 0.5)  # noqa: E731
        torch.manual_seed(7)
        out = checkpoint(block, x, use_reentrant=use_reentrant) if checkpointed else block(x)
        out.sum().backward()
        return out.detach().cpu(), x.grad.cpu(), model.weight.grad.cpu()

    for device in ("cpu", "neuron"):
        plain, checkpointed = grads(device, False), grads(device, True)
        for a, b in zip(plain, checkpointed):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
