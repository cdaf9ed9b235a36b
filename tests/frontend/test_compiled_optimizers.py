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


def _steps_side_by_side(steps: int, eager_params, eager_step, our_params, our_step, *after_each) -> None:
    """``steps`` optimizer steps on both sides with the same gradients (then each ``after_each`` callable)."""
    for step in range(steps):
        _set_grads(eager_params, step)
        _set_grads(our_params, step)
        eager_step()
        our_step()
        for after in after_each:
            after()


@pytest.mark.parametrize("foreach", [True, False], ids=["foreach", "single_tensor"])
@pytest.mark.parametrize("name", OPTIMIZERS)
def test_compiled_step_matches_eager_after_three_steps(name, foreach):
    eager_params, our_params = _params(), _params()
    eager = OPTIMIZERS[name](eager_params, foreach)
    ours = OPTIMIZERS[name](our_params, foreach)
    compiled_step = torch.compile(ours.step, backend="neuron")
    _steps_side_by_side(3, eager_params, eager.step, our_params, compiled_step)
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


SMALL_CLASSIFIER = {"width": 32, "heads": 2, "length": 8, "batch": 8}


def _classifier_training(make_optimizer, compile_with: str | None):
    """(step, model, optimizer) of a small transformer classifier (neuroncc/examples/classifier.py): each step
    zeroes the gradients, runs forward and backward and the optimizer step; with ``compile_with`` the model
    and ``optimizer.step`` are each compiled by that backend, as PyTorch's "Compiling the optimizer" does."""
    from neuroncc.examples.classifier import ClassifierConfig, build_example, make_batch

    config = ClassifierConfig(**SMALL_CLASSIFIER)
    tokens, labels = make_batch(config, torch.Generator().manual_seed(1))
    model = build_example(0, config)
    optimizer = make_optimizer(model.parameters())
    run, update = model, optimizer.step
    if compile_with is not None:
        run = torch.compile(model, backend=compile_with, dynamic=False)
        update = torch.compile(optimizer.step, backend=compile_with, dynamic=False)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        run(tokens, labels).backward()
        update()
    return step, model, optimizer


@pytest.mark.parametrize("make, settled", [
    (lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1), 0),
    (lambda ps: torch.optim.Adam(ps, lr=1e-2), 0),
    # SGD's first step makes the momentum buffers (a copy of the gradients), later ones update them: two step
    # graphs, as with Inductor
    (lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9), 1),
], ids=["adamw", "adam", "sgd"])
def test_a_classifier_trained_with_its_step_compiled_matches_eager_and_compiles_once(make, settled,
                                                                                     compiled_graphs):
    from torch._dynamo.utils import counters

    eager_step, eager_model, eager_optimizer = _classifier_training(make, None)
    our_step, our_model, our_optimizer = _classifier_training(make, "neuron")
    for step in range(settled + 3):
        eager_step()
        our_step()
        if step == settled:  # every graph compiled by now: the lr and the step counts are no guards
            graphs, frames = neuroncc.stats()["graphs_compiled"], dict(counters["stats"])
    assert neuroncc.stats()["graphs_compiled"] == graphs == 3 + settled  # forward, backward, the step(s)
    assert dict(counters["stats"]).get("unique_graphs") == frames.get("unique_graphs")
    for index, (p_eager, p_ours) in enumerate(zip(eager_model.parameters(), our_model.parameters())):
        torch.testing.assert_close(p_ours, p_eager, rtol=2e-5, atol=2e-6, msg=lambda m, i=index: f"parameter {i}: {m}")
        for key, value in eager_optimizer.state[p_eager].items():
            torch.testing.assert_close(our_optimizer.state[p_ours][key], value, rtol=2e-5, atol=2e-6,
                                       msg=lambda m, i=index, k=key: f"parameter {i} state {k}: {m}")
    assert neuroncc.stats()["fallback_ops"] == 0
    step_graph = compiled_graphs["inference"]._direct
    assert step_graph is not None  # the step ran on data pointers, not through numpy
    if isinstance(eager_optimizer, torch.optim.Adam):
        # the step counts: computed apart (their kernels read the old count after writing the new) and moved
        # into the optimizer's tensors by the call, not copied by torch
        assert len(step_graph.moved) == len(list(our_model.parameters()))


def test_a_scheduled_tensor_learning_rate_is_an_input_not_a_guard():
    """PyTorch's recipe for an LR scheduler with a compiled step (a float lr is a constant of the graph: each
    change would recompile): the lr as a tensor is read by the graph, which compiles once and follows it."""
    def setup():
        params = _params()
        optimizer = torch.optim.AdamW(params, lr=torch.tensor(0.01), weight_decay=0.1)
        return params, optimizer, torch.optim.lr_scheduler.LinearLR(optimizer, 1.0, 0.1, total_iters=4)

    eager_params, eager, eager_schedule = setup()
    our_params, ours, our_schedule = setup()
    compiled_step = torch.compile(ours.step, backend="neuron")
    _steps_side_by_side(4, eager_params, eager.step, our_params, compiled_step, eager_schedule.step,
                        our_schedule.step)
    assert neuroncc.stats()["graphs_compiled"] == 1
    for p_eager, p_ours in zip(eager_params, our_params):
        torch.testing.assert_close(p_ours, p_eager, **TOL)
