"""A compiled op program bound to a call signature: it runs on the call's tensors where they are.

Each call passes the executable the data addresses of its input tensors (device memory is host memory), the
lifted floats as 0-d arguments, and the addresses of fresh device tensors for the new results, allocated with
eager's strides (the executable writes them in place when its output layout is eager's, which it is for one-op
programs on dense inputs; otherwise through a temporary). Values the op writes into its arguments (``add_``,
``out=``) come back in a temporary and are copied into the argument. Dtypes the executable stores
differently (bfloat16 travels as float32, see neuroncc.runtime.executable) are converted on the way.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import torch
from torch.utils._pytree import tree_unflatten

from neuroncc.device import memory
from neuroncc.device.op_forms import OpForm, argument
from neuroncc.device.programs import Program
from neuroncc.frontend.importer import ComputedOutput, InputOutput
from neuroncc.ir import DType
from neuroncc.runtime.address_call import AddressCall

#: IR dtypes whose executable storage differs from the torch tensor's memory (bf16 travels as float32)
_STORED_AS_FLOAT32 = (DType.bf16,)
_DEVICE_DTYPE = {torch.float64: torch.float32}


def _same_layout(shape: tuple[int, ...], a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return all(size == 1 or x == y for size, x, y in zip(shape, a, b))


class _Scalar:
    """How a lifted float reaches the kernel: a fresh 0-d buffer of the parameter's storage type per call."""

    __slots__ = ("index", "make")

    def __init__(self, index: int, dtype: DType):
        self.index = index
        if dtype is DType.f32:
            self.make = ctypes.c_float
        elif dtype is DType.bf16:  # bf16 travels as float32 holding a bf16 value
            self.make = lambda value: ctypes.c_float(float(torch.tensor(value, dtype=torch.bfloat16)))
        else:
            storage = dtype.numpy
            self.make = lambda value: np.array(value, dtype=storage)


def _address(buffer: Any) -> int:
    return ctypes.addressof(buffer) if isinstance(buffer, ctypes._SimpleCData) else buffer.ctypes.data


class CompiledKernel:
    """``kernel(args, kwargs, tensors, floats)`` -> the op's result; see the module docstring."""

    holds_kernel = True

    def __init__(self, form: OpForm, program: Program, executable: Any, device_index: int,
                 tensors: list[torch.Tensor], state: Any):
        self.form, self.program, self.executable, self.state = form, program, executable, state
        self.index = device_index
        self.tick = 0
        self.run = AddressCall(executable)
        params = program.function.params
        # per IR parameter: ("tensor", call tensor index, convert to float32?) or ("float", _Scalar)
        self.inputs: list[tuple[str, Any, bool]] = []
        for param, source in zip(params, program.inputs):
            if source >= 0:
                convert = param.type.dtype in _STORED_AS_FLOAT32 or tensors[source].dtype is torch.float64
                self.inputs.append(("tensor", source, convert))
            else:
                self.inputs.append(("float", _Scalar(-1 - source, param.type.dtype), False))
        self.direct_inputs = all(kind == "tensor" and not convert for kind, _, convert in self.inputs)
        self.tensor_sources = [source for _, source, _ in self.inputs]
        outputs = program.function.outputs
        exec_strides = executable.output_strides
        # per IR output: ("new", shape, strides, dtype, direct) for results; ("write", tensor index) for writes
        self.results: list[tuple[Any, ...]] = [None] * len(outputs)
        for graph_output in program.outputs:
            if isinstance(graph_output, ComputedOutput) and self.results[graph_output.index] is None:
                spec = graph_output.spec
                dtype = _DEVICE_DTYPE.get(spec.dtype, spec.dtype)
                stored_differently = outputs[graph_output.index].type.dtype in _STORED_AS_FLOAT32
                direct = not stored_differently and _same_layout(spec.shape, spec.stride,
                                                                 tuple(exec_strides[graph_output.index]))
                self.results[graph_output.index] = ("new", spec.shape, spec.stride, dtype, direct)
        for tensor_index, output_index in program.writes:
            self.results[output_index] = ("write", tensor_index)
        self.layouts = [(tuple(v.type.shape), tuple(exec_strides[i]), v.type.dtype) for i, v in enumerate(outputs)]
        self.fast = self.direct_inputs and not program.writes and all(
            r is not None and r[0] == "new" and r[4] for r in self.results)

    def __call__(self, args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[torch.Tensor],
                 floats: list[float]) -> Any:
        self.state.device_calls += 1
        if self.fast:
            return self._fast(args, kwargs, tensors)
        keep: list[Any] = []  # temporaries alive until the kernel has run
        inputs = []
        for kind, source, convert in self.inputs:
            if kind == "tensor":
                tensor = tensors[source]
                if convert:
                    tensor = memory.host_view(tensor).to(torch.float32)
                    keep.append(tensor)
                inputs.append(tensor.data_ptr())
            else:
                buffer = source.make(floats[source.index])
                keep.append(buffer)
                inputs.append(_address(buffer))
        outputs, made, after = [], {}, []
        for position, result in enumerate(self.results):
            shape, strides, ir_dtype = self.layouts[position]
            if result is not None and result[0] == "new" and result[4]:
                tensor = memory.empty_strided(result[1], result[2], result[3], self.index)
                made[position] = tensor
                outputs.append(tensor.data_ptr())
                continue
            temporary = torch.empty_strided(shape, strides, dtype=_storage(ir_dtype))
            keep.append(temporary)
            outputs.append(temporary.data_ptr())
            after.append((position, result, temporary))
        self.run(inputs, outputs)
        for position, result, temporary in after:
            if result is None:
                continue
            if result[0] == "write":
                memory.host_view(tensors[result[1]]).copy_(temporary)
            else:
                tensor = memory.empty_strided(result[1], result[2], result[3], self.index)
                memory.host_view(tensor).copy_(temporary)
                made[position] = tensor
        return self._result(args, kwargs, tensors, made)

    def _fast(self, args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[torch.Tensor]) -> Any:
        """Every input read in place and every result written in place: the common eager call."""
        empty, index = memory.empty_strided, self.index
        made = [empty(r[1], r[2], r[3], index) for r in self.results]
        self.run([tensors[s].data_ptr() for s in self.tensor_sources], [t.data_ptr() for t in made])
        return self._result(args, kwargs, tensors, dict(enumerate(made)))

    def _result(self, args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[torch.Tensor],
                made: dict[int, torch.Tensor]) -> Any:
        form = self.form
        if form.writes:
            written = [argument(form.op, name, args, kwargs) for name in form.returns]
            if not written:
                return None
            return written[0] if len(written) == 1 else tuple(written)
        values = []
        for graph_output in self.program.outputs:
            if isinstance(graph_output, ComputedOutput):
                values.append(made[graph_output.index])
            elif isinstance(graph_output, InputOutput):  # a new result equal to an input: still a new tensor
                values.append(memory.to_device(memory.host_view(tensors[graph_output.position]), self.index))
            else:
                values.append(graph_output.value)
        return tree_unflatten(values, self.program.result_tree)


def _storage(dtype: DType) -> torch.dtype:
    """The torch dtype of an executable's storage for IR ``dtype``."""
    return {DType.bf16: torch.float32}.get(dtype) or _TORCH.get(dtype.value, torch.float32)


_TORCH = {"f32": torch.float32, "f16": torch.float16, "i64": torch.int64, "i32": torch.int32, "i16": torch.int16,
          "i8": torch.int8, "u8": torch.uint8, "bool": torch.bool}
