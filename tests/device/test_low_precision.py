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


def _update_and_compute(x, w, buffer, row):
    buffer.mul_(0.5).add_(x[0, :4].float().sum())  # a bf16 input updated in place (its whole storage)
    row.add_(1)  # a bf16 view of a larger tensor, updated in place
    y = F.linear(x, w).relu()
    return y.softmax(-1), y.t(), (x[::2] * 3).sum(0), y.float().mean()


def test_compiled_graphs_take_bf16_tensors_as_their_bits(monkeypatch):
    """torch.compile on neuron tensors passes a bf16 tensor's memory as the executable's i16 parameter and
    writes bf16 results and input updates as bits (no float32 copy of any bf16 input, output or update, as on
    CPU tensors); the bits of every result and update are those of the same graph compiled on CPU tensors."""
    from neuroncc.device import compiled as device_compiled

    bindings = []
    make = device_compiled._binding
    monkeypatch.setattr(device_compiled, "_binding",
                        lambda compiled, args: bindings.append((compiled, make(compiled, args))) or bindings[-1][1])

    def inputs(device):
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(16, 40, generator=generator)[:, ::2].t().to(torch.bfloat16)  # a transposed view
        w = torch.randn(12, 16, generator=generator).to(torch.bfloat16)
        buffer = torch.randn(3, 5, generator=generator).to(torch.bfloat16)
        big = torch.randn(4, 6, generator=generator).to(torch.bfloat16)
        x = x.to(device).t().contiguous().t()  # a transposed layout on the device too
        return x, w.to(device), buffer.to(device), big.to(device)

    torch._dynamo.reset()
    step = torch.compile(_update_and_compute, backend="neuron", dynamic=False)
    (x, w, buffer, big), (cx, cw, cbuffer, cbig) = inputs("neuron"), inputs("cpu")
    for _ in range(2):  # the same graph called again: inputs read in place, results new
        got = step(x, w, buffer, big[1])
        want = step(cx, cw, cbuffer, cbig[1])
        for g, c in zip(got, want, strict=True):
            assert g.device.type == "neuron" and g.dtype == c.dtype and g.stride() == c.stride()
            assert torch.equal(_bits(g.cpu()), _bits(c))
        assert torch.equal(_bits(buffer.cpu()), _bits(cbuffer)) and torch.equal(_bits(big.cpu()), _bits(cbig))
    assert len(bindings) == 1
    compiled, binding = bindings[0]
    assert DType.bf16 not in {p.type.dtype for p in compiled.executable.function.params}
    assert DType.bf16 not in {v.type.dtype for v in compiled.executable.function.outputs}
    assert binding.plain_inputs  # every input read where it is, no float32 copy
    # every result and update in the executable's layout written by it into the tensor it becomes or updates
    # (y.t() is computed row-major: a layout copy, as in float32)
    direct = [how in ("new", "write") for how, spec, layout in binding.outputs if spec[2] == layout[1]]
    assert len(direct) == 5 and all(direct), binding.outputs


@pytest.mark.parametrize("autocast", [False, True], ids=["bf16 model", "autocast"])
def test_a_compiled_bf16_training_step_has_the_bits_of_the_float32_copies_one(autocast, monkeypatch):
    """A bf16 model with BatchNorm (its running statistics: bf16 buffers the forward graph updates) or a float32
    model under bf16 autocast (bf16 activations the forward graph saves for the backward one), compiled and
    trained on the device with bf16 crossing as bits: losses, gradients, parameters and buffers have the bits
    of the same steps with bf16 crossing as float32 copies (the device's compiled graphs before session 28's
    cbf16), and the forward's loss and buffers those of the CPU-compiled step. (The first layer's gradients
    differ from the CPU-compiled step's by an ulp, with float32 copies as with bits.)"""
    from neuroncc.frontend import aten_compiler
    from neuroncc.frontend.importer import import_graph

    def model_on(device):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(24, 32), torch.nn.BatchNorm1d(32), torch.nn.GELU(),
                                    torch.nn.Linear(32, 8))
        return model.to(device, dtype=torch.float32 if autocast else torch.bfloat16)

    def train(device, steps):
        torch._dynamo.reset()
        model = model_on(device)
        step = torch.compile(lambda x: model(x).float().square().mean(), backend="neuron", dynamic=False)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        generator = torch.Generator().manual_seed(1)
        losses = []
        for _ in range(steps):
            x = torch.randn(16, 24, generator=generator).to(device, dtype=model[0].weight.dtype)
            with torch.autocast(device, dtype=torch.bfloat16, enabled=autocast):
                loss = step(x)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.detach().cpu())
        return (losses, [p.grad.cpu() for p in model.parameters()], [t.cpu() for t in model.state_dict().values()],
                [t.cpu() for t in model.buffers()])

    def same(got, want):
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype and torch.equal(_bits(g), _bits(w)), (g, w)

    bits = train("neuron", 3)
    with monkeypatch.context() as patch:
        patch.setattr(aten_compiler, "import_graph", lambda *a, **k: import_graph(*a, **{**k, "bf16_bits": False}))
        copies = train("neuron", 3)
    for got, want in zip(bits, copies, strict=True):
        same(got, want)
    (loss,), _, _, buffers = train("neuron", 1)
    (cpu_loss,), _, _, cpu_buffers = train("cpu", 1)
    same([loss, *buffers], [cpu_loss, *cpu_buffers])
