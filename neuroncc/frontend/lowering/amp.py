"""``torch.amp.GradScaler``'s two ops, as elementwise ops and reductions the IR has.

``GradScaler.unscale_`` calls ``_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)`` and
``GradScaler.update`` calls ``_amp_update_scale_(scale, growth_tracker, found_inf, growth, backoff, interval)``.
The eager device compiles their functional forms (below) and writes the results back, so a scaler's step is
two programs on the device (all the gradients' checks and unscales in one) instead of two CPU fallbacks; a
compiled graph holding them lowers the same way. Both follow ATen's CPU kernels
(``aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp``) value for value: every gradient is multiplied by
``inv_scale`` whether or not a non-finite value was found; ``found_inf`` becomes 1.0 when one was; the scale
backs off on a nonzero ``found_inf``, and grows after ``growth_interval`` clean steps unless growing would make it
non-finite. (ATen multiplies the float32 scale by the double factor before rounding; here the factor is a
float32 parameter: the same result for factors exactly representable in float32, such as the defaults 2.0 and
0.5.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

aten = torch.ops.aten


def non_finite_check_and_unscale(grads: list[torch.Tensor], found_inf: torch.Tensor,
                                 inv_scale: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    """``_amp_foreach_non_finite_check_and_unscale``: the unscaled gradients, and ``found_inf`` set to 1.0 if
    any of them holds an inf or a NaN (left as it was otherwise)."""
    unscaled = [(grad * inv_scale).to(grad.dtype) for grad in grads]
    found = found_inf
    for grad in grads:
        found = torch.where(torch.isfinite(grad).all(), found, torch.ones_like(found))
    return unscaled, found


def update_scale(scale: torch.Tensor, growth_tracker: torch.Tensor, found_inf: torch.Tensor, growth_factor: float,
                 backoff_factor: float, growth_interval: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``_amp_update_scale``: (the new scale, the new count of clean steps since the last change)."""
    found = found_inf != 0
    clean_steps = growth_tracker + 1
    grow = clean_steps == growth_interval
    grown = scale * growth_factor
    grown = torch.where(torch.isfinite(grown), grown, scale)
    new_scale = torch.where(found, scale * backoff_factor, torch.where(grow, grown, scale))
    new_tracker = torch.where(found | grow, torch.zeros_like(growth_tracker), clean_steps)
    return new_scale, new_tracker


def amp_decompositions() -> dict[torch._ops.OpOverload, Callable[..., Any]]:
    """The functional forms of GradScaler's ops -> their decompositions."""
    return {
        aten._amp_foreach_non_finite_check_and_unscale.default: non_finite_check_and_unscale,
        aten._amp_update_scale.default: update_scale,
    }
