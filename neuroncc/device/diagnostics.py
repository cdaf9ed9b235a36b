"""The device's warnings, and the user's ``file:line`` for them (the innermost frame outside torch and neuroncc)."""

from __future__ import annotations

import os
import sys
import warnings

import torch


class DeviceFallbackWarning(UserWarning):
    """An op on ``neuron`` tensors ran on CPU because neuroncc cannot compile it (once per op)."""


class DeviceFloat64Warning(UserWarning):
    """float64 placed on the ``neuron`` device became float32 (once per process)."""


_NEURONCC_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LIBRARY_DIRS = (os.path.dirname(torch.__file__) + os.sep, _NEURONCC_DIR + os.sep)


def user_location() -> str | None:
    """``file:line`` of the innermost caller frame outside torch and neuroncc, or None if there is none."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(_LIBRARY_DIRS) and not filename.startswith("<frozen"):
            return f"{filename}:{frame.f_lineno}"
        frame = frame.f_back
    return None


_warned_float64 = False


def float64_demoted() -> None:
    """Warn once per process that float64 on the device is float32."""
    global _warned_float64
    if not _warned_float64:
        _warned_float64 = True
        where = user_location()
        warnings.warn(f"neuroncc: float64 tensors on the neuron device are stored and computed as float32"
                      f"{f' (first at {where})' if where else ''}; use float32 to silence this",
                      DeviceFloat64Warning, stacklevel=3)


class DeviceAutogradWarning(UserWarning):
    """Tensors that require grad on ``neuron:1`` and up: their backward cannot run (once per process)."""


_warned_autograd = False


def autograd_off_device_zero(index: int) -> None:
    """Warn once that backward cannot run on ``neuron:index`` (index > 0).

    PyTorch's autograd engine gives each device index a ready queue, sized by the device guards' device
    counts, and the guard a Python-only backend registers (torch 2.13) always reports one device: a backward
    pass over ``neuron:1`` tensors stops at an internal assert of the engine. Forward, inference, copies and
    everything else work on every device; one device per process (``neuron:0``) trains."""
    global _warned_autograd
    if not _warned_autograd:
        _warned_autograd = True
        where = user_location()
        warnings.warn(f"neuroncc: tensors on neuron:{index} require grad{f' (at {where})' if where else ''}, "
                      "but backward can only run on neuron:0 (torch's autograd engine sees one device of a "
                      "Python-registered backend); train on neuron:0, one device per process",
                      DeviceAutogradWarning, stacklevel=3)
