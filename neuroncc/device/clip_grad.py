"""``torch.nn.utils.clip_grad_norm_`` on the device as two programs: the total norm, and the scaling.

PyTorch's ``clip_grad_norm_`` calls ``_get_total_norm`` (``_foreach_norm`` over the gradients: one new 0-d
tensor per gradient; ``torch.stack`` of those; ``vector_norm``) and ``_clip_grads_with_norm_`` (``max_norm /
(total + 1e-6)``, ``clamp``, ``_foreach_mul_``): ~8 device ops and, over a model's 120 gradients, 120 0-d
tensors made and stacked every step (3.7x CPU's time, session 31). :func:`install` wraps both functions of
``torch.nn.utils.clip_grad`` (the module ``clip_grad_norm_`` looks them up in): a call whose gradients are dense
tensors of one floating dtype on one neuron device (``foreach`` not False) runs the function's own ops, in its
order, as one traced program (foreach_optimizers.run_step: compiled once per signature, the tensors' memory
read and written where it is; ``max_norm`` a lifted float). The values are the functions', bit for bit
(tests/device/test_training_step.py). Anything else, and TorchDynamo tracing the call, runs PyTorch's function. The
calls count as ``torch.nn.utils.clip_grad._get_total_norm`` / ``_clip_grads_with_norm_`` in
``neuroncc.get_executed_ops()``.
"""

from __future__ import annotations

from typing import Any

import torch

from neuroncc.device.foreach_optimizers import dense, run_step

_TOTAL = "torch.nn.utils.clip_grad._get_total_norm"
_CLIP = "torch.nn.utils.clip_grad._clip_grads_with_norm_"
_installed = False


def install() -> None:
    """Wrap ``torch.nn.utils.clip_grad._get_total_norm`` and ``_clip_grads_with_norm_`` (once; with the device's
    foreach kernels, dispatch.py)."""
    global _installed
    if _installed:
        return
    _installed = True
    import torch.nn.utils.clip_grad as module

    total_norm, clip_with_norm = module._get_total_norm, module._clip_grads_with_norm_

    def routed_total_norm(tensors: Any, norm_type: float = 2.0, error_if_nonfinite: bool = False,
                          foreach: bool | None = None) -> torch.Tensor:
        tensors = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
        result = None
        if foreach is not False and not torch.compiler.is_compiling():
            result = _total_norm(tensors, float(norm_type))
        if result is None:
            return total_norm(tensors, norm_type, error_if_nonfinite, foreach)
        if error_if_nonfinite and torch.logical_or(result.isnan(), result.isinf()):
            raise RuntimeError(
                f"The total norm of order {float(norm_type)} for gradients from `parameters` is non-finite, so it "
                "cannot be clipped. To disable this error and scale the gradients by the non-finite norm anyway, "
                "set `error_if_nonfinite=False`")
        return result

    def routed_clip_with_norm(parameters: Any, max_norm: float, total_norm: torch.Tensor,
                              foreach: bool | None = None) -> None:
        parameters = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
        if foreach is False or torch.compiler.is_compiling() or not _clip(parameters, float(max_norm), total_norm):
            clip_with_norm(parameters, max_norm, total_norm, foreach)

    for routed, original in ((routed_total_norm, total_norm), (routed_clip_with_norm, clip_with_norm)):
        routed.__wrapped__ = original  # type: ignore[attr-defined]
        routed.__name__, routed.__doc__ = original.__name__, original.__doc__
    module._get_total_norm = routed_total_norm
    module._clip_grads_with_norm_ = routed_clip_with_norm


def _total_norm(tensors: list[torch.Tensor], norm_type: float) -> torch.Tensor | None:
    """The total norm as one program (None: PyTorch's function computes it)."""
    placed = dense([tensors])
    if placed is None:
        return None
    with torch.no_grad():
        out = torch.empty((), dtype=placed.dtype, device=tensors[0].device)
        if run_step(_TOTAL, _total_norm_math, [*tensors, out], [], len(tensors), (norm_type,), placed, [out]):
            return out
    return None


def _total_norm_math(tensors: list[torch.Tensor], floats: list[float], n: int, variant: tuple) -> None:
    """``_get_total_norm``'s ops (one device and dtype, foreach): the norm of the per-tensor norms."""
    (norm_type,) = variant
    norms = torch._foreach_norm(tensors[:n], norm_type)
    tensors[n].copy_(torch.linalg.vector_norm(torch.stack(norms), norm_type))


def _clip(parameters: list[torch.Tensor], max_norm: float, total_norm: torch.Tensor) -> bool:
    """The gradients scaled as one program; False when PyTorch's function must run it (nothing done)."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return False
    placed = dense([grads])
    if placed is None or type(total_norm) is not torch.Tensor or total_norm.dim() != 0 \
            or total_norm.dtype is not placed.dtype or total_norm.device != grads[0].device:
        return False
    with torch.no_grad():
        return run_step(_CLIP, _clip_math, [*grads, total_norm], [max_norm], len(grads), (), placed, grads)


def _clip_math(tensors: list[torch.Tensor], floats: list[float], n: int, variant: tuple) -> None:
    """``_clip_grads_with_norm_``'s ops: the gradients times min(max_norm / (total + 1e-6), 1)."""
    clip_coef = floats[0] / (tensors[n] + 1e-6)
    torch._foreach_mul_(tensors[:n], torch.clamp(clip_coef, max=1.0))
