"""The ``interp`` target's executable: the graph run by the numpy reference interpreter.

A module of its own (not :mod:`neuroncc.executors.executable`, which a graph cache hit imports for the
``Executable`` protocol): a hit loads cpu executables only, and the class's generated methods are ~0.5 ms of
an import (docs/performance-history.md, session 23 hit23).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from neuroncc.ir import Function, interpret
from neuroncc.executors.tracing import StepInfo, active_tracer


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
