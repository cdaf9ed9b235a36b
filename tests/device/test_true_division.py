"""True division on the ``neuron`` device and through ``torch.compile(backend="neuron")`` gives eager's bits (session
45, ``codegen/llvm/division.py``): eager's CPU kernel divides (IEEE's quotient; a bf16/f16 result: the float32
quotient by the unrounded number, rounded once), where neuroncc multiplied by a hoisted reciprocal for a number, a 0-d
tensor or a column divisor (``x / 3.0``: a third of the quotients one ulp off)."""

from __future__ import annotations

import pytest
import torch

NUMBERS = (3.0, 7.0, 0.1, -1e-3, 1e30)


def _every_low_precision_value(dtype: torch.dtype) -> torch.Tensor:
    """All 65536 bf16/f16 bit patterns (NaNs included): the ties of rounding the float32 quotient are among them."""
    return torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(dtype)


def _assert_equal(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    nan = torch.isnan(want)
    assert torch.equal(torch.isnan(got), nan)
    assert torch.equal(got[~nan], want[~nan]), int((got[~nan] != want[~nan]).sum())


@pytest.mark.parametrize("size", [100_000, 37])
def test_a_tensor_divided_by_a_number_on_the_device_has_eagers_bits(size):
    x = torch.randn(size)
    x[:6] = torch.tensor([0.0, -0.0, float("inf"), float("nan"), 1e-45, 3e38])
    device = x.to("neuron")
    for c in NUMBERS:
        _assert_equal((device / c).cpu(), x / c)
        _assert_equal(torch.div(device, c, rounding_mode=None).cpu(), x / c)
        _assert_equal(torch.true_divide(device, c).cpu(), x / c)
        _assert_equal((device / torch.tensor(c)).cpu(), x / torch.tensor(c))  # a 0-d CPU tensor divisor
        _assert_equal((c / device).cpu(), c / x)


def test_in_place_division_on_the_device_has_eagers_bits():
    x_cpu = torch.randn(256, 64)
    x = x_cpu.to("neuron")
    for c in (3.0, 7.0, 0.1):
        for _ in range(3):  # the first call, then the entry's direct calls
            assert x.div_(c) is x
            x_cpu.div_(c)
            _assert_equal(x.cpu(), x_cpu)


def test_broadcast_divisors_on_the_device_have_eagers_bits():
    x, row, column = torch.randn(300, 200), torch.randn(200), torch.randn(300, 1)
    for divisor in (row, column, torch.randn(1, 1), torch.randn(300, 200)):
        _assert_equal((x.to("neuron") / divisor.to("neuron")).cpu(), x / divisor)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_division_by_a_number_has_eagers_bits(dtype):
    x = _every_low_precision_value(dtype)
    for c in NUMBERS:
        _assert_equal((x.to("neuron") / c).cpu(), x / c)
        _assert_equal((x.to("neuron") / torch.tensor(c)).cpu(), x / torch.tensor(c))
        _assert_equal((x.to("neuron") / torch.tensor(c, dtype=dtype)).cpu(), x / torch.tensor(c, dtype=dtype))
    y = torch.randn(65536).to(dtype)
    _assert_equal((x.to("neuron") / y.to("neuron")).cpu(), x / y)


def test_torch_compile_divides_as_eager():
    x = torch.randn(100_000)
    compiled = torch.compile(lambda t: t / 3.0, backend="neuron", dynamic=False)
    _assert_equal(compiled(x), x / 3.0)
    by_tensor = torch.compile(lambda t, c: t / c, backend="neuron", dynamic=False)
    for c in (torch.tensor(7.0), torch.randn(1000, 1), torch.randn(100)):
        _assert_equal(by_tensor(x.reshape(1000, 100), c), x.reshape(1000, 100) / c)
    low = _every_low_precision_value(torch.bfloat16)
    _assert_equal(torch.compile(lambda t: t / 0.1, backend="neuron", dynamic=False)(low), low / 0.1)
    mean = torch.compile(lambda t: (t - t.mean()) / 3.0, backend="neuron", dynamic=False)
    torch.testing.assert_close(mean(x), (x - x.mean()) / 3.0)  # (the mean's sum in its own order)


def test_foreach_division_by_a_number_has_eagers_bits():
    """The optimizers' ``_foreach_div_`` (one program for the list) divides as eager's ``div_`` does."""
    tensors = [torch.randn(300), torch.randn(64, 33)]
    on_device = [t.to("neuron") for t in tensors]
    for c in (3.0, 0.1):
        torch._foreach_div_(on_device, c)
        torch._foreach_div_(tensors, c)
        for got, want in zip(on_device, tensors):
            _assert_equal(got.cpu(), want)
