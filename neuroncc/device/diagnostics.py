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
