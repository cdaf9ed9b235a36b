"""Cost-model estimates of the NKI kernels neuroncc generates (``neuroncc inspect --cost`` calls this).

``estimate_costs(fn_or_executable, target="trn2")`` emits (or reuses) the program and runs every kernel in
the simulator's cost-only mode (``nki.benchmark(..., execute=False)``): control flow runs and every
instruction is traced with its shapes, nothing is computed, so large shapes estimate in seconds. Kernels
run back to back on one NeuronCore; host steps (views, constants, gathers) are listed with no device time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import neuroncc.nki as nki
from neuroncc.codegen.nki import NkiProgram, emit_program
from neuroncc.executors.nki_sim.executable import (
    NkiExecutable,
    load_module,
    lower_for_nki,
)
from neuroncc.ir import Function
from neuroncc.ir.dtypes import DType

#: NKI dtype of each IR dtype for cost-only arguments (int64 travels as int32, as the executable passes it).
_SPEC_DTYPES = {DType.f32: "float32", DType.bf16: "bfloat16", DType.f16: "float16", DType.i64: "int32",
                DType.i32: "int32", DType.i16: "int16", DType.i8: "int8", DType.u8: "uint8", DType.bool: "bool_"}

ENGINES = ("TensorE", "VectorE", "ScalarE", "GpSimdE", "DMA")


@dataclass(frozen=True)
class KernelCost:
    """One step of the launch plan: a kernel's estimate, or a host step (no device time)."""

    name: str
    kind: str  # "kernel" | "host"
    latency_us: float = 0.0
    bound: str = ""
    utilisation: tuple[tuple[str, float], ...] = ()  # (engine, busy / latency)
    dma_bytes: int = 0
    dma_bound_us: float = 0.0
    tensor_flops: int = 0
    tensor_peak_fraction: float = 0.0
    instructions: int = 0
    profile: Any = None  # the simulator's KernelProfile (kernels only)
    trace: tuple[Any, ...] = ()  # the placed instruction trace the estimate scheduled (the slowest core's)

    @property
    def dma_bound(self) -> bool:
        return self.bound == "DMA"


@dataclass(frozen=True)
class CostTable:
    """Per-step estimates of a compiled function on one target, and their total."""

    function: str
    target: str
    steps: tuple[KernelCost, ...]

    @property
    def kernels(self) -> tuple[KernelCost, ...]:
        return tuple(s for s in self.steps if s.kind == "kernel")

    @property
    def total_us(self) -> float:
        return sum(s.latency_us for s in self.steps)

    def kernel(self, name: str) -> KernelCost:
        for step in self.steps:
            if step.name == name:
                return step
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return {"function": self.function, "target": self.target, "total_us": self.total_us,
                "steps": [{"name": s.name, "kind": s.kind, "latency_us": s.latency_us, "bound": s.bound,
                           "utilisation": dict(s.utilisation), "dma_bytes": s.dma_bytes,
                           "dma_bound_us": s.dma_bound_us, "tensor_flops": s.tensor_flops,
                           "tensor_peak_fraction": s.tensor_peak_fraction, "instructions": s.instructions}
                          for s in self.steps]}

    def __str__(self) -> str:
        header = (f"{'kernel':32s} {'latency us':>11s} {'bound':>8s} "
                  + " ".join(f"{e:>8s}" for e in ENGINES) + f" {'DMA-bound':>10s} {'TensorE %pk':>11s}")
        lines = [f"NKI cost-model estimate for func @{self.function} on {self.target} "
                 f"(kernels back to back on one NeuronCore)", header, "-" * len(header)]
        for step in self.steps:
            if step.kind == "host":
                lines.append(f"{step.name:32s} {'host':>11s}")
                continue
            usage = dict(step.utilisation)
            ratio = f"{step.latency_us / step.dma_bound_us:.2f}x" if step.dma_bound_us else "-"
            lines.append(f"{step.name:32s} {step.latency_us:11.2f} {step.bound:>8s} "
                         + " ".join(f"{100 * usage.get(e, 0.0):7.1f}%" for e in ENGINES)
                         + f" {ratio:>10s} {100 * step.tensor_peak_fraction:10.1f}%")
        lines.append(f"{'total':32s} {self.total_us:11.2f}")
        return "\n".join(lines)


def _program(subject: Function | NkiExecutable | NkiProgram, target: str) -> tuple[str, NkiProgram, Any]:
    if isinstance(subject, NkiExecutable):
        if subject.target == target:
            return subject.function.name, subject.program, subject.module
        subject = subject.function
    if isinstance(subject, NkiProgram):
        return subject.plan.function, subject, load_module(subject.source)
    program = emit_program(lower_for_nki(subject, target), target)
    return subject.name, program, load_module(program.source)


def estimate_costs(subject: Function | NkiExecutable | NkiProgram, target: str = "trn2") -> CostTable:
    """Cost-only estimates of every kernel of ``subject`` on ``target`` (see the module docstring).

    ``subject`` is a function (before or after the ``nki`` pipeline), an nki-sim executable or an emitted
    program.
    """
    name, program, module = _program(subject, target)
    plan = program.plan
    steps = []
    for step in plan.steps:
        if step.kind == "host":
            steps.append(KernelCost(step.name, "host"))
            continue
        specs = [nki.TensorSpec.of(plan.slots[i].shape, _SPEC_DTYPES[DType(plan.slots[i].dtype)])
                 for i in step.inputs]
        result = nki.benchmark(getattr(module, step.name), target=target, execute=False)(*specs)
        profile = result.profile
        steps.append(KernelCost(
            step.name, "kernel", profile.latency_us, profile.bound,
            tuple((usage.engine, usage.utilisation) for usage in profile.engines), profile.dma_bytes,
            profile.dma_bound_us, profile.tensor_flops, profile.tensor_peak_fraction, profile.instruction_count,
            profile, result.trace))
    return CostTable(name, target, tuple(steps))


__all__ = ["CostTable", "KernelCost", "estimate_costs"]
