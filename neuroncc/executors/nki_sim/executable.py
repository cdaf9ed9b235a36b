"""The ``nki-sim`` target: every kernel of a compiled graph runs as generated NKI code in the simulator.

``build_nki_executable(fn, options)`` emits the module (:func:`neuroncc.codegen.nki.emit_program`),
``exec``s its source with ``neuroncc.nki`` as ``nki`` and returns an :class:`NkiExecutable`: called with
numpy arrays, it walks the launch plan, simulating each kernel with ``nki.simulate`` on numpy arrays and
running host steps (views, constants, gathers and scatters) with the reference interpreter.

Options (all optional): ``nki_target`` ("trn1" | "trn2" | "trn3", default trn2) picks the NeuronCore the
kernels are emitted and simulated for. Anything the emitter does not support is refused at build time
with :class:`NkiUnsupportedError` naming the op; nothing falls back silently.

Artifacts (see :data:`neuroncc.driver.artifact.ARTIFACT_CODECS`): ``nki_kernels.py`` (the module source)
and ``nki_plan.json`` (the launch plan); nothing pickled.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

import neuroncc.nki as nki
from neuroncc.codegen.nki import (
    NkiLaunchPlan,
    NkiProgram,
    NkiSlot,
    emit_program,
    graph_digest,
)
from neuroncc.errors import (
    ArtifactError,
    CodegenError,
    InputError,
    PassError,
    UnsupportedOpError,
)
from neuroncc.executors.tracing import StepInfo, active_tracer
from neuroncc.ir import Function, collect_resources, interpret, parse
from neuroncc.ir.dtypes import DType, to_storage
from neuroncc.nki import trace
from neuroncc.nki.launch import _launch  # simulate() plus the trace, for the counters
from neuroncc.nki.target import resolve_target
from neuroncc.passes.kernels import check_kernel_contract
from neuroncc.passes.manager import PassContext
from neuroncc.passes.pipeline import default_pipeline, run_pipeline
from neuroncc.codegen.llvm.fork_safety import renew_in_child

SOURCE_FILE, PLAN_FILE = "nki_kernels.py", "nki_plan.json"
DEFAULT_NKI_TARGET = "trn2"


class NkiUnsupportedError(UnsupportedOpError):
    """The nki-sim target cannot compile a graph (an op or region the NKI emitter does not support)."""


class NkiRangeError(InputError):
    """An int64 value a kernel would hold as int32 (NKI has no 64-bit integers) is out of int32's range."""


INT32_MIN, INT32_MAX = -(2 ** 31), 2 ** 31 - 1


def load_module(source: str, name: str = "neuroncc_nki_kernels") -> ModuleType:
    """Execute emitted kernel source as a fresh module (its imports bring in ``neuroncc.nki``)."""
    module = ModuleType(name)
    module.__dict__["__file__"] = f"<{name}>"
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)  # noqa: S102 - our own generated source
    return module


class NkiExecutable:
    """The ``nki-sim`` executable (see the module docstring); ``stats`` holds integer counters."""

    def __init__(self, function: Function, program: NkiProgram):
        self.function = function
        self.program = program
        self.plan: NkiLaunchPlan = program.plan
        self.target = program.plan.target
        self.module = load_module(program.source)
        self.kernels = {step.name: getattr(self.module, step.name) for step in self.plan.steps if step.kind == "kernel"}
        resources = collect_resources(function)
        self.host_programs = {index: parse(step.program, source=f"<host step {step.name}>", resources=resources)
                              for index, step in enumerate(self.plan.steps) if step.kind == "host"}
        self._lock = renew_in_child(threading.Lock())
        self._graph_info = StepInfo(function.name, "graph", function.name,
                                    tuple((p.type.shape, p.type.layout_strides, p.type.dtype.value) for p in function.params))
        self._step_infos = [StepInfo(step.name, "kernel" if step.kind == "kernel" else "host", function.name,
                                     tuple((tuple(self.plan.slots[i].shape), (), self.plan.slots[i].dtype)
                                           for i in step.inputs))
                            for step in self.plan.steps]
        self.stats: dict[str, int] = {
            "kernels": len(self.kernels),
            "host_steps": len(self.host_programs),
            "calls": 0,
            "kernel_launches": 0,
            "simulated_instructions": 0,
        }

    @property
    def source(self) -> str:
        return self.program.source

    def __call__(self, *inputs: Any) -> list[np.ndarray]:
        fn, plan = self.function, self.plan
        if len(inputs) != len(fn.params):
            raise InputError(f"func @{fn.name} takes {len(fn.params)} inputs, got {len(inputs)}")
        slots: list[np.ndarray | None] = [None] * len(plan.slots)
        for position, (param, array) in enumerate(zip(fn.params, inputs)):
            array = np.asarray(array)
            if array.shape != param.type.shape:
                raise InputError(f"input #{position} has shape {list(array.shape)}, the graph expects "
                                 f"{list(param.type.shape)}")
            slots[plan.params[position]] = to_storage(array, param.type.dtype)
        tracer = active_tracer()  # None unless a profiler or recorder is watching (executors/tracing.py)
        with self._lock, (tracer.step(self._graph_info) if tracer else contextlib.nullcontext()):
            self.stats["calls"] += 1
            for index, step in enumerate(plan.steps):
                arguments = [slots[i] for i in step.inputs]
                with tracer.step(self._step_infos[index]) if tracer else contextlib.nullcontext():
                    if step.kind == "kernel":
                        results = self._launch(step.name, arguments, [plan.slots[i] for i in step.inputs],
                                               [plan.slots[i] for i in step.outputs])
                    else:
                        results = interpret(self.host_programs[index], arguments)
                for slot, array in zip(step.outputs, results):
                    slots[slot] = array
        returned: list[np.ndarray] = []
        seen: set[int] = set()
        for slot in plan.outputs:
            array = slots[slot]
            fresh = slot not in seen and slot not in plan.params
            returned.append(array if fresh else np.array(array, copy=True))
            seen.add(slot)
        return returned

    def _launch(self, name: str, arguments: list[np.ndarray], inputs: list[NkiSlot],
                outputs: list[NkiSlot]) -> list[np.ndarray]:
        """Simulate kernel ``name``; bf16 arguments travel as bfloat16 host arrays, int64 as int32."""
        for position, (array, spec) in enumerate(zip(arguments, inputs)):
            if spec.dtype == DType.i64.value and array.size and (array.min() < INT32_MIN or array.max() > INT32_MAX):
                raise NkiRangeError(f"kernel '{name}' argument #{position}: int64 values in [{array.min()}, "
                                    f"{array.max()}] do not fit the int32 the NKI device holds int64 in")
        device = [nki.bfloat16_array(array) if spec.dtype == DType.bf16.value else np.ascontiguousarray(array)
                  for array, spec in zip(arguments, inputs)]
        results, cores = _launch(self.kernels[name], resolve_target(self.target, {}), True, tuple(device), {},
                                 write_back=False)
        self.stats["kernel_launches"] += 1
        self.stats["simulated_instructions"] += sum(1 for events in cores for e in events
                                                    if isinstance(e, trace.Instruction))
        return [to_storage(np.asarray(array), DType(spec.dtype)) for array, spec in zip(results, outputs)]

    def save(self, directory: str | Path) -> list[str]:
        """Write the kernel module and the launch plan into ``directory``; returns the names written."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / SOURCE_FILE).write_text(self.program.source, encoding="utf-8")
        (directory / PLAN_FILE).write_text(self.plan.to_json(), encoding="utf-8")
        return [SOURCE_FILE, PLAN_FILE]


def _nki_target(options: Mapping[str, Any]) -> str:
    return str(options.get("nki_target") or DEFAULT_NKI_TARGET)


def lower_for_nki(fn: Function, target: str = DEFAULT_NKI_TARGET) -> Function:
    """``fn`` after the ``nki`` pipeline for ``target`` (trn1/trn2/trn3), unless it already is in kernel form
    (the output of the pipeline: only kernels, matmuls, extern calls and views at the top level)."""
    try:
        check_kernel_contract(fn)
        return fn
    except PassError:
        pipeline = default_pipeline("nki").replace("target=trn2", f"target={target}")
        return run_pipeline(pipeline, fn, PassContext())


def nki_program(fn: Function, target: str = DEFAULT_NKI_TARGET) -> NkiProgram:
    """The emitted NKI program (module source and launch plan) for ``fn``, before or after the ``nki``
    pipeline. Raises :class:`NkiUnsupportedError` naming an op the emitter does not support."""
    try:
        return emit_program(lower_for_nki(fn, target), target)
    except CodegenError as error:
        raise NkiUnsupportedError(f"target nki-sim cannot compile func @{fn.name}: {error}") from None


def nki_source(fn: Function, target: str = DEFAULT_NKI_TARGET) -> str:
    """The generated NKI module for ``fn`` (before or after the ``nki`` pipeline), as ``inspect --nki``
    prints it. Raises :class:`NkiUnsupportedError` naming an op the emitter does not support."""
    return nki_program(fn, target).source


def build_nki_executable(fn: Function, options: Mapping[str, Any] | None = None) -> NkiExecutable:
    """Emit NKI kernels for ``fn`` (after the ``nki`` pipeline) and wrap them as an executable."""
    options = options or {}
    try:
        program = emit_program(fn, _nki_target(options))
    except CodegenError as error:
        raise NkiUnsupportedError(f"target nki-sim cannot compile func @{fn.name}: {error}") from None
    return NkiExecutable(fn, program)


def load_nki_executable(directory: str | Path, fn: Function,
                        files: Mapping[str, bytes] | None = None) -> NkiExecutable:
    """The executable saved by :meth:`NkiExecutable.save` for ``fn``, without emitting again. ``files``: the
    artifact's files' bytes as its manifest check read them (else they are read from ``directory``).

    Raises :class:`ArtifactError` when the files are missing, malformed, or belong to another graph.
    """
    directory = Path(directory)
    files = files or {}
    try:
        source = (files[SOURCE_FILE] if SOURCE_FILE in files else (directory / SOURCE_FILE).read_bytes()).decode()
        plan = NkiLaunchPlan.from_json(
            (files[PLAN_FILE] if PLAN_FILE in files else (directory / PLAN_FILE).read_bytes()).decode())
    except (OSError, UnicodeDecodeError) as exc:
        raise ArtifactError(f"cannot read the NKI kernels in {directory}: {exc}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise ArtifactError(f"{directory / PLAN_FILE}: malformed launch plan ({exc})") from None
    if hashlib.sha256(source.encode()).hexdigest() != plan.source_sha256:
        raise ArtifactError(f"{directory / SOURCE_FILE} does not match its launch plan (checksum mismatch)")
    if plan.graph_sha256 != graph_digest(fn):
        raise ArtifactError(f"{directory}: the saved NKI kernels were emitted for a different graph")
    if len(plan.params) != len(fn.params) or len(plan.outputs) != len(fn.outputs):
        raise ArtifactError(f"{directory}: the launch plan does not match func @{fn.name}'s signature")
    try:
        return NkiExecutable(fn, NkiProgram(source, plan))
    except Exception as exc:  # a damaged module must read as a miss, never crash the caller
        raise ArtifactError(f"{directory}: cannot load the NKI kernels ({type(exc).__name__}: {exc})") from None


__all__ = ["NkiExecutable", "NkiRangeError", "NkiUnsupportedError", "build_nki_executable", "load_module", "load_nki_executable",
           "lower_for_nki", "nki_program", "nki_source"]
