"""The contract between the compiler and whoever runs its output.

A *target* turns a (post-pipeline) :class:`Function` into an :class:`Executable`: a callable taking numpy
arrays in the function's parameter order and returning fresh numpy arrays in output order. bf16 values cross
this boundary as float32 arrays holding bf16-representable values (the reference interpreter's convention).

Targets are looked up by name in :data:`TARGETS`; each entry is a factory ``(Function, options) ->
Executable`` so that importing this module stays cheap (llvmlite is imported only when the cpu target builds,
the NKI simulator and code generator only when the nki-sim target does).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from neuroncc.errors import NeuronccError
from neuroncc.ir import Function, interpret
from neuroncc.executors.tracing import StepInfo, active_tracer


class Executable(Protocol):
    """What a target returns: call it with numpy arrays, get numpy arrays back."""

    function: Function

    def __call__(self, *inputs: np.ndarray) -> list[np.ndarray]: ...


@dataclass
class InterpreterExecutable:
    """The ``interp`` target: runs the graph with the numpy reference interpreter."""

    function: Function
    stats: dict[str, int] = field(default_factory=dict)

    def __call__(self, *inputs: np.ndarray) -> list[np.ndarray]:
        tracer = active_tracer()
        if tracer is None:
            return interpret(self.function, inputs)
        with tracer.step(StepInfo(self.function.name, "graph", self.function.name)):
            return interpret(self.function, inputs)

    def save(self, directory: Path) -> list[str]:
        """Write this executable's own artifact files into ``directory``; returns their names.

        The interpreter runs the graph itself, and the artifact layer already writes the graph for every
        target (``graph.nir`` + ``constants.npz``, see :mod:`neuroncc.driver.artifact`): nothing to add.
        """
        return []


def load_interp_executable(directory: Path, fn: Function) -> InterpreterExecutable:
    """The ``interp`` executable of an artifact directory whose graph (already read and verified) is ``fn``."""
    return InterpreterExecutable(fn)


def _build_interp(fn: Function, options: Mapping[str, Any]) -> Executable:
    return InterpreterExecutable(fn)


def _build_cpu(fn: Function, options: Mapping[str, Any]) -> Executable:
    from neuroncc.executors.cpu.launcher import build_cpu_executable

    return build_cpu_executable(fn, options)


def _build_nki_sim(fn: Function, options: Mapping[str, Any]) -> Executable:
    # the NKI simulator and its code generator: ~60 ms to import, which no cpu compile or load needs
    from neuroncc.executors.nki_sim.executable import build_nki_executable

    return build_nki_executable(fn, options)


TargetFactory = Callable[[Function, Mapping[str, Any]], Executable]

#: The target a compile is for when no one says (``compile_graph``, the ``neuron`` backend's ``target``).
DEFAULT_TARGET = "cpu"

#: Every compilation target by name. ``cpu`` (LLVM) is the default once available.
TARGETS: dict[str, TargetFactory] = {
    "interp": _build_interp,
    "cpu": _build_cpu,
    "nki-sim": _build_nki_sim,
}


class UnknownTargetError(NeuronccError):
    pass


def build_executable(fn: Function, target: str, options: Mapping[str, Any] | None = None) -> Executable:
    try:
        factory = TARGETS[target]
    except KeyError:
        raise UnknownTargetError(f"unknown target '{target}' (known: {', '.join(sorted(TARGETS))})") from None
    return factory(fn, options or {})


def run(fn: Function, inputs: Sequence[np.ndarray], target: str = "interp") -> list[np.ndarray]:
    """Build and run in one step (tests and the CLI's --check use this)."""
    return build_executable(fn, target)(*inputs)
