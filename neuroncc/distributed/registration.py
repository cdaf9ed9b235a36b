"""Telling torch.distributed about the ``neuron`` backend (idempotent). The backend itself
(process_group.py, with gloo and FSDP's fitting) is imported when a process group is first made, not when the
device's autoload registers it with ``import torch``."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch.distributed as dist

from neuroncc.device.registration import DEVICE_NAME


def register() -> None:
    """Register the ``neuron`` backend (named after the device) for neuron tensors (``init_process_group("neuron")``); once per process.
    Cheap enough for torch's import-time autoload of the device."""
    if DEVICE_NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(DEVICE_NAME, _create, devices=[DEVICE_NAME])


def _create(store: dist.Store, rank: int, size: int, timeout: timedelta) -> Any:
    """The creator ``Backend.register_backend`` calls for ``init_process_group("neuron")`` / ``new_group``."""
    from neuroncc.distributed.process_group import create  # the backend, on first use (see the docstring)

    return create(store, rank, size, timeout)
