"""What the cpu launcher tells a tracer about each step of its plan (see :mod:`neuroncc.executors.tracing`).

A kernel step is named after its kernel (``fused_3_layer_norm``, the name the fuse pass gave it), a top-level
extern after its op and position (``mm_4``; so is a top-level matmul run as generated code), a view copy
``copy_<op>_<position>``; every step lists its operands' shapes, strides and dtypes, which
``torch.profiler(record_shapes=True)`` shows as input shapes, and its results' (what a profile counts as bytes
written: ``benchmarks/profile_steps.py``).
"""

from __future__ import annotations

from neuroncc.codegen.llvm.launch_plan import CpuLaunchPlan, StepKind, StepSpec
from neuroncc.executors.tracing import StepInfo
from neuroncc.ir.graph import Function


def step_name(function: Function, step: StepSpec) -> str:
    op = function.ops[step.op_index]
    if step.kind == StepKind.KERNEL:
        return str(op.attrs.get("name") or f"{op.name}_{step.op_index}")  # bmm_4: a matmul run as generated code
    if step.kind == StepKind.EXTERN:
        return f"{op.name}_{step.op_index}"
    return f"copy_{op.name}_{step.op_index}"


def step_kind(step: StepSpec) -> str:
    if step.kind == StepKind.KERNEL:
        return "kernel" if step.native else "interpreted"
    return "extern" if step.kind == StepKind.EXTERN else "host"


def step_infos(function: Function, plan: CpuLaunchPlan) -> list[StepInfo]:
    """One :class:`StepInfo` per step of ``plan``, in order."""
    def described(ids: tuple[int, ...]) -> tuple:
        return tuple((tuple(plan.values[i].shape), tuple(plan.values[i].strides), plan.values[i].dtype) for i in ids)

    return [StepInfo(step_name(function, step), step_kind(step), function.name, described(step.operands),
                     described(step.results)) for step in plan.steps]


def graph_info(function: Function) -> StepInfo:
    operands = tuple((p.type.shape, p.type.layout_strides, p.type.dtype.value) for p in function.params)
    return StepInfo(function.name, "graph", function.name, operands)
