"""The eager path's counters (a leaf module: the dispatcher and the compiler count, tracking.py reports)."""

from __future__ import annotations

#: counter -> what it counts; ``neuroncc.stats()`` includes every one.
DESCRIPTIONS = {
    "eager_kernels_compiled": "op kernels compiled for the neuron device (a signature seen for the first time)",
    "eager_kernels_loaded": "op kernels loaded from the compile cache on disk instead of compiling",
    "eager_kernels_evicted": "op kernels dropped from memory (least recently used, past the capacity)",
    "eager_fallback_signatures": "op signatures that run on CPU because neuroncc cannot compile them",
    "eager_fallback_calls": "calls of ops on neuron tensors that ran on CPU",
    "eager_device_calls": "calls of ops on neuron tensors that ran as neuroncc kernels (or device RNG)",
}

COUNTS: dict[str, int] = dict.fromkeys(DESCRIPTIONS, 0)
