"""``torch.neuron``: the device module, shaped like ``torch.cuda``.

Registered with ``torch._register_device_module("neuron", this module)``, so ``torch.neuron.device_count()``,
``torch.get_device_module("neuron")`` and PyTorch's own helpers that look a device module up (``torch.manual_seed``,
``torch.random.fork_rng``, ``torch.accelerator``, serialization) find it. The device is synchronous: work has
finished when a call returns, so ``synchronize`` only has to flush what the lazy batching holds.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Any

import torch

from neuroncc.device import generators
from neuroncc.device.allocator import ALLOCATOR
from neuroncc.device.config import CONFIG
from neuroncc.device.streams import Event, Stream, current_stream, default_stream, set_stream, stream  # noqa: F401
from neuroncc.errors import DeviceIndexError

_state = threading.local()  # the current device is per thread, as CUDA's is

#: torch.utils.checkpoint saves and restores a device module's RNG state only when this is true (as
#: ``torch.cuda._initialized`` after CUDA's lazy init): without it, dropout recomputed under checkpointing
#: drew a different mask than the forward's, and gradients were wrong
_initialized = True


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def _is_in_bad_fork() -> bool:
    return False


def _lazy_init() -> None:
    """Nothing to initialize (PyTorch calls this on device modules)."""


def device_count() -> int:
    return CONFIG.device_count


def current_device() -> int:
    return getattr(_state, "index", 0)


def set_device(device: Any) -> None:
    index = _index(device)
    if index >= 0:
        _state.index = index


def get_device_name(device: Any = None) -> str:
    _index(device)
    return "neuroncc host device (cpu target)"


def get_device_capability(device: Any = None) -> tuple[int, int]:
    _index(device)
    return (1, 0)


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.bfloat16, torch.float16]


def synchronize(device: Any = None) -> None:
    """Wait for the device's work: every op has run when its call returns."""
    _index(device)


class device:
    """Context manager that makes ``device`` the current neuron device (``None`` or a negative index: no
    change)."""

    def __init__(self, device: Any):
        self.index = -1 if device is None else _index(device)
        self.previous = -1

    def __enter__(self) -> None:
        self.previous = current_device()
        if self.index >= 0:
            set_device(self.index)

    def __exit__(self, *exc_info: object) -> bool:
        set_device(self.previous)
        return False


class device_of(device):
    """Context manager that makes the device of ``tensor`` current (no change for a CPU tensor)."""

    def __init__(self, tensor: torch.Tensor):
        super().__init__(tensor.get_device() if tensor.device.type == _name() else None)


# ---- random numbers -------------------------------------------------------------------------------------


def manual_seed(seed: int) -> None:
    generators.manual_seed(seed, current_device())


def manual_seed_all(seed: int) -> None:
    generators.manual_seed_all(seed, device_count())


def seed() -> None:
    generators.seed(current_device())


def seed_all() -> None:
    generators.seed_all(device_count())


def initial_seed() -> int:
    return generators.initial_seed(current_device())


def get_rng_state(device: Any = None) -> torch.Tensor:
    return generators.get_state(_index(device, default_current=True))


def set_rng_state(new_state: torch.Tensor, device: Any = None) -> None:
    generators.set_state(new_state, _index(device, default_current=True))


def get_rng_state_all() -> list[torch.Tensor]:
    return [generators.get_state(i) for i in range(device_count())]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    for index, state in enumerate(new_states):
        generators.set_state(state, index)


# ---- memory ----------------------------------------------------------------------------------------------


def memory_allocated(device: Any = None) -> int:
    """Bytes in blocks that tensors on the device use now (block sizes, rounded as the allocator rounds)."""
    return _counter(device, "allocated_bytes.all.current")


def max_memory_allocated(device: Any = None) -> int:
    return _counter(device, "allocated_bytes.all.peak")


def memory_reserved(device: Any = None) -> int:
    """Bytes the allocator holds for the device: in use plus cached for reuse."""
    return _counter(device, "reserved_bytes.all.current")


def max_memory_reserved(device: Any = None) -> int:
    return _counter(device, "reserved_bytes.all.peak")


def reset_peak_memory_stats(device: Any = None) -> None:
    ALLOCATOR.pool(_index(device, default_current=True)).reset_peak()


def reset_accumulated_memory_stats(device: Any = None) -> None:
    ALLOCATOR.pool(_index(device, default_current=True)).reset_accumulated()


def memory_stats(device: Any = None) -> OrderedDict[str, int]:
    """The allocator's counters for the device, named as ``torch.cuda.memory_stats`` names them."""
    return OrderedDict(ALLOCATOR.pool(_index(device, default_current=True)).stats())


def empty_cache() -> None:
    """Give the host every cached, unused block of every device."""
    for pool in ALLOCATOR.pools():
        pool.empty_cache()


def empty_host_cache() -> None:
    """Nothing to free: pinned memory is ordinary host memory, freed with its tensors (``pinned.py``)."""


def reset_max_memory_allocated(device: Any = None) -> None:
    """``torch.cuda``'s older name: resets every peak counter, as CUDA's does."""
    reset_peak_memory_stats(device)


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    """A table of the allocator's counters, like ``torch.cuda.memory_summary`` (one line per counter)."""
    index = _index(device, default_current=True)
    stats = memory_stats(index)
    rows = [f"{_name()}:{index} memory summary (neuroncc caching allocator; bytes are block sizes)"]
    for kind, label in (("allocated_bytes", "Allocated memory"), ("reserved_bytes", "Reserved memory")):
        rows.append(f"  {label:<18} current {_mib(stats[f'{kind}.all.current']):>12}  "
                    f"peak {_mib(stats[f'{kind}.all.peak']):>12}  total {_mib(stats[f'{kind}.all.allocated']):>12}  "
                    f"freed {_mib(stats[f'{kind}.all.freed']):>12}")
    rows.append(f"  {'Active blocks':<18} current {stats['active.all.current']:>12}  "
                f"peak {stats['active.all.peak']:>12}  total {stats['active.all.allocated']:>12}")
    rows.append(f"  {'Segments':<18} current {stats['segment.all.current']:>12}  peak {stats['segment.all.peak']:>12}")
    rows.append(f"  cache hits {stats['num_cache_hits']}, OOMs {stats['num_ooms']}")
    return "\n".join(rows) + "\n"


def _mib(nbytes: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= size:
            return f"{nbytes / size:.2f} {unit}"
    return f"{nbytes} B"


class DeviceProperties:
    """``torch.neuron.get_device_properties(i)``, with the fields scripts read from CUDA's."""

    def __init__(self, index: int):
        self.name = get_device_name(index)
        self.major, self.minor = get_device_capability(index)
        self.total_memory = mem_get_info(index)[1]
        self.multi_processor_count = os.cpu_count() or 1
        self.is_integrated = True  # the device's memory is the host's

    def __repr__(self) -> str:
        return (f"_NeuronDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
                f"total_memory={self.total_memory // 2**20}MB, multi_processor_count={self.multi_processor_count})")


def get_device_properties(device: Any = None) -> DeviceProperties:
    return DeviceProperties(_index(device, default_current=True))


#: dtypes a tensor keeps on the device (float64 and complex128 are stored in single precision)
SUPPORTED_DTYPES = frozenset({torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                              torch.float16, torch.bfloat16, torch.float32, torch.complex64})


def accelerator_capability(device: Any = None) -> dict[str, Any]:
    """``torch.accelerator.get_device_capability`` for the device: the dtypes its tensors keep."""
    _index(device, default_current=True)
    return {"supported_dtypes": set(SUPPORTED_DTYPES)}


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) bytes of host memory (the device's memory is the host's)."""
    _index(device)
    pages, free_pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_AVPHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    return free_pages * size, pages * size


def _counter(device: Any, name: str) -> int:
    return ALLOCATOR.pool(_index(device, default_current=True)).stats().get(name, 0)


# ---- device arguments -----------------------------------------------------------------------------------


def _name() -> str:
    return torch._C._get_privateuse1_backend_name()


def _index(device: Any, default_current: bool = True) -> int:
    """The device index ``device`` names (an int, ``"neuron:1"``, a torch.device; None: the current one)."""
    if device is None:
        return current_device() if default_current else -1
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != _name():
            raise ValueError(f"expected a {_name()} device, got '{device}'")
        index = current_device() if device.index is None else device.index
    elif isinstance(device, int):
        index = device
    else:
        raise TypeError(f"expected a device index, a device string or a torch.device, got {type(device).__name__}")
    if index >= device_count():
        raise DeviceIndexError(f"{_name()}:{index} does not exist: torch.{_name()}.device_count() is {device_count()} "
                               "(set NEURONCC_DEVICE_COUNT for more devices)")
    return index


class _Utils:
    """``torch.neuron._utils._get_device_index``, which serialization looks for."""

    @staticmethod
    def _get_device_index(device: Any, optional: bool = False, allow_cpu: bool = False) -> int:
        if isinstance(device, str) and device.startswith(_name()) and ":" not in device:
            return current_device()
        return _index(device)


_utils = _Utils()
