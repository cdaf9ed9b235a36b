"""Native CPU code through LLVM (llvmlite): kernel regions -> loop nests -> vectorized machine code.

    plan_kernel(region, param layouts, output layouts) -> KernelPlan     (schedule.py: stages and phases,
                                                                         refined by refine.py, transpose.py)
    emit_kernel(plan, symbol) -> (LLVM IR per phase, phase symbols)     (emit.py + per-op tables)
    jit.compile_ir([texts]) -> JitModule (object code, symbol addresses) (jit.py: O3, host CPU, MCJIT)

A plan is data (``kernel_plan.py``): each phase is one loop shape of a tagged union (``RowLoop``,
``BlockedMap``, ``TransposedMap``, ``SplitColumns``, ...); the planner is a flat sequence of named steps that
each return a new plan, and the emitter dispatches once on the shape. Per-op lowerings are tables:
``elementwise.ELEMENTWISE``, ``access.ACCESS`` (movement, indexing, creation) and ``reductions.COMBINERS``;
they and the stage emitters see the emitter through ``context.EmitContext``. The launch plan
(``program.py``) decides layouts and buffers; the launcher (``neuroncc.executors.cpu.launcher``) runs the
phases across threads.

May import: errors, hardware, ir, passes, llvmlite.
"""

from __future__ import annotations

from neuroncc.hardware.host import CpuTarget, host_cpu
from neuroncc.codegen.llvm.emit import KernelEmitter
from neuroncc.codegen.llvm.kernel_plan import ExternCall, ExtraArg, KernelPlan, Phase
from neuroncc.codegen.llvm.schedule import plan_kernel
from neuroncc.codegen.llvm.views import Layout, reshape_strides, view_layout


def emit_kernel(plan: KernelPlan, symbol: str, target: CpuTarget | None = None) -> tuple[list[str], list[str]]:
    """One kernel's phase functions (``{symbol}_p{i}``) for ``target`` (default: the host CPU): the LLVM IR
    text of each phase's module and their symbols, in run order."""
    if target is None:
        target = host_cpu()
    phases = KernelEmitter(plan, symbol, target).emit()
    return [str(module) for _, module in phases], [name for name, _ in phases]


__all__ = ["CpuTarget", "ExternCall", "ExtraArg", "KernelPlan", "Layout", "Phase", "emit_kernel", "plan_kernel",
           "reshape_strides", "view_layout"]
