"""The CPU boundary's common call on data pointers: no numpy arrays made, outputs allocated as tensors.

:class:`~neuroncc.frontend.compiled.CompiledGraph` hands CPU tensors to its executable as numpy views and wraps
the executable's fresh numpy results as tensors (convert.py). For a graph whose tensors all cross as they are
(no dtype that crosses as another, each input already in its parameter's layout, each result wanted in the
layout the executable writes) that is pure overhead: a training step's graphs take and return dozens of
tensors, at 4-6 us of Python each. Such a graph is called the way the ``neuron`` device calls executables
(``executors/cpu/address_call.py``): parameter data pointers in, outputs made by ``torch.empty_strided`` and
written in place.

Whether a graph qualifies is decided once, from its executable and imported graph; every call still checks
that each input has the dtype, shape and strides the decision assumed (a few hundred nanoseconds a tensor),
and takes the numpy path for that call when one does not.
"""

from __future__ import annotations

from typing import Any

import torch

from neuroncc.executors.cpu.address_call import AddressCall
from neuroncc.frontend.convert import _NUMPY_DTYPES
from neuroncc.frontend.imported import ComputedOutput, ImportedGraph
from neuroncc.ir.dtypes import DType


def _dense_same(shape: tuple[int, ...], have: tuple[int, ...], want: tuple[int, ...]) -> bool:
    return all(size == 1 or a == b for size, a, b in zip(shape, have, want, strict=True))


class DirectCall:
    """``call(args) -> outputs by IR output index`` or None (the numpy path must run this call)."""

    def __init__(self, executable: Any, graph: ImportedGraph, outputs: list[tuple[Any, Any]]):
        self.run = AddressCall(executable)
        params = executable.function.params
        #: per parameter: (graph input position, torch dtype (or the other it may have), shape, strides) the
        #: call's tensor must have
        self.inputs: list[tuple[int, torch.dtype, torch.dtype, tuple[int, ...], tuple[int, ...]]] = []
        for param, position in zip(params, graph.param_positions, strict=True):
            if param.type.dtype is DType.bf16:
                raise _NotDirect("a bf16 parameter crosses as float32")
            dtype = _TORCH_DTYPES[param.type.dtype.numpy]
            # with bf16_bits an i16 parameter holds an int16 tensor or a bf16 tensor's bits: the same bytes
            other = torch.bfloat16 if graph.bf16_bits and dtype is torch.int16 else dtype
            self.inputs.append((position, dtype, other, tuple(param.type.shape), tuple(param.type.layout_strides)))
        #: IR outputs the kernels write into their donated input's tensor: nothing is made for them
        self.in_place = frozenset(getattr(executable, "in_place", {}))
        #: per IR output: (shape, strides, dtype) of the tensor made for it
        self.results: list[tuple[tuple[int, ...], tuple[int, ...], torch.dtype]] = []
        for value, strides in zip(executable.function.outputs, executable.output_strides, strict=True):
            self.results.append((tuple(value.type.shape), tuple(strides), _TORCH_DTYPES[value.type.dtype.numpy]))
        for output, _ in outputs:  # each computed graph output is its IR output's tensor as made
            if isinstance(output, ComputedOutput):
                shape, strides, dtype = self.results[output.index]
                if graph.bf16_bits and output.spec.dtype is torch.bfloat16 and dtype is torch.int16:
                    dtype = torch.bfloat16  # a bf16 result's bits (importer.py): the tensor is made as bf16
                    self.results[output.index] = (shape, strides, dtype)
                if output.spec.dtype is not dtype or output.spec.shape != shape or \
                        not _dense_same(shape, strides, output.spec.stride):
                    raise _NotDirect(f"output {output.index} is wanted in another layout or dtype")

    @staticmethod
    def of(executable: Any, graph: ImportedGraph, outputs: list[tuple[Any, Any]]) -> DirectCall | None:
        """The direct call of a CPU executable and its graph, or None when some tensor must be converted."""
        if getattr(executable, "plan", None) is None or not hasattr(executable, "_call_buffers"):
            return None  # not the cpu target's launcher (nki-sim, the interpreter)
        if graph.rng_key:
            return None
        computed = [o.index for o, _ in outputs if isinstance(o, ComputedOutput)]
        if len(set(computed)) != len(computed):
            return None  # one result returned twice: the numpy path gives each its own tensor object
        try:
            return DirectCall(executable, graph, outputs)
        except (_NotDirect, KeyError):  # KeyError: a dtype without a torch equivalent here
            return None

    def __call__(self, args: list[Any]) -> list[torch.Tensor | None] | None:
        """The outputs by IR output index (None for those computed in place: in their input's tensor), or None
        when this call's tensors do not qualify."""
        addresses = []
        for position, dtype, other, shape, strides in self.inputs:
            tensor = args[position]
            if type(tensor) is not torch.Tensor and not isinstance(tensor, torch.nn.Parameter):
                return None
            if (tensor.dtype is not dtype and tensor.dtype is not other) or tensor.shape != shape or \
                    (tensor.stride() != strides and not _dense_same(shape, tensor.stride(), strides)) or \
                    tensor.is_conj() or tensor.is_neg() or not tensor.is_cpu:
                return None
            addresses.append(tensor.data_ptr())
        if not self.in_place:
            made = [torch.empty_strided(shape, strides, dtype=dtype) for shape, strides, dtype in self.results]
            self.run(addresses, [t.data_ptr() for t in made])
            return made
        made = [None if index in self.in_place else torch.empty_strided(shape, strides, dtype=dtype)
                for index, (shape, strides, dtype) in enumerate(self.results)]
        self.run(addresses, [0 if t is None else t.data_ptr() for t in made])
        return made


class _NotDirect(Exception):
    pass


_TORCH_DTYPES = {numpy: torch_dtype for torch_dtype, numpy in _NUMPY_DTYPES.items()}

__all__ = ["DirectCall"]
