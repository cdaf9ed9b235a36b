"""bfloat16 and float16 eager ops on the device: the kernels read and write the tensors' own memory (bf16
crosses as its bits, as torch.compile's cpu kernels take it), and every result has CPU eager's bits."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from neuroncc.device import dispatch
from neuroncc.device.kernels import CompiledKernel
from neuroncc.device.signature import describe
from neuroncc.ir import DType, round_to_bf16

LOW = (torch.bfloat16, torch.float16)


def _entry(op, args, kwargs=None):
    key, _, _ = describe(args, kwargs or {})
    return dispatch._handlers[op].entries[key]


@pytest.mark.parametrize("dtype", LOW)
def test_low_precision_kernels_read_and_write_the_tensors_memory(dtype):
    """A bf16 add is the one-tensor-in-one-out call, as float32's: no float32 copies of its inputs or its
    result (they made a 16-element bf16 add cost 7x a float32 one)."""
    x, y = torch.randn(16).to(dtype).to("neuron"), torch.randn(16).to(dtype).to("neuron")
    for _ in range(3):  # the entry is kept from the second call
        x.add(y)
    entry = _entry(torch.ops.aten.add.Tensor, (x, y))
    assert isinstance(entry, CompiledKernel)
    assert entry.binding.plain_inputs and entry.one_result
    params = {p.type.dtype for p in entry.program.function.params}
    assert params == ({DType.i16} if dtype is torch.bfloat16 else {DType.f16})
    for _ in range(3):
        x.add_(y, alpha=0.5)
    in_place = _entry(torch.ops.aten.add_.Tensor, (x, y), {"alpha": 0.5})
    assert getattr(in_place.call, "__func__", None) is not CompiledKernel.call  # the in-place closure


def _bits(tensor):
    return tensor.view(torch.int16) if tensor.dtype in LOW else tensor


CASES = {
    "add": (lambda x, y: x + y, [(4, 16), (4, 16)]),
    "mul by a float": (lambda x: x * 0.1, [(4, 16)]),
    "gelu": (F.gelu, [(4, 16)]),
    "where": (lambda x, y: torch.where(x > 0, x, y), [(4, 16), (4, 16)]),
    "clamp by floats": (lambda x: x.clamp(-0.1, 0.1), [(4, 16)]),
    "clamp_max": (lambda x: x.clamp_max(0.1), [(4, 16)]),
    "sum": (lambda x: x.sum(1), [(4, 16)]),
    "mean": (lambda x: x.mean(), [(64, 64)]),
    "amax": (lambda x: x.amax(0), [(4, 16)]),
    "var": (lambda x: x.var(1), [(4, 16)]),
    "sum to float32": (lambda x: x.sum(1, dtype=torch.float32), [(4, 16)]),
    "mm": (torch.mm, [(4, 16), (16, 8)]),
    "bmm": (torch.bmm, [(2, 4, 16), (2, 16, 8)]),
    "linear": (F.linear, [(4, 16), (8, 16), (8,)]),
    "linear weight gradient": (lambda g, x: g.t() @ x, [(32, 64), (32, 16)]),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (16,), w, b), [(4, 16), (16,), (16,)]),
    "group_norm": (lambda x, w, b: F.group_norm(x, 2, w, b), [(2, 4, 8), (4,), (4,)]),
    "softmax": (lambda x: x.softmax(-1), [(4, 16)]),
    "to float32": (lambda x: x.float(), [(4, 16)]),
    "to int32": (lambda x: (x * 10).to(torch.int32), [(4, 16)]),
    "to the other half type": (lambda x: x.to(torch.float16 if x.dtype == torch.bfloat16 else torch.bfloat16),
                               [(4, 16)]),
    "float32 to it": (lambda x: (x.float() * 1.1).to(x.dtype), [(4, 16)]),
    "in-place add_": (lambda x, y: x.add_(y), [(4, 16), (4, 16)]),
    "in-place mul_": (lambda x: x.mul_(0.3), [(4, 16)]),
    "in-place clamp_": (lambda x: x.clamp_(min=0.1), [(4, 16)]),
    "add_ into a strided view": (lambda x, y: (x[1:, ::2].add_(y[1:, ::2]), x)[1], [(4, 16), (4, 16)]),
    "copy_ into a slice": (lambda x, y: (x[:, 3:7].copy_(y[:, :4]), x)[1], [(4, 16), (4, 16)]),
    "fill_ a row": (lambda x: (x[1].fill_(0.1), x)[1], [(4, 16)]),
    "a view at an offset": (lambda x: x[1:, 2:].exp(), [(4, 16)]),
    "a strided view": (lambda x: x[:, ::3] * 2, [(4, 16)]),
    "a transpose": (lambda x: x.t() + 1, [(4, 16)]),
    "a transposed product": (lambda x, y: x.permute(1, 0) @ y, [(16, 4), (16, 8)]),
    "cat": (lambda x, y: torch.cat([x, y], 1), [(4, 16), (4, 8)]),
}


@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("name", CASES)
def test_low_precision_ops_have_eager_bits(name, dtype):
    op, shapes = CASES[name]
    torch.manual_seed(0)
    inputs = [torch.randn(s).to(dtype) for s in shapes]
    expected = op(*[x.clone() for x in inputs])
    got = op(*[x.clone().to("neuron") for x in inputs]).cpu()
    assert got.dtype == expected.dtype
    assert torch.equal(_bits(got), _bits(expected)), name


@pytest.mark.parametrize("dtype", LOW)
def test_a_low_precision_model_trains_as_on_cpu(dtype):
    """A bf16/f16 model's training step (Linear, GELU, cross entropy in float32) as on CPU (log_softmax's
    float32 bits differ from eager's in the last place, before and after session 28: a tolerance)."""
    def step(device):
        torch.manual_seed(1)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).to(dtype)
        model = model.to(device)
        x = torch.randn(8, 16).to(dtype).to(device)
        loss = F.cross_entropy(model(x).float(), torch.tensor([0, 1, 2, 3] * 2).to(device))
        loss.backward()
        return [loss] + [p.grad for p in model.parameters()]

    for got, expected in zip(step("neuron"), step("cpu")):
        assert got.dtype == expected.dtype
        torch.testing.assert_close(got.cpu(), expected)


def test_bf16_products_round_as_round_to_bf16_does():
    """An extern bf16 product is rounded in place by ATen's conversion; round_to_bf16's bits on ties,
    subnormals, infinities, overflow and (through its own path) NaN payloads."""
    from neuroncc.executors.cpu.extern import _round_in_place

    bits = np.array([0x3F808000, 0x3F818000, 0x3F80C000, 0x00018000, 0x80008001, 0x007FFFFF, 0x7F7FFFFF,
                     0xFF7FFFFF, 0x7F800000, 0xFF800000, 0x00000000, 0x80000000, 0x3DCCCCCD], dtype=np.uint32)
    values = np.concatenate([bits.view(np.float32), np.random.default_rng(0).standard_normal(4096,
                                                                                              dtype=np.float32)])
    for case in (values, np.concatenate([values, np.array([0x7FA12345, 0xFFC00001], np.uint32).view(np.float32)])):
        result = case.copy()
        _round_in_place(torch, result)
        assert np.array_equal(result.view(np.uint32), round_to_bf16(case).view(np.uint32))


def test_compiled_bf16_clamp_rounds_its_bounds_as_eager_does():
    """``clamp(min=0.1)`` on bf16: eager converts the bound to bf16 (0.10009765625); the kernel wrote the
    float32 0.1's high half (0.099609375) when the bound was not rounded first."""
    x = torch.randn(64).to(torch.bfloat16)
    compiled = torch.compile(lambda t: t.clamp(min=0.1, max=0.3), backend="neuron", dynamic=False)
    assert torch.equal(_bits(compiled(x)), _bits(x.clamp(min=0.1, max=0.3)))
