"""``nn.LSTM`` and ``nn.GRU`` on the neuron device: ATen's RNN code runs each step through the fused cell ops
(``_thnn_fused_lstm_cell`` / ``_thnn_fused_gru_cell``, CUDA kernels only), which the device compiles from the
front end's decompositions (frontend/lowering/rnn_cells.py), forward and backward, matching CPU eager (PyTorch's
own float32 tolerances). Before, both modules raised NotImplementedError on the device."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import neuroncc
import neuroncc.device

CASES = [
    (nn.LSTM, {}),
    (nn.LSTM, {"num_layers": 2, "bidirectional": True, "batch_first": True}),
    (nn.LSTM, {"bias": False}),
    (nn.LSTM, {"proj_size": 4}),
    (nn.GRU, {}),
    (nn.GRU, {"num_layers": 2, "bidirectional": True, "batch_first": True}),
    (nn.GRU, {"bias": False}),
]


def _outputs(result):
    output, state = result
    return [output, *(state if isinstance(state, tuple) else (state,))]


@pytest.mark.parametrize("module, kwargs", CASES, ids=lambda c: c.__name__ if isinstance(c, type) else str(c))
def test_rnn_forward_and_backward_match_cpu(module, kwargs):
    neuroncc.set_fallback_mode("error")  # every op, the fused cells and their backward included, on the device
    cpu = module(8, 16, **kwargs)
    device = copy.deepcopy(cpu).to("neuron")
    x = torch.randn(2, 4, 8) if kwargs.get("batch_first") else torch.randn(4, 2, 8)
    x_cpu, x_device = x.clone().requires_grad_(), x.to("neuron").requires_grad_()
    want, got = _outputs(cpu(x_cpu)), _outputs(device(x_device))
    for w, g in zip(want, got):
        torch.testing.assert_close(g.cpu(), w)
    sum((k + 1) * w.sum() for k, w in enumerate(want)).backward()  # weighed apart: every output's gradient counts
    sum((k + 1) * g.sum() for k, g in enumerate(got)).backward()
    torch.testing.assert_close(x_device.grad.cpu(), x_cpu.grad)
    for (name, p_cpu), p_device in zip(cpu.named_parameters(), device.parameters()):
        torch.testing.assert_close(p_device.grad.cpu(), p_cpu.grad, msg=name)


def test_lstm_without_grad_is_one_kernel_per_step():
    lstm = nn.LSTM(8, 16).to("neuron")
    with torch.no_grad():
        lstm(torch.randn(3, 2, 8, device="neuron"))
    assert neuroncc.get_executed_ops()["aten._thnn_fused_lstm_cell.default"] == 3


@pytest.mark.parametrize("module", [nn.LSTM, nn.GRU], ids=lambda c: c.__name__)
def test_compiled_rnn_on_device_tensors_matches_cpu(module):
    """TorchDynamo breaks the graph inside the RNN's forward; the ops between its graphs run eagerly on the device,
    whose kernels it must not trace as user code (device/untraced.py): before, it recompiled the device's kernel
    per storage offset until GRU raised its specialization limit; and until session 44 it traced the LSTM cell's
    kernel and the device allocator's release of a block freed meanwhile (a warning about ``_thread.get_ident``)."""
    import torch._dynamo
    from torch._dynamo.convert_frame import input_codes

    torch._dynamo.reset()
    cpu = module(8, 16, num_layers=2, batch_first=True)
    compiled = torch.compile(copy.deepcopy(cpu).to("neuron"), backend="neuron")
    for _ in range(2):
        x = torch.randn(3, 5, 8)
        want, got = _outputs(cpu(x)), _outputs(compiled(x.to("neuron")))
        for w, g in zip(want, got):
            torch.testing.assert_close(g.cpu(), w)
    traced = [code.co_filename for code in (ref() for ref in input_codes.seen) if code is not None]
    device_code = Path(neuroncc.device.__file__).parent
    assert not [name for name in traced if Path(name).parent == device_code], traced


class PackedTagger(nn.Module):
    """Padded sequences of different lengths through a packed RNN, as taggers run them."""

    def __init__(self, module):
        super().__init__()
        self.rnn = module(8, 16, num_layers=2, bidirectional=True, batch_first=True)

    def forward(self, x, lengths):
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, state = self.rnn(packed)
        padded, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
        return [padded, *(state if isinstance(state, tuple) else (state,))]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("module", [nn.LSTM, nn.GRU], ids=lambda c: c.__name__)
def test_packed_sequences_forward_and_backward_match_cpu(module, compiled):
    """``pack_padded_sequence(..., enforce_sorted=False)`` / ``pad_packed_sequence`` around a 2-layer
    bidirectional RNN on the device, eagerly and under ``torch.compile(backend="neuron")``: outputs, the input's
    and every parameter's gradients are CPU's (this worked when first tried, in session 28)."""
    import torch._dynamo

    torch._dynamo.reset()
    neuroncc.set_fallback_mode("error")  # packing, unpacking and the cells all on the device
    cpu = PackedTagger(module)
    device = copy.deepcopy(cpu).to("neuron")
    run = torch.compile(device, backend="neuron") if compiled else device
    x, lengths = torch.randn(4, 5, 8), torch.tensor([3, 5, 1, 4])  # lengths stay on CPU, as PyTorch requires
    x_cpu, x_device = x.clone().requires_grad_(), x.to("neuron").requires_grad_()
    want, got = cpu(x_cpu, lengths), run(x_device, lengths)
    for w, g in zip(want, got):
        torch.testing.assert_close(g.cpu(), w)
    sum((k + 1) * w.square().sum() for k, w in enumerate(want)).backward()
    sum((k + 1) * g.square().sum() for k, g in enumerate(got)).backward()
    torch.testing.assert_close(x_device.grad.cpu(), x_cpu.grad)
    for (name, p_cpu), p_device in zip(cpu.named_parameters(), device.parameters()):
        torch.testing.assert_close(p_device.grad.cpu(), p_cpu.grad, msg=name)
