"""Resizing a neuron storage in place, as ``storage.resize_(n)`` does on CUDA.

PyTorch routes ``resize_`` of a PrivateUse1 storage to a C++ hook that a Python-registered device cannot
provide, so code that frees and re-allocates parameter memory (FSDP2's unsharded parameters) calls this
instead (neuroncc.distributed installs it there). The storage object stays the same (every tensor viewing it
sees the new memory); its bytes up to the smaller size are kept.
"""

from __future__ import annotations

import ctypes

import torch

from neuroncc.device.allocator import ALLOCATOR
from neuroncc.device.memory import storage_for


def resize_storage(storage: torch.UntypedStorage, nbytes: int) -> None:
    """Give ``storage`` ``nbytes`` of fresh device memory, keeping its first ``min(old, nbytes)`` bytes."""
    if storage.nbytes() == nbytes:
        return
    index = storage.device.index or 0
    old = storage_for(ALLOCATOR.allocate(0, index), index, 0)
    if storage.nbytes():  # PyTorch swaps memory only with a storage of the same size or an empty one
        _exchange(storage, old)  # now ``old`` holds the old memory, ``storage`` is empty
    if nbytes:
        _exchange(storage, storage_for(ALLOCATOR.allocate(nbytes, index), index, nbytes))
    keep = min(old.nbytes(), nbytes)
    if keep:
        ctypes.memmove(storage.data_ptr(), old.data_ptr(), keep)


def _exchange(a: torch.UntypedStorage, b: torch.UntypedStorage) -> None:
    """Swap two storages' memory (data pointers and sizes), and so the blocks that own it."""
    a._swap_data_ptr_(b)
    a._owner, b._owner = getattr(b, "_owner", None), getattr(a, "_owner", None)
    a.__dict__.pop("_host", None)  # CPU views of the previous memory
    b.__dict__.pop("_host", None)
