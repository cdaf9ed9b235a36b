"""The OpInfo sweep seeds its runs as ``torch.manual_seed`` does, without formatting the stack per run."""

from __future__ import annotations

import traceback

import pytest
import torch

from neuroncc.testing.opinfo import seed_generators


def _states() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.get_rng_state(), torch.get_device_module("neuron").get_rng_state()


@pytest.mark.parametrize("seed", [0, 7919, 2**40 + 3, -5])
def test_the_generators_end_as_torch_manual_seed_leaves_them(seed):
    torch.manual_seed(seed)
    expected = _states()
    torch.manual_seed(seed + 1)
    seed_generators(seed)
    assert all(torch.equal(a, b) for a, b in zip(_states(), expected))
    assert torch.equal(torch.rand(5, device="neuron").cpu(), (torch.manual_seed(seed), torch.rand(5))[1])


@pytest.mark.skipif(torch.cuda.is_available() or torch.xpu.is_available() or torch.mtia.is_available(),
                    reason="their seeds are queued as torch queues them")
def test_no_stack_is_formatted_for_devices_that_cannot_start(monkeypatch):
    # torch.manual_seed queues a seed for CUDA, XPU and MTIA with the caller's stack formatted (1-5 ms under pytest
    # and TorchDynamo, 2000 times per sample of a random op)
    monkeypatch.setattr(traceback, "format_stack", lambda *a, **k: pytest.fail("formatted the stack"))
    seed_generators(3)
