"""What ran where: ``neuroncc.get_executed_ops()``, ``clear_op_tracking()``, ``set_fallback_mode()``, and the
device's part of ``neuroncc.stats()`` and ``get_fallback_ops()`` (reported through the front end's counters).

Counts are per aten overload name (``"aten.add.Tensor"``). An op runs on the device when neuroncc's compiled
kernel (or the device's random number generator) ran it, and falls back when it ran on CPU.
``get_fallback_ops()`` also reports the torch.compile backend's fallback nodes (``options={"fallback": "cpu"}``),
as it always has.
"""

from __future__ import annotations

from neuroncc.device.config import CONFIG, check_fallback_mode
from neuroncc.device.counters import COUNTS, DESCRIPTIONS, OP_STATES
from neuroncc.frontend import stats as frontend_stats


def get_executed_ops() -> dict[str, int]:
    """Ops on neuron tensors that ran on the device: op name -> calls."""
    return {str(op): s.device_calls for op, s in list(OP_STATES.items()) if s.device_calls}


def _fallback_calls() -> dict[str, int]:
    """Ops on neuron tensors that ran on CPU: op name -> calls."""
    return {str(op): s.fallback_calls for op, s in list(OP_STATES.items()) if s.fallback_calls}


def clear_op_tracking() -> None:
    """Forget the executed and fallback op counts (a fallback op warns again on its next fallback)."""
    for state in list(OP_STATES.values()):
        state.device_calls = state.fallback_calls = 0
        state.warned = False
    frontend_stats.clear_fallback_ops()


def set_fallback_mode(mode: str) -> None:
    """``"cpu"``: an op neuroncc cannot compile runs on CPU with a warning (the default); ``"error"``: it raises
    ``neuroncc.DeviceFallbackError``, to prove a model runs wholly on the device."""
    CONFIG.fallback = check_fallback_mode(mode)


def get_fallback_mode() -> str:
    return CONFIG.fallback


def _eager_stats() -> dict[str, int]:
    """The eager device's counters (see counters.DESCRIPTIONS)."""
    counts = dict(COUNTS)
    states = list(OP_STATES.values())
    counts["eager_device_calls"] = sum(s.device_calls for s in states)
    counts["eager_fallback_calls"] = sum(s.fallback_calls for s in states)
    return counts


def _reset_eager_stats() -> None:
    for name in COUNTS:
        COUNTS[name] = 0
    clear_op_tracking()


def report_to_stats() -> None:
    """Make ``neuroncc.stats()``, ``reset_stats()`` and ``get_fallback_ops()`` include the device (the first
    compile calls this, with the compiler loaded; the front end's counters hold the functions, so
    ``neuroncc.stats()`` itself never needs torch)."""
    frontend_stats.add_source("neuron device", frontend_stats.StatsSource(_eager_stats, _reset_eager_stats,
                                                                           _fallback_calls))


__all__ = ["DESCRIPTIONS", "clear_op_tracking", "get_executed_ops", "get_fallback_mode", "report_to_stats",
           "set_fallback_mode"]
