"""What ran where: ``neuroncc.get_executed_ops()``, ``get_fallback_ops()``, ``clear_op_tracking()``,
``set_fallback_mode()``, and ``neuroncc.stats()`` with the eager counters.

Counts are per aten overload name (``"aten.add.Tensor"``). An op runs on the device when neuroncc's compiled
kernel (or the device's random number generator) ran it, and falls back when it ran on CPU.
``get_fallback_ops()`` also reports the torch.compile backend's fallback nodes (``options={"fallback": "cpu"}``),
as it always has.
"""

from __future__ import annotations

from neuroncc.device import dispatch
from neuroncc.device.config import CONFIG, check_fallback_mode
from neuroncc.device.counters import COUNTS, DESCRIPTIONS
from neuroncc.frontend import stats as frontend_stats


def get_executed_ops() -> dict[str, int]:
    """Ops on neuron tensors that ran on the device: op name -> calls."""
    return {str(h.op): h.state.device_calls for h in dispatch.handlers() if h.state.device_calls}


def get_fallback_ops() -> dict[str, int]:
    """Ops that ran on CPU: on neuron tensors (calls) and in torch.compile's fallback mode (graph nodes)."""
    found = frontend_stats.get_fallback_ops()
    for handler in dispatch.handlers():
        if handler.state.fallback_calls:
            name = str(handler.op)
            found[name] = found.get(name, 0) + handler.state.fallback_calls
    return found


def clear_op_tracking() -> None:
    """Forget the executed and fallback op counts (a fallback op warns again on its next fallback)."""
    for handler in dispatch.handlers():
        handler.state.device_calls = handler.state.fallback_calls = 0
        handler.state.warned = False
    frontend_stats.clear_fallback_ops()


def set_fallback_mode(mode: str) -> None:
    """``"cpu"``: an op neuroncc cannot compile runs on CPU with a warning (the default); ``"error"``: it raises
    ``neuroncc.DeviceFallbackError``, to prove a model runs wholly on the device."""
    CONFIG.fallback = check_fallback_mode(mode)


def get_fallback_mode() -> str:
    return CONFIG.fallback


def stats() -> dict[str, int]:
    """``neuroncc.stats()``: the compile counters plus the eager device's (see counters.DESCRIPTIONS)."""
    counts = frontend_stats.stats()
    counts.update(COUNTS)
    counts["eager_device_calls"] = sum(h.state.device_calls for h in dispatch.handlers())
    counts["eager_fallback_calls"] = sum(h.state.fallback_calls for h in dispatch.handlers())
    return counts


def reset_stats() -> None:
    """Zero every counter, the eager ones included, and forget the op counts."""
    frontend_stats.reset_stats()
    for name in COUNTS:
        COUNTS[name] = 0
    clear_op_tracking()


__all__ = ["DESCRIPTIONS", "clear_op_tracking", "get_executed_ops", "get_fallback_mode", "get_fallback_ops",
           "reset_stats", "set_fallback_mode", "stats"]
