"""Each ``neuron`` device's random number generator.

A device's generator is a CPU ``torch.Generator`` (Philox-free mt19937, as CPU's): random ops on ``neuron``
tensors draw from it on the host, where the device's memory is, so ``torch.rand*``, ``bernoulli_``,
``dropout`` and friends on the device are reproducible after ``torch.manual_seed`` (which seeds every
device's generator through ``torch.neuron.manual_seed_all``), independently of the CPU's own generator.
Without seeding, each starts from PyTorch's default seed, as CUDA's do.
"""

from __future__ import annotations

import threading

import torch

_lock = threading.Lock()
_generators: dict[int, torch.Generator] = {}


def generator(index: int) -> torch.Generator:
    """Device ``index``'s generator (made on first use)."""
    found = _generators.get(index)
    if found is None:
        with _lock:
            found = _generators.setdefault(index, torch.Generator())
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
