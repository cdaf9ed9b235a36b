"""Decompositions of ATen's fused LSTM and GRU cells and their backward ops into elementwise math.

ATen's RNN code (aten/src/ATen/native/RNN.cpp) computes each time step of ``nn.LSTM``/``nn.GRU`` on a CUDA, XPU
or PrivateUse1 tensor through the fused cell ops, and so on the ``neuron`` device: ``_thnn_fused_lstm_cell``
(the gates' matrix products are ATen's ``linear``s, without their biases; the cell adds both biases, applies the
activations and returns (hy, cy, workspace)) and ``_thnn_fused_gru_cell`` (returns (hy, workspace)). The
derivative PyTorch records for them is ``_thnn_fused_lstm_cell_backward_impl`` / ``_thnn_fused_gru_cell_backward``
(from the workspace; the differentiable formulas only when the backward itself is recorded). All four have
CUDA kernels only: without these entries the device's CPU fallback had none either and LSTM and GRU raised.

Each is written as ATen's CUDA kernels compute it (aten/src/ATen/native/cuda/RNN.cu), with the gates' sums in
CPU's order (the input gates and their bias, plus the hidden gates and theirs, as CPU's ``LSTMCell`` adds two
``linear`` results), so one compiled kernel per step and op matches CPU eager to rounding. The workspace holds
what the backward reads: the LSTM's four activated gates [B, 4H]; the GRU's reset and update gates, the input
and hidden new-gate parts with their biases, and hx [B, 5H].
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

aten = torch.ops.aten


def _gates(input_gates: torch.Tensor, hidden_gates: torch.Tensor, input_bias: torch.Tensor | None,
           hidden_bias: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    if input_bias is not None:
        input_gates = input_gates + input_bias
    if hidden_bias is not None:
        hidden_gates = hidden_gates + hidden_bias
    return input_gates, hidden_gates


def fused_lstm_cell(input_gates: torch.Tensor, hidden_gates: torch.Tensor, cx: torch.Tensor,
                    input_bias: torch.Tensor | None = None,
                    hidden_bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``aten._thnn_fused_lstm_cell``: (hy, cy, workspace = the activated gates i, f, g, o)."""
    input_gates, hidden_gates = _gates(input_gates, hidden_gates, input_bias, hidden_bias)
    i, f, g, o = (input_gates + hidden_gates).chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    hy = o * cy.tanh()
    return hy, cy, torch.cat([i, f, g, o], 1)


def fused_lstm_cell_backward_impl(grad_hy: torch.Tensor | None, grad_cy: torch.Tensor | None, cx: torch.Tensor,
                                  cy: torch.Tensor, workspace: torch.Tensor,
                                  has_bias: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``aten._thnn_fused_lstm_cell_backward_impl``: (the gates' gradient [B, 4H], cx's, the biases' or None).
    A missing output gradient is zero, as the kernel reads it."""
    i, f, g, o = workspace.chunk(4, 1)
    tanh_cy = cy.tanh()
    grad_c = torch.zeros_like(cy) if grad_cy is None else grad_cy
    if grad_hy is not None:
        grad_o = grad_hy * tanh_cy * (1 - o) * o
        grad_c = grad_c + grad_hy * o * (1 - tanh_cy * tanh_cy)
    else:
        grad_o = torch.zeros_like(o)
    grad_i = grad_c * g * (1 - i) * i
    grad_f = grad_c * cx * (1 - f) * f
    grad_g = grad_c * i * (1 - g * g)
    grad_gates = torch.cat([grad_i, grad_f, grad_g, grad_o], 1)
    return grad_gates, grad_c * f, grad_gates.sum(0) if has_bias else None


def fused_gru_cell(input_gates: torch.Tensor, hidden_gates: torch.Tensor, hx: torch.Tensor,
                   input_bias: torch.Tensor | None = None,
                   hidden_bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``aten._thnn_fused_gru_cell``: (hy, workspace = r, z, the input's and the hidden's new-gate parts, hx)."""
    input_gates, hidden_gates = _gates(input_gates, hidden_gates, input_bias, hidden_bias)
    input_r, input_z, input_n = input_gates.chunk(3, 1)
    hidden_r, hidden_z, hidden_n = hidden_gates.chunk(3, 1)
    r = (input_r + hidden_r).sigmoid()
    z = (input_z + hidden_z).sigmoid()
    n = (input_n + r * hidden_n).tanh()
    hy = (hx - n) * z + n
    return hy, torch.cat([r, z, input_n, hidden_n, hx], 1)


def fused_gru_cell_backward(grad_hy: torch.Tensor, workspace: torch.Tensor, has_bias: bool) -> tuple[Any, ...]:
    """``aten._thnn_fused_gru_cell_backward``: the gradients of (input gates, hidden gates, hx, input bias,
    hidden bias), the biases' None without them."""
    r, z, input_n, hidden_n, hx = workspace.chunk(5, 1)
    n = (input_n + r * hidden_n).tanh()
    grad_z = grad_hy * (hx - n) * (1 - z) * z
    grad_n = grad_hy * (1 - z) * (1 - n * n)
    grad_r = grad_n * hidden_n * (1 - r) * r
    grad_input_gates = torch.cat([grad_r, grad_z, grad_n], 1)
    grad_hidden_gates = torch.cat([grad_r, grad_z, grad_n * r], 1)
    grad_hx = grad_hy * z
    if not has_bias:
        return grad_input_gates, grad_hidden_gates, grad_hx, None, None
    return grad_input_gates, grad_hidden_gates, grad_hx, grad_input_gates.sum(0), grad_hidden_gates.sum(0)


def missing_meta_kernels() -> dict[str, Callable[..., Any]]:
    """Meta kernels for the GRU cell ops, which PyTorch lacks (LSTM's have one): the decompositions, run on
    meta tensors. The device checks every call on meta tensors before compiling it (device/programs.py)."""
    return {"_thnn_fused_gru_cell": fused_gru_cell, "_thnn_fused_gru_cell_backward": fused_gru_cell_backward}


def rnn_cell_decompositions() -> dict[Any, Callable[..., Any]]:
    """The fused cells' entries of the front end's decomposition table (frontend/lowering/decompositions.py)."""
    return {
        aten._thnn_fused_lstm_cell.default: fused_lstm_cell,
        aten._thnn_fused_lstm_cell_backward_impl.default: fused_lstm_cell_backward_impl,
        aten._thnn_fused_gru_cell.default: fused_gru_cell,
        aten._thnn_fused_gru_cell_backward.default: fused_gru_cell_backward,
    }
