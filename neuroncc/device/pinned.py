"""Pinned host memory for the ``neuron`` device: ``tensor.pin_memory()``, ``is_pinned()``, and so
``DataLoader(pin_memory=True)``.

With ``neuron`` as PyTorch's accelerator, ``pin_memory()`` asks the accelerator's hooks for a pinned-memory
allocator, which a Python-only PrivateUse1 backend cannot provide in torch 2.13 (``getPinnedMemoryAllocator`` is
C++ only): every ``pin_memory()`` and every ``DataLoader(pin_memory=True)`` raised ``NotImplementedError``. The
device's memory is host memory, so pinning has nothing to lock: a pinned tensor is a CPU copy in ordinary memory
(same sizes and strides, offset 0, as CUDA's ``_pin_memory`` makes it), remembered so that ``is_pinned()`` says
True for it (and for every view of its storage) while the storage lives. ``.to("neuron", non_blocking=True)``
from it is the usual copy.

Both kernels sit on the CPU dispatch key of ``aten::_pin_memory`` and ``aten::is_pinned`` (whose only kernels
are CompositeExplicitAutograd ones); a call naming another device goes on to PyTorch's own kernel.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

_PINNED: set[int] = set()  # data pointers of the live storages pin_memory made
_PYTORCH_KERNEL = torch._C.DispatchKeySet(torch._C.DispatchKey.CompositeExplicitAutograd)


def _for_neuron(device: Any) -> bool:
    if device is None:
        accelerator = torch._C._accelerator_getAccelerator()
        return accelerator is not None and accelerator.type == torch._C._get_privateuse1_backend_name()
    return torch.device(device).type == torch._C._get_privateuse1_backend_name()


def _storage_pointer(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().data_ptr()


def pin_memory(tensor: torch.Tensor, device: Any = None) -> torch.Tensor:
    """``aten::_pin_memory`` on CPU: a pinned copy of ``tensor`` (``device`` None or neuron)."""
    if not _for_neuron(device):
        return torch.ops.aten._pin_memory.default.redispatch(_PYTORCH_KERNEL, tensor, device)
    pinned = torch.empty_strided(tensor.size(), tensor.stride(), dtype=tensor.dtype, device="cpu")
    pinned.copy_(tensor)
    storage = pinned.untyped_storage()
    pointer = storage.data_ptr()
    if storage.nbytes() > 0:
        _PINNED.add(pointer)
        weakref.finalize(storage, _PINNED.discard, pointer)
    return pinned


def is_pinned(tensor: torch.Tensor, device: Any = None) -> bool:
    """``aten::is_pinned`` on CPU: True for memory ``pin_memory`` made (``device`` None or neuron)."""
    if not _for_neuron(device):
        return torch.ops.aten.is_pinned.default.redispatch(_PYTORCH_KERNEL, tensor, device)
    return bool(_PINNED) and _storage_pointer(tensor) in _PINNED


def register(kernels: torch.library.Library) -> None:
    """Put both kernels on the CPU key of ``kernels`` (a ``torch.library.Library("aten", "IMPL")``)."""
    kernels.impl("_pin_memory", pin_memory, "CPU")
    kernels.impl("is_pinned", is_pinned, "CPU")
