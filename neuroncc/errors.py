"""Every error neuroncc raises on purpose derives from :class:`NeuronccError`.

This module imports nothing from the rest of the package so every layer (hardware, ir, nki, passes, codegen,
executors, driver, front end, device, CLI) can raise and catch the same types. The CLI turns any ``NeuronccError`` into one line and
a non-zero exit; anything else is a bug in neuroncc.
"""

from __future__ import annotations


class NeuronccError(Exception):
    """Base class of all typed neuroncc errors."""


class ParseError(NeuronccError):
    """Malformed ``.nir`` text. Carries the 1-based line and column of the problem."""

    def __init__(self, message: str, line: int, column: int, source: str = "<nir>"):
        self.message, self.line, self.column, self.source = message, line, column, source
        super().__init__(f"{source}:{line}:{column}: {message}")


class VerifyError(NeuronccError):
    """An IR graph that breaks a rule of the IR (types, dominance, op constraints)."""


class TypeInferenceError(VerifyError):
    """An op's operands or attributes do not fit the op; the message names the op and the operand."""


class InterpreterError(NeuronccError):
    """A graph failed at run time in the reference interpreter (bad inputs, out-of-range index, ...)."""


class RuntimeCheckError(NeuronccError, RuntimeError):
    """A compiled graph failed a run-time check on its data, where eager PyTorch raises too: an index out of range
    (:class:`RuntimeIndexError`), an integer division by zero (:class:`RuntimeZeroDivisionError`). A
    ``RuntimeError`` as eager's are. ``op`` is the op that failed (the aten op once the front end located it, else
    the IR op), ``detail`` eager's words for the value (``index 11 is out of bounds for dimension 1 with size 8``),
    ``location`` the user's ``file:line`` when known, ``kernel`` the fused kernel it ran in; each None when
    unknown. The front end (``frontend/run_errors.py``) and the device (``device/fallback.py``) locate every kind
    the same way: by rerunning eagerly, on the failure path only."""

    def __init__(self, message: str, *, op: str | None = None, detail: str | None = None,
                 kernel: str | None = None, location: str | None = None):
        self.op, self.detail, self.kernel, self.location = op, detail, kernel, location
        super().__init__(message)

    def __reduce__(self) -> tuple:  # keyword fields survive pickling (a worker process's error)
        return (_rebuild_runtime_check_error, (type(self), str(self), self.op, self.detail, self.kernel,
                                               self.location))


def _rebuild_runtime_check_error(cls: type, message: str, op: str | None, detail: str | None,
                                 kernel: str | None, location: str | None) -> RuntimeCheckError:
    return cls(message, op=op, detail=detail, kernel=kernel, location=location)


class RuntimeIndexError(RuntimeCheckError, IndexError):
    """A compiled graph read or wrote a data-dependent index out of range (gather, index_select, embedding,
    index, index_put, scatter, ...): an ``IndexError`` as eager's ``x[i]`` raises and a ``RuntimeError`` as
    eager's ``gather`` raises, so code catching eager's error catches it."""


class RuntimeZeroDivisionError(RuntimeCheckError, ZeroDivisionError):
    """A compiled graph divided integers by zero (``x // y``, ``x % y``, ``torch.div(x, y, rounding_mode=...)``,
    ``torch.fmod``): a ``RuntimeError`` as eager's ``RuntimeError: ZeroDivisionError`` is, and a
    ``ZeroDivisionError`` as its message says. Float division keeps IEEE's inf and NaN."""


class KernelIndexError(RuntimeIndexError):
    """A native kernel (the cpu target) met an index out of range: the kernel's error flag was set, and the
    message names the kernel, the op of it that failed and the value, found by rerunning that kernel's ops
    in the reference interpreter on its inputs (on the failure path only)."""


class KernelZeroDivisionError(RuntimeZeroDivisionError):
    """A native kernel (the cpu target) divided integers by zero: its error flag was set; found and named as
    :class:`KernelIndexError` is."""


class InterpreterIndexError(InterpreterError, RuntimeIndexError):
    """The reference interpreter (the interp target, a kernel run interpreted) met an index out of range."""


class InterpreterZeroDivisionError(InterpreterError, RuntimeZeroDivisionError):
    """The reference interpreter (the interp and nki-sim targets, a kernel run interpreted) divided integers by
    zero."""


class PassError(NeuronccError):
    """A pass refused its input (for example static-shape on a graph it cannot prove static)."""


class PipelineError(NeuronccError):
    """A pipeline string names an unknown pass or gives a pass an option it does not have."""


class UnsupportedOpError(NeuronccError):
    """An aten op (or a feature such as complex tensors) that neuroncc cannot compile.

    Raised by the torch front end; the message names the op, its input types and the user's file:line.
    """


class DynamicShapeError(UnsupportedOpError):
    """Symbolic sizes neuroncc cannot specialize (an exported program's dynamic dimensions).

    neuroncc compiles static shapes; the message says which sizes to fix. (TorchDynamo's symbolic sizes are
    specialized per call instead: see :mod:`neuroncc.frontend.specializations`.)
    """


class SpecializationLimitError(NeuronccError):
    """A graph with symbolic sizes was called with more input shapes than it may compile specializations for.

    neuroncc compiles one static specialization per input shape (``options={"max_specializations": N}``
    bounds them); the message lists the shapes compiled and suggests padding to buckets
    (``neuroncc.pad_to_bucket``).
    """


class CodegenError(NeuronccError):
    """A backend could not generate code for an op or kernel region."""


class ArtifactError(NeuronccError):
    """A cached or exported artifact is missing, corrupt, or from another version."""


class InputError(NeuronccError):
    """A user-supplied file or argument is unusable (not a .pt2, wrong inputs, absurd shapes, ...)."""


class TargetCpuError(InputError):
    """The CPU named to compile for (``NEURONCC_CPU``, ``neuroncc.set_cpu``, ``--cpu``) is unknown to LLVM, or has
    features this host lacks (its code would die here of an illegal instruction); the message names the setting,
    the CPU and the missing features. Raised before anything is compiled or loaded."""


class DeviceFallbackError(UnsupportedOpError):
    """An op on ``neuron`` tensors that neuroncc cannot compile, while CPU fallbacks are turned into errors
    (``neuroncc.set_fallback_mode("error")`` / ``NEURONCC_DEVICE_FALLBACK=error``). Carries the op's name."""

    def __init__(self, message: str, op: str):
        self.op = op
        super().__init__(message)


class DeviceAutogradError(NeuronccError, RuntimeError):
    """A backward pass (``backward()``, ``torch.autograd.grad``) over tensors on ``neuron:1`` or above: PyTorch's
    autograd engine cannot run it for a Python-registered device in torch 2.13 (a ``RuntimeError``, as the
    engine's own assert was)."""


class DeviceIndexError(NeuronccError, RuntimeError):
    """A ``neuron`` device index at or past ``torch.neuron.device_count()`` (``torch.ones(2, device="neuron:5")``,
    ``torch.accelerator.set_device_index(5)`` on one device): the message names the device, the count and
    ``NEURONCC_DEVICE_COUNT``. A ``RuntimeError``, as torch.cuda's invalid device ordinal is."""


class SpecializationLimitWarning(UserWarning):
    """A graph with symbolic sizes met one input shape more than ``max_specializations``: shapes not compiled
    run on eager PyTorch from then on, as TorchDynamo runs a frame past its ``recompile_limit`` (with
    ``torch._dynamo.config.fail_on_recompile_limit_hit`` set, :class:`SpecializationLimitError` instead)."""


class DeviceDisabledWarning(UserWarning):
    """The ``neuron`` device could not register when torch loaded it (the message says why); torch works
    without it. A warning, not an error: a broken neuroncc install must never break ``import torch``."""


class SharedLibraryWarning(UserWarning):
    """Linking the kernels into a shared library, or loading one, failed in this process: it compiles kernels as
    objects for LLVM's MCJIT from then on (correct, slower to load; ``codegen/llvm/native_library.py``). The
    message names the step and why: the linker's command line and its stderr, or the loader's error and the
    file it opened."""


class CollectiveError(NeuronccError):
    """A collective or point-to-point operation of the ``neuron`` process group failed: a peer died or closed
    its connection, or the operation did not complete within the group's timeout. The message names the
    operation, the rank and the group."""
