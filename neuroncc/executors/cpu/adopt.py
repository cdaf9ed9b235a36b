"""Adopting ATen's result tensors as the launcher's buffers, instead of copying them into the plan's.

Some extern kernels only return fresh tensors: oneDNN's linear (no ``out=``), ATen's convolutions (their
``out=`` overloads are generated wrappers that copy) and the ATen library ops (flash attention, LAPACK, sorting).
Copying such a result into the buffer the plan gave it costs a pass over it (single-threaded for numpy's copy),
~7 ms of a transformer training step. Instead:

* At plan time, :func:`neuroncc.codegen.llvm.extern_layouts.supplied_strides` predicts which results of a top-level extern step come back as fresh
  tensors and in which layout (``extern_layouts.RESULT_STRIDES``); the launch plan lays such a result out that
  way and marks its buffer *supplied* (``BufferSpec.supplied``): a per-call buffer in no arena, kind ``call``
  for an intermediate, ``output`` for a graph output.
* Each call, :class:`SuppliedExtern` runs the step and sets the supplied buffers' flat arrays and addresses in
  the call's buffer lists to the tensors' memory; every later step reads its buffers' addresses per call. A
  supplied output is returned as that memory (the numpy view's base keeps the tensor alive).
* Where a result cannot be adopted (:func:`adopt`: another dtype or layout than planned, memory overlapping an
  operand or an earlier result, not 64-byte aligned, or the op took a path that writes into its buffer, e.g. a
  float32 matmul precision other than "highest"), the step allocates the buffer fresh and copies into it.

Memory stays sound because a supplied buffer belongs to one value and one call: no other value shares it (it
is in no arena slot an in-place step could reuse), and each call gets new memory, so outputs never alias an
earlier call's. bf16 and f16 results are never supplied (they are rounded or converted on the way); a
convolution on bf16 words (bf16-product-words) supplies its results as ATen's bf16 tensors' words.

Inside a kernel (an mm/addmm whose epilogue the kernel fuses), the product goes to a scratch slot of the
kernel's argument array; :class:`ScratchProduct` points that slot at oneDNN's tensor for the call instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from neuroncc.ir.dtypes import DType
from neuroncc.ir.opdef import Trait
from neuroncc.ir.types import contiguous_strides
from neuroncc.codegen.llvm.extern_layouts import same_layout
from neuroncc.codegen.llvm.launch_plan import ALIGN, SlotKind, StepSpec
from neuroncc.executors.cpu.buffers import aligned_empty, data_address, flat_view, storage_dtype, strided_view
from neuroncc.executors.cpu.extern import convolution_words, onednn_product
from neuroncc.executors.cpu.extern_library import LIBRARY_CALLS, library_results, write_result
from neuroncc.executors.cpu.step_host import StepHost

def adopt(tensor: Any, spec: Any, dtype: np.dtype, taken: Sequence[np.ndarray]) -> np.ndarray | None:
    """``tensor``'s memory as a writable numpy array in ValueSpec ``spec``'s layout (``dtype`` its storage
    dtype), or None where it cannot be the buffer: see the module docstring. ``taken``: arrays its memory
    must not overlap (the step's operands and results adopted before)."""
    try:
        array = tensor.numpy()
    except (TypeError, RuntimeError):  # bfloat16, a conjugate view, a tensor that requires grad
        return None
    shape = tuple(spec.shape)
    if array.dtype != dtype or spec.offset != 0 or not array.flags.writeable:
        return None
    if array.shape != shape:  # ATen's result in another shape of the same contiguous elements
        if array.size != math.prod(shape) or not array.flags.c_contiguous \
                or not same_layout(shape, spec.strides, contiguous_strides(shape)):
            return None
        array = array.reshape(shape)
    itemsize = dtype.itemsize
    if not same_layout(shape, [s // itemsize for s in array.strides], spec.strides) \
            or any(s % itemsize for s in array.strides):
        return None
    if array.size and data_address(array) % ALIGN:
        return None  # kernels may read and write their scratch with aligned vector accesses
    if any(np.may_share_memory(array, other) for other in taken):
        return None
    return array


class SuppliedExtern:
    """A top-level extern step supplying the buffers of its results marked ``supplied`` in the plan."""

    def __init__(self, exe: StepHost, step: StepSpec):
        plan = exe.plan
        self.exe, self.step = exe, step
        self.op = exe.function.ops[step.op_index]
        self.library = self.op.name in LIBRARY_CALLS
        self.dtypes = [r.type.dtype for r in self.op.results]
        # per result: its ValueSpec, buffer number, storage dtype, and its extent when its buffer is supplied
        self.results = []
        for value_id in step.results:
            spec = plan.values[value_id]
            buffer = plan.buffers[spec.buffer]
            self.results.append((spec, spec.buffer, storage_dtype(spec.dtype),
                                 buffer.extent if buffer.supplied else None))

    def __call__(self, flats: list[Any], addresses: list[int]) -> None:
        op = self.op
        operands = self.exe.arrays(self.step.operands, flats)
        if self.library:
            tensors = library_results(op.name, op.attrs, operands, self.dtypes)
        elif op.attrs.get("words") and not op.has(Trait.MATRIX_PRODUCT):  # a convolution on bf16 words
            tensors = convolution_words(op.name, op.attrs, operands)
        else:
            product = onednn_product(op.name, op.attrs, operands, self.dtypes[0])
            tensors = None if product is None else (product,)
        if tensors is None:  # ATen's BLAS call writes into the buffers: give the supplied ones fresh storage
            for _, number, dtype, extent in self.results:
                if extent is not None:
                    flats[number], addresses[number] = aligned_empty(extent, dtype)
            self.exe.run_extern(self.step, flats)
            return
        taken = list(operands)
        for (spec, number, dtype, extent), tensor, ir_dtype in zip(self.results, tensors, self.dtypes):
            if extent is not None:
                array = adopt(tensor, spec, dtype, taken)
                if array is not None:
                    flats[number], addresses[number] = flat_view(array, extent), data_address(array)
                    taken.append(array)
                    continue
                flats[number], addresses[number] = aligned_empty(extent, dtype)
            write_result(strided_view(flats[number], spec), tensor, ir_dtype)


class ScratchProduct:
    """A kernel's extern float32 mm/addmm whose product goes to a scratch slot of the kernel's arguments:
    oneDNN's product tensor becomes that slot's memory for the call (see the module docstring)."""

    def __init__(self, args: Any, slot: int, op: Any, layout: Any):
        self.args, self.slot, self.op, self.layout = args, slot, op, layout
        self.scratch = args[slot]  # the arena scratch address, the slot's memory when nothing is adopted

    @staticmethod
    def slot_of(step: Any, op: Any) -> int | None:
        """The scratch slot holding the product of kernel step ``step``'s extern ``op``, where adoptable."""
        extern = step.extern
        if not op.has(Trait.MATRIX_PRODUCT) or op.results[0].type.rank != 2 or len(extern.results) != 1 \
                or op.results[0].type.dtype != DType.f32:  # a float32 mm or addmm
            return None
        layout = extern.results[0]
        slot = step.slots[layout.buffer] if layout.buffer < len(step.slots) else None
        if slot is None or slot.kind != SlotKind.SCRATCH or layout.offset != 0 or layout.dtype != "f32" \
                or tuple(layout.strides) != contiguous_strides(layout.shape):
            return None
        return layout.buffer

    def reset(self) -> None:
        """Point the slot back at its scratch memory (before the views of a call are built)."""
        self.args[self.slot] = self.scratch

    def run(self, operands: Sequence[np.ndarray], result: np.ndarray) -> np.ndarray | None:
        """Compute the product: adopted (returns the array the caller keeps alive until the kernel's phases
        ran), copied into ``result`` (the scratch view), or None when oneDNN does not run it (nothing done)."""
        product = onednn_product(self.op.name, self.op.attrs, operands, DType.f32)
        if product is None:
            return None
        array = adopt(product, self.layout, np.dtype(np.float32), operands)
        if array is None:
            result[...] = product.numpy()
            return result
        self.args[self.slot] = data_address(array)
        return array
