"""Each ``neuron`` device's random number generators: the device's default one, and those
``torch.Generator(device="neuron")`` makes.

A device's generator is a CPU ``torch.Generator`` (Philox-free mt19937, as CPU's): random ops on ``neuron``
tensors draw from it on the host, where the device's memory is, so ``torch.rand*``, ``bernoulli_``,
``dropout`` and friends on the device are reproducible after ``torch.manual_seed`` (which seeds every
device's generator through ``torch.neuron.manual_seed_all``), independently of the CPU's own generator.
Without seeding, each starts from PyTorch's default seed, as CUDA's do.

``torch.Generator(device="neuron")`` asks the PrivateUse1 hooks' ``getNewGenerator``, which a Python-only
backend cannot implement in torch 2.13 (``torch._C._acc.PrivateUse1Hooks`` exposes ``is_available``,
``is_built`` and ``has_primary_context`` only): it raised ``NotImplementedError``. So ``torch.Generator`` is
routed (:func:`route_torch_generator`, as streams.py routes ``torch.Event``): for a neuron device it makes a
:class:`DeviceGenerator`, a ``torch.Generator`` subclass over a CPU mt19937 whose ``device`` says
``neuron:i``. The device's random ops take it like any generator (they run CPU's kernels on the device's
memory), so a seeded one draws on the device exactly what a CPU generator with that seed draws on CPU.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import torch

from neuroncc.device.routed_classes import instances_of
from neuroncc.codegen.llvm.fork_safety import renew_in_child
from neuroncc.errors import DeviceIndexError

_TORCH_GENERATOR = torch._C.Generator  # PyTorch's own class: torch.Generator before routing

_lock = renew_in_child(threading.Lock())
_generators: dict[int, DeviceGenerator] = {}


class DeviceGenerator(_TORCH_GENERATOR):
    """A ``neuron`` device's generator (``torch.Generator(device="neuron")``, and each device's default one):
    a CPU mt19937 generator whose ``device`` is ``neuron:i``. ``manual_seed``, ``seed``, ``initial_seed``,
    ``get_state``/``set_state`` are CPU's; copies and pickles keep the device and the state."""

    def __new__(cls, device: Any = None) -> DeviceGenerator:
        return super().__new__(cls)

    def __init__(self, device: Any = None):
        self._device = torch.device(_name(), _index(device))

    @property
    def device(self) -> torch.device:
        return self._device

    def clone_state(self) -> DeviceGenerator:
        clone = DeviceGenerator(self._device)
        clone.set_state(self.get_state())
        return clone

    def __reduce__(self) -> tuple[Any, ...]:
        _, _, state = super().__reduce__()
        return DeviceGenerator, (str(self._device),), state

    def __repr__(self) -> str:
        return f"<torch.Generator device={self._device}>"


def _name() -> str:
    return torch._C._get_privateuse1_backend_name()


def _index(device: Any) -> int:
    """The index of the neuron device ``device`` names (None, or no index: the current device), checked."""
    module = torch.get_device_module(_name())
    index = device if isinstance(device, int) else None if device is None else torch.device(device).index
    if index is None:
        return module.current_device()
    if not 0 <= index < module.device_count():
        raise DeviceIndexError(f"{_name()}:{index} does not exist: torch.{_name()}.device_count() is "
                               f"{module.device_count()} (set NEURONCC_DEVICE_COUNT for more devices)")
    return index


def _names_neuron(device: Any) -> bool:
    try:
        return torch.device(device).type == _name()
    except (RuntimeError, TypeError):
        return False  # PyTorch's own class raises its error for it


class _RoutedGenerator(_TORCH_GENERATOR, metaclass=instances_of(_TORCH_GENERATOR)):
    """``torch.Generator`` once the device is registered: a generator of a neuron device
    (``torch.Generator(device="neuron")``, ``"neuron:1"``, or an index while neuron is the accelerator) is a
    :class:`DeviceGenerator`; any other (no device: CPU, as always) is PyTorch's own."""

    __neuroncc_routed__ = True

    def __new__(cls, device: Any = None) -> Any:
        if device is None:
            return _TORCH_GENERATOR()
        if _names_neuron(device):
            return DeviceGenerator(device)
        return _TORCH_GENERATOR(device)


def route_torch_generator() -> None:
    """Make ``torch.Generator`` :class:`_RoutedGenerator` (idempotent)."""
    if not getattr(torch.Generator, "__neuroncc_routed__", False):
        _RoutedGenerator.__doc__ = (_TORCH_GENERATOR.__doc__ or "") + "\n\n" + (_RoutedGenerator.__doc__ or "")
        torch.Generator = _RoutedGenerator
        _not_opaque_to_dynamo()


def _not_opaque_to_dynamo() -> None:
    """TorchDynamo takes an object whose type is exactly ``torch._C.Generator`` as a plain object (a random op
    given one breaks the graph and runs eagerly), but a subclass as an opaque graph input, whose fake run of the
    random op fails (``GeneratorImpl with nullptr is not supported``): a ``torch.compile``d function drawing
    from a :class:`DeviceGenerator` raised. An entry for the subclass in torch's opaque-type table whose name
    is registered nowhere makes ``is_opaque_type(DeviceGenerator)`` False, so TorchDynamo treats it as it
    treats a CPU generator. Skipped if torch's table is not there (another torch version)."""
    try:
        from torch._library import opaque_object
    except ImportError:  # pragma: no cover - another torch
        return
    table = getattr(opaque_object, "_OPAQUE_TYPES", None)
    info = table.get(_TORCH_GENERATOR) if table is not None else None
    if info is not None and dataclasses.is_dataclass(info):
        table[DeviceGenerator] = dataclasses.replace(info, class_name="neuroncc.device.generators.not_opaque")


def generator(index: int) -> DeviceGenerator:
    """Device ``index``'s default generator (made on first use)."""
    found = _generators.get(index)
    if found is None:
        with _lock:
            found = _generators.get(index)
            if found is None:
                found = _generators[index] = DeviceGenerator(index)
    return found


def manual_seed(seed: int, index: int) -> None:
    generator(index).manual_seed(int(seed))


def manual_seed_all(seed: int, count: int) -> None:
    for index in range(count):
        manual_seed(seed, index)


def seed(index: int) -> int:
    """Seed device ``index`` from a non-deterministic source; returns the seed."""
    return generator(index).seed()


def seed_all(count: int) -> None:
    """A fresh non-deterministic seed, the same for every device."""
    value = generator(0).seed()
    for index in range(1, count):
        manual_seed(value, index)


def initial_seed(index: int) -> int:
    return generator(index).initial_seed()


def get_state(index: int) -> torch.Tensor:
    return generator(index).get_state()


def set_state(state: torch.Tensor, index: int) -> None:
    generator(index).set_state(state.cpu() if state.device.type != "cpu" else state)
