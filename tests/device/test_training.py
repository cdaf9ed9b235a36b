"""Acceptance: the backend-test models train 3 optimizer steps on the device as on CPU, eager and compiled."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch

import neuroncc
from frontend import models

TOL = {"rtol": 1e-4, "atol": 1e-4}


def _randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(1))


CASES: dict[str, tuple[Callable[[], torch.nn.Module], Callable[[], tuple[torch.Tensor, ...]]]] = {
    "mlp": (models.MLP, lambda: (_randn(4, 8),)),
    "layernorm": (models.LayerNormNet, lambda: (_randn(4, 16),)),
    "attention": (lambda: models.CausalSelfAttention(sdpa=True), lambda: (_randn(2, 8, 16),)),
    "attention_masked": (lambda: models.CausalSelfAttention(sdpa=False), lambda: (_randn(2, 8, 16),)),
    "conv_bn_relu": (models.ConvBNReLU, lambda: (_randn(2, 3, 6, 6),)),
    "embedding": (models.EmbeddingNet, lambda: (torch.tensor([[1, 5, 19, 5, 0], [7, 7, 2, 11, 3]]),)),
    "cross_entropy": (models.CrossEntropyNet, lambda: (_randn(6, 8), torch.tensor([0, 4, 2, 1, 3, 4]))),
}

OPTIMIZERS = {
    "adamw": lambda params: torch.optim.AdamW(params, lr=0.01),
    "adamw_single_tensor": lambda params: torch.optim.AdamW(params, lr=0.01, foreach=False),
    "sgd_momentum": lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9),
    "adam_foreach": lambda params: torch.optim.Adam(params, lr=0.01, foreach=True),
}


def _loss(out: torch.Tensor) -> torch.Tensor:
    return out if out.dim() == 0 else out.square().mean()


def _train(model: torch.nn.Module, run: Callable[..., torch.Tensor], inputs: tuple[torch.Tensor, ...],
           make_optimizer: Callable[..., torch.optim.Optimizer], steps: int = 3) -> list[float]:
    optimizer = make_optimizer(model.parameters())
    losses = []
    for _ in range(steps):
        loss = _loss(run(*inputs))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def _check(name: str, optimizer: str, compiled: bool) -> None:
    make_model, make_inputs = CASES[name]
    torch.manual_seed(0)
    reference = make_model()
    on_device = copy.deepcopy(reference).to("neuron")
    inputs = make_inputs()
    cpu_losses = _train(reference, reference, inputs, OPTIMIZERS[optimizer])
    run = torch.compile(on_device, backend="neuron", dynamic=False) if compiled else on_device
    device_losses = _train(on_device, run, tuple(t.to("neuron") for t in inputs), OPTIMIZERS[optimizer])
    torch.testing.assert_close(device_losses, cpu_losses, **TOL)
    for (param_name, expected), actual in zip(reference.state_dict().items(), on_device.state_dict().values()):
        assert actual.device.type == "neuron", param_name
        torch.testing.assert_close(actual.cpu(), expected, **TOL, msg=param_name)


@pytest.mark.parametrize("name", CASES)
def test_adamw_steps_on_the_device_match_cpu(name):
    _check(name, "adamw", compiled=False)
    assert neuroncc.get_fallback_ops() == {}, "every op of these models runs on the device"


@pytest.mark.parametrize("optimizer", ["adamw_single_tensor", "sgd_momentum", "adam_foreach"])
def test_other_optimizers(optimizer):
    _check("mlp", optimizer, compiled=False)


@pytest.mark.parametrize("name", CASES)
def test_compiled_on_the_device_matches_cpu(name):
    _check(name, "adamw", compiled=True)
    torch._dynamo.reset()


def test_compiled_graph_reads_and_writes_device_memory_in_place():
    model = models.MLP().to("neuron")
    compiled = torch.compile(model, backend="neuron", dynamic=False)
    x = torch.randn(4, 8, device="neuron")
    with torch.no_grad():
        out = compiled(x)
    assert out.device.type == "neuron"
    torch.testing.assert_close(out.cpu(), model.cpu()(x.cpu()), **TOL)
    assert neuroncc.stats()["inference_graphs"] == 1
    torch._dynamo.reset()


def test_a_model_runs_wholly_on_the_device_in_error_mode():
    neuroncc.set_fallback_mode("error")
    _check("layernorm", "adamw", compiled=False)
    assert neuroncc.get_executed_ops()


def test_foreach_optimizer_steps_are_one_device_kernel_per_list_op():
    """PyTorch's generic foreach kernels would loop per tensor; the device compiles each list op whole, and
    torch.optim's foreach AdamW step is one program (foreach_optimizers.py)."""
    model = models.MLP().to("neuron")
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01, foreach=True)
    for _ in range(2):
        model(torch.randn(4, 8, device="neuron")).sum().backward()
        optimizer.step()
    params = [p.detach() for p in model.parameters()]
    torch._foreach_lerp_(params, [p.grad for p in model.parameters()], 0.5)
    executed = neuroncc.get_executed_ops()
    assert executed.get("torch.optim._multi_tensor_adam") == 2, executed
    assert executed.get("aten._foreach_lerp_.Scalar") == 1, executed
    assert "aten.lerp_.Scalar" not in executed and "aten.addcdiv_.default" not in executed, executed
