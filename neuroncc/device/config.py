"""The device's settings, read once from the environment and changeable from Python.

    NEURONCC_DEVICE_COUNT          how many ``neuron`` devices a process has (default 1; ``neuron:0``...)
    NEURONCC_DEVICE_FALLBACK       ``cpu`` (default: an op neuroncc cannot compile runs on CPU with a warning)
                                   or ``error`` (it raises ``neuroncc.device.DeviceFallbackError``)
    NEURONCC_DEVICE_KERNELS        how many compiled op kernels stay in memory (default 4096; least recently
                                   used first out; the compile cache on disk keeps them all)
    NEURONCC_DEVICE_CACHED_BYTES   free host memory the allocator keeps for reuse per device (default 1 GiB)

This is the API boundary of the device, so it is the one place those variables are read (at registration);
the rest of the package reads :data:`CONFIG`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from neuroncc.errors import InputError

FALLBACK_MODES = ("cpu", "error")


@dataclass
class DeviceConfig:
    """The neuron device's settings, read once from the environment (``NEURONCC_DEVICE_*``)."""

    device_count: int = 1
    fallback: str = "cpu"
    kernel_capacity: int = 4096
    cached_bytes: int = 1 << 30

    @staticmethod
    def from_environ(environ: Mapping[str, str]) -> DeviceConfig:
        config = DeviceConfig()
        config.device_count = _positive(environ, "NEURONCC_DEVICE_COUNT", config.device_count)
        config.kernel_capacity = _positive(environ, "NEURONCC_DEVICE_KERNELS", config.kernel_capacity)
        config.cached_bytes = _positive(environ, "NEURONCC_DEVICE_CACHED_BYTES", config.cached_bytes, minimum=0)
        config.fallback = check_fallback_mode(environ.get("NEURONCC_DEVICE_FALLBACK") or config.fallback,
                                              "NEURONCC_DEVICE_FALLBACK")
        return config


def check_fallback_mode(mode: str, where: str = "fallback mode") -> str:
    if mode not in FALLBACK_MODES:
        raise InputError(f"{where} must be one of {', '.join(FALLBACK_MODES)}, got {mode!r}")
    return mode


def _positive(environ: Mapping[str, str], name: str, default: int, minimum: int = 1) -> int:
    text = environ.get(name)
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise InputError(f"{name} must be an integer, got {text!r}") from None
    if value < minimum:
        raise InputError(f"{name} must be at least {minimum}, got {value}")
    return value


#: The process's settings (replaced from the environment when the device registers).
CONFIG = DeviceConfig()


def load_from_environment() -> None:
    # in place, not rebound: modules that imported CONFIG by name keep seeing the live settings
    fresh = DeviceConfig.from_environ(os.environ)
    for field_name in fresh.__dataclass_fields__:
        setattr(CONFIG, field_name, getattr(fresh, field_name))


def set_device_count(count: int) -> None:
    """Give the process ``count`` neuron devices (``NEURONCC_DEVICE_COUNT`` from Python; tensors already on a
    device past the new count stay valid, new ones cannot be made there)."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise InputError(f"device count must be a positive integer, got {count!r}")
    CONFIG.device_count = count
