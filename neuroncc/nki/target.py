"""Choosing the NeuronCore generation a launch simulates and costs.

The generations' numbers live in :mod:`neuroncc.hardware.neuron` (shared with the passes and the NKI emitter);
``Target`` and ``TARGETS`` are the simulator's names for them. The target is resolved once, at the API
boundary (``nki.simulate`` / ``nki.benchmark``), from an explicit argument or the
``NEURON_PLATFORM_TARGET_OVERRIDE`` environment variable; the core only ever sees a ``Target`` value.
"""

from __future__ import annotations

from collections.abc import Mapping

from neuroncc.hardware.neuron import DEFAULT_NEURON_CORE, NEURON_CORES, NeuronCore
from neuroncc.nki.errors import NKISimulationError

TARGET_ENV_VAR = "NEURON_PLATFORM_TARGET_OVERRIDE"
DEFAULT_TARGET = DEFAULT_NEURON_CORE

#: One NeuronCore generation (clocks, engine widths, memory sizes, DMA bandwidth).
Target = NeuronCore
#: Every generation by name (``trn1``, ``trn2``, ``trn3``).
TARGETS: Mapping[str, Target] = NEURON_CORES


def resolve_target(explicit: str | Target | None, environ: Mapping[str, str]) -> Target:
    """The target named explicitly, else by ``NEURON_PLATFORM_TARGET_OVERRIDE`` in ``environ``, else trn2."""
    if isinstance(explicit, Target):
        return explicit
    name = explicit if explicit is not None else environ.get(TARGET_ENV_VAR, DEFAULT_TARGET)
    key = name.strip().lower()
    if key not in TARGETS:
        source = "target argument" if explicit is not None else TARGET_ENV_VAR
        raise NKISimulationError(f"unknown NKI target {name!r} from {source}; expected one of {', '.join(TARGETS)}")
    return TARGETS[key]
