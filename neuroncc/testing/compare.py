"""Judging a compiled result against eager when they differ by more than a tolerance: ask float64.

Eager PyTorch is a reference, not the truth: its float32 kernels round too. When a compiled result and eager's
differ, both are compared with the same computation run in float64; the compiled result passes when it is no
further from that answer than ``slack`` times eager's own error, plus a small allowance relative to the
output's scale. A layer norm over one element, where the normalized value is 0 in exact arithmetic and
2e-5 in eager, passes; a compiled result that is 1% off where eager is exact does not.
"""

from __future__ import annotations

import torch

#: Relative allowance (to max |float64 answer| + 1) per dtype, on top of ``slack`` x eager's error.
ALLOWANCE = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}
SLACK = 3.0


def special_positions_differ(got: torch.Tensor, want: torch.Tensor) -> str | None:
    """NaN, +inf and -inf must sit where eager has them."""
    for name, mask in (("NaN", torch.isnan), ("+inf", torch.isposinf), ("-inf", torch.isneginf)):
        if not torch.equal(mask(got), mask(want)):
            return f"{name} positions differ"
    return None


def float64_judgement(got: torch.Tensor, want: torch.Tensor, exact: torch.Tensor) -> str | None:
    """None when ``got`` is as close to ``exact`` (float64) as eager's ``want`` is; else why not.

    Only finite positions are judged; the caller checks NaN/inf placement (:func:`special_positions_differ`).
    """
    if exact.shape != want.shape or got.shape != want.shape:
        return f"float64 reference has shape {list(exact.shape)}, eager {list(want.shape)}"
    finite = torch.isfinite(want) & torch.isfinite(got) & torch.isfinite(exact)
    g, w, r = got.double()[finite], want.double()[finite], exact.double()[finite]
    if r.numel() == 0:
        return None
    error_got, error_eager = float((g - r).abs().max()), float((w - r).abs().max())
    scale = float(r.abs().max()) + 1.0
    if error_got <= SLACK * error_eager + ALLOWANCE.get(want.dtype, 1e-5) * scale:
        return None
    return f"error vs float64 {error_got:.3g}, eager's {error_eager:.3g}"
