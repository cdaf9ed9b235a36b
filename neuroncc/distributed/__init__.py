"""torch.distributed on the ``neuron`` device: the ``neuron`` process group backend (gloo moves the bytes of
the device's host memory) and what the parallelism APIs need from the device.

    import neuroncc.distributed            # registers the backend (the device's autoload does it too)
    dist.init_process_group("neuron")      # or "cpu:gloo,neuron:neuron"

Modules: process_group (``ProcessGroupNeuron``, the backend), work (its work objects and their errors), host
(neuron tensors as the CPU tensors gloo moves), registration, fsdp and ddp (what FSDP2 and DDP need of the
device: storage resizing, the bf16 gradient-compression hooks).

May import: errors, hardware, ir, passes, codegen, executors, driver, frontend, device, torch. Imported by: cli.
"""

from __future__ import annotations

from neuroncc.distributed.registration import register

register()

__all__ = ["register"]
