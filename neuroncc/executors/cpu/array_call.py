"""The common call of a cpu executable on numpy arrays, with its decisions made once per executable.

``CpuExecutable._call`` handles every case: inputs to convert, copy or re-lay out, outputs that are views of
an input, the arena or a constant, outputs computed in place or supplied by an extern step, steps that read
numpy arrays. Each call pays for deciding which case it is in, and on a roofline row that decision runs on the
caches the previous call's kernel emptied: ~0.1 ms of a 0.9 ms softmax call at 2 threads, most of it lookups
and small objects, not work (docs/performance-history.md, session 18 softmax and callfast).

:func:`array_call` decides once whether an executable's plan is the common case: every step a native kernel
without an extern (its runners read the call's buffer addresses, never its numpy arrays), every output in a
fresh buffer of its own returned whole (a reshape), every input read where it is in a contiguous layout. Its
call then checks each input with four comparisons (an ndarray of the planned shape, byte strides and dtype),
allocates each output with ``buffers.placed_empty`` (aligned and placed as the full path does), writes the
addresses and runs the steps. Anything else, an input that fails a check included, returns None, and the caller takes the full
path, which converts what it can and raises the typed errors; the two paths return the same arrays.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from neuroncc.codegen.llvm.launch_plan import BufferKind, StepKind
from neuroncc.executors.cpu.buffers import data_address, placed_empty, storage_dtype
from neuroncc.ir.types import contiguous_strides

#: ``call(exe, inputs) -> list of arrays, or None`` (None: not the common case, take the full path)
ArrayCall = Callable[[Any, tuple[Any, ...]], "list[np.ndarray] | None"]


def array_call(exe: Any) -> ArrayCall | None:
    """The common-case call of ``exe`` (a CpuExecutable), or None when its plan is not the common case (see the
    module docstring)."""
    plan, params = exe.plan, exe._params
    if any(step.kind != StepKind.KERNEL or not step.native or step.extern is not None for step in plan.steps):
        return None  # a step that reads numpy arrays (extern, interpreter, view copy) or supplies a buffer
    if exe.in_place or any(b.supplied or b.kind == BufferKind.CALL for b in plan.buffers):
        return None
    inputs: list[tuple[int, int, tuple[int, ...], tuple[int, ...], np.dtype]] = []
    outputs: dict[int, tuple[int, tuple[int, ...], np.dtype, int]] = {}
    for number, buffer in enumerate(plan.buffers):
        if buffer.kind == BufferKind.INPUT:
            shape, dtype, strides, contiguous = params[buffer.index]
            if not contiguous or buffer.extent != math.prod(shape) or buffer.extent == 0:
                return None
            inputs.append((number, buffer.index, tuple(shape), strides, dtype))
        elif buffer.kind == BufferKind.OUTPUT:
            spec, dtype = plan.values[plan.outputs[buffer.index]], storage_dtype(buffer.dtype)
            whole = spec.offset == 0 and tuple(spec.strides) == contiguous_strides(tuple(spec.shape))
            if not whole or spec.dtype != buffer.dtype or buffer.extent != math.prod(spec.shape):
                return None  # returned as a strided view or a part of its buffer
            outputs[buffer.index] = (number, tuple(spec.shape), dtype, buffer.extent)
    if sorted(outputs) != list(range(len(plan.outputs))):
        return None  # an output with no buffer of its own (a view or a repeat): copied by the full path
    count = len(params)
    checks = tuple(inputs)
    made = tuple(outputs[position] for position in range(len(plan.outputs)))

    def call(exe: Any, given: tuple[Any, ...]) -> list[np.ndarray] | None:
        # Written for the caches a large kernel leaves: every line of code and data it touches is a miss
        # (~5-15 us per statement on the softmax row), so it does the fewest things.
        if len(given) != count:
            return None
        for _, position, shape, strides, dtype in checks:
            array = given[position]
            if type(array) is not np.ndarray or array.shape != shape or array.strides != strides \
                    or array.dtype != dtype:
                return None
        with exe._lock:
            addresses = exe._address_list.copy()
            near: list[int] = []  # the data addresses the kernels read (placed_empty's)
            for number, position, *_ in checks:
                addresses[number] = address = data_address(given[position])
                near.append(address)
            results = []
            for number, shape, dtype, extent in made:
                storage, addresses[number] = placed_empty(extent, dtype, near)  # as the full path places it
                results.append(storage.reshape(shape))
            flats = exe._flat_list  # read by no step of this plan (native kernels without externs)
            for run in exe._calls:
                run(flats, addresses)
            return results

    return call

