"""``torch.accelerator`` answering for the ``neuron`` device.

``torch.accelerator.device_count`` / ``is_available`` / ``current_accelerator`` already ask the device module.
The rest go to C++ (the device guard and the device allocator), and torch 2.13's Python-only PrivateUse1
backend has a guard that always says device 0 and no C++ allocator: ``set_device_index`` would do nothing,
``synchronize`` and the memory functions would raise. So, when neuron is the accelerator, those functions are
routed to ``torch.neuron``'s (they keep their own behaviour for any other accelerator). Done once, at
registration, on ``torch.accelerator`` and ``torch.accelerator.memory``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from neuroncc.device import torch_module


def _neuron_is_current() -> bool:
    accelerator = torch._C._accelerator_getAccelerator()
    return accelerator is not None and accelerator.type == torch._C._get_privateuse1_backend_name()


def _routed(original: Callable[..., Any], ours: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def route(*args: Any, **kwargs: Any) -> Any:
        if _neuron_is_current():
            return ours(*args, **kwargs)
        return original(*args, **kwargs)

    route.__neuroncc_routed__ = True
    return route


class _DeviceIndex:
    """``torch.accelerator.device_index(i)`` for neuron: the current device is ``i`` inside the block."""

    def __init__(self, device: int | None, /) -> None:
        self.idx = device
        self.prev_idx = -1

    def __enter__(self) -> None:
        if self.idx is not None:
            self.prev_idx = torch_module.current_device()
            torch_module.set_device(self.idx)

    def __exit__(self, *exc_info: object) -> None:
        if self.idx is not None:
            torch_module.set_device(self.prev_idx)


def _device_index_class(original: type) -> type:
    class device_index(original):  # type: ignore[misc, valid-type]
        __doc__ = original.__doc__

        def __new__(cls, device: int | None, /) -> Any:
            if _neuron_is_current():
                return _DeviceIndex(device)
            return super().__new__(cls)

    return device_index


#: torch.accelerator / torch.accelerator.memory function -> the torch.neuron function answering for it
_ROUTES: dict[str, Callable[..., Any]] = {
    "current_device_index": torch_module.current_device,
    "current_device_idx": torch_module.current_device,
    "set_device_index": torch_module.set_device,
    "set_device_idx": torch_module.set_device,
    "synchronize": torch_module.synchronize,
    # the device's streams (streams.py): their record_event() records an event of the device's clock
    "current_stream": torch_module.current_stream,
    "set_stream": torch_module.set_stream,
    "get_device_capability": torch_module.accelerator_capability,
    "empty_cache": torch_module.empty_cache,
    "empty_host_cache": torch_module.empty_host_cache,
    "memory_stats": torch_module.memory_stats,
    "memory_allocated": torch_module.memory_allocated,
    "max_memory_allocated": torch_module.max_memory_allocated,
    "memory_reserved": torch_module.memory_reserved,
    "max_memory_reserved": torch_module.max_memory_reserved,
    "reset_peak_memory_stats": torch_module.reset_peak_memory_stats,
    "reset_accumulated_memory_stats": torch_module.reset_accumulated_memory_stats,
    "get_memory_info": torch_module.mem_get_info,
}


def route_accelerator() -> None:
    """Route ``torch.accelerator``'s device-index, synchronize and memory functions (idempotent)."""
    import torch.accelerator.memory as memory

    for module in (torch.accelerator, memory):
        for name, ours in _ROUTES.items():
            original = getattr(module, name, None)
            if original is None or getattr(original, "__neuroncc_routed__", False):
                continue
            setattr(module, name, _routed(original, ours))
    original_class = torch.accelerator.device_index
    if not getattr(original_class, "__neuroncc_routed__", False):
        routed = _device_index_class(original_class)
        routed.__neuroncc_routed__ = True
        torch.accelerator.device_index = routed
