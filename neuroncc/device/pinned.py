"""``Tensor.pin_memory()`` when the pinned memory is the neuron device's: a copy in ordinary host memory.

The device's memory is host memory, so there is nothing to pin: a CPU tensor moves to the device at the same cost
from pageable memory. PyTorch asks the current accelerator's hooks for a pinned-memory allocator, and a device
registered from Python cannot provide one (torch 2.13's Python ``PrivateUse1Hooks`` has no such method): every
``pin_memory()`` raised ``You should register PrivateUse1HooksInterface ... getPinnedMemoryAllocator``, which
broke ``DataLoader(pin_memory=True)`` (it pins whenever an accelerator is available) and torch.distributed
checkpoint's staging in pinned memory. Only ``pin_memory()`` is covered: ``torch.empty(..., pin_memory=True)``
still raises that error (its CPU kernel is ATen's factory, not replaced here).
"""

from __future__ import annotations

from typing import Any

import torch

_PIN = torch.ops.aten._pin_memory.default
_ATEN = torch._C.DispatchKeySet(torch._C.DispatchKey.CompositeExplicitAutograd)


def pin_memory(tensor: torch.Tensor, device: torch.device | None = None) -> torch.Tensor:
    """``aten::_pin_memory`` for CPU tensors: the pinned copy (same sizes and strides) in the device's case, ATen's
    kernel for any other device."""
    target = device.type if device is not None else _current_accelerator()
    if target != torch._C._get_privateuse1_backend_name():
        return _PIN.redispatch(_ATEN, tensor, device)
    return tensor.clone(memory_format=torch.preserve_format)


def _current_accelerator() -> str | None:
    accelerator: Any = torch.accelerator.current_accelerator()
    return accelerator.type if accelerator is not None else None


def register(library: torch.library.Library) -> None:
    """``aten::_pin_memory`` for the CPU key on ``library`` (an ``aten`` IMPL library); below autograd, which
    passes the gradient through as for ATen's kernel."""
    library.impl("_pin_memory", pin_memory, "CPU")
