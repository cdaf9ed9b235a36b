"""channels_last tensors on the ``neuron`` device are computed in their memory order: pointwise ops over flat
buffers, batch norm over ``[elements / C, C]`` rows, convolutions by ATen on the device's memory
(``neuroncc/device/layouts.py``: ``memory_order_shapes``, ``aten_on_device_memory``). Each check compares values,
strides and gradients with CPU eager, and that no kernel of the call wrote its result through a transposing
temporary (``kernels.Binding``'s "via cpu" outputs)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from neuroncc.device import dispatch, entries
from neuroncc.device.kernels import CompiledKernel

CL, CL3 = torch.channels_last, torch.channels_last_3d


def _strides(t: torch.Tensor) -> list[int]:
    return [s for n, s in zip(t.shape, t.stride()) if n != 1]


def _check(expected: torch.Tensor, got: torch.Tensor, tolerance: float = 1e-5) -> None:
    torch.testing.assert_close(got.cpu(), expected, rtol=tolerance, atol=tolerance)
    assert _strides(got) == _strides(expected), (got.stride(), expected.stride())


def _entries() -> set[int]:
    """The device's entries so far (another test of the process may have made entries of the same ops)."""
    return {id(entry) for handler in dispatch.handlers() for entry in handler.entries.values()}


def _transposing(ops: set[str], before: set[int]) -> list[tuple[str, str]]:
    """(op, how) for each compiled entry of ``ops`` made since ``before`` (:func:`_entries`) writing a result
    through a temporary in another layout."""
    found = []
    for handler in dispatch.handlers():
        if str(handler.op).split(".")[1] not in ops:
            continue
        for entry in handler.entries.values():
            if isinstance(entry, CompiledKernel) and id(entry) not in before:
                found += [(str(handler.op), how) for how, _, _ in entry.binding.outputs if "via cpu" in how]
    return found


def test_channels_last_pointwise_chain_forward_and_backward_without_transposing_copies():
    before = _entries()
    x = torch.randn(3, 6, 5, 7).to(memory_format=CL)
    g = torch.randn(3, 6, 5, 7).to(memory_format=CL)

    def run(device):
        a = x.detach().to(device).requires_grad_()
        y = torch.sigmoid(F.relu(a) * 2.0 + a)
        z = F.gelu(y - a.exp()) * y
        z.backward(g.to(device))
        h = a.detach().clone()
        h.add_(g.to(device), alpha=0.5).relu_()  # in place
        o = torch.empty_like(h)
        torch.mul(h, 3.0, out=o)  # out=
        return [y, z, a.grad, h, o]

    for expected, got in zip(run("cpu"), run("neuron")):
        _check(expected, got)
    assert _transposing({"relu", "relu_", "mul", "add", "add_", "sigmoid", "sigmoid_backward", "sub", "exp",
                         "gelu", "gelu_backward", "threshold_backward", "neg"}, before) == []


def test_channels_last_batch_norm_training_and_eval_compute_over_rows():
    before = _entries()
    torch.manual_seed(0)
    for shape, fmt in (((4, 8, 5, 6), CL), ((2, 4, 3, 5, 6), CL3)):
        x, g = torch.randn(shape).to(memory_format=fmt), torch.randn(shape).to(memory_format=fmt)
        bn = nn.BatchNorm2d(shape[1]) if len(shape) == 4 else nn.BatchNorm3d(shape[1])
        results = {}
        for device in ("cpu", "neuron"):
            module = type(bn)(shape[1]).to(device)
            module.load_state_dict(bn.state_dict())
            a = x.detach().to(device).requires_grad_()
            y = module(a)
            y.backward(g.to(device))
            module.eval()
            results[device] = [y, a.grad, module.weight.grad, module.bias.grad, module.running_mean,
                               module.running_var, module(a.detach())]
        for expected, got in zip(results["cpu"], results["neuron"]):
            _check(expected, got, 1e-4)  # sums over N*H*W elements in another order
    assert _transposing({"native_batch_norm", "native_batch_norm_backward", "_native_batch_norm_legit",
                         "_native_batch_norm_legit_no_training"}, before) == []


def test_channels_last_convolution_runs_aten_on_device_memory():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 9, 9).to(memory_format=CL)
    conv = nn.Conv2d(3, 5, 3, padding=1).to(memory_format=CL)
    results = {}
    for device in ("cpu", "neuron"):
        module = nn.Conv2d(3, 5, 3, padding=1).to(device, memory_format=CL)
        module.load_state_dict(conv.state_dict())
        a = x.detach().to(device).requires_grad_()
        y = module(a)
        y.square().sum().backward()
        results[device] = [y, a.grad, module.weight.grad, module.bias.grad]
    for expected, got in zip(results["cpu"], results["neuron"]):
        _check(expected, got, 1e-4)
    for name in ("convolution", "convolution_backward"):
        handler = dispatch.handler_for(getattr(torch.ops.aten, name).default)
        assert any(isinstance(e, entries.AtenOnDeviceMemory) for e in handler.entries.values()), name


def test_memory_order_edge_cases_match_cpu():
    """Size-1 dims (a [N, C, 1, 1] channels_last tensor has ambiguous strides), 0-d operands, mixed layouts
    (not built in memory order), bfloat16 and a channels_last input beside a contiguous one."""
    torch.manual_seed(0)
    x = torch.randn(4, 6, 1, 1).to(memory_format=CL)
    y = torch.randn(4, 6, 5, 5).to(memory_format=CL)
    z = torch.randn(4, 6, 5, 5)
    cases = [
        lambda d: x.to(d) * 2 + x.to(d).relu(),
        lambda d: y.to(d) * torch.tensor(3.0, device=d),
        lambda d: y.to(d) + z.to(d),
        lambda d: z.to(d) + y.to(d),
        lambda d: torch.where(y.to(d) > 0, y.to(d), z.to(d)),
        lambda d: (y.to(d).bfloat16().relu() * 2).float(),
        lambda d: y.to(d).clone(memory_format=torch.contiguous_format).relu(),
        lambda d: F.batch_norm(y.to(d), None, None, training=True) + z.to(d),
    ]
    for case in cases:
        _check(case("cpu"), case("neuron"))


def test_channels_last_foreach_optimizer_steps_compute_over_flat_buffers():
    """SGD with momentum and Adam over channels_last convolution weights beside contiguous ones: the foreach
    ops' channels_last positions are flat buffers, the others as they are."""
    before = _entries()
    torch.manual_seed(0)
    weights = [torch.randn(8, 4, 3, 3).to(memory_format=CL), torch.randn(8), torch.randn(6, 8, 3, 3),
               torch.randn(5, 3, 1, 1).to(memory_format=CL)]
    grads = [torch.randn_like(w) for w in weights]
    results = {}
    for device in ("cpu", "neuron"):
        params = [nn.Parameter(w.clone().to(device)) for w in weights]
        steps = [torch.optim.SGD(params[:2], lr=0.1, momentum=0.9), torch.optim.Adam(params[2:], lr=0.1)]
        for _ in range(2):
            for p, g in zip(params, grads):
                p.grad = g.clone().to(device)
            for optimizer in steps:
                optimizer.step()
        values, on_device = [p.detach() for p in params], [g.to(device) for g in grads]
        results[device] = values + list(torch._foreach_addcmul(values, on_device, on_device, value=0.5))
    for expected, got in zip(results["cpu"], results["neuron"]):
        _check(expected, got)
    foreach = {"_foreach_add_", "_foreach_mul_", "_foreach_addcmul_", "_foreach_addcdiv_", "_foreach_lerp_",
               "_foreach_sqrt", "_foreach_div_", "_foreach_addcmul", "zero_"}
    assert _transposing(foreach, before) == []


def test_channels_last_pointwise_ops_with_broadcast_operands_compute_in_memory_order():
    """A per-channel scale or bias (``[1, C, 1, 1]``, ``[C, 1, 1]``), an expanded gradient, an operand in another
    layout: the op is built over the tensors permuted into the channels_last order ([N, H, W, C])."""
    before = _entries()
    torch.manual_seed(0)
    x = torch.randn(4, 6, 5, 7).to(memory_format=CL)
    b, c, g = torch.randn(1, 6, 1, 1), torch.randn(6, 1, 1), torch.randn(6)
    m = torch.randn(4, 6, 1, 1).to(memory_format=CL)
    other = torch.randn(7, 5, 6, 4).permute(3, 2, 1, 0)  # dense, in another order
    square = torch.randn(4, 4, 4, 4)  # its memory-order shape is its own: built as it is

    def run(device):
        a = x.to(device)
        y = a.clone()
        y.mul_(b.to(device)).add_(c.to(device))  # in place
        return [a + b.to(device), a * c.to(device), a * g.to(device)[:, None, None],
                torch.where(a > 0, a, m.to(device)), torch.addcmul(a, b.to(device), a, value=0.5),
                torch.ops.aten.threshold_backward(m.to(device).expand(4, 6, 5, 7), a, 0.0), y, a + other.to(device),
                torch.ops.aten.threshold_backward(square.to(device), square.to(device, memory_format=CL), 0.0)]

    for expected, got in zip(run("cpu"), run("neuron")):
        _check(expected, got)
    assert _transposing({"add", "add_", "mul", "mul_", "where", "addcmul", "gt"}, before) == []


def test_channels_last_pools_and_pads_run_atens_kernels_in_memory_order():
    """Pools, adaptive pools, their backwards and the 2-d reflection pad of channels_last tensors
    run ATen's channels_last kernels on the device's memory (layouts.CHANNELS_LAST_KERNELS), as convolutions do:
    no program computing in the logical order and transposing its result; CPU eager's values and strides, with
    contiguous inputs still built as programs."""
    before = _entries()
    torch.manual_seed(0)
    x = torch.randn(2, 6, 9, 10)
    pieces = [lambda a: F.max_pool2d(a, 2), lambda a: F.max_pool2d(a, 3, 2, 1), lambda a: F.avg_pool2d(a, 2),
              lambda a: F.adaptive_avg_pool2d(a, 1), lambda a: F.adaptive_avg_pool2d(a, (4, 3)),
              lambda a: F.adaptive_max_pool2d(a, 3), lambda a: F.pad(a, (1, 1, 2, 1), mode="reflect"),
              lambda a: F.pad(a, (2, 1, 1, 2), mode="replicate"),
              lambda a: F.max_pool3d(a.unsqueeze(2).expand(-1, -1, 4, -1, -1).contiguous(memory_format=CL3), 2)]
    for fmt in (CL, torch.contiguous_format):
        results = {}
        for device in ("cpu", "neuron"):
            a = x.to(device).to(memory_format=fmt).clone().detach().requires_grad_()
            outs = [piece(a) for piece in pieces]
            weights = [torch.linspace(-1, 1, o.numel()).reshape(o.shape).to(device) for o in outs]
            sum((o * w).sum() for o, w in zip(outs, weights)).backward()
            results[device] = outs + [a.grad]
        for expected, got in zip(results["cpu"], results["neuron"]):
            _check(expected, got)
    ops = {"max_pool2d_with_indices", "max_pool2d_with_indices_backward", "avg_pool2d", "avg_pool2d_backward",
           "_adaptive_avg_pool2d", "_adaptive_avg_pool2d_backward", "adaptive_max_pool2d",
           "adaptive_max_pool2d_backward", "reflection_pad2d", "reflection_pad2d_backward", "max_pool3d_with_indices", "max_pool3d_with_indices_backward"}
    assert _transposing(ops, before) == []
    on_memory = {str(handler.op).split(".")[1] for handler in dispatch.handlers()
                 for entry in handler.entries.values()
                 if isinstance(entry, entries.AtenOnDeviceMemory) and id(entry) not in before}
    assert {"max_pool2d_with_indices", "_adaptive_avg_pool2d", "reflection_pad2d"} <= on_memory, on_memory
