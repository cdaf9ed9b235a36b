"""bfloat16/float16 ops rounded where CPU eager's kernels round them (the decision, made once, for the device's
eager ops and for torch.compile graphs alike).

PyTorch's decompositions compute a half-precision op in float32 and round its result once
(``pw_cast_for_opmath``, ``computation_dtype``). Most of ATen's CPU kernels do too, and there the two agree
bit for bit; but some CPU kernels round intermediates to the input's dtype: their arithmetic is written in
``scalar_t`` (each ``BFloat16``/``Half`` operation converts to float, computes and rounds back), or they
keep a per-row or per-channel statistic in a ``scalar_t`` buffer. A user comparing a bf16 model on the
device with CPU then sees different numbers. Each entry below wraps the decomposition it replaces, rounds
exactly where the CPU kernel rounds (``_rounded``: to the dtype and back to float32, the IR's two casts), and
leaves every other dtype to that decomposition:

| op | CPU kernel (aten/src/ATen/native/cpu) | rounded to the input's dtype |
|---|---|---|
| ``_log_softmax`` over the last dim | ``serial_vec_log_softmax_lastdim_range``: max and sum buffers of ``scalar_t`` | sum(exp(x - max)), then its log; x - max - log(sum) in float32, rounded once |
| ``native_batch_norm`` and the ``_native_batch_norm_legit*`` family, training | statistics saved in ``scalar_t``; the output from them as ``x * alpha + beta`` | mean, 1/sqrt(var + eps), bf16's sum of squares and var (float32 weights keep float32 statistics, as CPU) |
| ``linalg_cross`` | ``cross`` in ``scalar_t`` arithmetic | each product, then the difference |
| ``logit`` | ``logit_kernel`` in ``scalar_t`` arithmetic | eps and 1 - eps, 1 - x, the quotient, the log |
| ``upsample_linear1d``, ``upsample_trilinear3d`` | ``cpu_upsample_linear``: weights in ``scalar_t`` | each dim's two weights (the sum of the corners in float32) |
| ``addr`` (registered for the device: its composite kernel ran) | ``addr_kernel`` in ``scalar_t`` arithmetic | beta and alpha, alpha * vec1, its product with vec2, beta * self, the sum (float32: the same order) |
| ``mse_loss`` | ``mse_kernel``: ``diff = a - b; diff * diff`` in ``scalar_t`` | the difference, its square (then the mean or sum accumulates in float32) |
| ``embedding_dense_backward`` | ``grad_weight[k].add_(grad[i])`` per index | after every add, in index order (accumulated in the dtype) |
| ``index_add`` | first/last dim: scatter_add's float32 buffer; else ``add_`` per index | once (float32), else after every add |
| ``index_reduce`` mean | ``scalar_t`` adds per index, the count in float | after every add; the quotient once |

log_softmax over another dim keeps the float32 buffers (``serial_vec_logsoftmax_range``): rounded once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch._decomp import decomposition_table as torch_decompositions

aten = torch.ops.aten

LOW_PRECISION = (torch.bfloat16, torch.float16)


def _rounded(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x`` (float32) rounded to ``dtype`` as a CPU kernel's ``scalar_t`` intermediate, back in float32."""
    return x.to(dtype).to(torch.float32)


def _rounded_scalar(value: float, dtype: torch.dtype, like: torch.Tensor) -> torch.Tensor:
    """A Python float as a ``scalar_t`` constant (``Scalar::to<BFloat16>``), a 0-d float32 tensor rounded in
    the program: the device lifts the float into a parameter (device/programs.py), which a constant rounded
    here in Python would hide (two sentinels can round to one bf16 value)."""
    return _rounded(torch.full((), value, dtype=torch.float32, device=like.device), dtype)


def _log_softmax(base: Callable[..., Any]) -> Callable[..., Any]:
    def decomposition(x: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
        last = x.dim() > 0 and dim % x.dim() == x.dim() - 1
        if x.dtype not in LOW_PRECISION or half_to_float or not last or x.numel() == 0:
            return base(x, dim, half_to_float)
        shifted = x.to(torch.float32)
        shifted = shifted - torch.amax(shifted, dim, keepdim=True)
        total = _rounded(torch.sum(torch.exp(shifted), dim, keepdim=True), x.dtype)
        return (shifted - _rounded(torch.log(total), x.dtype)).to(x.dtype).contiguous()

    return decomposition


def _batch_norm(base: Callable[..., Any], op: Any, stateless: Callable[..., Any]) -> Callable[..., Any]:
    """A training batch norm's output and saved statistics as CPU's kernel computes them (the running
    statistics stay the base decomposition's): the mean and 1/sqrt(var + eps) saved in the input's dtype
    (bf16 also rounds the sum of squared deviations, which CPU keeps in a ``scalar_t`` buffer, and that sum
    over the count; float16 keeps both in float32), the output from the rounded statistics as ``x * alpha + beta``, alpha = invstd * weight,
    beta = bias - mean * alpha in float32 (``batch_norm_cpu_collect_stats_*``,
    ``batch_norm_cpu_transform_input_template``). With float32 weights (mixed) CPU keeps float32
    statistics: the base decomposition's."""
    names = [argument.name for argument in op._schema.arguments]
    always = "training" not in names  # _batch_norm_with_update*: training by definition
    functional = op._schema.name.endswith("_functional")  # returns the new running statistics

    def decomposition(*args: Any, **kwargs: Any) -> Any:
        bound = dict(zip(names, args), **kwargs)
        x, weight, bias, eps = bound["input"], bound.get("weight"), bound.get("bias"), bound["eps"]
        training = always or bool(bound["training"])
        if not training or x.dtype not in LOW_PRECISION or x.dim() < 2 or x.numel() == 0 or \
                any(p is not None and p.dtype is not x.dtype for p in (weight, bias)):
            return base(*args, **kwargs)
        if functional or bound.get("running_mean") is None:
            results = base(*args, **kwargs)
        else:  # the functional form, whose new running statistics (from float32 ones, as CPU) are written here
            *results, new_mean, new_var = stateless(x, weight, bias, bound["running_mean"], bound["running_var"],
                                                    True, bound["momentum"], eps)
            bound["running_mean"].copy_(new_mean)
            bound["running_var"].copy_(new_var)
        dims = [0] + list(range(2, x.dim()))
        count = x.numel() // x.shape[1]
        variance, mean = torch.var_mean(x.to(torch.float32), dims, correction=0)
        if x.dtype is torch.bfloat16:
            variance = _rounded(_rounded(variance * count, x.dtype) / count, x.dtype)
        mean = _rounded(mean, x.dtype)
        invstd = _rounded(1.0 / torch.sqrt(variance + eps), x.dtype)
        alpha = invstd if weight is None else invstd * weight.to(torch.float32)
        beta = -mean * alpha if bias is None else bias.to(torch.float32) - mean * alpha
        shape = [1, x.shape[1]] + [1] * (x.dim() - 2)
        output = (x.to(torch.float32) * alpha.reshape(shape) + beta.reshape(shape)).to(x.dtype)
        return (output, mean.to(x.dtype), invstd.to(x.dtype), *results[3:])

    return decomposition


def _linalg_cross(base: Callable[..., Any]) -> Callable[..., Any]:
    def decomposition(a: torch.Tensor, b: torch.Tensor, dim: int = -1) -> torch.Tensor:
        if a.dtype not in LOW_PRECISION or b.dtype is not a.dtype:
            return base(a, b, dim)
        a, b = torch.broadcast_tensors(a, b)
        dim = dim % a.dim()
        index = torch.arange(3, device=a.device)
        ahead, behind = (index + 1) % 3, (index + 2) % 3
        left = _rounded(a.index_select(dim, ahead).float() * b.index_select(dim, behind).float(), a.dtype)
        right = _rounded(a.index_select(dim, behind).float() * b.index_select(dim, ahead).float(), a.dtype)
        return (left - right).to(a.dtype)

    return decomposition


def _logit(base: Callable[..., Any]) -> Callable[..., Any]:
    def decomposition(x: torch.Tensor, eps: float | None = None) -> torch.Tensor:
        if x.dtype not in LOW_PRECISION:
            return base(x, eps)
        dtype = x.dtype
        x = x.to(torch.float32)
        if eps is not None:
            low = _rounded_scalar(eps, dtype, x)  # scalar_t lo = eps; hi = scalar_t(1) - eps
            high = _rounded(1.0 - low, dtype)
            x = torch.where(x < low, low, torch.where(x > high, high, x))  # x0 = x < lo ? lo : (x > hi ? hi : x)
        return torch.log(_rounded(x / _rounded(1.0 - x, dtype), dtype)).to(dtype)

    return decomposition


def _mse_loss(base: Callable[..., Any]) -> Callable[..., Any]:
    def decomposition(x: torch.Tensor, target: torch.Tensor, reduction: int = 1) -> torch.Tensor:
        if x.dtype not in LOW_PRECISION or target.dtype is not x.dtype:
            return base(x, target, reduction)
        difference = _rounded(x.to(torch.float32) - target.to(torch.float32), x.dtype)
        loss = (difference * difference).to(x.dtype)
        if reduction == 1:
            return torch.mean(loss)
        return torch.sum(loss) if reduction == 2 else loss

    return decomposition


def _addr(base: Callable[..., Any]) -> Callable[..., Any]:
    """``addr_kernel``: ``beta * self + alpha * vec1 * vec2`` in ``scalar_t`` arithmetic (beta and alpha
    converted to it), each product and the sum rounded; beta == 0 leaves ``self`` out."""
    def decomposition(self: torch.Tensor, vec1: torch.Tensor, vec2: torch.Tensor, *, beta: Any = 1,
                      alpha: Any = 1) -> torch.Tensor:
        dtype = self.dtype
        if dtype not in (*LOW_PRECISION, torch.float32) or vec1.dtype is not dtype or vec2.dtype is not dtype:
            return base(self, vec1, vec2, beta=beta, alpha=alpha)  # (float32: the same order, no rounding)
        scaled = _rounded(vec1.to(torch.float32) * _rounded_scalar(alpha, dtype, vec1), dtype)
        outer = _rounded(scaled.unsqueeze(1) * vec2.to(torch.float32), dtype)
        # beta == 0 leaves self out (NaN too), decided in the program: the device lifts beta into a parameter
        factor = torch.full((), beta, dtype=torch.float32, device=self.device)
        total = _rounded(self.to(torch.float32) * _rounded(factor, dtype), dtype) + outer
        return torch.where(factor == 0, outer, total).to(dtype)

    return decomposition


def _upsample_linear(base: Callable[..., Any]) -> Callable[..., Any]:
    """upsample_linear1d/trilinear3d: CPU's kernel keeps each dim's weights in ``scalar_t`` (lambda1 rounded,
    lambda0 = 1 - lambda1 rounded) and sums the corners, innermost dim first, in float32 (bilinear's kernel
    keeps float32 weights: the decomposition's)."""
    from torch._decomp.decompositions import _compute_scale, _compute_source_index
    from torch._prims_common import suggest_memory_format

    def decomposition(x: torch.Tensor, output_size: list[int], align_corners: bool, *scales: Any) -> torch.Tensor:
        if x.dtype not in LOW_PRECISION:
            return base(x, output_size, align_corners, *scales)
        dims = len(output_size)
        scales = tuple(scales) + (None,) * (dims - len(scales))
        values = [x.to(torch.float32)]
        for dim in reversed(range(dims)):  # the innermost dim first
            in_size, out_size = x.shape[2 + dim], output_size[dim]
            scale = _compute_scale(in_size, out_size, align_corners, scales[dim])
            source = _compute_source_index(scale, torch.arange(out_size, device=x.device).to(torch.float32),
                                           align_corners).clamp(min=0.0)
            low = source.to(torch.int64).clamp(max=in_size - 1)
            high = (low + 1).clamp(max=in_size - 1)
            lambda1 = _rounded((source - low).clamp(0.0, 1.0), x.dtype)
            lambda0 = _rounded(1.0 - lambda1, x.dtype)
            shape = [out_size] + [1] * (dims - 1 - dim)
            values = [v.index_select(2 + dim, low) * lambda0.reshape(shape) +
                      v.index_select(2 + dim, high) * lambda1.reshape(shape) for v in values]
        return values[0].to(x.dtype).contiguous(memory_format=suggest_memory_format(x))

    return decomposition


def _index_add(base: Callable[..., Any]) -> Callable[..., Any]:
    """``index_add``: CPU adds a bf16/f16 ``source`` along the first or the last dim of a 2-d or larger tensor
    in float32 and rounds once (its scatter_add path); along a middle dim, or into a 1-d tensor, it rounds
    after every add in index order (``add_`` per index), which the base decomposition's accumulating
    ``index_put`` does (docs/ir.md). Found by emulation against eager (torch 2.13, alpha = 1; other alphas
    round in neither order: the base's)."""
    def decomposition(x: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor, *,
                      alpha: Any = 1) -> torch.Tensor:
        once = x.dim() >= 2 and dim % x.dim() in (0, x.dim() - 1)
        if x.dtype not in LOW_PRECISION or source.dtype is not x.dtype or not once or alpha != 1:
            return base(x, dim, index, source, alpha=alpha)
        return base(x.to(torch.float32), dim, index, source.to(torch.float32)).to(x.dtype)

    return decomposition


def _embedding_dense_backward(base: Callable[..., Any]) -> Callable[..., Any]:
    """``embedding_dense_backward``: CPU adds each index's bf16/f16 gradient row into its weight row in the
    gradient's dtype, in index order (``grad_weight[k].add_(grad[i])``), where the decomposition adds in
    float32 and rounds once: accumulated in the dtype (the IR's accumulating write rounds after every add).
    ``scale_grad_by_freq`` (a double scale per add) keeps the base's."""
    def decomposition(grad: torch.Tensor, indices: torch.Tensor, num_weights: int, padding_idx: int,
                      scale_grad_by_freq: bool) -> torch.Tensor:
        if grad.dtype not in LOW_PRECISION or scale_grad_by_freq:
            return base(grad, indices, num_weights, padding_idx, scale_grad_by_freq)
        indices = indices.to(torch.int64)
        rows = grad.reshape(indices.numel(), -1)
        flat = indices.reshape(-1)
        rows = rows.masked_fill((flat == padding_idx).unsqueeze(1), 0)  # the padding row gets nothing
        total = rows.new_zeros((num_weights, rows.shape[1])).index_put([flat], rows, accumulate=True)
        return total.reshape((num_weights,) + tuple(grad.shape[indices.dim():]))

    return decomposition


def _index_reduce(base: Callable[..., Any]) -> Callable[..., Any]:
    """``index_reduce`` mean: CPU adds each slice into its row in the input's dtype, in index order (the IR's
    accumulating write), counts in float and divides once (``result / count`` rounded), where the base
    decomposition's ``scatter_reduce`` adds in float32 (CPU's scatter kernels' order)."""
    def decomposition(x: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor, reduce: str, *,
                      include_self: bool = True) -> torch.Tensor:
        if x.dtype not in LOW_PRECISION or source.dtype is not x.dtype or reduce != "mean" or x.dim() == 0:
            return base(x, dim, index, source, reduce, include_self=include_self)
        dim = dim % x.dim()
        rows, slices, index = x.movedim(dim, 0), source.movedim(dim, 0), index.reshape(-1).to(torch.int64)
        shape = [-1] + [1] * (rows.dim() - 1)
        hit = torch.zeros(rows.shape[0], dtype=torch.bool, device=x.device).index_fill(0, index, True)
        start = rows if include_self else rows.masked_fill(hit.reshape(shape), 0)
        total = start.index_put([index], slices, accumulate=True)
        counts = torch.full((rows.shape[0],), 1.0 if include_self else 0.0, device=x.device)
        counts = counts.index_add(0, index, torch.ones(index.numel(), device=x.device))
        counts = torch.where(counts == 0, 1.0, counts)
        return (total.to(torch.float32) / counts.reshape(shape)).to(x.dtype).movedim(0, dim).contiguous()

    return decomposition


#: addbmm batches unrolled one rounded add each (a longer batch keeps the base's single rounding)
_ADDBMM_UNROLLED = 64


def _addbmm(base: Callable[..., Any]) -> Callable[..., Any]:
    """``addbmm``: CPU starts from ``beta * self`` rounded (nothing for beta = 0) and adds each batch's
    product, ``alpha * (batch1[b] @ batch2[b])`` in float32, into the bf16/f16 result (``addmm_`` per batch,
    each rounded). ``beta == 0`` is a Python branch: the device's lifted floats guard it (device/stand_ins.py)."""
    def decomposition(x: torch.Tensor, batch1: torch.Tensor, batch2: torch.Tensor, *, beta: Any = 1,
                      alpha: Any = 1) -> torch.Tensor:
        dtype = x.dtype
        if dtype not in LOW_PRECISION or batch1.dtype is not dtype or batch2.dtype is not dtype or \
                batch1.shape[0] > _ADDBMM_UNROLLED or batch1.shape[0] == 0:
            return base(x, batch1, batch2, beta=beta, alpha=alpha)
        products = torch.bmm(batch1.to(torch.float32), batch2.to(torch.float32))
        shape = products.shape[1:]
        if beta == 0:
            result = torch.zeros(shape, dtype=torch.float32, device=x.device)
        else:
            result = _rounded(x.to(torch.float32).expand(shape) * _rounded_scalar(beta, torch.float32, x), dtype)
        for product in products.unbind(0):
            result = _rounded(result + product * alpha, dtype)
        return result.to(dtype)

    return decomposition


_BATCH_NORMS = (aten.native_batch_norm.default, aten._native_batch_norm_legit.default,
                aten._native_batch_norm_legit.no_stats, aten._native_batch_norm_legit_functional.default,
                aten._batch_norm_with_update_functional.default)


def low_precision_decompositions(table: dict[Any, Callable[..., Any]]) -> dict[Any, Callable[..., Any]]:
    """The entries replacing ``table``'s decompositions of the ops above (each falls back to the one it
    replaces outside bf16/f16)."""
    wrappers: dict[Any, Callable[..., Any]] = {
        aten._log_softmax.default: _log_softmax, aten.linalg_cross.default: _linalg_cross,
        aten.logit.default: _logit, aten.mse_loss.default: _mse_loss, aten.addr.default: _addr,
        aten.upsample_linear1d.default: _upsample_linear, aten.upsample_trilinear3d.default: _upsample_linear,
        aten.index_add.default: _index_add, aten.embedding_dense_backward.default: _embedding_dense_backward,
        aten.index_reduce.default: _index_reduce, aten.addbmm.default: _addbmm,
    }
    entries = {}
    for op, wrap in wrappers.items():  # ours, else torch's own table's (the device traces with both)
        base = table.get(op) or torch_decompositions.get(op)
        if base is not None:
            entries[op] = wrap(base)
    stateless = table[aten._native_batch_norm_legit_functional.default]
    entries.update({op: _batch_norm(table[op], op, stateless) for op in _BATCH_NORMS if op in table})
    return entries
