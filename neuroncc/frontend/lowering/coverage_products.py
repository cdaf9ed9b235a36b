"""Distances and multilinear products added for OpInfo coverage: cdist, pdist (and their backward), _trilinear.

Distances are written from the pairwise differences, as eager's CPU kernels compute them (not the
``|a|^2 + |b|^2 - 2ab`` matmul form, which cancels): ``p = 0`` counts nonzero differences, ``p = inf`` takes
the largest, other ``p`` sum ``|d|^p`` and take the p-th root (``p = 1, 2`` without the pow). The gradients
follow ATen's formulas, including their choices at ties and zero distances (zero gradient there).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

aten = torch.ops.aten

#: Rows pdist pairs up by name (one index piece per row); more decline and stay refused.
_PDIST_ROWS = 256


def _pnorm(diff: torch.Tensor, p: float) -> torch.Tensor:
    """The p-norm over the last dim of ``diff``."""
    if p == 0:
        return (diff != 0).to(diff.dtype).sum(-1)
    if p == math.inf:
        return diff.abs().amax(-1)
    if p == 1:
        return diff.abs().sum(-1)
    if p == 2:
        return (diff * diff).sum(-1).sqrt()
    return diff.abs().pow(p).sum(-1).pow(1.0 / p)


def _pnorm_grad(diff: torch.Tensor, dist: torch.Tensor, p: float) -> torch.Tensor:
    """d dist / d diff (dist broadcast over the last dim), with ATen's zero at zero distance."""
    dist = dist.unsqueeze(-1)
    if p == 0:
        return torch.zeros_like(diff)
    if p == 1:
        return torch.sign(diff)
    if p == math.inf:
        return torch.sign(diff) * (diff.abs() == dist).to(diff.dtype)
    safe = torch.where(dist == 0, 1.0, dist)
    if p == 2:
        grad = diff / safe
    elif p < 2:
        grad = torch.sign(diff) * diff.abs().pow(p - 1) / safe.pow(p - 1)
        grad = torch.where((diff == 0) & (p < 1), 0.0, grad)
    else:
        grad = diff * diff.abs().pow(p - 2) / safe.pow(p - 1)
    return torch.where(dist == 0, 0.0, grad)


def cdist_forward(x1: torch.Tensor, x2: torch.Tensor, p: float, compute_mode: Any = None) -> torch.Tensor:
    """aten._cdist_forward: [.., P, M] x [.., R, M] -> [.., P, R]."""
    return _pnorm(x1.unsqueeze(-2) - x2.unsqueeze(-3), p)


def cdist_backward(grad: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, p: float,
                   cdist: torch.Tensor) -> torch.Tensor:
    """aten._cdist_backward: the gradient for x1 (summed over the batch dims x1 was broadcast along)."""
    diff = x1.unsqueeze(-2) - x2.unsqueeze(-3)
    full = (grad.unsqueeze(-1) * _pnorm_grad(diff, cdist, p)).sum(-2)
    return full.sum_to_size(x1.shape)


def _pairs(rows: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(i, j) for every i < j in row-major order, as pdist lists them."""
    firsts = [torch.full((rows - 1 - i,), i, dtype=torch.int64, device=device) for i in range(rows - 1)]
    seconds = [torch.arange(i + 1, rows, device=device) for i in range(rows - 1)]
    return torch.cat(firsts), torch.cat(seconds)


def pdist_forward(self: torch.Tensor, p: float = 2) -> Any:
    """aten._pdist_forward: the distances of every pair of rows i < j."""
    rows = self.shape[0]
    if rows > _PDIST_ROWS:
        return NotImplemented
    if rows < 2:
        return self.new_zeros((0,))
    first, second = _pairs(rows, self.device)
    return _pnorm(self[first] - self[second], p)


def pdist_backward(grad: torch.Tensor, self: torch.Tensor, p: float, pdist: torch.Tensor) -> Any:
    """aten._pdist_backward: each pair's gradient added to its first row and subtracted from its second."""
    rows = self.shape[0]
    if rows > _PDIST_ROWS:
        return NotImplemented
    if rows < 2:
        return torch.zeros_like(self)
    first, second = _pairs(rows, self.device)
    contribution = grad.unsqueeze(-1) * _pnorm_grad(self[first] - self[second], pdist, p)
    return torch.zeros_like(self).index_add(0, first, contribution).index_add(0, second, -contribution)


def trilinear(i1: torch.Tensor, i2: torch.Tensor, i3: torch.Tensor, expand1: Any, expand2: Any, expand3: Any,
              sumdim: Any, unroll_dim: int = 1) -> torch.Tensor:
    """aten._trilinear (nn.functional.bilinear): the broadcast product of the three operands, each with size-1
    dims inserted at its ``expand`` positions, summed over ``sumdim``."""
    def grow(t: torch.Tensor, dims: Any) -> torch.Tensor:
        for d in sorted(dims):
            t = t.unsqueeze(d)
        return t

    product = grow(i1, expand1) * grow(i2, expand2) * grow(i3, expand3)
    return product.sum(list(sumdim)) if len(sumdim) else product


#: aten op -> decomposition written here (one comment per rule).
PRODUCT_FORMULAS: dict[Any, Callable[..., Any]] = {
    aten._cdist_forward.default: cdist_forward,  # p-norm of the pairwise differences
    aten._cdist_backward.default: cdist_backward,  # ATen's p-norm gradient, summed over the other set
    aten._pdist_forward.default: pdist_forward,  # the same on the row pairs i < j
    aten._pdist_backward.default: pdist_backward,  # index_add of each pair's gradient to both rows
    aten._trilinear.default: trilinear,  # broadcast product, then sum
}
