"""``torch.compile(opt.step, backend="neuron")``: SGD, Adam and AdamW (foreach and single-tensor paths) match
eager's parameters and state, and the per-parameter updates fuse horizontally into one kernel per shape."""

from __future__ import annotations

import pytest
import torch

import neuroncc

TOL = {"rtol": 1e-5, "atol": 1e-6}

#: A 3-layer MLP's parameter shapes: 6 tensors in 2 shapes ([32, 32] weights, [32] biases) plus a head.
SHAPES = [(32, 32), (32,), (32, 32), (32,), (32, 32), (32,), (10, 32), (10,)]

OPTIMIZERS = {
    "sgd": lambda params, foreach: torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-2,
                                                   foreach=foreach),
    "sgd_nesterov": lambda params, foreach: torch.optim.SGD(params, lr=0.1, momentum=0.9, nesterov=True,
                                                            foreach=foreach),
    "adam": lambda params, foreach: torch.optim.Adam(params, lr=0.01, foreach=foreach),
    "adam_amsgrad": lambda params, foreach: torch.optim.Adam(params, lr=0.01, amsgrad=True, weight_decay=1e-2,
                                                             foreach=foreach),
    "adamw": lambda params, foreach: torch.optim.AdamW(params, lr=0.01, weight_decay=0.1, foreach=foreach),
}


def _params() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(shape, generator=generator, requires_grad=True) for shape in SHAPES]


def _set_grads(params: list[torch.Tensor], step: int) -> None:
    generator = torch.Generator().manual_seed(100 + step)
    for p in params:
        p.grad = torch.randn(p.shape, generator=generator)


@pytest.mark.parametrize("foreach", [True, False], ids=["foreach", "single_tensor"])
@pytest.mark.parametrize("name", OPTIMIZERS)
def test_compiled_step_matches_eager_after_three_steps(name, foreach):
    eager_params, our_params = _params(), _params()
    eager = OPTIMIZERS[name](eager_params, foreach)
    ours = OPTIMIZERS[name](our_params, foreach)
    compiled_step = torch.compile(ours.step, backend="neuron")
    for step in range(3):
        _set_grads(eager_params, step)
        _set_grads(our_params, step)
        eager.step()
        compiled_step()
    for index, (p_eager, p_ours) in enumerate(zip(eager_params, our_params)):
        torch.testing.assert_close(p_ours, p_eager, **TOL, msg=lambda m, i=index: f"parameter {i}: {m}")
        for key, value in eager.state[p_eager].items():
            torch.testing.assert_close(ours.state[p_ours][key], value, **TOL,
                                       msg=lambda m, i=index, k=key: f"parameter {i} state {k}: {m}")
    assert neuroncc.stats()["fallback_ops"] == 0


@pytest.mark.parametrize("foreach", [True, False], ids=["foreach", "single_tensor"])
def test_adamw_step_is_one_kernel_per_parameter_shape(foreach):
    params = _params()
    optimizer = torch.optim.AdamW(params, lr=0.01, foreach=foreach)
    compiled_step = torch.compile(optimizer.step, backend="neuron")
    _set_grads(params, 0)
    compiled_step()
    counts = neuroncc.stats()
    assert counts["inference_graphs"] == 1
    # 8 parameters in 4 shapes: [32, 32], [32], [10, 32], [10]
    assert counts["kernels"] == 4


def test_without_horizontal_fusion_each_parameter_is_a_kernel():
    params = _params()
    optimizer = torch.optim.AdamW(params, lr=0.01)
    pipeline = "canonicalize,static-shape,fuse{horizontal=false},layout{target=cpu},tile{target=cpu},plan-memory"
    compiled_step = torch.compile(optimizer.step, backend="neuron", options={"pipeline": pipeline})
    _set_grads(params, 0)
    compiled_step()
    assert neuroncc.stats()["kernels"] == len(SHAPES)
