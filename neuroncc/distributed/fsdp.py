"""What FSDP2 (``torch.distributed.fsdp.fully_shard``) needs from the neuron device beyond streams.

FSDP2 frees an unsharded parameter's memory after use with ``storage.resize_(0)`` and gets it back with
``storage.resize_(size)``; PyTorch sends ``resize_`` of a PrivateUse1 storage to a C++ hook that a
Python-registered device cannot provide. :func:`install` (called when a neuron process group is made) wraps
FSDP2's two helpers so that neuron tensors resize through ``device.resize.resize_storage`` (everything else goes
to FSDP2's own code).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from neuroncc.device.resize import resize_storage

_installed = False


def _for_neuron(original: Callable[[torch.Tensor], None], size_of: Callable[[torch.Tensor], int]
                ) -> Callable[[torch.Tensor], None]:
    def resize(tensor: torch.Tensor) -> None:
        if tensor.device.type != "neuron":
            original(tensor)
            return
        resize_storage(tensor.untyped_storage(), size_of(tensor))

    resize.__name__ = original.__name__
    resize.__doc__ = f"FSDP2's {original.__name__}, with neuron storages resized by neuroncc."
    return resize


def install() -> None:
    """Route FSDP2's storage frees and allocations of neuron tensors through the device (idempotent)."""
    global _installed
    if _installed:
        return
    _installed = True
    from torch.distributed.fsdp._fully_shard import _fsdp_param  # heavy (DTensor and FSDP): only with a group

    _fsdp_param.free_storage = _for_neuron(_fsdp_param.free_storage, lambda t: 0)
    _fsdp_param.alloc_storage = _for_neuron(_fsdp_param.alloc_storage, lambda t: t.numel() * t.itemsize)
