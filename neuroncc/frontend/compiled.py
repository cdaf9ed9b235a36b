"""The callable AOTAutograd runs: tensors in, executable, tensors out.

It follows AOTAutograd's boxed calling convention (one list argument, cleared once read so inputs can be
freed early) and builds every graph output the way :class:`~neuroncc.frontend.importer.ImportedGraph` says:
computed outputs get eager's dtype and strides, inputs returned unchanged are the same tensor objects, and
missing gradients are ``None``. In-place updates of inputs are written back before returning.
"""

from __future__ import annotations

from typing import Any

import torch

from neuroncc.frontend.convert import ParameterViews, TensorSpec, numpy_layout, to_torch, wrap_result
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
        # per graph output: how to build it (computed outputs with the result layout that needs no conversion)
        self._parameters = ParameterViews(len(graph.param_positions))
        self._outputs = [(output, numpy_layout(output.spec)) if isinstance(output, ComputedOutput) else (output, None)
                         for output in graph.outputs]

    def __call__(self, args: list[Any]) -> list[Any]:
        graph = self.graph
        arrays = self._parameters.arrays(args, graph.param_positions)
        try:
            results = self.executable(*arrays)
        except LinalgInputError as error:
            # The cpu target's ATen call raises torch's own error; the numpy references (interp, nki-sim) raise
            # the IR's. Users catch what eager raises, whatever the target: the IR's error stays the cause.
            raise torch.linalg.LinAlgError(str(error)) from error
        outputs: list[Any] = []
        for output, layout in self._outputs:
            if isinstance(output, ComputedOutput):
                outputs.append(wrap_result(results[output.index], output.spec, layout))
            elif isinstance(output, InputOutput):
                outputs.append(args[output.position])
            else:
                outputs.append(output.value)
        if graph.mutations:
            self._write_back(args, results)
        args.clear()
        return outputs

    def _write_back(self, args: list[Any], results: list[Any]) -> None:
        """In-place updates of inputs, copied into the caller's tensors."""
        with torch.no_grad():
            for position, index in self.graph.mutations:
                args[position].copy_(to_torch(results[index], TensorSpec.of(args[position])))
