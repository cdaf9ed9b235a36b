"""The callable AOTAutograd runs: tensors in, executable, tensors out.

It follows AOTAutograd's boxed calling convention (one list argument, cleared once read so inputs can be
freed early) and builds every graph output the way :class:`~neuroncc.frontend.importer.ImportedGraph` says:
computed outputs get eager's dtype and strides, inputs returned unchanged are the same tensor objects, and
missing gradients are ``None``. In-place updates of inputs are written back before returning.
"""

from __future__ import annotations

from typing import Any

import torch

from neuroncc.frontend.convert import TensorSpec, to_numpy, to_torch
from neuroncc.frontend.importer import ComputedOutput, ImportedGraph, InputOutput
from neuroncc.ir.ops.library_linalg import LinalgInputError
from neuroncc.runtime.executable import Executable


class CompiledGraph:
    """An imported graph bound to its executable."""

    def __init__(self, graph: ImportedGraph, executable: Executable):
        self.graph = graph
        self.executable = executable
        # AOTAutograd passes the arguments as one list that we may clear. An instance attribute, not a class
        # one: TorchDynamo's disable() wrapper around the backward copies the instance __dict__ only.
        self._boxed_call = True

    def __call__(self, args: list[Any]) -> list[Any]:
        graph = self.graph
        arrays = [to_numpy(args[p]) for p in graph.param_positions]
        try:
            results = self.executable(*arrays)
        except LinalgInputError as error:
            # The cpu target's ATen call raises torch's own error; the numpy references (interp, nki-sim) raise
            # the IR's. Users catch what eager raises, whatever the target: the IR's error stays the cause.
            raise torch.linalg.LinAlgError(str(error)) from error
        outputs: list[Any] = []
        for output in graph.outputs:
            if isinstance(output, ComputedOutput):
                outputs.append(to_torch(results[output.index], output.spec))
            elif isinstance(output, InputOutput):
                outputs.append(args[output.position])
            else:
                outputs.append(output.value)
        with torch.no_grad():
            for position, index in graph.mutations:
                args[position].copy_(to_torch(results[index], TensorSpec.of(args[position])))
        args.clear()
        return outputs
