"""Backward passes over ``neuron:1`` and up: a typed error at the user's ``backward()`` instead of an internal
assert of PyTorch's autograd engine.

The engine gives each device index a ready queue (``Engine::start_device_threads``), as many as the largest
``deviceCount()`` of the registered C++ device guards, and the guard a Python-only PrivateUse1 backend registers
in torch 2.13 (``torch._C._acc.DeviceGuard``) answers one device whatever the device module says (its
``deviceCount`` is C++ code no Python method reaches). A backward pass whose graph holds a ``neuron:1`` node so
stopped at ``INTERNAL ASSERT FAILED at "torch/csrc/autograd/engine.cpp" ... please report a bug to PyTorch``.
That cannot be fixed from Python; what can is the error: :func:`route_backward` wraps the function both
``Tensor.backward``/``torch.autograd.backward`` and ``torch.autograd.grad`` call (torch's own tracing patches
the same function the same way), and turns that assert into :class:`~neuroncc.errors.DeviceAutogradError`
naming the problem, the user's line and the way out. Every other error, and every other backward, is untouched.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from neuroncc.device.diagnostics import user_location
from neuroncc.errors import DeviceAutogradError

#: what the engine's assert says when a node's device index has no ready queue
_ENGINE_ASSERT = "device_ready_queues_"


def _typed(run_backward: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(run_backward)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return run_backward(*args, **kwargs)
        except RuntimeError as error:
            if _ENGINE_ASSERT not in str(error) or isinstance(error, DeviceAutogradError):
                raise
            where = user_location()
            raise DeviceAutogradError(
                f"neuroncc: backward{f' at {where}' if where else ''} reaches tensors on a neuron device other "
                "than neuron:0, which PyTorch's autograd engine cannot run for a device registered from Python "
                "(torch 2.13: it makes one ready queue per device the C++ device guard counts, and a Python "
                "backend's guard counts one). Train on neuron:0, one device per process (move the model and "
                "its inputs to neuron:0, or give each process its own device); forward and inference run on "
                "every device") from error

    run.__neuroncc_routed__ = True
    return run


def route_backward() -> None:
    """Wrap ``torch.autograd``'s engine entry (both its names, as torch's own patch does; idempotent)."""
    import torch.autograd.graph

    current = torch.autograd.graph._engine_run_backward
    if getattr(current, "__neuroncc_routed__", False):
        return
    routed = _typed(current)
    torch.autograd.graph._engine_run_backward = routed
    if getattr(torch.autograd, "_engine_run_backward", None) is current:
        torch.autograd._engine_run_backward = routed
