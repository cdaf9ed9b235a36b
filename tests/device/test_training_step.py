"""What runs beside the optimizer step of a training loop on the device, against PyTorch: GradScaler's unscale and
``_foreach_mul_`` by a tensor computed in the gradients' own memory (neuroncc/device/foreach_donated.py), and
``clip_grad_norm_`` as two programs (neuroncc/device/clip_grad.py); each bit for bit what PyTorch's own
functions give on the device, and CPU eager's values."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.utils.clip_grad as clip_module

import neuroncc
from neuroncc.device import dispatch
from neuroncc.device.diagnostics import DeviceFloat64Warning

SHAPES = [(16, 8), (8,), (3, 8), (37,), (5, 7, 3), (128, 96)]  # (128, 96): past the 16 KiB written through scratch
TOTAL = "torch.nn.utils.clip_grad._get_total_norm"
CLIP = "torch.nn.utils.clip_grad._clip_grads_with_norm_"


def _grads(dtype: torch.dtype, device: str, bad: float | None = None) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    grads = [(torch.randn(s, generator=generator) * 100).to(dtype) for s in SHAPES]
    if bad is not None:
        grads[2][1, 3] = bad
    return [g.to(device) for g in grads]


def _entries(name: str) -> list:
    return [e for h in dispatch.handlers() if str(h.op) == name for e in h.entries.values()]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("bad", [None, float("inf"), float("nan")], ids=["finite", "inf", "nan"])
def test_unscale_writes_the_gradients_in_their_memory_with_cpus_values(dtype, bad):
    """``_amp_foreach_non_finite_check_and_unscale_``: CPU's gradients and found_inf exactly, every gradient
    written where it is (the generic in-place entry wrote fresh memory and swapped it in: new data pointers)."""
    neuroncc.set_fallback_mode("error")
    expected = _grads(dtype, "cpu", bad)
    found_cpu, inv_cpu = torch.zeros(1), torch.full((1,), 2.0 ** -7)
    torch._amp_foreach_non_finite_check_and_unscale_(expected, found_cpu, inv_cpu)
    actual = _grads(dtype, "neuron", bad)
    addresses = [g.data_ptr() for g in actual]
    found, inv = torch.zeros(1, device="neuron"), inv_cpu.to("neuron")
    torch._amp_foreach_non_finite_check_and_unscale_(actual, found, inv)
    assert found.item() == found_cpu.item() == (0.0 if bad is None else 1.0)
    for a, e in zip(actual, expected, strict=True):
        torch.testing.assert_close(a.cpu(), e, rtol=0, atol=0, equal_nan=True)
    assert [g.data_ptr() for g in actual] == addresses
    assert neuroncc.get_executed_ops()["aten._amp_foreach_non_finite_check_and_unscale_.default"] == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("bad", [None, float("inf"), float("nan"), 3e38], ids=["finite", "inf", "nan", "large"])
@pytest.mark.parametrize("inv_scale", [2.0 ** -16, 1.0, 0.0, -0.5, 4.0, float("inf")])
def test_unscale_checks_the_values_it_writes_in_one_pass_where_that_is_exact(dtype, bad, inv_scale):
    """GradScaler's unscale is one program over the gradients (the check reads the unscaled rows it writes) for
    an inv_scale that is finite and at most 1 in magnitude, and two programs for any other (a finite gradient
    may overflow when scaled up: 3e38 * 4); CPU's gradients and found_inf exactly either way, every gradient
    written where it is, rows longer than the kernel keeps (40000 elements) included."""
    neuroncc.set_fallback_mode("error")
    shapes = [*SHAPES, (40000,), (3, 20000), ()]
    generator = torch.Generator().manual_seed(2)
    expected = [(torch.randn(s, generator=generator) * 100).to(dtype) for s in shapes]
    if bad is not None:
        expected[3][5] = bad
    actual = [g.to("neuron") for g in expected]
    found_cpu, inv_cpu = torch.zeros(()), torch.full((), inv_scale)
    torch._amp_foreach_non_finite_check_and_unscale_(expected, found_cpu, inv_cpu)
    addresses = [g.data_ptr() for g in actual]
    found = torch.zeros((), device="neuron")
    name = "aten._amp_foreach_non_finite_check_and_unscale_.default"
    for entry in _entries(name):  # an earlier case's programs forgotten: this call makes the ones it runs
        entry.one_pass = entry.kernels = None
    torch._amp_foreach_non_finite_check_and_unscale_(actual, found, inv_cpu.to("neuron"))
    assert found.item() == found_cpu.item()
    for a, e in zip(actual, expected, strict=True):
        torch.testing.assert_close(a.cpu(), e, rtol=0, atol=0, equal_nan=True)
    assert [g.data_ptr() for g in actual] == addresses
    one_pass = abs(inv_scale) <= 1.0
    entry, = [e for e in _entries(name) if e.checked is not None and e.checked[:len(shapes)] == tuple(addresses)]
    assert bool(entry.one_pass) is one_pass and (entry.kernels is None) is one_pass


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("bad", [None, float("nan")], ids=["finite", "nan"])
def test_unscale_of_a_gradient_with_no_rows_to_split_into_takes_the_two_programs(dtype, bad):
    """A gradient of a prime length above a kept row (16411 elements: its one-pass rows would be one element
    each) sends the call to the two programs; CPU's gradients and found_inf exactly, each written where it is."""
    neuroncc.set_fallback_mode("error")
    generator = torch.Generator().manual_seed(3)
    expected = [(torch.randn(s, generator=generator) * 100).to(dtype) for s in ((7, 5), (16411,), (3, 16411))]
    if bad is not None:
        expected[2][1, 7] = bad
    actual = [g.to("neuron") for g in expected]
    found_cpu, inv_cpu = torch.zeros(()), torch.full((), 2.0 ** -16)
    torch._amp_foreach_non_finite_check_and_unscale_(expected, found_cpu, inv_cpu)
    addresses = [g.data_ptr() for g in actual]
    found = torch.zeros((), device="neuron")
    name = "aten._amp_foreach_non_finite_check_and_unscale_.default"
    for entry in _entries(name):
        entry.one_pass = entry.kernels = None
    torch._amp_foreach_non_finite_check_and_unscale_(actual, found, inv_cpu.to("neuron"))
    assert found.item() == found_cpu.item() == (0.0 if bad is None else 1.0)
    for a, e in zip(actual, expected, strict=True):
        torch.testing.assert_close(a.cpu(), e, rtol=0, atol=0, equal_nan=True)
    assert [g.data_ptr() for g in actual] == addresses
    entry, = [e for e in _entries(name) if e.checked is not None and e.checked[:3] == tuple(addresses)]
    assert entry.one_pass is False and entry.kernels is not None


def test_foreach_mul_by_a_tensor_writes_in_place_and_overlapping_lists_keep_pytorchs_order():
    """``_foreach_mul_(grads, coef)`` (clip_grad_norm_'s scaling, called directly) keeps each tensor's memory; a
    list whose tensors overlap (views of one buffer) runs CPU's in-order kernel: the overlap multiplied twice."""
    neuroncc.set_fallback_mode("error")
    grads = _grads(torch.float32, "neuron")
    addresses = [g.data_ptr() for g in grads]
    expected = [g.cpu() * 0.3 for g in grads]
    torch._foreach_mul_(grads, torch.tensor(0.3, device="neuron"))
    assert [g.data_ptr() for g in grads] == addresses
    for a, e in zip(grads, expected, strict=True):
        assert torch.equal(a.cpu(), e)
    flat_cpu = torch.arange(1.0, 13.0)
    flat = flat_cpu.to("neuron")
    torch._foreach_mul_([flat[0:8], flat[4:12]], torch.tensor(2.0, device="neuron"))
    torch._foreach_mul_([flat_cpu[0:8], flat_cpu[4:12]], torch.tensor(2.0))
    assert torch.equal(flat.cpu(), flat_cpu)


def _clip_run(dtype: torch.dtype, device: str, max_norm: float, norm_type: float, routed: bool = True
              ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    params = []
    for s in SHAPES:
        p = torch.nn.Parameter(torch.randn(s, generator=generator).to(dtype).to(device))
        p.grad = torch.randn(s, generator=generator).to(dtype).to(device)
        params.append(p)
    if routed:
        total = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type)
    else:  # PyTorch's own functions
        total = clip_module._get_total_norm.__wrapped__([p.grad for p in params], norm_type)
        clip_module._clip_grads_with_norm_.__wrapped__(params, max_norm, total)
    return total, [p.grad for p in params]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf")], ids=["l2", "l1", "inf"])
def test_clip_grad_norm_is_two_programs_with_pytorchs_bits(dtype, norm_type):
    """clip_grad_norm_ runs as the routed total norm and scaling (no _foreach_norm, stack or _foreach_mul_ of
    its own), bit for bit PyTorch's functions on the device, and CPU eager's values to the reduction's rounding."""
    neuroncc.set_fallback_mode("error")
    _clip_run(dtype, "neuron", 1.0, norm_type)  # the routes are installed with the device's first foreach op
    neuroncc.reset_stats()
    total, grads = _clip_run(dtype, "neuron", 1.0, norm_type)
    executed = neuroncc.get_executed_ops()
    assert executed.get(TOTAL) == 1 and executed.get(CLIP) == 1, executed
    assert not [op for op in executed if "_foreach_norm" in op or "stack" in op or "_foreach_mul_" in op], executed
    expected_total, expected = _clip_run(dtype, "neuron", 1.0, norm_type, routed=False)
    assert torch.equal(total.cpu(), expected_total.cpu())
    for a, e in zip(grads, expected, strict=True):
        assert torch.equal(a.cpu(), e.cpu())
    cpu_total, cpu_grads = _clip_run(dtype, "cpu", 1.0, norm_type)
    # float32 sums of ~300 terms in another order; bf16: the norm rounded to bf16 (8 bits), the grads an ulp
    tolerance = {"rtol": 1e-5, "atol": 0} if dtype is torch.float32 else {"rtol": 2.0 ** -7, "atol": 0}
    torch.testing.assert_close(total.cpu(), cpu_total, **tolerance)
    for a, e in zip(grads, cpu_grads, strict=True):
        torch.testing.assert_close(a.cpu(), e, rtol=tolerance["rtol"], atol=1e-6)


def test_clip_grad_norm_takes_a_new_max_norm_and_new_gradients_without_compiling():
    """A new max_norm is a lifted float and new gradients (backward's fresh memory each step) new addresses:
    neither compiles anything, and the result follows the new max_norm."""
    neuroncc.set_fallback_mode("error")
    for _ in range(2):  # the routes are installed with the device's first foreach op, then compiled
        _clip_run(torch.float32, "neuron", 1.0, 2.0)
    assert neuroncc.get_executed_ops().get(TOTAL)
    compiled = neuroncc.stats()["eager_kernels_compiled"] + neuroncc.stats()["eager_kernels_loaded"]
    total, grads = _clip_run(torch.float32, "neuron", 0.5, 2.0)
    assert neuroncc.stats()["eager_kernels_compiled"] + neuroncc.stats()["eager_kernels_loaded"] == compiled
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.cpu()) for g in grads]))
    assert abs(norm.item() - 0.5) < 1e-5 and total.item() > 1.0


def test_clip_grad_norm_keeps_pytorchs_errors_and_other_forms():
    """error_if_nonfinite raises PyTorch's error; foreach=False and gradients of two dtypes run PyTorch's
    functions (their results, not the routes)."""
    params = [torch.nn.Parameter(torch.ones(4, device="neuron")) for _ in range(2)]
    params[0].grad = torch.tensor([1.0, float("inf"), 0.0, 0.0], device="neuron")
    params[1].grad = torch.ones(4, device="neuron")
    with pytest.raises(RuntimeError, match="is non-finite, so it cannot be clipped"):
        torch.nn.utils.clip_grad_norm_(params, 1.0, error_if_nonfinite=True)
    neuroncc.reset_stats()
    params[0].grad = torch.full((4,), 2.0, device="neuron")
    total = torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=False)
    assert TOTAL not in neuroncc.get_executed_ops()
    assert total.item() == pytest.approx(20 ** 0.5)
    params[1] = torch.nn.Parameter(torch.ones(4, device="neuron", dtype=torch.bfloat16))
    params[1].grad = torch.ones(4, device="neuron", dtype=torch.bfloat16)
    params[0].grad = torch.full((4,), 2.0, device="neuron")
    total = torch.nn.utils.clip_grad_norm_(params, 100.0)
    assert TOTAL not in neuroncc.get_executed_ops()
    assert total.item() == pytest.approx(20 ** 0.5, rel=1e-3)


def test_a_training_step_with_gradscaler_and_clipping_matches_cpu():
    """The loop users write (autocast-free GradScaler, clip_grad_norm_, AdamW, zero_grad), 3 steps: the device's
    parameters are CPU's to float32 rounding, and no step after the first compiles anything."""
    def run(device: str) -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        scaler = torch.amp.GradScaler(device)
        x, y = torch.randn(5, 8).to(device), torch.randn(5, 4).to(device)
        compiled = []
        for _ in range(3):
            loss = torch.nn.functional.mse_loss(model(x), y)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
            compiled.append(neuroncc.stats()["eager_kernels_compiled"] + neuroncc.stats()["eager_kernels_loaded"])
        if device == "neuron":
            assert compiled[1] == compiled[2], compiled
        return [p.detach().cpu() for p in model.parameters()]

    with warnings.catch_warnings():  # GradScaler's float64 reciprocal of its scale warns on the device
        warnings.simplefilter("ignore", DeviceFloat64Warning)
        actual = run("neuron")
    executed = neuroncc.get_executed_ops()
    assert executed.get(TOTAL) and executed.get(CLIP), executed
    for a, e in zip(actual, run("cpu"), strict=True):
        torch.testing.assert_close(a, e, rtol=0, atol=1e-6)

