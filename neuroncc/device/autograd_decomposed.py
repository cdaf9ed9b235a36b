"""Ops that autograd differentiates through their decomposition on the device, not through their backward op.

PyTorch's autograd records such an op (``upsample_bilinear2d``, ``replication_pad2d``, ``hardshrink``, ...)
as one node whose derivative is a dedicated backward op (``upsample_bilinear2d_backward``, ...). neuroncc has
no lowering for those backward ops and PyTorch no decomposition, so on the device they would run on CPU.
torch.compile never meets them: AOTAutograd differentiates the forward's decomposition. The device does the
same for the ops listed here: their AutogradPrivateUse1 kernel runs the op's decomposition (the front end's
table first, then PyTorch's), so autograd records the decomposition's ops, whose derivatives the device
compiles. Without a gradient to record (no input requires grad, or grad mode is off) the op runs as itself,
below autograd, as one compiled kernel.

The list is decided from the device's OpInfo sweep (``docs/ops.md``, "On the neuron device"): forward ops
that have a decomposition and whose backward op fell back, where the decomposition's gradients match
(``grid_sampler_2d``'s does not: its grid gets no gradient on some samples, so it stays out).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from neuroncc.device.untraced import untraced

aten = torch.ops.aten

#: (op name, overloads) whose derivative the device takes through the decomposition. (The ``.vec`` overloads
#: are composite: they call ``.default``.)
THROUGH_DECOMPOSITION: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("upsample_linear1d", ("default",)),
    ("upsample_bilinear2d", ("default",)),
    ("upsample_bicubic2d", ("default",)),
    ("upsample_trilinear3d", ("default",)),
    ("upsample_nearest1d", ("default",)),
    ("upsample_nearest2d", ("default",)),
    ("upsample_nearest3d", ("default",)),
    ("_upsample_nearest_exact1d", ("default",)),
    ("_upsample_nearest_exact2d", ("default",)),
    ("_upsample_nearest_exact3d", ("default",)),
    ("replication_pad1d", ("default",)),
    ("replication_pad2d", ("default",)),
    ("replication_pad3d", ("default",)),
    ("hardshrink", ("default",)),
    ("softshrink", ("default",)),
    ("multi_margin_loss", ("default",)),
    ("multilabel_margin_loss_forward", ("default",)),
)


def _decomposition(op: Any) -> Callable[..., Any] | None:
    from torch._decomp import decomposition_table as torch_decompositions

    from neuroncc.frontend.lowering.decompositions import decomposition_table

    return decomposition_table().get(op) or torch_decompositions.get(op)


def _kernel(op: Any) -> Callable[..., Any]:
    found: list[Callable[..., Any] | None] = []  # the decomposition, looked up on the first call that needs it

    def autograd_kernel(*args: Any, **kwargs: Any) -> Any:
        if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad
                                           for a in (*args, *kwargs.values())):
            if not found:
                found.append(_decomposition(op))
            if found[0] is not None:
                return found[0](*args, **kwargs)
        with torch._C._AutoDispatchBelowAutograd():
            return op(*args, **kwargs)

    return autograd_kernel


def register(library: torch.library.Library) -> None:
    """Register the AutogradPrivateUse1 kernels on ``library`` (an ``aten`` IMPL library)."""
    for name, overloads in THROUGH_DECOMPOSITION:
        packet = getattr(aten, name, None)
        for overload in overloads:
            op = getattr(packet, overload, None) if packet is not None else None
            if op is None:
                continue
            library.impl(name if overload == "default" else f"{name}.{overload}", untraced(_kernel(op)),
                         "AutogradPrivateUse1")
