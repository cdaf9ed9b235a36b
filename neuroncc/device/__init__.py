"""The ``neuron`` PyTorch device: eager per-op compilation on host memory, with CPU fallback.

    torch.randn(8, device="neuron")  ->  structural ops (allocator, views, copies)       registration.py
    x + y on neuron tensors          ->  dispatch.py: signature -> compiled kernel (IR, pass pipeline, LLVM),
                                         cached in memory and in the compile cache on disk; CPU otherwise

The device registers itself while torch is imported (the ``torch.backends`` entry point,
``neuroncc._autoload_device``); with ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``, call ``neuroncc.device.register()``.
Importing this package registers nothing by itself. It sits above the torch front end (it compiles through
its importer) and below the CLI; see docs/device.md.

Modules: registration (what torch is told), torch_module (``torch.neuron``), accelerator and printing (torch
functions that answer for the device), allocator and memory (host memory and tensors over it), structural
(factories, copies, views), dispatch (every other op), signature, op_forms, programs, entries, kernels
(per-op compilation), fallback (CPU), generators (RNG, ``torch.Generator(device="neuron")``),
backward_devices (the typed error of a backward off ``neuron:0``), autocast and autocast_policy
(``torch.autocast("neuron")``), tracking and counters (what ran where), config, streams and resize (what FSDP2
and code written for CUDA streams ask of a device: synchronous streams and events, storage resizing).

May import: errors, hardware, ir, passes, codegen, executors, driver, frontend, torch. Imported by:
distributed, cli (and ``neuroncc._autoload_device``, the entry point torch calls).
"""

from __future__ import annotations

# torch first: when a device module is the first thing imported, torch's autoload (which registers the device
# through neuroncc.device.registration) then runs before any device module is half-initialized.
import torch  # noqa: F401

from neuroncc.device.config import set_device_count


def register() -> None:
    """Register the ``neuron`` device with PyTorch (idempotent; torch's autoload normally does it)."""
    from neuroncc.device.registration import register as register_device

    register_device()


__all__ = ["register", "set_device_count"]
