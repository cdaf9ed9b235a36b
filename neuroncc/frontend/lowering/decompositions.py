"""The decomposition table AOTAutograd traces with: aten ops down to the primitives neuroncc's IR has.

The base is PyTorch's post-autograd core-ATen table (what Inductor and export use). On top of it we decompose
the composite ops the IR deliberately lacks (softmax, normalizations, var_mean, ...) so that the fusion pass
sees plain elementwise ops and reductions, and we keep the ops the IR has natively (gelu, sigmoid, tanh,
mm/addmm/bmm, convolution and its backward, embedding, var). Every rule below says why in one comment.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable

import torch
from torch._decomp import _core_aten_decompositions_post_autograd, get_decompositions

from neuroncc.frontend.lowering.amp import amp_decompositions
from neuroncc.frontend.lowering.coverage import coverage_decompositions
from neuroncc.frontend.lowering.foreach import foreach_decompositions
from neuroncc.frontend.lowering.library import library_decompositions
from neuroncc.frontend.lowering.low_precision import low_precision_decompositions
from neuroncc.frontend.lowering.random_ops import random_decompositions
from neuroncc.frontend.lowering.rnn_cells import rnn_cell_decompositions
from neuroncc.frontend.lowering.transformer_fastpath import fastpath_decompositions

aten = torch.ops.aten

#: Ops the core table keeps but our IR has no op for: decompose them into exp/sum/mean/rsqrt/... .
EXTRA_DECOMPOSITIONS = (
    aten._softmax,  # exp(x - amax) / sum: the fusion pass fuses it, no softmax op in the IR
    aten._log_softmax,  # x - amax - log(sum(exp(.)))
    aten.native_layer_norm,  # mean/var/rsqrt; its backward is already decomposed by the core table
    aten.native_group_norm,  # same, per group
    aten._native_batch_norm_legit_functional,  # training BatchNorm: returns the updated running stats
    aten._native_batch_norm_legit_no_training,  # eval BatchNorm
    aten._native_batch_norm_legit,  # BatchNorm without running stats
    aten.native_batch_norm,  # legacy entry point of the above
    aten.hardtanh,  # clamp
    aten.leaky_relu,  # where(x > 0, x, x * slope)
    aten.elu,  # where + expm1
    aten.linalg_vector_norm,  # abs/pow/sum
    aten.logsumexp,  # amax + log(sum(exp(x - amax)))
    aten._adaptive_avg_pool2d,  # mean over the spatial dims (1x1 output) or avg_pool2d
    aten.max_pool2d_with_indices,  # strided slices + amax/argmax over the window
    aten.max_pool2d_with_indices_backward,  # scatter-add of the gradient at the argmax positions
    aten.upsample_nearest2d,  # index with computed source rows/columns
)

#: Decompositions from the core table that we drop, so the op reaches the importer (or fails loudly).
REMOVED_DECOMPOSITIONS = (
    # The CPU flash-attention decomposition returns the attention probabilities where the op returns the
    # logsumexp, which autograd's formula (the ATen flash backward) then reads: wrong gradients. Kept as one
    # op instead, with its backward (frontend/lowering/attention.py), as Inductor does.
    aten._scaled_dot_product_flash_attention_for_cpu.default,
    # PyTorch's references make them clamps, whose NaN bound gives a positive NaN; eager's clamp_min(x, -nan) is
    # -nan everywhere: lowered as themselves (frontend/lowering/elementwise.py), which knows that
    aten.clamp_min.default,
    aten.clamp_max.default,
)


def nll_loss_backward_one_hot(grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor,
                              weight: torch.Tensor | None, reduction: int, ignore_index: int,
                              total_weight: torch.Tensor) -> torch.Tensor:
    """``aten.nll_loss_backward`` of a [N, C] input: PyTorch's core decomposition with its one-hot built as
    ``where(class == target, -1, 0)`` instead of a scatter into zeros. Elementwise in the input's row, the
    one-hot fuses into the log-softmax backward that reads it (cross-entropy's backward); the scatter was a
    [N, C] buffer written and read back (two passes over the logits' size: 130 MB per step at a 32k vocabulary
    and 512 rows). Other ranks keep the core decomposition."""
    if self.dim() != 2 or target.dim() != 1:
        return _CORE_NLL_LOSS_BACKWARD(grad_output, self, target, weight, reduction, ignore_index, total_weight)
    if reduction == 1:  # mean
        grad_output = grad_output / total_weight
    target = target.unsqueeze(1)
    safe_target = torch.where(target != ignore_index, target, 0)  # ignored rows: -1 at class 0, times 0, as core
    classes = torch.arange(self.shape[1], device=self.device).unsqueeze(0)
    grad_input = torch.where(classes == safe_target, -1.0, 0.0).to(self.dtype)
    if grad_output.dim() > 0:  # reduction none: one gradient per row
        grad_output = grad_output.unsqueeze(1)
    if weight is not None:
        grad_output = grad_output * weight.reshape(1, weight.shape[0])
    grad_output = torch.where(target != ignore_index, grad_output, 0)
    return grad_input * grad_output


_CORE_NLL_LOSS_BACKWARD = _core_aten_decompositions_post_autograd()[aten.nll_loss_backward.default]

def _float32_statistics(input: torch.Tensor, *parameters: torch.Tensor | None) -> bool:
    """A bfloat16/float16 input normalized with float32 weights (autocast's usual case): CPU's layer and group
    norm kernels then keep the mean and rstd they save for the backward in float32."""
    return input.dtype in (torch.bfloat16, torch.float16) and \
        any(p is not None and p.dtype is torch.float32 for p in parameters)


def native_layer_norm_cpu_statistics(input: torch.Tensor, normalized_shape: list[int], weight: torch.Tensor | None,
                                     bias: torch.Tensor | None, eps: float) -> tuple[torch.Tensor, ...]:
    """PyTorch's reference, whose statistics on CPU tensors are rounded to the input's dtype; with float32
    weights they stay float32, as CPU's kernel keeps them (the traced device kernels use CPU fake tensors)."""
    out, mean, rstd = _REF_LAYER_NORM(input, normalized_shape, weight, bias, eps)
    if _float32_statistics(input, weight, bias) and mean.dtype is not torch.float32:
        dims = list(range(input.dim() - len(normalized_shape), input.dim()))
        variance, mean = torch.var_mean(input.float(), dim=dims, correction=0, keepdim=True)
        rstd = torch.rsqrt(variance + eps)
    return out, mean, rstd


def native_group_norm_cpu_statistics(input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                                     batch: int, channels: int, inner: int, groups: int,
                                     eps: float) -> tuple[torch.Tensor, ...]:
    """The same for group norm: float32 statistics, [batch, groups], with float32 weights."""
    out, mean, rstd = _REF_GROUP_NORM(input, weight, bias, batch, channels, inner, groups, eps)
    if _float32_statistics(input, weight, bias) and mean.dtype is not torch.float32:
        variance, mean = torch.var_mean(input.float().reshape(batch, groups, -1), dim=2, correction=0)
        rstd = torch.rsqrt(variance + eps)
    return out, mean, rstd


def elu_zero_as_eager(a: torch.Tensor, alpha: float = 1.0, scale: float = 1.0,
                      input_scale: float = 1.0) -> torch.Tensor:
    """aten.elu as ATen's CPU kernels compute it (``native/cpu/Elu.h``): ``a >= 0 ? a * scale : expm1(a *
    input_scale) * (alpha * scale)``, a bfloat16/float16 input in float32. PyTorch's reference tests ``a > 0``:
    x = +-0 took the other side, ``alpha * expm1(+-0)``, which is NaN for an infinite or NaN alpha where eager
    gives x (and +0 at -0 for a negative alpha, where eager gives -0)."""
    x = a.to(torch.float32) if a.dtype in (torch.bfloat16, torch.float16) else a
    return torch.where(x >= 0, x * scale, torch.expm1(x * input_scale) * (alpha * scale)).to(a.dtype)


def eye_int64_positions(n: int, m: int | None = None, *, dtype: torch.dtype | None = None, layout: object = None,
                        device: object = None, pin_memory: bool = False) -> torch.Tensor:
    """aten.eye: PyTorch's reference compares two aranges of the narrowest unsigned type holding n and m, which
    is uint16 for 256 <= n < 65536 (SimCLR's ``torch.eye(2 * batch, dtype=torch.bool)``), a dtype the IR
    lacks; the same comparison of int64 positions."""
    rows = torch.arange(n, device=device).unsqueeze(-1)
    return (rows == torch.arange(n if m is None else m, device=device)).to(dtype or torch.get_default_dtype())


def weight_norm_interface_backward(grad_w: torch.Tensor, saved_v: torch.Tensor, saved_g: torch.Tensor,
                                   saved_norms: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """aten._weight_norm_interface_backward (``weight_norm`` over dim 0 or the last dim: the fused path PyTorch's
    ``_weight_norm`` takes on CPU and neuron tensors), which the core table lacks: ATen's CPU kernel's formulas,
    with s the sum of grad_w * v over each slice, grad_g = s / norm and grad_v = g / norm * (grad_w - v * s /
    norm^2)."""
    dims = [d for d in range(saved_v.dim()) if d != dim % saved_v.dim()]
    acc = torch.float32 if saved_v.dtype in (torch.bfloat16, torch.float16) else saved_v.dtype  # as ATen's kernel
    v, norms = saved_v.to(acc), saved_norms.to(acc)
    sums = (grad_w.to(acc) * v).sum(dims, keepdim=True)
    grad_g = sums / norms
    grad_v = (saved_g.to(acc) / norms) * (grad_w.to(acc) - v * (grad_g / norms))
    return grad_v.to(saved_v.dtype), grad_g.reshape(saved_g.shape).to(saved_g.dtype)


_REF_LAYER_NORM = get_decompositions([aten.native_layer_norm.default])[aten.native_layer_norm.default]
_REF_GROUP_NORM = get_decompositions([aten.native_group_norm.default])[aten.native_group_norm.default]

#: Our own decompositions of ops the core table decomposes less well for fusion.
OWN_DECOMPOSITIONS = {
    aten.nll_loss_backward.default: nll_loss_backward_one_hot,  # one-hot by where, not scatter (fuses)
    aten.native_layer_norm.default: native_layer_norm_cpu_statistics,  # float32 statistics with float32 weights
    aten.native_group_norm.default: native_group_norm_cpu_statistics,  # the same
    aten.elu.default: elu_zero_as_eager,  # x = +-0 on eager's side of the branch (an infinite alpha: not NaN)
    aten.eye.default: eye_int64_positions,  # int64 positions, not uint16 ones
    aten.eye.m: eye_int64_positions,
    aten._weight_norm_interface_backward.default: weight_norm_interface_backward,  # the core table has none
}


def decomposition_table() -> dict[torch._ops.OperatorBase, Callable]:
    """The table passed to AOTAutograd (built once; the dict is shared, do not mutate it).

    ``prims.fma`` is defined by ``torch._inductor.inductor_prims``, which TorchDynamo imports before it writes
    the op into a graph (``addcmul_``/``addcdiv_`` with a value). Importing it here would import all of
    TorchDynamo and Inductor (~2 s) into processes that never trace (the eager device's first op), so its
    entry joins the table once that module is loaded, which every graph holding the op implies."""
    table = _table()
    if "torch._inductor.inductor_prims" in sys.modules:
        table.setdefault(torch.ops.prims.fma.default, _fma)
    return table


@functools.cache
def _table() -> dict[torch._ops.OperatorBase, Callable]:
    table = dict(_core_aten_decompositions_post_autograd())
    table.update(get_decompositions(list(EXTRA_DECOMPOSITIONS)))
    table.update(coverage_decompositions())  # ops added for OpInfo coverage (frontend/lowering/coverage.py)
    table.update(library_decompositions())  # pinv over svd/eigh (frontend/lowering/library.py)
    table.update(foreach_decompositions())  # _foreach_* -> one aten call per tensor (frontend/lowering/foreach.py)
    table.update(OWN_DECOMPOSITIONS)
    table.update(low_precision_decompositions(table))  # bf16/f16 rounded where CPU rounds (low_precision.py)
    table.update(fastpath_decompositions())  # fused transformer inference ops (lowering/transformer_fastpath.py)
    table.update(rnn_cell_decompositions())  # LSTM/GRU fused cells and their backward ops (lowering/rnn_cells.py)
    table.update(random_decompositions())  # random ops over the Philox generator (frontend/lowering/random_ops.py)
    table.update(amp_decompositions())  # GradScaler's unscale and scale update (frontend/lowering/amp.py)
    for op in REMOVED_DECOMPOSITIONS:
        table.pop(op, None)
    return table


def _fma(a: torch.Tensor, b: torch.Tensor | float, c: torch.Tensor) -> torch.Tensor:
    """``prims.fma(a, b, c) = a * b + c``, which TorchDynamo writes for ``addcmul_``/``addcdiv_`` with a value
    and ``add_`` with a tensor alpha (torch/optim's Adam): rounded after the product and after the sum, as
    eager's unfused addcmul kernel rounds (Inductor emits one fused rounding instead)."""
    return a * b + c
