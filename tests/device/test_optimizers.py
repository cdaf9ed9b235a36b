"""torch.optim on the device in every form a user can ask for (default, foreach, single tensor, fused), against the
same optimizer on CPU eager: the fused ops (``_fused_adam_``, ``_fused_adamw_``, ``_fused_sgd_``) are one device
program per parameter-list signature (neuroncc/device/fused_optimizers.py), never a CPU fallback."""

from __future__ import annotations

import pytest
import torch

import neuroncc

SHAPES = [(16, 8), (8,), (3, 8), (37,)]  # 37: a tail past the 8-lane vector loops

#: the fused float32 kernels (CPU's and ours) round differently only where CPU's vector loop fuses a
#: multiply-add: an ulp per step at these magnitudes (parameters ~1, 3 steps)
F32 = {"rtol": 0, "atol": 5e-7}
#: bf16: one bf16 ulp at the parameters' magnitude (|p| < 4: 2**-6)
BF16 = {"rtol": 0, "atol": 2.0 ** -6}

CASES = {
    "adam": (torch.optim.Adam, {"lr": 0.1}),
    "adam_amsgrad_decay_maximize": (torch.optim.Adam, {"lr": 0.1, "amsgrad": True, "weight_decay": 0.1,
                                                       "maximize": True}),
    "adamw": (torch.optim.AdamW, {"lr": 0.1}),
    "adamw_amsgrad_large_lerp": (torch.optim.AdamW, {"lr": 0.1, "amsgrad": True, "betas": (0.3, 0.99)}),
    "sgd": (torch.optim.SGD, {"lr": 0.1}),
    "sgd_momentum_dampening": (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "dampening": 0.2}),
    "sgd_nesterov_decay_maximize": (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "nesterov": True,
                                                      "weight_decay": 0.1, "maximize": True}),
}


def _run(device: str, optimizer: type, options: dict, dtype: torch.dtype = torch.float32, steps: int = 3,
         scheduler: bool = False) -> list[torch.Tensor]:
    """``steps`` steps over fixed-seed parameters and gradients; the parameters' values after them."""
    generator = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s, generator=generator).to(dtype).to(device)) for s in SHAPES]
    options = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in options.items()}
    made = optimizer(params, **options)
    schedule = torch.optim.lr_scheduler.StepLR(made, 1, gamma=0.5) if scheduler else None
    for _ in range(steps):
        for p in params:
            p.grad = (torch.randn(p.shape, generator=generator) * 0.1).to(dtype).to(device)
        made.step()
        if schedule is not None:
            schedule.step()
    return [p.detach().cpu() for p in params]


def _close(actual: list[torch.Tensor], expected: list[torch.Tensor], dtype: torch.dtype) -> None:
    for a, e in zip(actual, expected, strict=True):
        torch.testing.assert_close(a.float(), e.float(), **(F32 if dtype == torch.float32 else BF16))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("case", CASES)
def test_fused_steps_run_on_the_device_as_on_cpu(case, dtype):
    neuroncc.set_fallback_mode("error")  # a CPU fallback of the fused op raises
    optimizer, options = CASES[case]
    actual = _run("neuron", optimizer, {**options, "fused": True}, dtype)
    # CPU's fused bf16 SGD kernel leaves the parameters of its vector loop unchanged (torch 2.13): its foreach
    # step is the reference there
    cpu_form = {"foreach": True} if optimizer is torch.optim.SGD and dtype == torch.bfloat16 else {"fused": True}
    _close(actual, _run("cpu", optimizer, {**options, **cpu_form}, dtype), dtype)
    assert any("_fused_" in op for op in neuroncc.get_executed_ops())


@pytest.mark.parametrize("form", [{}, {"foreach": True}, {"foreach": False}], ids=["default", "foreach", "single"])
@pytest.mark.parametrize("case", ["adam_amsgrad_decay_maximize", "adamw", "sgd_nesterov_decay_maximize"])
def test_foreach_and_single_tensor_steps_run_wholly_on_the_device(case, form):
    neuroncc.set_fallback_mode("error")
    optimizer, options = CASES[case]
    _close(_run("neuron", optimizer, {**options, **form}), _run("cpu", optimizer, {**options, **form}), torch.float32)


@pytest.mark.parametrize("optimizer", [torch.optim.AdamW, torch.optim.SGD])
def test_fused_tensor_lr_with_a_scheduler(optimizer):
    """A tensor learning rate (read by the step on the host) that a scheduler changes in place."""
    neuroncc.set_fallback_mode("error")
    options = {"lr": torch.tensor(0.1), "fused": True}
    actual = _run("neuron", optimizer, options, steps=4, scheduler=True)
    _close(actual, _run("cpu", optimizer, options, steps=4, scheduler=True), torch.float32)


def test_a_new_learning_rate_is_an_argument_not_a_kernel():
    params = [torch.nn.Parameter(torch.randn(s, device="neuron")) for s in SHAPES]
    optimizer = torch.optim.AdamW(params, lr=0.1, fused=True)
    schedule = torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5)
    for step in range(4):
        for p in params:
            p.grad = torch.randn(p.shape, device="neuron")
        optimizer.step()
        schedule.step()
        if step == 0:
            compiled = neuroncc.stats()["eager_kernels_compiled"] + neuroncc.stats()["eager_kernels_loaded"]
    assert neuroncc.stats()["eager_kernels_compiled"] + neuroncc.stats()["eager_kernels_loaded"] == compiled


@pytest.mark.parametrize("op", ["_fused_adamw_", "_fused_sgd_"])
@pytest.mark.parametrize("found_inf", [0.0, 1.0])
def test_fused_ops_take_gradscaler_scale_and_found_inf(op, found_inf):
    """GradScaler's unscale in the step: gradients divided by ``grad_scale`` (and written back); ``found_inf``
    set skips the whole update, as CPU's kernel does."""
    neuroncc.set_fallback_mode("error")
    generator = torch.Generator().manual_seed(0)
    lists = [[torch.randn(s, generator=generator) for s in SHAPES] for _ in range(4)]
    steps = [torch.tensor(3.0) for _ in SHAPES]

    def call(device: str) -> list[list[torch.Tensor]]:
        tensors = [[t.clone().to(device) for t in group] for group in lists]
        tensors[3] = [t.abs() for t in tensors[3]]  # exp_avg_sq >= 0
        scale, inf = torch.tensor(64.0, device=device), torch.tensor(found_inf, device=device)
        if op == "_fused_adamw_":
            torch._fused_adamw_(*tensors, [], [s.to(device) for s in steps], lr=0.01, beta1=0.9, beta2=0.999,
                                weight_decay=0.01, eps=1e-8, amsgrad=False, maximize=False, grad_scale=scale,
                                found_inf=inf)
        else:
            torch._fused_sgd_(*tensors[:3], weight_decay=0.0, momentum=0.9, lr=0.01, dampening=0.0, nesterov=False,
                              maximize=False, is_first_step=False, grad_scale=scale, found_inf=inf)
        return [[t.cpu() for t in group] for group in tensors]

    for actual, expected in zip(call("neuron"), call("cpu"), strict=True):
        _close(actual, expected, torch.float32)


def test_gradscaler_training_with_fused_adamw():
    """``GradScaler("neuron")`` with ``AdamW(fused=True)``: the scaler hands the step its scale (no separate
    unscale kernel), as on CPU."""
    neuroncc.set_fallback_mode("error")

    def train(device: str) -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)).to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.01, fused=True)
        scaler = torch.amp.GradScaler(device, init_scale=256.0)
        generator = torch.Generator().manual_seed(1)
        for _ in range(3):
            x = torch.randn(4, 8, generator=generator).to(device)
            loss = model(x).square().mean()
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        return [p.detach().cpu() for p in model.parameters()]

    for actual, expected in zip(train("neuron"), train("cpu"), strict=True):
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("overlap", [False, True], ids=["disjoint_views", "overlapping_views"])
def test_fused_step_over_views_of_one_buffer(overlap):
    """Parameters viewing one flat buffer (a "flat parameters" layout): the kernel writes each in place; views
    that overlap one another go to CPU's kernel (its in-order result)."""
    def call(device: str) -> torch.Tensor:
        generator = torch.Generator().manual_seed(0)
        flat = [torch.randn(96, generator=generator).to(device) for _ in range(4)]
        flat[3] = flat[3].abs()
        spans = [(0, 40), (30, 70)] if overlap else [(0, 40), (40, 96)]
        lists = [[t[a:b] for a, b in spans] for t in flat]
        steps = [torch.tensor(2.0, device=device) for _ in spans]
        torch._fused_adamw_(*lists, [], steps, lr=0.01, beta1=0.9, beta2=0.999, weight_decay=0.01, eps=1e-8,
                            amsgrad=False, maximize=False)
        return torch.cat([t.cpu() for t in flat])

    _close([call("neuron")], [call("cpu")], torch.float32)
