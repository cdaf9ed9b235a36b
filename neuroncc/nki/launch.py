"""Launching kernels: ``nki.jit``, ``nki.simulate``, ``nki.benchmark`` and the launch grid.

A launch wraps the numpy inputs as HBM tensors, runs the kernel's Python body once per program of the
grid inside a ``SimulationContext`` (every program sees the same inputs and the same ``shared_hbm``
outputs), and converts the returned HBM tensors back to numpy. The trace it records feeds the cost
model. This module is the API boundary: it is the only place that reads the environment (the target).
"""

from __future__ import annotations

import functools
import itertools
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from neuroncc.nki import language
from neuroncc.nki import trace as tr
from neuroncc.nki.context import SimulationContext, activate, active
from neuroncc.nki.dtypes import DType, bfloat16, cast, dtype_of
from neuroncc.nki.errors import NKISimulationError
from neuroncc.nki.memory import place
from neuroncc.nki.profile import KernelProfile, build_profile
from neuroncc.nki.target import Target, resolve_target
from neuroncc.nki.tensor import Buffer, Tensor


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """Shape and dtype of a kernel argument without values, for cost-only runs (``execute=False``)."""

    shape: tuple[int, ...]
    dtype: DType

    @staticmethod
    def of(shape: tuple[int, ...] | list[int], dtype: object) -> TensorSpec:
        return TensorSpec(tuple(int(n) for n in shape), dtype_of(dtype))


@dataclass(frozen=True, slots=True)
class HostArray:
    """Host values with an explicit NKI dtype; how to pass bfloat16 inputs, which numpy cannot hold."""

    values: np.ndarray
    dtype: DType


def host_array(values: np.ndarray, dtype: object) -> HostArray:
    """``values`` as a kernel input of ``dtype`` (e.g. ``nl.bfloat16``; values are rounded to it)."""
    kind = dtype_of(dtype)
    return HostArray(cast(np.asarray(values), kind), kind)


def bfloat16_array(values: np.ndarray) -> HostArray:
    """``values`` rounded to bfloat16, as a bfloat16 kernel input."""
    return host_array(values, bfloat16)


class Kernel:
    """An ``@nki.jit`` kernel, optionally bound to a launch grid with ``kernel[gx, gy]``."""

    def __init__(self, fn: Callable[..., Any], grid: tuple[int, ...] = ()):
        self.fn = fn
        self.grid = grid
        functools.update_wrapper(self, fn)

    def __getitem__(self, grid: int | tuple[int, ...]) -> Kernel:
        dims = grid if isinstance(grid, tuple) else (grid,)
        if not dims or any(not isinstance(n, int) or n <= 0 for n in dims):
            raise NKISimulationError(f"launch grid must be positive integers, got {grid!r}")
        return Kernel(self.fn, tuple(dims))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if active() is not None:  # a kernel calling a kernel: just Python
            return self.fn(*args, **kwargs)
        return simulate(self)(*args, **kwargs)

    def __repr__(self) -> str:
        grid = f"[{', '.join(map(str, self.grid))}]" if self.grid else ""
        return f"<nki kernel {self.fn.__name__}{grid}>"


def jit(fn: Callable[..., Any] | None = None, **options: Any) -> Any:
    """Mark a function as an NKI kernel; ``@nki.jit`` or ``@nki.jit(...)`` (options are accepted and ignored)."""
    if fn is None:
        return lambda f: Kernel(f)
    return fn if isinstance(fn, Kernel) else Kernel(fn)


@dataclass(frozen=True)
class BenchmarkResult:
    """A launch's outputs with the cost model's estimate."""

    outputs: Any
    profile: KernelProfile
    trace: tuple[tr.Event, ...]

    @property
    def latency_us(self) -> float:
        return self.profile.latency_us

    def report(self) -> str:
        return self.profile.report()


def simulate(kernel: Kernel | Callable[..., Any], *, target: str | Target | None = None, numerics: bool = True,
             profile: bool = False) -> Callable[..., Any]:
    """Return a function that runs ``kernel`` on numpy inputs and returns numpy outputs.

    ``target`` defaults to ``NEURON_PLATFORM_TARGET_OVERRIDE`` (read now, once) or trn2. With
    ``numerics=False`` nothing is computed (inputs may be ``TensorSpec``; outputs come back as
    ``TensorSpec``). With ``profile=True`` the function returns ``(outputs, KernelProfile)``.
    """
    resolved = resolve_target(target, os.environ)

    def run(*args: Any, **kwargs: Any) -> Any:
        outputs, events = _launch(kernel, resolved, numerics, args, kwargs)
        if profile:
            return outputs, build_profile(events, resolved)
        return outputs
    return run


def simulate_kernel(kernel: Kernel | Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """NKI 0.1's spelling: ``simulate_kernel(kernel, *inputs)`` is ``simulate(kernel)(*inputs)``."""
    return simulate(kernel)(*args, **kwargs)


def benchmark(kernel: Kernel | Callable[..., Any], *, target: str | Target | None = None,
              execute: bool = True) -> Callable[..., BenchmarkResult]:
    """Return a function that launches ``kernel`` and returns a ``BenchmarkResult`` (outputs + estimate).

    ``execute=False`` is cost-only: the kernel's control flow runs and every instruction is traced with
    its shapes, but no values are computed, so large problems estimate in seconds.
    """
    resolved = resolve_target(target, os.environ)

    def run(*args: Any, **kwargs: Any) -> BenchmarkResult:
        outputs, events = _launch(kernel, resolved, execute, args, kwargs)
        return BenchmarkResult(outputs, build_profile(events, resolved), tuple(events))
    return run


def trace_kernel(kernel: Kernel | Callable[..., Any], *args: Any, target: str | Target | None = None,
                 numerics: bool = False, **kwargs: Any) -> list[tr.Event]:
    """The placed instruction trace of one launch (cost-only by default); see ``trace`` for the format."""
    return _launch(kernel, resolve_target(target, os.environ), numerics, args, kwargs)[1]


# --------------------------------------------------------------------------------- internals
def _launch(kernel: Kernel | Callable[..., Any], target: Target, numerics: bool, args: tuple[Any, ...],
            kwargs: Mapping[str, Any]) -> tuple[Any, list[tr.Event]]:
    fn, grid = (kernel.fn, kernel.grid) if isinstance(kernel, Kernel) else (kernel, ())
    context = SimulationContext(target, numerics, language, grid)
    with activate(context):
        inputs = [_to_device(arg, context, f"arg{i}") for i, arg in enumerate(args)]
        named = {key: _to_device(value, context, key) for key, value in kwargs.items()}
        result = None
        for program in itertools.product(*(range(n) for n in grid)):
            context.begin_program(program)
            result = fn(*inputs, **named)
        outputs = _to_host(result, numerics)
    return outputs, place(context.events, target)


def _to_device(value: Any, context: SimulationContext, name: str) -> Any:
    if isinstance(value, HostArray):
        return context.new_tensor(value.values.shape, value.dtype, Buffer.HBM, name, data=value.values.copy())
    if isinstance(value, np.ndarray):
        kind = dtype_of(value.dtype)
        data = cast(value, kind) if context.numerics else None
        return context.new_tensor(value.shape, kind, Buffer.HBM, name, data=data)
    if isinstance(value, TensorSpec):
        if context.numerics:
            raise NKISimulationError(f"argument {name} is a TensorSpec (no values); pass arrays, or run cost-only")
        return context.new_tensor(value.shape, value.dtype, Buffer.HBM, name)
    if isinstance(value, (list, tuple)):
        return type(value)(_to_device(v, context, f"{name}_{i}") for i, v in enumerate(value))
    return value


def _to_host(value: Any, numerics: bool) -> Any:
    if isinstance(value, Tensor):
        if value.buffer.on_chip:
            raise NKISimulationError(
                f"kernel returned {value.buffer.value} tile '{value.name}'; kernel outputs must be HBM tensors "
                f"(allocate with buffer=nl.shared_hbm and store into them)")
        return np.array(value.array()) if numerics else TensorSpec(value.shape, value.dtype)
    if isinstance(value, (list, tuple)):
        return type(value)(_to_host(v, numerics) for v in value)
    if isinstance(value, dict):
        return {key: _to_host(v, numerics) for key, v in value.items()}
    return value
