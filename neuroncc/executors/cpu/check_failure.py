"""What a kernel whose run-time check failed tells its caller: which of its ops failed and on which value.

A kernel's code only sets its error flag (one store, on the unlikely branch of each check: an index out of
range, an integer divisor of zero; the success path pays nothing for this module). When the flag is up the
launcher calls :func:`kernel_check_error`, which reruns the kernel's region in the reference interpreter on
copies of the kernel's inputs: the op whose reference raises is the one that failed, with eager's words for the
value (``index 11 is out of bounds for dimension 1 with size 8``, ``integer division by zero``). The front end
then adds the aten op and the user's ``file:line`` (``frontend/run_errors.py``).
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from neuroncc.codegen.llvm.launch_plan import FailedCheck, StepSpec
from neuroncc.errors import (InterpreterIndexError, InterpreterZeroDivisionError, KernelIndexError,
                             KernelZeroDivisionError, RuntimeCheckError)
from neuroncc.executors.cpu.buffers import storage_dtype, strided_view
from neuroncc.executors.cpu.step_host import StepHost
from neuroncc.ir.interpreter import interpret


#: the interpreter's error for a failed check -> the kernel's
_KERNEL_ERROR = {InterpreterIndexError: KernelIndexError, InterpreterZeroDivisionError: KernelZeroDivisionError}


def kernel_check_error(exe: StepHost, step: StepSpec, flats: list[Any], addresses: list[int],
                       failed: int) -> RuntimeCheckError:
    """The error for kernel step ``step``, whose run-time check ``failed`` (its error flag: a
    :class:`~neuroncc.codegen.llvm.launch_plan.FailedCheck`) in this call (``flats``: its buffers' flat arrays
    where the call has them, ``addresses``: their addresses)."""
    op = exe.function.ops[step.op_index]
    kernel = op.attrs["name"]
    try:
        # copies: the rerun must not write into the caller's buffers (an indexed write's region updates in place)
        inputs = [np.array(_operand(exe, value, flats, addresses), copy=True) for value in step.operands]
        interpret(op.regions[0], inputs)
    except (InterpreterIndexError, InterpreterZeroDivisionError) as found:
        return _KERNEL_ERROR[type(found)](f"kernel '{kernel}': op '{found.op}': {found.detail}", op=found.op,
                                          detail=found.detail, kernel=kernel)
    except Exception:  # noqa: BLE001 - the diagnosis is best effort; the kernel's own report stands
        pass
    names = ', '.join(sorted({o.name for o in op.regions[0].ops}))
    if failed == FailedCheck.ZERO_DIVISOR:
        return KernelZeroDivisionError(f"kernel '{kernel}' ({names}): integer division by zero", kernel=kernel)
    return KernelIndexError(f"kernel '{kernel}' ({names}): index out of range", kernel=kernel)


def _operand(exe: StepHost, value: int, flats: list[Any], addresses: list[int]) -> np.ndarray:
    """A view of plan value ``value``: over its buffer's array when the call has one, else over its address (a
    direct call passes the tensors' addresses only)."""
    spec = exe.plan.values[value]
    if flats[spec.buffer] is not None:
        return exe.arrays((value,), flats)[0]
    address = exe.static_address(spec.buffer)
    if address is None:
        address = addresses[spec.buffer]
    dtype = storage_dtype(spec.dtype)
    extent = 1 + spec.offset + sum((n - 1) * s for n, s in zip(spec.shape, spec.strides)) if all(spec.shape) else 0
    raw = (ctypes.c_byte * (max(extent, 1) * dtype.itemsize)).from_address(address)
    return strided_view(np.frombuffer(raw, np.int8).view(dtype), spec)
