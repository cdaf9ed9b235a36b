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
from typing import Any, Protocol

import numpy as np

from neuroncc.errors import NeuronccError
from neuroncc.ir import Function


class Executable(Protocol):
    """What a target returns: call it with numpy arrays, get numpy arrays back."""

    function: Function

    def __call__(self, *inputs: np.ndarray) -> list[np.ndarray]: ...


def _build_interp(fn: Function, options: Mapping[str, Any]) -> Executable:
    from neuroncc.executors.interpreter_executable import InterpreterExecutable  # off a graph cache hit's path

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
