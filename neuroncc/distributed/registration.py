"""Telling torch.distributed about the ``neuron`` backend (idempotent)."""

from __future__ import annotations

import torch.distributed as dist

from neuroncc.distributed.process_group import BACKEND_NAME, create


def register() -> None:
    """Register the ``neuron`` backend for neuron tensors (``init_process_group("neuron")``); once per process.
    Cheap enough for torch's import-time autoload of the device."""
    if BACKEND_NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND_NAME, create, devices=["neuron"])
