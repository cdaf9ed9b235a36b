"""Native CPU code through LLVM (llvmlite): kernel regions -> loop nests -> vectorized machine code.

    plan_kernel(region, param layouts, output layouts) -> KernelPlan     (schedule.py: stages and phases)
    emit_kernel(plan, symbol) -> (LLVM IR text, phase symbols)          (emit.py + per-op tables)
    jit.compile_ir([texts]) -> JitModule (object code, symbol addresses) (jit.py: O3, host CPU, MCJIT)

Per-op lowerings are tables: ``elementwise.ELEMENTWISE``, ``access.ACCESS`` (movement, indexing, creation)
and ``reductions.COMBINERS``. The launcher (``neuroncc.runtime.launcher``) decides layouts and buffers, and
runs the phases across threads.
"""

from __future__ import annotations

from llvmlite import ir

from neuroncc.codegen.llvm.emit import KernelEmitter
from neuroncc.codegen.llvm.schedule import ExternCall, ExtraArg, KernelPlan, plan_kernel
from neuroncc.codegen.llvm.views import Layout, reshape_strides, view_layout


def emit_kernel(plan: KernelPlan, symbol: str) -> tuple[str, list[str]]:
    """LLVM IR text of one kernel's phase functions (``{symbol}_p{i}``) and their symbols in run order."""
    module = ir.Module(name=symbol)
    phases = KernelEmitter(module, plan, symbol).emit()
    return str(module), phases


__all__ = ["ExternCall", "ExtraArg", "KernelPlan", "Layout", "emit_kernel", "plan_kernel", "reshape_strides",
           "view_layout"]
