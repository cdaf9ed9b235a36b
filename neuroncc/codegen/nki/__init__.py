"""NKI-style kernel emission: compiled functions become readable ``@nki.jit`` Python kernels.

    program = emit_program(fn, target="trn2")   # fn: after the ``nki`` pass pipeline
    print(program.source)                       # the module: one @nki.jit function per kernel
    program.plan                                # the launch plan: slots and steps (kernels, host steps)

Modules: ``plan`` (which ops share a loop nest), ``shapes`` (affine maps of values onto loop nests),
``access`` (DMA expressions), ``body`` / ``op_rules`` / ``instructions`` (loop bodies, one rule per op,
fusion), ``stages`` / ``matmul`` (loop nests), ``kernel`` / ``program`` (functions and the module),
``normalize`` and ``source`` (helpers). See docs/nki.md ("Emission").
"""

from neuroncc.codegen.nki.op_rules import OP_RULES
from neuroncc.codegen.nki.plan import HOST_OPS, TRANSFER_OPS, plan_region
from neuroncc.codegen.nki.program import NkiLaunchPlan, NkiProgram, PlanStep, NkiSlot, emit_program, graph_digest

__all__ = ["HOST_OPS", "NkiLaunchPlan", "NkiProgram", "OP_RULES", "PlanStep", "NkiSlot", "TRANSFER_OPS",
           "emit_program", "graph_digest", "plan_region"]
