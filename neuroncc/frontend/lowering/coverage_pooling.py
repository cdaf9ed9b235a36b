"""Pooling ops added for OpInfo coverage, written with the IR's matmuls, gathers, scatters and reductions.

Average pooling (plain and adaptive, any number of spatial dims, ceil_mode, divisor_override, padding counted
or not) is separable: the window sum is one matrix per spatial dim, ``M[o, i] = start[o] <= i < end[o]``,
built from ``arange`` comparisons at trace time, and the divisor an outer product of per-dim counts. The
forward applies ``M`` along each dim and divides, as eager sums a window and divides once; the backward
applies ``M^T`` to ``grad / divisor``. Adaptive max pooling gathers each window (clamped to its last element,
which changes neither the max nor its index) and takes amax/argmax; every max-pool backward is a
scatter-add of the gradient at the saved flat indices.

The plain 4-d avg_pool2d without ceil_mode or divisor_override keeps its depthwise-convolution lowering
(``lower_reductions.py``); these decompositions decline it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

aten = torch.ops.aten


def _per_dim(value: Any, n: int, default: Sequence[int] | None = None) -> list[int]:
    """An int or a 1/n-long list as n ints (empty or None means ``default``)."""
    if isinstance(value, int):
        return [value] * n
    value = list(value) if value else list(default or [])
    return value * n if len(value) == 1 else value


def _pooled_length(size: int, kernel: int, stride: int, pad: int, ceil_mode: bool) -> int:
    """PyTorch's pooling_output_shape (dilation 1): a ceil-mode window must start inside the padded input."""
    out = (size + 2 * pad - kernel + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def _window_matrix(starts: torch.Tensor, ends: torch.Tensor, size: int) -> torch.Tensor:
    """Bool [out, size]: input i lies in output o's window [starts[o], ends[o])."""
    i = torch.arange(size, device=starts.device)
    return (starts.unsqueeze(1) <= i) & (i < ends.unsqueeze(1))


def _along(x: torch.Tensor, dim: int, matrix: torch.Tensor) -> torch.Tensor:
    """Contract ``x``'s ``dim`` with ``matrix``'s columns: [.., in, ..] x [out, in] -> [.., out, ..]."""
    moved = x.movedim(dim, -1)
    return torch.matmul(moved, matrix.to(x.dtype).t()).movedim(-1, dim)


def _outer(vectors: list[torch.Tensor]) -> torch.Tensor:
    """The outer product of per-dim vectors, shaped [n0, n1, ...]."""
    result = vectors[0]
    for v in vectors[1:]:
        result = result.unsqueeze(-1) * v
    return result


def _avg_windows(x_shape: Sequence[int], nspatial: int, kernel_size: Any, stride: Any, padding: Any,
                 ceil_mode: bool, count_include_pad: bool, divisor_override: Any,
                 device: torch.device) -> tuple[list[torch.Tensor], torch.Tensor | float]:
    """The per-dim window matrices of avg_pool and its divisor (a tensor over the output's spatial dims), on
    ``device`` (the pooled tensor's: a neuron tensor's trace under torch.compile mixes no CPU tensor into it)."""
    kernel = _per_dim(kernel_size, nspatial)
    strides = _per_dim(stride, nspatial, kernel)
    pads = _per_dim(padding, nspatial, [0])
    matrices, pool_sizes, valid = [], [], []
    for size, k, s, p in zip(x_shape[-nspatial:], kernel, strides, pads):
        out = _pooled_length(size, k, s, p, ceil_mode)
        starts = torch.arange(out, device=device) * s - p
        ends = torch.clamp(starts + k, max=size + p)  # a window may overhang the padding (ceil_mode)
        matrices.append(_window_matrix(starts, ends, size))
        pool_sizes.append(ends - starts)
        valid.append(torch.clamp(ends, max=size) - torch.clamp(starts, min=0))
    if divisor_override:
        return matrices, float(divisor_override)
    counts = _outer(pool_sizes if count_include_pad else valid)
    return matrices, torch.clamp(counts, min=1)


def _convolution_lowers_it(x: torch.Tensor, ceil_mode: bool, divisor_override: Any) -> bool:
    """The cases lower_reductions.py lowers as a depthwise convolution (kept: fewer ops, TensorE on NKI)."""
    return x.ndim == 4 and not ceil_mode and divisor_override is None


def _avg_pool(nspatial: int) -> Callable[..., Any]:
    def decomposition(self: torch.Tensor, kernel_size: Any, stride: Any = (), padding: Any = 0,
                      ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: Any = None) -> Any:
        if nspatial == 2 and _convolution_lowers_it(self, ceil_mode, divisor_override):
            return NotImplemented
        matrices, divisor = _avg_windows(self.shape, nspatial, kernel_size, stride, padding, ceil_mode,
                                         count_include_pad, divisor_override, self.device)
        summed = self
        for d, matrix in enumerate(matrices):
            summed = _along(summed, self.ndim - nspatial + d, matrix)
        if not self.is_floating_point():  # ATen's integer average: the window sum over the divisor, truncated
            return torch.div(summed, divisor if isinstance(divisor, torch.Tensor) else int(divisor),
                             rounding_mode="trunc")
        return summed / divisor

    return decomposition


def _avg_pool_backward(nspatial: int) -> Callable[..., Any]:
    def decomposition(grad_output: torch.Tensor, self: torch.Tensor, kernel_size: Any, stride: Any, padding: Any,
                      ceil_mode: bool, count_include_pad: bool, divisor_override: Any) -> Any:
        if nspatial == 2 and _convolution_lowers_it(self, ceil_mode, divisor_override):
            return NotImplemented
        matrices, divisor = _avg_windows(self.shape, nspatial, kernel_size, stride, padding, ceil_mode,
                                         count_include_pad, divisor_override, grad_output.device)
        grad = grad_output / divisor
        for d, matrix in enumerate(matrices):
            grad = _along(grad, self.ndim - nspatial + d, matrix.t())
        return grad.contiguous()

    return decomposition


def _adaptive_bounds(size: int, out: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Adaptive pooling's windows: [floor(o * size / out), ceil((o + 1) * size / out)), on ``device``."""
    o = torch.arange(out, device=device)
    return torch.div(o * size, out, rounding_mode="floor"), torch.div((o + 1) * size + out - 1, out,
                                                                        rounding_mode="floor")


def _adaptive_avg_windows(x_shape: Sequence[int], output_size: Sequence[int],
                          device: torch.device) -> tuple[list[torch.Tensor], torch.Tensor]:
    nspatial = len(output_size)
    matrices, counts = [], []
    for size, out in zip(x_shape[-nspatial:], output_size):
        starts, ends = _adaptive_bounds(size, out, device)
        matrices.append(_window_matrix(starts, ends, size))
        counts.append(ends - starts)
    return matrices, _outer(counts)


def adaptive_avg_pool(self: torch.Tensor, output_size: Any) -> torch.Tensor:
    """_adaptive_avg_pool2d/3d: the window sums over the window sizes."""
    output_size = list(output_size)
    matrices, counts = _adaptive_avg_windows(self.shape, output_size, self.device)
    summed = self
    for d, matrix in enumerate(matrices):
        summed = _along(summed, self.ndim - len(output_size) + d, matrix)
    return summed / counts


def _adaptive_avg_pool_backward(nspatial: int) -> Callable[..., Any]:
    def decomposition(grad_output: torch.Tensor, self: torch.Tensor) -> torch.Tensor:
        output_size = list(grad_output.shape[-nspatial:])
        matrices, counts = _adaptive_avg_windows(self.shape, output_size, grad_output.device)
        grad = grad_output / counts
        for d, matrix in enumerate(matrices):
            grad = _along(grad, self.ndim - nspatial + d, matrix.t())
        return grad.contiguous()

    return decomposition


def _adaptive_max_pool(nspatial: int, torch_rule: Callable[..., Any]) -> Callable[..., Any]:
    """adaptive_max_pool2d/3d: PyTorch's rule where it has one (global or evenly divisible windows), else a
    gather of every (clamped) window and amax/argmax over it."""
    def decomposition(self: torch.Tensor, output_size: Any) -> Any:
        output_size = list(output_size)
        handled = torch_rule(self, output_size)
        if handled is not NotImplemented:
            return handled
        lead = self.ndim - nspatial
        windows, flat_index, strides = self, None, [math.prod(self.shape[lead + d + 1:]) for d in range(nspatial)]
        for d, (size, out) in enumerate(zip(self.shape[lead:], output_size)):
            starts, ends = _adaptive_bounds(size, out, self.device)
            width = max(-(-(o + 1) * size // out) - (o * size) // out for o in range(out))
            window = torch.arange(width, device=self.device)
            index = torch.minimum(starts.unsqueeze(1) + window, ends.unsqueeze(1) - 1)  # [out, K]
            axis = lead + 2 * d  # each earlier spatial dim became (out, K)
            picked = windows.index_select(axis, index.reshape(-1))
            windows = picked.reshape(picked.shape[:axis] + (out, width) + picked.shape[axis + 1:])
            term = (index * strides[d]).reshape([1] * (2 * d) + [out, width])
            flat_index = term if flat_index is None else flat_index.unsqueeze(-1).unsqueeze(-1) + term
        # [.., o0, k0, o1, k1, ..] -> [.., o0, o1, .., k0 k1 ..]
        order = list(range(lead)) + [lead + 2 * d for d in range(nspatial)] + [lead + 2 * d + 1 for d in range(nspatial)]
        windows = windows.permute(order).flatten(-nspatial)
        flat_index = flat_index.permute([2 * d for d in range(nspatial)] + [2 * d + 1 for d in range(nspatial)])
        flat_index = flat_index.flatten(-nspatial).expand(windows.shape)
        which = torch.argmax(windows, -1, keepdim=True)
        return torch.amax(windows, -1), torch.gather(flat_index, -1, which).squeeze(-1)

    return decomposition


def _max_pool_backward(nspatial: int) -> Callable[..., Any]:
    """Every max-pool backward with saved indices: scatter-add the gradient at the flat spatial indices."""
    def decomposition(grad_output: torch.Tensor, self: torch.Tensor, *args: Any) -> torch.Tensor:
        indices = args[-1]
        lead = self.shape[:-nspatial]
        grad = torch.zeros(lead + (math.prod(self.shape[-nspatial:]),), dtype=grad_output.dtype,
                           device=grad_output.device)
        grad = grad.scatter_add(-1, indices.flatten(-nspatial), grad_output.flatten(-nspatial))
        return grad.reshape(self.shape)

    return decomposition


def _aa_scale(size: int, out: int, align_corners: bool, scale: float | None) -> float:
    """area_pixel_compute_scale: the input step per output pixel."""
    if align_corners:
        return (size - 1) / (out - 1) if out > 1 else 0.0
    return 1.0 / scale if scale is not None and scale > 0 else size / out


def _aa_weights(size: int, out: int, align_corners: bool, scale: float | None, device: torch.device) -> torch.Tensor:
    """[out, size] antialiased bilinear weights as ATen's _compute_indices_min_size_weights_aa computes them:
    a triangle filter stretched by the scale when downsampling, cut to [xmin, xmin + xsize), normalized."""
    step = _aa_scale(size, out, align_corners, scale)
    support = step if step >= 1.0 else 1.0
    invscale = 1.0 / step if step >= 1.0 else 1.0
    center = (torch.arange(out, dtype=torch.float32, device=device) + 0.5) * step
    xmin = torch.clamp(torch.trunc(center - support + 0.5), min=0)
    xmax = torch.clamp(torch.trunc(center + support + 0.5), max=size)
    i = torch.arange(size, dtype=torch.float32, device=device)
    taps = torch.clamp(1 - ((i - center.unsqueeze(1) + 0.5) * invscale).abs(), min=0)
    inside = (xmin.unsqueeze(1) <= i) & (i < xmax.unsqueeze(1))
    taps = torch.where(inside, taps, 0.0)
    total = taps.sum(1, keepdim=True)
    return taps / torch.where(total == 0, 1.0, total)


def upsample_bilinear2d_aa(self: torch.Tensor, output_size: Any, align_corners: bool, scales_h: Any = None,
                           scales_w: Any = None) -> torch.Tensor:
    """aten._upsample_bilinear2d_aa: separable, the width pass first as eager runs it. Not for uint8: ATen's
    uint8 kernel uses fixed-point weights with its own rounding (the device runs it on CPU); the weights cast
    to an integer dtype were all 0 (an all-zero image)."""
    if not self.is_floating_point():
        return NotImplemented
    out_h, out_w = output_size
    width = _aa_weights(self.shape[-1], out_w, align_corners, scales_w, self.device).to(self.dtype)
    height = _aa_weights(self.shape[-2], out_h, align_corners, scales_h, self.device).to(self.dtype)
    return _along(_along(self, self.ndim - 1, width), self.ndim - 2, height).contiguous()  # eager's layout


def upsample_bilinear2d_aa_backward(grad_output: torch.Tensor, output_size: Any, input_size: Any,
                                    align_corners: bool, scales_h: Any = None, scales_w: Any = None) -> torch.Tensor:
    out_h, out_w = output_size
    device = grad_output.device
    width = _aa_weights(input_size[-1], out_w, align_corners, scales_w, device).to(grad_output.dtype)
    height = _aa_weights(input_size[-2], out_h, align_corners, scales_h, device).to(grad_output.dtype)
    grad = _along(grad_output, grad_output.ndim - 2, height.t())
    return _along(grad, grad_output.ndim - 1, width.t()).contiguous()


def _reflect(coords: torch.Tensor, twice_low: int, twice_high: int) -> torch.Tensor:
    """Fold coordinates into [low, high] by reflection (bounds doubled so half-integers stay exact)."""
    if twice_low == twice_high:
        return torch.zeros_like(coords)
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    distance = (coords - low).abs()
    extra = torch.fmod(distance, span)
    flips = torch.floor(distance / span)
    return torch.where(torch.fmod(flips, 2) == 0, extra + low, span + low - extra)


def grid_sampler_3d(input: torch.Tensor, grid: torch.Tensor, interpolation_mode: int = 0, padding_mode: int = 0,
                    align_corners: bool = False) -> Any:
    """aten.grid_sampler_3d (trilinear or nearest; zeros, border or reflection padding), as PyTorch's own
    grid_sampler_2d decomposition one dimension up: gathers of the 8 (or 1) corners, weighted and summed in
    eager's corner order. A corner outside the input contributes nothing (not 0 * its value)."""
    if interpolation_mode not in (0, 1) or padding_mode not in (0, 1, 2):
        return NotImplemented
    n, c, depth, height, width = input.shape
    _, od, oh, ow, _ = grid.shape

    def source(coords: torch.Tensor, size: int) -> torch.Tensor:
        scale = (size * 0.5 - 0.5) if align_corners else size * 0.5
        coords = coords * scale + (size * 0.5 - 0.5)
        if padding_mode == 1:
            return torch.clamp(coords, 0, size - 1)
        if padding_mode == 2:
            folded = _reflect(coords, 0, 2 * (size - 1)) if align_corners else _reflect(coords, -1, 2 * size - 1)
            return torch.clamp(folded, 0, size - 1)
        return coords

    ix, iy, iz = source(grid[..., 0], width), source(grid[..., 1], height), source(grid[..., 2], depth)
    flat = input.reshape(n, c, depth * height * width)

    def corner(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, weight: Any) -> torch.Tensor:
        inside = (x >= 0) & (x < width) & (y >= 0) & (y < height) & (z >= 0) & (z < depth)
        index = torch.where(inside, (z * height + y) * width + x, 0).to(torch.int64)
        values = torch.gather(flat, 2, index.reshape(n, 1, -1).expand(n, c, od * oh * ow)).reshape(n, c, od, oh, ow)
        return torch.where(inside.unsqueeze(1), values * weight, 0.0)

    if interpolation_mode == 1:
        one = torch.ones((), dtype=input.dtype)
        return corner(torch.round(ix), torch.round(iy), torch.round(iz), one)
    x0, y0, z0 = torch.floor(ix), torch.floor(iy), torch.floor(iz)
    x1, y1, z1 = x0 + 1, y0 + 1, z0 + 1
    wx, wy, wz = ((x1 - ix, ix - x0), (y1 - iy, iy - y0), (z1 - iz, iz - z0))
    total = None
    for zc, wzc in ((z0, wz[0]), (z1, wz[1])):  # eager's order: top then bottom, north then south, west then east
        for yc, wyc in ((y0, wy[0]), (y1, wy[1])):
            for xc, wxc in ((x0, wx[0]), (x1, wx[1])):
                term = corner(xc, yc, zc, (wxc * wyc * wzc).unsqueeze(1))
                total = term if total is None else total + term
    return total


def _torch_rule(op: Any) -> Callable[..., Any]:
    from torch._decomp import decomposition_table

    return decomposition_table[op]


def _floats_only(op: Any) -> Callable[..., Any]:
    """PyTorch's rule for ``op``, declined for integer images: ATen resizes uint8 bilinearly with fixed-point
    weights and its own rounding, one off (in 16% of the pixels) from the rounded float result the rule gives;
    the call runs on CPU."""
    rule = _torch_rule(op)

    def decomposition(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        return rule(self, *args, **kwargs) if self.is_floating_point() else NotImplemented

    return decomposition


#: aten op -> decomposition written here (one comment per rule).
POOLING_FORMULAS: dict[Any, Callable[..., Any]] = {
    aten.avg_pool2d.default: _avg_pool(2),  # separable window sums; ceil_mode, divisor_override, 3-d input
    aten.avg_pool3d.default: _avg_pool(3),  # same, three spatial dims
    aten.avg_pool2d_backward.default: _avg_pool_backward(2),  # transposed window matrices on grad / divisor
    aten.avg_pool3d_backward.default: _avg_pool_backward(3),
    aten._adaptive_avg_pool3d.default: adaptive_avg_pool,  # separable adaptive window sums / sizes
    aten._adaptive_avg_pool2d_backward.default: _adaptive_avg_pool_backward(2),
    aten._adaptive_avg_pool3d_backward.default: _adaptive_avg_pool_backward(3),
    aten.adaptive_max_pool2d.default: _adaptive_max_pool(2, _torch_rule(aten.adaptive_max_pool2d.default)),
    aten.adaptive_max_pool3d.default: _adaptive_max_pool(3, _torch_rule(aten.adaptive_max_pool3d.default)),
    aten.max_pool3d_with_indices_backward.default: _max_pool_backward(3),  # scatter-add at the argmax
    aten.adaptive_max_pool2d_backward.default: _max_pool_backward(2),
    aten.adaptive_max_pool3d_backward.default: _max_pool_backward(3),
    aten._upsample_bilinear2d_aa.default: upsample_bilinear2d_aa,  # separable antialiased weight matrices
    aten._upsample_bilinear2d_aa_backward.default: upsample_bilinear2d_aa_backward,  # their transposes
    aten.grid_sampler_3d.default: grid_sampler_3d,  # corner gathers, weighted, in eager's order
    aten.upsample_bilinear2d.default: _floats_only(aten.upsample_bilinear2d.default),  # not uint8 (see there)
    aten.upsample_bilinear2d.vec: _floats_only(aten.upsample_bilinear2d.vec),
}
