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


def _scheduled_steps_compile_once(optimizer: torch.optim.Optimizer, params: list[torch.nn.Parameter]) -> None:
    """Four steps with a new float learning rate each (StepLR): kernels are made by the first step only."""
    schedule = torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5)
    for step in range(4):
        for p in params:
            p.grad = torch.randn(p.shape, device="neuron")
        optimizer.step()
        schedule.step()
        if step == 0:
            compiled = neuroncc.stats()["eager_kernels_compiled"] + neuroncc.stats()["eager_kernels_loaded"]
    assert neuroncc.stats()["eager_kernels_compiled"] + neuroncc.stats()["eager_kernels_loaded"] == compiled


def test_a_new_learning_rate_is_an_argument_not_a_kernel():
    params = [torch.nn.Parameter(torch.randn(s, device="neuron")) for s in SHAPES]
    optimizer = torch.optim.AdamW(params, lr=0.1, fused=True)
    _scheduled_steps_compile_once(optimizer, params)


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


# ---- torch.optim's default (foreach) step as one program (neuroncc/device/foreach_optimizers.py) ---------------

ROUTED = {torch.optim.Adam: "torch.optim._multi_tensor_adam", torch.optim.AdamW: "torch.optim._multi_tensor_adam",
          torch.optim.SGD: "torch.optim._multi_tensor_sgd"}


def _unrouted(monkeypatch) -> None:
    """PyTorch's own foreach functions again (each _foreach_* op its own device program)."""
    import torch.optim.adam as adam_module
    import torch.optim.sgd as sgd_module

    for module, name in ((adam_module, "_multi_tensor_adam"), (sgd_module, "_multi_tensor_sgd")):
        monkeypatch.setattr(module, name, getattr(getattr(module, name), "__wrapped__", getattr(module, name)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("case", CASES)
def test_default_steps_are_one_program_with_the_foreach_bits(case, dtype, monkeypatch):
    """The default form (PyTorch picks foreach for the device) runs each step as one program: no _foreach_ op
    of the update runs, the routed step counts, and the parameters are bitwise those of PyTorch's foreach
    function on the device (the same ops in the same order) and CPU eager's default (single tensor) to float32
    rounding (CPU's vector loops fuse multiply-adds) or one bf16 ulp."""
    neuroncc.set_fallback_mode("error")
    optimizer, options = CASES[case]
    actual = _run("neuron", optimizer, options, dtype, steps=4)
    executed = neuroncc.get_executed_ops()
    assert executed.get(ROUTED[optimizer], 0) >= 3, executed  # SGD's first step with momentum makes its buffers
    updates = ("_foreach_lerp_", "_foreach_addcdiv_", "_foreach_addcmul_", "_foreach_sqrt")
    if optimizer is not torch.optim.SGD:
        assert not [op for op in executed if any(u in op for u in updates)], executed
    _close(actual, _run("cpu", optimizer, options, dtype, steps=4), dtype)
    _unrouted(monkeypatch)
    neuroncc.reset_stats()
    expected = _run("neuron", optimizer, options, dtype, steps=4)
    assert ROUTED[optimizer] not in neuroncc.get_executed_ops()
    for a, e in zip(actual, expected, strict=True):
        assert torch.equal(a, e)


def test_default_step_keeps_pytorchs_state_and_takes_a_new_learning_rate_as_an_argument():
    """The routed step increments PyTorch's CPU ``step`` tensors as PyTorch does, and a scheduler's new float
    learning rate each step compiles nothing new."""
    params = [torch.nn.Parameter(torch.randn(s, device="neuron")) for s in SHAPES]
    optimizer = torch.optim.AdamW(params, lr=0.1)
    _scheduled_steps_compile_once(optimizer, params)
    assert neuroncc.get_executed_ops()["torch.optim._multi_tensor_adam"] == 4
    state = optimizer.state[params[0]]
    assert state["step"].device.type == "cpu" and state["step"].item() == 4.0
    versions = [p._version for p in params]
    optimizer.step()  # written in place as PyTorch's ops write: autograd's saved-tensor check sees it
    assert all(p._version > v for p, v in zip(params, versions))


def test_default_step_over_overlapping_views_runs_pytorchs_function(monkeypatch):
    """Parameters that overlap one another (views of one buffer): the in-place program would read what it wrote,
    so PyTorch's foreach function runs the step (its device result, bit for bit)."""
    def run() -> torch.Tensor:
        generator = torch.Generator().manual_seed(0)
        flat = torch.randn(96, generator=generator).to("neuron")
        params = [torch.nn.Parameter(flat[0:40]), torch.nn.Parameter(flat[30:70])]
        for p in params:
            p.grad = torch.randn(40, generator=generator).to("neuron")
        torch.optim.SGD(params, lr=0.1).step()
        return flat.cpu()

    actual = run()
    assert "torch.optim._multi_tensor_sgd" not in neuroncc.get_executed_ops()
    _unrouted(monkeypatch)
    assert torch.equal(actual, run())


def test_large_device_blocks_start_spread_over_the_page():
    """Large blocks start a multiple of the aliasing window past a page (never 4K-aliased with one another), not
    all at the same page offset: an optimizer step streaming many of them at once ran 1.2-2.0x slower when they
    all shared their L1 sets."""
    from neuroncc.hardware.host import ALIAS_PERIOD_BYTES, aliased_distances

    tensors = [torch.empty(300_000 + 1000 * k, device="neuron") for k in range(8)]
    offsets = [t.data_ptr() % ALIAS_PERIOD_BYTES for t in tensors]
    assert all(offset % aliased_distances().stop == 0 for offset in offsets), offsets
    assert len(set(offsets)) >= 4, offsets


def test_fused_step_compiles_one_loop_per_tensor(monkeypatch):
    """The step's program keeps each tensor's loop apart (``fuse{horizontal=false}``), as CPU's kernel runs: merged
    same-shape loops stream 4-5 arrays per tensor at once."""
    import neuroncc.device.kernel_compile as kernel_compile

    pipelines = []
    compile_graph = kernel_compile.compile_graph

    def recording(fn, **kwargs):
        pipelines.append(kwargs["options"].get("pipeline", ""))
        return compile_graph(fn, **kwargs)

    monkeypatch.setattr(kernel_compile, "compile_graph", recording)
    params = [torch.nn.Parameter(torch.randn(s, device="neuron")) for s in [(13, 5), (13, 5), (29,)]]
    for p in params:
        p.grad = torch.randn(p.shape, device="neuron")
    torch.optim.Adam(params, lr=0.1, fused=True).step()
    assert any("fuse{horizontal=false}" in p for p in pipelines), pipelines


def test_default_step_over_parameters_at_different_steps_has_the_foreach_bits(monkeypatch):
    """Parameters whose ``step`` counts differ (one got no gradient at first) get each its own scalars: the
    routed step passes a pair per tensor then, one pair for all when the counts agree; both bitwise PyTorch's
    foreach function on the device."""
    def run() -> list[torch.Tensor]:
        generator = torch.Generator().manual_seed(0)
        params = [torch.nn.Parameter(torch.randn(s, generator=generator).to("neuron")) for s in SHAPES]
        optimizer = torch.optim.AdamW(params, lr=0.1, weight_decay=0.1)
        for step in range(4):
            for k, p in enumerate(params):
                p.grad = None if step == 0 and k == 2 else torch.randn(p.shape, generator=generator).to("neuron")
            optimizer.step()
        assert [optimizer.state[p]["step"].item() for p in params] == [4.0, 4.0, 3.0, 4.0]
        return [p.detach().cpu() for p in params]

    actual = run()
    assert neuroncc.get_executed_ops()["torch.optim._multi_tensor_adam"] == 4
    _unrouted(monkeypatch)
    for a, e in zip(actual, run(), strict=True):
        assert torch.equal(a, e)


def test_default_step_over_a_transposed_gradient_runs_pytorchs_function(monkeypatch):
    """A call the program does not compute (here a non-contiguous gradient) runs PyTorch's foreach function: its
    device bits, and no routed step counted."""
    def run() -> list[torch.Tensor]:
        generator = torch.Generator().manual_seed(0)
        params = [torch.nn.Parameter(torch.randn(s, generator=generator).to("neuron")) for s in [(8, 8), (5,)]]
        optimizer = torch.optim.Adam(params, lr=0.1)
        for _ in range(2):
            for p in params:
                p.grad = torch.randn(p.shape, generator=generator).to("neuron")
            params[0].grad = params[0].grad.t()
            optimizer.step()
        return [p.detach().cpu() for p in params]

    actual = run()
    assert "torch.optim._multi_tensor_adam" not in neuroncc.get_executed_ops()
    _unrouted(monkeypatch)
    for a, e in zip(actual, run(), strict=True):
        assert torch.equal(a, e)


def test_an_unrouted_step_and_lerp_into_or_from_transposed_tensors_run_on_the_device():
    """``_foreach_lerp_`` with a transposed gradient (what PyTorch's foreach Adam calls when a step is not routed)
    and ``lerp`` into a transposed ``out=`` compile (PyTorch's decomposition of the out= form writes
    ``prims.copy_strided``): no CPU fallback, CPU eager's values to float32 rounding (CPU's vector lerp is one
    fused multiply-add), and the device's own contiguous lerp's bits."""
    neuroncc.set_fallback_mode("error")
    generator = torch.Generator().manual_seed(3)
    avg, grad = torch.randn(16, 8, generator=generator), torch.randn(8, 16, generator=generator).t()
    bias, bias_grad = torch.randn(37, generator=generator), torch.randn(37, generator=generator)
    for weight in (0.1, 0.9):  # lerp's two forms
        cpu = [avg.clone(), bias.clone()]
        torch._foreach_lerp_(cpu, [grad, bias_grad], weight)
        device = [avg.to("neuron"), bias.to("neuron")]
        torch._foreach_lerp_(device, [grad.to("neuron"), bias_grad.to("neuron")], weight)
        contiguous = [avg.to("neuron"), bias.to("neuron")]
        torch._foreach_lerp_(contiguous, [grad.contiguous().to("neuron"), bias_grad.to("neuron")], weight)
        for d, c, e in zip(device, contiguous, cpu, strict=True):
            torch.testing.assert_close(d.cpu(), e, **F32)
            assert torch.equal(d.cpu(), c.cpu())
        out, out_cpu = torch.empty(8, 16, device="neuron").t(), torch.empty(8, 16).t()
        torch.lerp(avg.to("neuron"), grad.to("neuron"), weight, out=out)
        torch.lerp(avg, grad, weight, out=out_cpu)
        torch.testing.assert_close(out.cpu(), out_cpu, **F32)
    neuroncc.set_fallback_mode("cpu")

    def run(device: str) -> list[torch.Tensor]:
        generator = torch.Generator().manual_seed(0)
        params = [torch.nn.Parameter(torch.randn(s, generator=generator).to(device)) for s in [(8, 8), (5,)]]
        optimizer = torch.optim.Adam(params, lr=0.1)
        for _ in range(2):
            for p in params:
                p.grad = torch.randn(p.shape, generator=generator).to(device)
            params[0].grad = params[0].grad.t()
            optimizer.step()
        return [p.detach().cpu() for p in params]

    for a, e in zip(run("neuron"), run("cpu"), strict=True):
        torch.testing.assert_close(a, e, **F32)
    assert neuroncc.get_fallback_ops() == {}
