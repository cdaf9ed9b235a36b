"""The neuron device under torch.profiler (its kernels and its CPU fallbacks as named ranges) and in the
evaluation's fallback list (source ``neuron device``)."""

from __future__ import annotations

import warnings

import torch

import neuroncc  # noqa: F401
from neuroncc.evaluation.fallbacks import FallbackSnapshot


def test_device_kernels_and_fallbacks_are_profiled_and_counted():
    x = torch.randn(6, device="neuron")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (x * 2).nonzero()  # compiles the device's mul kernel, warns about nonzero's fallback
        snapshot = FallbackSnapshot.take()
        with torch.profiler.profile(record_shapes=True) as prof:
            (x * 2).nonzero()
    names = {e.name for e in prof.events() if e.name.startswith("neuroncc::")}
    assert "neuroncc::fallback::aten.nonzero.default" in names, names
    kernels = [e for e in prof.events() if e.name.startswith("neuroncc::") and "mul" in e.name]
    assert kernels and any([6] in k.input_shapes for k in kernels), names
    (fallback,) = snapshot.since()
    assert (fallback.op, fallback.calls, fallback.source) == ("aten.nonzero.default", 1, "neuron device")
