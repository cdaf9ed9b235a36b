"""Native CPU code through LLVM (llvmlite): kernel regions -> loop nests -> vectorized machine code.

    schedule.plan_kernel(region, param layouts, output layouts) -> KernelPlan  (stages and phases, refined
                                                                           by refine.py, transpose.py)
    emit.emit_kernel(plan, symbol) -> (LLVM IR per phase, phase symbols)   (+ per-op tables)
    jit.compile_ir([texts]) -> JitModule (object code, symbol addresses)   (O3, host CPU, MCJIT)

A plan is data (``kernel_plan.py``): each phase is one loop shape of a tagged union (``RowLoop``,
``BlockedMap``, ``TransposedMap``, ``SplitColumns``, ...); the planner is a flat sequence of named steps that
each return a new plan, and the emitter dispatches once on the shape. Per-op lowerings are tables:
``elementwise.ELEMENTWISE``, ``access.ACCESS`` (movement, indexing, creation) and ``reductions.COMBINERS``;
they and the stage emitters see the emitter through ``context.EmitContext``. The launch planner
(``program.py``) decides layouts and buffers, into a launch plan (``launch_plan.py``: data and its JSON); the
launcher (``neuroncc.executors.cpu.launcher``) runs the phases across threads.

This package imports only the layouts (``views``) and the host CPU: loading an artifact (``launch_plan``,
``jit``) does not import the planner or the emitters; import those from their modules.

May import: errors, hardware, ir, passes, llvmlite.
"""

from __future__ import annotations

from neuroncc.hardware.host import CpuTarget, host_cpu
from neuroncc.codegen.llvm.views import Layout, reshape_strides, view_layout

__all__ = ["CpuTarget", "Layout", "host_cpu", "reshape_strides", "view_layout"]
