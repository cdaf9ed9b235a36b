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
from neuroncc.nki.blocked import BlockedTensor
from neuroncc.nki.context import SimulationContext, activate, active
from neuroncc.nki.dtypes import DType, HostArray, bfloat16, cast, dtype_of, host_array
from neuroncc.nki.errors import NKISimulationError
from neuroncc.nki.forwarding import forward_results
from neuroncc.nki.language_grid import SpmdDim
from neuroncc.nki.memory import place
from neuroncc.nki.profile import KernelProfile, build_profile
from neuroncc.nki.target import Target, resolve_target
from neuroncc.nki.tensor import Buffer, Tensor
from neuroncc.nki.timeline import write_profile
from neuroncc.nki.typing import TensorAnnotation


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """Shape and dtype of a kernel argument without values, for cost-only runs (``execute=False``)."""

    shape: tuple[int, ...]
    dtype: DType

    @staticmethod
    def of(shape: tuple[int, ...] | list[int], dtype: object) -> TensorSpec:
        return TensorSpec(tuple(int(n) for n in shape), dtype_of(dtype))

    @staticmethod
    def from_annotation(annotation: TensorAnnotation, name: str) -> TensorSpec:
        """NKI 0.1's ``nt.tensor[[8192, 4096], nl.bfloat16]`` passed in place of an input (the profiling
        docs' and the matmul tutorial's benchmarks): the shape and dtype of an argument without values."""
        spec = annotation.spec
        if (isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], (list, tuple))
                and all(isinstance(n, int) for n in spec[0])):
            return TensorSpec.of(spec[0], spec[1])
        raise NKISimulationError(
            f"argument {name} is the annotation nt.tensor[{spec!r}]: a placeholder input needs a shape and a "
            f"dtype, nt.tensor[[rows, cols], nl.float32]")


def bfloat16_array(values: np.ndarray) -> HostArray:
    """``values`` rounded to bfloat16, as a bfloat16 kernel input."""
    return host_array(values, bfloat16)


class Kernel:
    """An ``@nki.jit`` kernel, optionally bound to a launch grid with ``kernel[gx, gy]``.

    Grid dimensions are ints or NKI 0.1's ``nl.nc(n)`` / ``nl.spmd_dim(...)``, which also say which physical
    NeuronCore runs each program (programs on different cores run in parallel in the cost model; otherwise
    programs run back to back on one core). ``platform_target`` (``nki.jit(platform_target="trn2")``) fixes
    the target of every launch of this kernel.
    """

    def __init__(self, fn: Callable[..., Any], grid: tuple[Any, ...] = (), target: str | Target | None = None):
        self.fn = fn
        self.grid_dims = grid
        self.target = target
        functools.update_wrapper(self, fn)

    @property
    def grid(self) -> tuple[int, ...]:
        return tuple(d.size if isinstance(d, SpmdDim) else d for d in self.grid_dims)

    def core_of(self, program: tuple[int, ...]) -> int:
        """The physical core that runs ``program`` (row-major over the ``nl.nc`` dimensions)."""
        core = 0
        for dim, index in zip(self.grid_dims, program):
            if isinstance(dim, SpmdDim):
                core = core * dim.cores + dim.core_of(index)
        return core

    def __getitem__(self, grid: Any) -> Kernel:
        dims = grid if isinstance(grid, tuple) else (grid,)
        if not dims or any(not (isinstance(n, SpmdDim) or (isinstance(n, int) and n > 0)) for n in dims):
            raise NKISimulationError(f"launch grid must be positive integers or nl.nc / nl.spmd_dim, got {grid!r}")
        return Kernel(self.fn, tuple(dims), self.target)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if active() is not None:  # a kernel calling a kernel: just Python
            return self.fn(*args, **kwargs)
        return simulate(self, target=self.target)(*args, **kwargs)

    def __repr__(self) -> str:
        grid = f"[{', '.join(map(str, self.grid))}]" if self.grid else ""
        return f"<nki kernel {self.fn.__name__}{grid}>"


def jit(fn: Callable[..., Any] | None = None, mode: str = "auto", platform_target: str | None = None,
        **options: Any) -> Any:
    """Mark a function as an NKI kernel: ``@nki.jit``, ``@nki.jit(...)`` or ``nki.jit(fn, mode=...)``.

    Every mode (NKI 0.1's ``"simulation"``, ``"baremetal"``, ... and ``"auto"``) simulates on numpy inputs;
    ``platform_target`` picks the target. Other options (compiler flags) are accepted and have no effect.
    """
    if mode not in _MODES:
        raise NKISimulationError(f"nki.jit mode {mode!r} is not one of {', '.join(_MODES)}")

    def wrap(f: Callable[..., Any]) -> Kernel:
        if isinstance(f, Kernel):
            return Kernel(f.fn, f.grid_dims, platform_target or f.target)
        return Kernel(f, (), platform_target)
    return wrap if fn is None else wrap(fn)


_MODES = ("auto", "simulation", "baremetal", "benchmark", "jax", "torchxla", "torch", "profile")


class LatencyPercentiles:
    """NKI 0.1's ``benchmark_result.nc_latency``: latency percentiles in microseconds.

    The cost model is deterministic, so every percentile is its one estimate.
    """

    PERCENTILES = (0, 1, 10, 25, 50, 90, 99, 100)

    def __init__(self, latency_us: float):
        self._latency_us = latency_us

    def get_latency_percentile(self, percentile: int) -> float:
        if percentile not in self.PERCENTILES:
            raise NKISimulationError(f"latency percentile {percentile} is not one of {self.PERCENTILES}")
        return self._latency_us


@dataclass(frozen=True)
class BenchmarkResult:
    """A launch's outputs with the cost model's estimate (the slowest core's, for a multi-core grid)."""

    outputs: Any
    profile: KernelProfile
    trace: tuple[tr.Event, ...]
    core_profiles: tuple[KernelProfile, ...] = ()

    @property
    def latency_us(self) -> float:
        return self.profile.latency_us

    @property
    def nc_latency(self) -> LatencyPercentiles:
        """The estimate in the shape of NKI's benchmark report (``get_latency_percentile(p)``, microseconds)."""
        return LatencyPercentiles(self.profile.latency_us)

    def report(self) -> str:
        return self.profile.report()


def simulate(kernel: Kernel | Callable[..., Any], *, target: str | Target | None = None, numerics: bool = True,
             profile: bool = False) -> Callable[..., Any]:
    """Return a function that runs ``kernel`` on numpy inputs and returns numpy outputs.

    ``target`` defaults to the kernel's ``platform_target``, then ``NEURON_PLATFORM_TARGET_OVERRIDE`` (read
    now, once), then trn2. With ``numerics=False`` nothing is computed (inputs may be ``TensorSpec``; outputs
    come back as ``TensorSpec``). With ``profile=True`` the function returns ``(outputs, KernelProfile)``.
    """
    resolved = resolve_target(_target_of(kernel, target), os.environ)

    def run(*args: Any, **kwargs: Any) -> Any:
        outputs, cores = _launch(kernel, resolved, numerics, args, kwargs)
        if profile:
            return outputs, _slowest([build_profile(events, resolved) for events in cores])
        return outputs
    return run


def simulate_kernel(kernel: Kernel | Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """NKI 0.1's spelling: ``simulate_kernel(kernel, *inputs)`` is ``simulate(kernel)(*inputs)``."""
    return simulate(kernel)(*args, **kwargs)


class _Launcher:
    """What ``nki.baremetal`` / ``nki.benchmark`` / ``nki.profile`` return: a kernel plus how to launch it."""

    def __init__(self, kernel: Kernel | Callable[..., Any], action: Callable[..., Any], target: Target):
        self.kernel = kernel
        self._action = action
        self.target = target  # resolved when the launcher was made: the environment is read once, there
        self.benchmark_result: BenchmarkResult | None = None
        functools.update_wrapper(self, kernel.fn if isinstance(kernel, Kernel) else kernel)

    def __getitem__(self, grid: Any) -> _Launcher:
        base = self.kernel if isinstance(self.kernel, Kernel) else Kernel(self.kernel)
        return _Launcher(base[grid], self._action, self.target)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._action(self, *args, **kwargs)


def _decorator(kernel: Any, action: Callable[..., Any], target: str | Target | None) -> Any:
    def wrap(k: Any) -> _Launcher:
        return _Launcher(k, action, resolve_target(_target_of(k, target), os.environ))
    return wrap if kernel is None else wrap(kernel)


def baremetal(kernel: Kernel | Callable[..., Any] | None = None, **options: Any) -> Any:
    """NKI 0.1's ``@nki.baremetal(...)``: run the kernel on numpy inputs and return numpy outputs.

    There is no device here: the kernel is simulated. Compiler and artifact options (``save_neff_name``,
    ``artifacts_dir``, ``additional_compile_opt``) are accepted and have no effect.
    """
    def run(launcher: _Launcher, *args: Any, **kwargs: Any) -> Any:
        return simulate(launcher.kernel, target=launcher.target)(*args, **kwargs)
    return _decorator(kernel, run, options.get("target"))


def benchmark(kernel: Kernel | Callable[..., Any] | None = None, *, target: str | Target | None = None,
              execute: bool = True, **options: Any) -> Any:
    """Launch ``kernel`` and estimate it with the cost model; returns a callable giving a ``BenchmarkResult``.

    ``nki.benchmark(kernel, target="trn1")(*inputs)`` returns outputs + estimate. NKI 0.1's decorator form
    ``nki.benchmark(warmup=10, iters=100)(kernel)`` works too: after a call, ``.benchmark_result.nc_latency
    .get_latency_percentile(50)`` is the estimate in microseconds (every percentile is the one estimate;
    ``warmup``/``iters`` have nothing to repeat). ``execute=False`` is cost-only: the kernel's control flow
    runs and every instruction is traced with its shapes, but no values are computed, so large problems
    estimate in seconds.
    """
    def run(launcher: _Launcher, *args: Any, **kwargs: Any) -> BenchmarkResult:
        numerics = execute and not _placeholders(args, kwargs)
        outputs, cores = _launch(launcher.kernel, launcher.target, numerics, args, kwargs)
        profiles = tuple(build_profile(events, launcher.target) for events in cores)
        slowest = _slowest(list(profiles))
        result = BenchmarkResult(outputs, slowest, tuple(cores[profiles.index(slowest)]), profiles)
        launcher.benchmark_result = result
        return result
    return _decorator(kernel, run, target)


def profile(func: Kernel | Callable[..., Any] | None = None, *, working_directory: str | None = None,
            save_trace_name: str = "profile.json", target: str | Target | None = None, **options: Any) -> Any:
    """NKI 0.1's ``@nki.profile(working_directory=...)``: run the kernel and write its simulated timeline.

    Writes ``save_trace_name`` (a Chrome trace-event JSON file: open it in Perfetto or chrome://tracing;
    an ``.ntff`` name is written as ``.json`` beside it, since NTFF is the device profiler's format) and
    ``profile_summary.json`` (the cost-model report) into ``working_directory``, and returns the outputs.
    """
    def run(launcher: _Launcher, *args: Any, **kwargs: Any) -> Any:
        if not working_directory:
            raise NKISimulationError("nki.profile needs working_directory=")
        outputs, cores = _launch(launcher.kernel, launcher.target, not _placeholders(args, kwargs), args, kwargs)
        name = getattr(launcher.kernel, "__name__", "kernel")
        write_profile(working_directory, save_trace_name, name, cores, launcher.target,
                      overwrite=bool(options.get("overwrite", True)))
        return outputs
    return _decorator(func, run, target)


def trace_kernel(kernel: Kernel | Callable[..., Any], *args: Any, target: str | Target | None = None,
                 numerics: bool = False, **kwargs: Any) -> list[tr.Event]:
    """The placed instruction trace of one launch (cost-only by default); see ``trace`` for the format.

    For a grid spread over several cores (``nl.nc``), the trace of core 0.
    """
    return _launch(kernel, resolve_target(_target_of(kernel, target), os.environ), numerics, args, kwargs)[1][0]


def _target_of(kernel: Any, explicit: str | Target | None) -> str | Target | None:
    if explicit is not None:
        return explicit
    inner = kernel.kernel if isinstance(kernel, _Launcher) else kernel
    return inner.target if isinstance(inner, Kernel) else None


def _slowest(profiles: list[KernelProfile]) -> KernelProfile:
    return max(profiles, key=lambda p: p.latency_us)


# --------------------------------------------------------------------------------- internals
def _launch(kernel: Any, target: Target, numerics: bool, args: tuple[Any, ...],
            kwargs: Mapping[str, Any], write_back: bool = True) -> tuple[Any, list[list[tr.Event]]]:
    """Run every program of the grid; returns the outputs and one placed trace per physical core.

    With ``write_back`` the numpy inputs the kernel wrote are updated in place (what NKI's simulator does).
    """
    if isinstance(kernel, _Launcher):
        kernel = kernel.kernel
    kernel = kernel if isinstance(kernel, Kernel) else Kernel(kernel)
    grid = kernel.grid
    context = SimulationContext(target, numerics, grid, api=language)
    starts: list[tuple[int, int]] = []  # (first event of the program, its core)
    with activate(context):
        inputs = [_to_device(arg, context, f"arg{i}") for i, arg in enumerate(args)]
        named = {key: _to_device(value, context, key) for key, value in kwargs.items()}
        result = None
        for program in itertools.product(*(range(n) for n in grid)):
            context.begin_program(program)
            starts.append((len(context.events), kernel.core_of(program)))
            try:
                result = kernel.fn(*inputs, **named)
            except NKISimulationError as error:
                _locate(error)
                raise
        outputs = _to_host(result, numerics)
        if numerics and write_back:
            _write_back(list(args) + list(kwargs.values()), inputs + list(named.values()), context)
    events = forward_results(context.events)
    cores = sorted({core for _, core in starts})
    if len(cores) <= 1:
        return outputs, [place(events, target)]
    return outputs, [place(trace, target) for trace in _split_by_core(context.events, starts, cores)]


def _split_by_core(events: list[tr.Event], starts: list[tuple[int, int]], cores: list[int]) -> list[list[tr.Event]]:
    """Each core's events: its programs' instructions, with every HBM allocation (HBM is shared)."""
    owner = [0] * len(events)
    bounds = starts + [(len(events), -1)]
    for (first, core), (end, _) in zip(bounds, bounds[1:]):
        for position in range(first, end):
            owner[position] = core
    hbm = [e for e in events if isinstance(e, tr.Allocate) and e.buffer not in ("sbuf", "psum")]
    traces = []
    for core in cores:
        own = [e for e, o in zip(events, owner)
               if o == core and not (isinstance(e, tr.Allocate) and e.buffer not in ("sbuf", "psum"))]
        traces.append(forward_results(hbm + own))
    return traces


_PACKAGE = os.path.dirname(os.path.abspath(__file__))


def _locate(error: NKISimulationError) -> None:
    """Add the kernel's line that made ``error`` (the innermost frame outside the simulator) to its message,
    as NKI's compiler reports the kernel line of a broken rule."""
    frame, where = error.__traceback__, None
    while frame is not None:
        filename = frame.tb_frame.f_code.co_filename
        if not os.path.abspath(filename).startswith(_PACKAGE + os.sep):
            where = f"{filename}:{frame.tb_lineno} in {frame.tb_frame.f_code.co_name}"
        frame = frame.tb_next
    if where and error.args and isinstance(error.args[0], str) and "\n  at " not in error.args[0]:
        error.args = (f"{error.args[0]}\n  at {where}",) + error.args[1:]


def _placeholders(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> bool:
    """Whether an argument is a shape without values (``TensorSpec``, ``nt.tensor[[shape], dtype]``): such a
    benchmark or profile is cost-only, as NKI's benchmark of placeholder inputs measures without results."""
    return any(isinstance(v, (TensorSpec, TensorAnnotation)) for v in list(args) + list(kwargs.values()))


def _to_device(value: Any, context: SimulationContext, name: str) -> Any:
    if isinstance(value, TensorAnnotation):
        value = TensorSpec.from_annotation(value, name)
    if isinstance(value, HostArray):
        return context.new_tensor(value.values.shape, value.dtype, Buffer.HBM, name, data=value.values.copy())
    if isinstance(value, np.ndarray):
        kind = dtype_of(value.dtype)
        if value.dtype == np.int64 and context.numerics:
            _check_int32_range(value, name)
        source = value.astype(np.float32) if value.dtype.name in ("bfloat16",) or value.dtype.name.startswith(
            "float8") else value  # ml_dtypes arrays: their values, then rounded to the type again (exact)
        data = cast(source, kind) if context.numerics else None
        return context.new_tensor(value.shape, kind, Buffer.HBM, name, data=data)
    if isinstance(value, TensorSpec):
        if context.numerics:
            raise NKISimulationError(
                f"argument {name} is a placeholder {list(value.shape)} {value.dtype.name} with no values: pass "
                f"numpy arrays to simulate, or benchmark it (nki.benchmark runs placeholder inputs cost-only)")
        return context.new_tensor(value.shape, value.dtype, Buffer.HBM, name)
    if isinstance(value, (list, tuple)):
        return type(value)(_to_device(v, context, f"{name}_{i}") for i, v in enumerate(value))
    return value


def _check_int32_range(value: np.ndarray, name: str) -> None:
    """An int64 array becomes an int32 tensor (NKI has no 64-bit integers); a value outside int32 would be
    clipped without a word, so it is refused by name."""
    info = np.iinfo(np.int32)
    outside = (value < info.min) | (value > info.max)
    if outside.any():
        where = tuple(int(i) for i in np.argwhere(outside)[0])
        raise NKISimulationError(
            f"argument {name}: int64 value {int(value[where])} at {list(where)} is outside int32's range; NKI tensors "
            f"have no 64-bit integers and an int64 array is passed as int32 (pass int32 values)")


def _write_back(hosts: list[Any], devices: list[Any], context: SimulationContext) -> None:
    """Inputs the kernel wrote are updated in place, as NKI's simulator does (0.1 kernels write outputs passed
    as arguments)."""
    for host, device in zip(hosts, devices):
        if isinstance(host, (list, tuple)) and isinstance(device, (list, tuple)):
            _write_back(list(host), list(device), context)
            continue
        if not isinstance(device, Tensor) or device.storage.id not in context.producers:
            continue
        target = host.values if isinstance(host, HostArray) else host
        if isinstance(target, np.ndarray) and target.flags.writeable:
            target[...] = np.asarray(device.array()).astype(target.dtype, copy=False).reshape(target.shape)


def _to_host(value: Any, numerics: bool) -> Any:
    if isinstance(value, BlockedTensor):
        raise NKISimulationError(f"kernel returned blocked on-chip tensor '{value.name}'; return HBM tensors")
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
