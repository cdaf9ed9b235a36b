"""The eager path's counters and per-op counts (a leaf module: the dispatcher and the compiler count,
tracking.py reports)."""

from __future__ import annotations

from typing import Any

#: counter -> what it counts; ``neuroncc.stats()`` includes every one.
DESCRIPTIONS = {
    "eager_kernels_compiled": "op kernels compiled for the neuron device (a signature seen for the first time)",
    "eager_kernels_loaded": "op kernels loaded from the compile cache on disk instead of compiling",
    "eager_index_hits": "op kernels found through the signature index (no program built: signature_index.py)",
    "eager_index_misfits": "signature index entries that did not fit their artifact (rebuilt and replaced)",
    "eager_kernels_evicted": "op kernels dropped from memory (least recently used, past the capacity)",
    "eager_fallback_signatures": "op signatures that run on CPU because neuroncc cannot compile them",
    "eager_fallback_calls": "calls of ops on neuron tensors that ran on CPU",
    "eager_device_calls": "calls of ops on neuron tensors that ran as neuroncc kernels (or device RNG)",
}

COUNTS: dict[str, int] = dict.fromkeys(DESCRIPTIONS, 0)


class OpState:
    """One op's counts on the device (what tracking.py reports) and whether its fallback has been warned about."""

    __slots__ = ("device_calls", "fallback_calls", "warned")

    def __init__(self) -> None:
        self.device_calls = 0
        self.fallback_calls = 0
        self.warned = False


#: aten op -> its state, for every op the device has a handler for.
OP_STATES: dict[Any, OpState] = {}


def op_state(op: Any) -> OpState:
    """``op``'s state (made on first use)."""
    state = OP_STATES.get(op)
    if state is None:
        state = OP_STATES[op] = OpState()
    return state
