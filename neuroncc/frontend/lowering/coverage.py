"""Ops added for OpInfo coverage: decompositions into ops the IR has, and a few lowerings.

Each entry was found missing by the OpInfo sweep (``tools/opinfo_sweep.py``) and is checked by it against
eager. The formulas are chosen for accuracy in relative terms, not only within a test's tolerance: near the
poles and for large arguments they switch to forms that neither cancel nor overflow. Functions that cannot be
written accurately from the IR's ops stay refused rather than approximately right. The special functions
(gamma family, Bessel family, orthogonal polynomials, float bit functions) live in ``special_*.py``.

They run after autograd (AOTAutograd's post-autograd table), so gradients still come from PyTorch's own
derivative formulas; a ``where`` here never meets the gradient-through-both-branches problem.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx
from torch._decomp import get_decompositions

from neuroncc.frontend.lowering.coverage_indexing import INDEXING_FORMULAS
from neuroncc.frontend.lowering.coverage_integers import INTEGER_FORMULAS
from neuroncc.frontend.lowering.coverage_pooling import POOLING_FORMULAS
from neuroncc.frontend.lowering.coverage_products import PRODUCT_FORMULAS
from neuroncc.frontend.lowering.context import LoweringContext
from neuroncc.frontend.lowering.special_bessel import BESSEL_FORMULAS
from neuroncc.frontend.lowering.special_bits import BIT_FORMULAS, BIT_LOWERINGS
from neuroncc.frontend.lowering.special_gamma import GAMMA_FORMULAS
from neuroncc.frontend.lowering.special_polynomials import POLYNOMIAL_FORMULAS
from neuroncc.ir import Value

aten = torch.ops.aten
prims = torch.ops.prims

_LN2 = math.log(2.0)
_OVERFLOW = 88.0  # exp(x) is finite in float32 below ~88.7
_HUGE = 1e18  # above this, (x - 1)(x + 1) or x * x overflows float32; use the asymptotic form


def _float_math(formula: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """A unary float function as PyTorch computes it: integers promote to the default float dtype, and
    bf16/f16 compute in float32 and round once."""
    def decomposition(x: torch.Tensor) -> torch.Tensor:
        out_dtype = x.dtype if x.is_floating_point() else torch.get_default_dtype()
        compute = torch.float32 if out_dtype in (torch.bfloat16, torch.float16) else out_dtype
        return formula(x.to(compute)).to(out_dtype)

    decomposition.__name__ = formula.__name__
    return decomposition


def _with_sign_of(x: torch.Tensor, magnitude: torch.Tensor) -> torch.Tensor:
    return torch.where(x < 0, -magnitude, magnitude)


@_float_math
def _acos(x: torch.Tensor) -> torch.Tensor:
    return torch.atan2(torch.sqrt((1 - x) * (1 + x)), x)  # (1-x)(1+x): no cancellation near |x| = 1


@_float_math
def _asin(x: torch.Tensor) -> torch.Tensor:
    return torch.atan2(x, torch.sqrt((1 - x) * (1 + x)))


@_float_math
def _acosh(x: torch.Tensor) -> torch.Tensor:
    t = x - 1
    near_one = torch.log1p(t + torch.sqrt(t * (x + 1)))  # log1p keeps acosh(1 + tiny) accurate
    return torch.where(x > _HUGE, torch.log(x) + _LN2, near_one)


@_float_math
def _asinh(x: torch.Tensor) -> torch.Tensor:
    a = torch.abs(x)
    small = torch.log1p(a + a * a / (1 + torch.sqrt(1 + a * a)))
    return _with_sign_of(x, torch.where(a > _HUGE, torch.log(a) + _LN2, small))


@_float_math
def _atanh(x: torch.Tensor) -> torch.Tensor:
    a = torch.abs(x)  # on |x|: near -1, 2x / (1 - x) would sit next to -1 and log1p would cancel
    return _with_sign_of(x, 0.5 * torch.log1p(2 * a / (1 - a)))


@_float_math
def _sinh(x: torch.Tensor) -> torch.Tensor:
    a = torch.abs(x)
    small = 0.5 * (torch.expm1(a) - torch.expm1(-a))  # no cancellation for |x| < 1
    large = torch.where(a < _OVERFLOW, 0.5 * (torch.exp(a) - torch.exp(-a)), torch.exp(a - _LN2))
    return _with_sign_of(x, torch.where(a < 1, small, large))


@_float_math
def _cosh(x: torch.Tensor) -> torch.Tensor:
    a = torch.abs(x)
    return torch.where(a < _OVERFLOW, 0.5 * (torch.exp(a) + torch.exp(-a)), torch.exp(a - _LN2))


@_float_math
def _log10(x: torch.Tensor) -> torch.Tensor:
    return torch.log(x) * (1 / math.log(10.0))


@_float_math
def _real_angle(x: torch.Tensor) -> torch.Tensor:
    # Real inputs: pi for negatives, 0 otherwise, NaN kept (as at::angle for real types).
    return torch.where(torch.isnan(x), x, torch.where(x < 0, math.pi, 0.0))


def _angle(x: torch.Tensor) -> torch.Tensor:
    if x.is_complex():  # atan2(im, re), a real tensor (the _float_math cast would drop the imaginary part)
        pairs = torch.view_as_real(x)
        return torch.atan2(pairs[..., 1], pairs[..., 0])
    return _real_angle(x)


def _nan_aware(pick: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Callable[..., torch.Tensor]:
    """fmax/fmin: like maximum/minimum, but a NaN loses to a number (NaN only if both are NaN)."""
    def decomposition(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        dtype = torch.result_type(a, b)
        a, b = a.to(dtype), b.to(dtype)
        if not dtype.is_floating_point:
            return pick(a, b)
        return torch.where(torch.isnan(a), b, torch.where(torch.isnan(b), a, pick(a, b)))

    return decomposition


def _hypot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    dtype = torch.result_type(a, b)
    compute = torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype
    a, b = torch.abs(a.to(compute)), torch.abs(b.to(compute))
    big, small = torch.maximum(a, b), torch.minimum(a, b)
    ratio = small / torch.where(big == 0, 1.0, big)  # scaled, so a * a never overflows
    scaled = big * torch.sqrt(1 + ratio * ratio)
    infinite = torch.isinf(a) | torch.isinf(b)  # hypot(inf, NaN) is inf, as C's hypot
    return torch.where(infinite, math.inf, scaled).to(dtype)


def _round_decimals(x: torch.Tensor, *, decimals: int) -> torch.Tensor:
    # As ATen's round_decimals kernel: scale by 10^|decimals| in the tensor's compute type, round half to even.
    compute = torch.float32 if x.dtype in (torch.bfloat16, torch.float16) else x.dtype
    scale = float(10 ** abs(decimals))
    y = x.to(compute)
    rounded = torch.round(y / scale) * scale if decimals < 0 else torch.round(y * scale) / scale
    return rounded.to(x.dtype)


# erfc(z) = t * exp(-z^2 + P(t)), t = 1 / (1 + z/2), for z >= 0 (Numerical Recipes' erfcc: relative error
# below 1.2e-7). exp(-z^2) is taken as exp(-zh^2) * exp(-(z - zh)(z + zh)) with zh = z to 1/16, so that the
# large argument is exact: 4e-7 relative error in float32 out to erfc's underflow.
_ERFC_P = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398, 1.48851587,
           -0.82215223, 0.17087277)


def _erfc_poly(t: torch.Tensor) -> torch.Tensor:
    poly = torch.full_like(t, _ERFC_P[-1])
    for coefficient in reversed(_ERFC_P[:-1]):
        poly = coefficient + t * poly
    return poly


def _erfc_parts(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(t, the exponent -z^2 + P(t) split as a product of two exps) for z >= 0: erfc(z) = t * e1 * e2."""
    t = 1 / (1 + 0.5 * z)
    zh = torch.trunc(z * 16) / 16
    return t, torch.exp(-zh * zh) * torch.exp(-(z - zh) * (z + zh) + _erfc_poly(t))


_ERFC_ZERO = 11.0  # erfc(11) is 1.4e-54: zero in float32; clamping there keeps inf out of the split below


@_float_math
def _erfc(x: torch.Tensor) -> torch.Tensor:
    t, e = _erfc_parts(torch.clamp(torch.abs(x), max=_ERFC_ZERO))
    tail = t * e
    return torch.where(x >= 0, tail, 2 - tail)


@_float_math
def _erfcx(x: torch.Tensor) -> torch.Tensor:
    # exp(x^2) erfc(x): for x >= 0 the exp(-x^2) inside erfc cancels (no overflow, no underflow).
    t = 1 / (1 + 0.5 * torch.abs(x))
    positive = t * torch.exp(_erfc_poly(t))
    return torch.where(x >= 0, positive, 2 * torch.exp(x * x) - positive)


@_float_math
def _log_ndtr(x: torch.Tensor) -> torch.Tensor:
    # log(Phi(x)) = log(erfc(z) / 2), z = -x / sqrt 2: from the exponent itself in the left tail (no underflow),
    # log1p(-erfc(-z) / 2) in the right one (no cancellation). Infinite x is put back at the end.
    z = -x * (1 / math.sqrt(2.0))
    a = torch.where(torch.isinf(z), 0.0, torch.abs(z))
    t, e = _erfc_parts(a)
    zh = torch.trunc(a * 16) / 16
    left = torch.log(t) - zh * zh - (a - zh) * (a + zh) + _erfc_poly(t) - _LN2
    finite = torch.where(z >= 0, left, torch.log1p(-0.5 * t * e))
    return torch.where(z == math.inf, -math.inf, torch.where(z == -math.inf, 0.0, finite))


def _addbmm(input: torch.Tensor, batch1: torch.Tensor, batch2: torch.Tensor, *, beta: Any = 1,
            alpha: Any = 1) -> torch.Tensor:
    # beta * input + alpha * sum_b batch1[b] @ batch2[b]; beta = 0 ignores input (NaN in it included), as aten.
    # Integer tensors take alpha and beta as integers (ATen's Scalar.to<int64_t>() truncates 0.6 to 0).
    if not input.is_floating_point() and not input.is_complex():
        alpha, beta = (bool(alpha), bool(beta)) if input.dtype is torch.bool else (int(alpha), int(beta))
    product = torch.bmm(batch1, batch2)
    product = product.sum(0, dtype=product.dtype)  # int32 stays int32 (sum widens integers to int64)
    product = product if alpha == 1 else product * alpha
    return product if beta == 0 else (input if beta == 1 else input * beta) + product


#: Elements the masked [.., n, n, ..] tensor of PyTorch's scan decompositions may hold (O(n^2) in the
#: scanned length); longer scans are refused rather than allowed to exhaust memory.
_SCAN_LIMIT = 1 << 22


def _masked_scan(reduce: Callable[..., torch.Tensor], identity: int) -> Callable[..., Any]:
    """cumsum/cumprod as one reduction over a masked triangle (PyTorch's own decomposition, written with
    the ops the IR has): out[.., j, ..] = reduce over i <= j of a[.., i, ..]. The triangle is O(n^2) in the
    scanned length, so long scans decline (and stay refused) instead of exhausting memory."""
    def decomposition(a: torch.Tensor, dim: int, *, dtype: torch.dtype | None = None) -> Any:
        if dtype is None:
            dtype = a.dtype if a.is_floating_point() else torch.int64  # integer scans accumulate in int64
        if a.ndim == 0:
            return a.to(dtype)
        dim = dim % a.ndim
        length = a.shape[dim]
        if a.numel() * length > _SCAN_LIMIT:
            return NotImplemented
        positions = torch.arange(length, device=a.device)
        mask = positions.unsqueeze(1) <= positions  # [i, j]: i contributes to j
        for _ in range(a.ndim - dim - 1):
            mask = mask.unsqueeze(-1)
        masked = torch.where(mask, a.to(dtype).unsqueeze(dim + 1), identity)
        return reduce(masked, dim).to(dtype)  # sum and prod widen int32 to int64; wrapping agrees mod 2**32

    return decomposition


#: aten op -> decomposition written here (one comment per rule says why it is accurate).
FORMULAS: dict[Any, Callable[..., torch.Tensor]] = {
    aten.acos.default: _acos,  # atan2(sqrt((1-x)(1+x)), x)
    aten.asin.default: _asin,  # atan2(x, sqrt((1-x)(1+x)))
    aten.acosh.default: _acosh,  # log1p(t + sqrt(t(x+1))), t = x-1; log(x)+ln2 for huge x
    aten.asinh.default: _asinh,  # sign * log1p(a + a^2/(1+sqrt(1+a^2))); log(a)+ln2 for huge a
    aten.atanh.default: _atanh,  # sign * log1p(2a/(1-a))/2, a = |x|
    aten.sinh.default: _sinh,  # expm1 form below 1, exp(a-ln2) past float32's exp overflow
    aten.cosh.default: _cosh,  # (exp(a)+exp(-a))/2, exp(a-ln2) past exp's overflow
    aten.log10.default: _log10,  # log(x)/ln(10): one extra rounding
    aten.angle.default: _angle,  # real: pi for negatives; complex: atan2(im, re)
    aten.fmax.default: _nan_aware(torch.maximum),  # NaN-ignoring maximum
    aten.fmin.default: _nan_aware(torch.minimum),  # NaN-ignoring minimum
    aten.hypot.default: _hypot,  # scaled: max * sqrt(1 + (min/max)^2)
    aten.round.decimals: _round_decimals,  # ATen's own scaling
    aten.erfc.default: _erfc,  # rational exponent form, exact large argument (no 1 - erf cancellation)
    aten.special_erfcx.default: _erfcx,  # the same form without exp(-x^2)
    aten.special_log_ndtr.default: _log_ndtr,  # log of that form: no underflow in the left tail
    aten.addbmm.default: _addbmm,  # bmm then a sum over the batch
    aten.cumsum.default: _masked_scan(torch.sum, 0),  # a masked triangle, while it stays small
    aten.cumprod.default: _masked_scan(torch.prod, 1),  # same, with prod
}

#: PyTorch decompositions adopted because the sweep shows they reach ops the IR has and match eager.
#: (Some others look tempting and are not here: arange.start_step goes to prims.iota twice over,
#: bucketize and diagonal_scatter produce graphs AOTAutograd rejects.)
TORCH_DECOMPOSITIONS = (
    aten._batch_norm_with_update_functional,  # training batch norm with running-stat updates
    aten.addmv,  # beta * input + alpha * (mat @ vec)
    aten.as_strided_copy,  # as_strided
    aten.diagonal,  # as_strided view of the diagonal
    aten.dist,  # norm of the difference
    aten.ldexp,  # x * 2^e
    aten.narrow_copy,  # slice
    aten.new_empty_strided,  # empty_strided
    aten.unbind_copy,  # select per index
    aten.unfold,  # as_strided windows
    aten.max_pool3d_with_indices,  # strided window slices + amax/argmax, as the 2-d one
    aten.grid_sampler_2d,  # gathers at the computed source pixels, bilinear/nearest/bicubic weights
)


def coverage_decompositions() -> dict[Any, Callable[..., Any]]:
    """The entries this module adds to the front end's decomposition table."""
    table = dict(get_decompositions(list(TORCH_DECOMPOSITIONS)))
    table.update(FORMULAS)
    table.update(GAMMA_FORMULAS)  # special functions (frontend/special_*.py)
    table.update(BESSEL_FORMULAS)
    table.update(POLYNOMIAL_FORMULAS)
    table.update(BIT_FORMULAS)
    table.update(INDEXING_FORMULAS)  # scatter/index family (coverage_indexing.py)
    table.update(POOLING_FORMULAS)  # pooling family (coverage_pooling.py)
    table.update(PRODUCT_FORMULAS)  # cdist, pdist, _trilinear (coverage_products.py)
    table.update(INTEGER_FORMULAS)  # gcd, lcm (coverage_integers.py)
    return table


# ---- lowerings -----------------------------------------------------------------------------------------


def _iota(ctx: LoweringContext, node: fx.Node, length: int, *, start: Any = 0, step: Any = 1, **kwargs: Any) -> Value:
    """prims.iota (what PyTorch's own arange decompositions produce): the IR's iota."""
    return ctx.emit("iota", length=int(length), start=start, step=step, dtype=ctx.out_dtype(node))


def _empty(ctx: LoweringContext, node: fx.Node, *args: Any, **kwargs: Any) -> Value:
    """Uninitialized tensors (empty_permuted in backward graphs): zeros are a valid choice of contents."""
    dtype = ctx.out_dtype(node)
    return ctx.full(ctx.out_shape(node), dtype, 0)


COVERAGE_LOWERINGS: dict[Any, Callable[..., Any]] = {
    prims.iota.default: _iota,
    aten.empty_permuted.default: _empty,
    **BIT_LOWERINGS,  # view.dtype as the IR's bitcast
}
