"""Calling a cpu executable on raw addresses, for callers that own the memory (the ``neuron`` device).

``CpuExecutable.__call__`` takes numpy arrays and returns fresh ones. A caller whose tensors already live in host
memory it allocated (the eager device) wants neither: it passes each parameter's data address, laid out as the
parameter's type says, and the address of memory for each output, laid out as ``executable.output_strides`` says,
and the kernels read and write there directly. An output's address must be a multiple of 64 (``CACHE_LINE_BYTES``):
kernels stream large outputs with aligned non-temporal stores (``vmovntps``/``vmovntdq``), which fault on other
addresses. Every caller's outputs are (torch's CPU allocator, the output ring's kept storage and
``placement_shift``'s whole cache lines, the device's blocks); inputs may be anywhere. On the common path (native
kernels and BLAS steps) no numpy array is made at all; steps that need arrays (ATen externs, interpreted kernels, a
BLAS call that declines) get numpy views over the addresses, made on first use in the call. Outputs the plan does
not write into an output buffer of their own (views of an input, of the arena or of a constant, repeated outputs,
results ATen supplied) are copied into the caller's memory at the end; outputs computed in a donated input
(``exe.in_place``) are in that input's memory, and their output address is unused.

This module works on the launcher's plan and buffers: it is the launcher's second calling convention, kept
beside it.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import numpy as np

from neuroncc.executors.cpu.buffers import storage_dtype
from neuroncc.executors.cpu.native_sequence import NativeSequence
from neuroncc.executors import tracing
from neuroncc.executors.tracing import active_tracer
from neuroncc.ir.types import storage_extent


class _CallFlats:
    """The per-call list of flat buffer arrays (indexed by buffer number) that the launcher's steps read.

    Native kernels read addresses only, so the list is made on the first access: then the executable's
    static arrays are copied in and the caller's buffers become numpy views when a step asks for them."""

    __slots__ = ("_call", "_addresses", "_items", "_pending")

    def __init__(self, call: AddressCall, addresses: list[int]):
        self._call, self._addresses = call, addresses
        self._items: list[Any] | None = None
        self._pending: dict[int, tuple[int, int, np.dtype]] = {}

    def _materialize(self) -> list[Any]:
        if self._items is None:
            self._items = self._call.exe._flat_list.copy()
            self._pending = {number: (self._addresses[number], extent, dtype)
                             for number, _, _, extent, dtype in self._call._buffers}
        return self._items

    def __getitem__(self, number: int) -> Any:
        items = self._materialize()
        pending = self._pending.pop(number, None)
        if pending is not None:
            address, extent, dtype = pending
            items[number] = _array_at(address, extent, dtype)
        return items[number]

    def __setitem__(self, number: int, value: Any) -> None:
        items = self._materialize()
        self._pending.pop(number, None)
        items[number] = value


def _array_at(address: int, extent: int, dtype: np.dtype) -> np.ndarray:
    nbytes = max(extent, 0) * dtype.itemsize
    if nbytes == 0:
        return np.empty(0, dtype=dtype)
    return np.frombuffer((ctypes.c_char * nbytes).from_address(address), dtype=dtype)


class AddressCall:
    """``call(inputs, outputs)``: run ``exe`` with parameter ``i`` at address ``inputs[i]`` and output ``j``
    written to address ``outputs[j]`` (see the module docstring for the layouts)."""

    def __init__(self, exe: Any):
        exe.bind_code()  # its native steps (waits for code still being finished in the background)
        plan = exe.plan
        self.exe = exe
        # (buffer number, is an input, param or output position, extent, dtype) of each per-call buffer
        self._buffers: list[tuple[int, bool, int, int, np.dtype]] = []
        for number, buffer, dtype, _ in exe._call_buffers:
            self._buffers.append((number, buffer.kind == "input", buffer.index, buffer.extent, dtype))
        own = {buffer.index for buffer in plan.buffers if buffer.kind == "output" and not buffer.supplied}
        # outputs copied at the end: (position, buffer number or None, extent, dtype, layout of the result)
        self._copied: list[tuple[int, Any, np.dtype, Any]] = []
        for position, value_id in enumerate(plan.outputs):
            if position in own or position in exe.in_place:  # in place: already in the input's memory
                continue
            spec = plan.values[value_id]
            dtype = storage_dtype(spec.dtype)
            strides = tuple(exe.output_strides[position])
            extent = storage_extent(spec.shape, strides)
            self._copied.append((position, value_id, dtype, (tuple(spec.shape), strides, extent)))
        self._single = self._single_kernel()
        self._sequence = self._whole_sequence() if self._single is None else None

    def _single_kernel(self) -> tuple[Any, ...] | None:
        """For the commonest executable, one native kernel called straight (no extern, no index check, no
        thread pool) whose per-call pointers are all inputs and outputs: (the kernel's argument array and its
        address, its phases, and per per-call slot: (slot, is an input, position, byte offset))."""
        exe = self.exe
        if len(exe._runners) != 1 or self._copied:
            return None
        kernel = exe._runners[0]
        if getattr(kernel, "fast", None) is None or kernel.step.extern is not None:
            return None
        places = {number: (is_input, position) for number, is_input, position, _, _ in self._buffers}
        if any(buffer not in places for _, buffer, _ in kernel.dynamic):
            return None
        slots = tuple((slot, *places[buffer], offset) for slot, buffer, offset in kernel.dynamic)
        return kernel.args, kernel.args_address, tuple(kernel.serial_calls), slots

    def _whole_sequence(self) -> tuple[NativeSequence, tuple[tuple[int, bool, int], ...]] | None:
        """For an executable whose steps all run as one native sequence (native_sequence.py) with no output
        copied at the end: the sequence, and per per-call buffer (its number, is an input, position). Its address
        array's static entries (arena, constants) are written here once: every call writes the same values."""
        exe = self.exe
        if len(exe._calls) != 1 or not isinstance(exe._calls[0], NativeSequence) or self._copied:
            return None
        sequence = exe._calls[0]
        with exe._lock:
            sequence.addresses[:len(exe._address_list)] = exe._address_list
        return sequence, tuple((number, is_input, position) for number, is_input, position, _, _ in self._buffers)

    def runner(self) -> Any:
        """``run(inputs, outputs)``, the same call as this object's, made for a caller that calls it per op:
        for the single-kernel executable a closure that sets the kernel's pointers and calls it (two Python
        frames fewer than ``__call__``: a third of the call on a 16-element op), else this object."""
        if self._sequence is not None:
            return self._sequence_runner(*self._sequence)
        if self._single is None:
            return self
        args, address, calls, slots = self._single
        lock, traced = self.exe._lock, self.__call__
        inputs_only = tuple((slot, position, offset) for slot, is_input, position, offset in slots if is_input)
        outputs_only = tuple((slot, position, offset) for slot, is_input, position, offset in slots if not is_input)
        if (len(calls) == 1 and len(outputs_only) == 1 and 1 <= len(inputs_only) <= 2
                and not any(offset for *_, offset in slots)):
            return self._binary_runner(args, address, calls[0], inputs_only, outputs_only[0])

        def run(inputs: Sequence[int], outputs: Sequence[int]) -> None:
            if tracing.watching():
                return traced(inputs, outputs)
            with lock:
                for slot, position, offset in inputs_only:
                    args[slot] = inputs[position] + offset
                for slot, position, offset in outputs_only:
                    args[slot] = outputs[position] + offset
                for fn, n_outer in calls:
                    fn(address, 0, n_outer)

        return run

    def _sequence_runner(self, sequence: NativeSequence, slots: tuple[tuple[int, bool, int], ...]) -> Any:
        """:meth:`runner`'s closure for an executable run by one native sequence: the call's addresses written
        into the sequence's array, one native call (the steps one by one when a BLAS step would decline)."""
        lock, traced, words = self.exe._lock, self.__call__, sequence.words
        program, array, run, precision = sequence.program, sequence.addresses, sequence.run, sequence.precision
        inputs_only = tuple((number, position) for number, is_input, position in slots if is_input)
        outputs_only = tuple((number, position) for number, is_input, position in slots if not is_input)

        def run_sequence(inputs: Sequence[int], outputs: Sequence[int]) -> None:
            if tracing.watching() or (precision is not None and precision() != "highest"):
                return traced(inputs, outputs)
            with lock:
                for number, position in inputs_only:
                    array[number] = inputs[position]
                for number, position in outputs_only:
                    array[number] = outputs[position]
                run(program, words, array)

        return run_sequence

    def _binary_runner(self, args: Any, address: int, call: tuple[Any, int], inputs: tuple[tuple[int, int, int], ...],
                       output: tuple[int, int, int]) -> Any:
        """:meth:`runner`'s closure for the commonest kernel, unrolled: one phase, one or two inputs and one
        output at their buffers' starts (an elementwise op or a reduction on the eager device)."""
        lock, traced = self.exe._lock, self.__call__
        fn, n_outer = call
        (slot_a, a, _), (slot_b, b, _) = inputs if len(inputs) == 2 else inputs * 2
        slot_out, out, _ = output

        def run(inputs: Sequence[int], outputs: Sequence[int]) -> None:
            if tracing.watching():
                return traced(inputs, outputs)
            with lock:
                args[slot_a] = inputs[a]
                args[slot_b] = inputs[b]
                args[slot_out] = outputs[out]
                fn(address, 0, n_outer)

        return run

    def __call__(self, inputs: Sequence[int], outputs: Sequence[int]) -> None:
        # a profiler or recorder watching: the launcher's traced steps, in its range
        tracer = active_tracer() if tracing.watching() else None
        if tracer is not None:
            calls, graph = self.exe.traced_calls(tracer)
            with tracer.step(graph):
                return self._run(inputs, outputs, calls, single=False)
        return self._run(inputs, outputs, self.exe._calls, single=True)

    def _run(self, inputs: Sequence[int], outputs: Sequence[int], calls: list[Any], single: bool) -> None:
        exe = self.exe
        if single and self._single is not None:
            args, address, calls, slots = self._single
            with exe._lock:
                for slot, is_input, position, offset in slots:
                    args[slot] = (inputs if is_input else outputs)[position] + offset
                for fn, n_outer in calls:
                    fn(address, 0, n_outer)
            return
        addresses = exe._address_list.copy()
        for number, is_input, position, _, _ in self._buffers:
            addresses[number] = inputs[position] if is_input else outputs[position]
        flats = _CallFlats(self, addresses)
        with exe._lock:
            for run in calls:
                run(flats, addresses)
            for position, value_id, dtype, (shape, strides, extent) in self._copied:
                source = exe.arrays((value_id,), flats)[0]
                target = _array_at(outputs[position], extent, dtype)
                np.copyto(np.lib.stride_tricks.as_strided(target, shape, tuple(s * dtype.itemsize for s in strides)),
                          source)
