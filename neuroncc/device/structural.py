"""The ops that make ``neuron`` tensors exist: factories, copies, views, resizing, ``set_`` and ``.item()``.

These are registered for the PrivateUse1 key when the device registers; every other op goes through the
eager compiler (dispatch.py). Views are CPU's own view kernels, redispatched past our key: they only touch
sizes, strides and the storage, and the tensor they make keeps the neuron key and shares the storage. Copies
and ``.item()`` work through CPU tensors over the device's host memory (memory.host_view): one pass of CPU's
copy kernel, which also converts dtypes and broadcasts.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import torch

from neuroncc.device import memory
from neuroncc.device.allocator import ALLOCATOR
from neuroncc.device.config import CONFIG
from neuroncc.device.diagnostics import float64_demoted
from neuroncc.device.torch_module import current_device
from neuroncc.device.untraced import untraced
from neuroncc.errors import DeviceIndexError

aten = torch.ops.aten

#: View ops without a PrivateUse1 kernel of their own (the others are CompositeExplicitAutograd over these).
VIEW_OPS = ("view.default", "view.dtype", "as_strided.default", "_reshape_alias.default", "unfold.default",
            "view_as_real.default", "view_as_complex.default", "alias.default")
#: In-place ops that only change a tensor's metadata (CPU's kernels are device-agnostic).
METADATA_OPS = ("set_.source_Storage_storage_offset", "as_strided_.default")


def device_dtype(dtype: torch.dtype | None) -> torch.dtype:
    """The dtype a tensor of ``dtype`` gets on the device: float64 is stored as float32 (warned once)."""
    if dtype is None:
        dtype = torch.get_default_dtype()
    if dtype is torch.float64:
        float64_demoted()
        return torch.float32
    return dtype


def device_index(device: torch.device | str | int | None) -> int:
    """The neuron device index a factory's ``device=`` argument names (no index: the current device)."""
    if device is None:
        return current_device()
    index = device.index if type(device) is torch.device else device if isinstance(device, int) else \
        torch.device(device).index
    if index is None:
        return current_device()
    if not 0 <= index < CONFIG.device_count:
        raise DeviceIndexError(f"neuron:{index} does not exist: torch.neuron.device_count() is {CONFIG.device_count} "
                               "(set NEURONCC_DEVICE_COUNT for more devices)")
    return index


def strides_for(shape: list[int] | tuple[int, ...], memory_format: torch.memory_format | None) -> tuple[int, ...]:
    if memory_format is torch.channels_last and len(shape) == 4:
        n, c, h, w = shape
        return (h * w * c, 1, w * c, c) if c else memory.contiguous_strides(shape)
    if memory_format is torch.channels_last_3d and len(shape) == 5:
        n, c, d, h, w = shape
        return (d * h * w * c, 1, h * w * c, w * c, c) if c else memory.contiguous_strides(shape)
    return memory.contiguous_strides(shape)


# ---- factories --------------------------------------------------------------------------------------------


def empty_memory_format(size: list[int], dtype: torch.dtype | None = None, layout: Any = None,
                        device: Any = None, pin_memory: bool | None = None,
                        memory_format: torch.memory_format | None = None) -> torch.Tensor:
    return memory.empty_strided(size, strides_for(size, memory_format), device_dtype(dtype), device_index(device))


def empty_strided(size: list[int], stride: list[int], dtype: torch.dtype | None = None, layout: Any = None,
                  device: Any = None, pin_memory: bool | None = None) -> torch.Tensor:
    return memory.empty_strided(size, stride, device_dtype(dtype), device_index(device))


# ---- copies -----------------------------------------------------------------------------------------------


def copy_from(self: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    """``dst.copy_(self)`` where either is a neuron tensor: CPU's copy kernel over host views (dtype
    conversion and broadcasting included)."""
    memory.host_view(dst).copy_(memory.host_view(self))
    return dst


def copy_from_and_resize(self: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    if dst.shape != self.shape:
        dst.resize_(self.shape)
    return copy_from(self, dst)


def to_copy(self: torch.Tensor, dtype: torch.dtype | None = None, layout: Any = None, device: Any = None,
            pin_memory: bool | None = None, non_blocking: bool = False,
            memory_format: torch.memory_format | None = None) -> torch.Tensor:
    """``tensor.to(...)`` from a neuron tensor: a new tensor on the target device, filled through CPU's copy
    kernel. (PyTorch's generic version pins the CPU result of a non-blocking copy, which needs a pinned-memory
    allocator a Python backend cannot register; the device is synchronous, so there is nothing to pin.)"""
    target = torch.device(device) if device is not None else self.device
    dtype = dtype or self.dtype
    if memory_format in (None, torch.preserve_format) and memory.is_dense(self):
        shape, strides = tuple(self.shape), self.stride()
    else:
        format = memory_format
        if memory_format in (None, torch.preserve_format):
            format = torch.channels_last if self.dim() == 4 and self.is_contiguous(
                memory_format=torch.channels_last) else torch.contiguous_format
        shape, strides = tuple(self.shape), strides_for(self.shape, format)
    if target.type == "cpu":
        result = torch.empty_strided(shape, strides, dtype=dtype)
    else:
        result = memory.empty_strided(shape, strides, device_dtype(dtype), device_index(target))
    memory.host_view(result).copy_(memory.host_view(self))
    return result


def local_scalar_dense(self: torch.Tensor) -> Any:
    """``tensor.item()``."""
    return memory.host_view(self).item()


# ---- metadata -----------------------------------------------------------------------------------------------


def resize_(self: torch.Tensor, size: list[int], memory_format: torch.memory_format | None = None) -> torch.Tensor:
    """Resize in place; a storage too small is replaced by a bigger block holding the old bytes first.

    Unlike CUDA (which grows the StorageImpl in place), other tensors sharing the old storage keep it."""
    stride = strides_for(size, memory_format)
    offset = self.storage_offset()
    storage = self.untyped_storage()
    needed = memory.extent_bytes(size, stride, self.element_size(), offset)
    if needed > storage.nbytes():
        index = self.get_device()
        grown = memory.storage_for(ALLOCATOR.allocate(needed, index), index, needed)
        if storage.nbytes():
            ctypes.memmove(grown.data_ptr(), storage.data_ptr(), storage.nbytes())
        storage = grown
    memory._redispatch_set(memory.CPU_KEYS, self, storage, offset, list(size), list(stride))
    return self


def set_storage(self: torch.Tensor, source: Any) -> torch.Tensor:
    """``set_(storage)``: the whole storage as a 1-d tensor of self's dtype."""
    storage = source.untyped_storage() if hasattr(source, "untyped_storage") else source
    return aten.set_.source_Storage_storage_offset(self, storage, 0, [storage.nbytes() // self.element_size()], [1])


def set_tensor(self: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    return aten.set_.source_Storage_storage_offset(self, source.untyped_storage(), source.storage_offset(),
                                                   source.size(), source.stride())


def set_empty(self: torch.Tensor) -> torch.Tensor:
    index = self.get_device()
    storage = memory.storage_for(ALLOCATOR.allocate(0, index), index, 0)
    return aten.set_.source_Storage_storage_offset(self, storage, 0, [0], [1])


def install_storage_constructor() -> None:
    """``torch.UntypedStorage(n, device="neuron")`` from the device's allocator.

    PyTorch makes such a storage through the device's C++ allocator, which a Python-only backend cannot
    register (torch 2.13 crashes on it); serialization (``torch.load`` onto the device) and
    ``storage.to("neuron")`` go this way."""
    storage_class = torch.UntypedStorage
    if getattr(storage_class.__new__, "__neuroncc_routed__", False):
        return
    original = storage_class.__new__

    def __new__(cls: type, *args: Any, device: Any = None, **kwargs: Any) -> Any:
        if device is not None and torch.device(device).type == torch._C._get_privateuse1_backend_name():
            if kwargs or len(args) > 1 or (args and not isinstance(args[0], int)):
                raise TypeError("a neuron UntypedStorage is made from a size in bytes: "
                                "torch.UntypedStorage(nbytes, device='neuron')")
            nbytes, index = (args[0] if args else 0), device_index(device)
            return memory.storage_for(ALLOCATOR.allocate(nbytes, index), index, nbytes)
        if device is None:
            return original(cls, *args, **kwargs)
        return original(cls, *args, device=device, **kwargs)

    __new__.__neuroncc_routed__ = True
    storage_class.__new__ = staticmethod(__new__)


def _redispatched_to_cpu(op: Any) -> Callable[..., Any]:
    handle = getattr(op, "_handle", None)
    call = handle.redispatch_boxed if handle is not None else op.redispatch
    keys = memory.CPU_KEYS

    def kernel(*args: Any, **kwargs: Any) -> Any:
        return call(keys, *args, **kwargs)

    kernel.__name__ = f"cpu_{op.__name__.replace('.', '_')}"
    return kernel


def _overload(name: str) -> Any:
    packet, _, overload = name.partition(".")
    return getattr(getattr(aten, packet), overload or "default")


def shallow_copy_compatible(tensor: torch.Tensor, other: torch.Tensor) -> bool:
    """Whether ``tensor`` may take ``other``'s storage and metadata in place (``param.data = other``): two dense
    tensors may, as CPU's and CUDA's do. torch 2.13's TensorImpl says so only for its built-in dense backends, and
    ``Module._apply`` (``model.to("neuron")``) then gave each module its own new Parameter: tied parameters (GPT-2's
    ``lm_head.weight is wte.weight``) came apart and trained as two (session 26 lowp26). With this the Parameter
    objects stay, as on CUDA."""
    return all(t.layout == torch.strided and not t.is_quantized for t in (tensor, other))


def register(library: torch.library.Library) -> None:
    """Register every structural op for PrivateUse1 on ``library`` (an ``aten`` IMPL library)."""
    kernels: dict[str, Callable[..., Any]] = {
        "_has_compatible_shallow_copy_type": shallow_copy_compatible,
        "empty.memory_format": empty_memory_format,
        "empty_strided": empty_strided,
        "_copy_from": copy_from,
        "_copy_from_and_resize": copy_from_and_resize,
        "_to_copy": to_copy,
        "_local_scalar_dense": local_scalar_dense,
        "resize_": resize_,
        "set_.source_Storage": set_storage,
        "set_.source_Tensor": set_tensor,
        "set_": set_empty,
    }
    for name in VIEW_OPS + METADATA_OPS:
        kernels[name.removesuffix(".default")] = _redispatched_to_cpu(_overload(name))
    for name, kernel in kernels.items():
        library.impl(name, untraced(kernel), "PrivateUse1")
    # Copies read a lazily conjugated or negated source through its bit (host_view keeps it): without these,
    # PyTorch's fallback for those bits would materialize the source with clone, whose copy calls _copy_from
    # again, forever.
    for name in ("_copy_from", "_copy_from_and_resize"):
        for key in ("Conjugate", "Negative"):
            library.impl(name, torch.library.fallthrough_kernel, key)
