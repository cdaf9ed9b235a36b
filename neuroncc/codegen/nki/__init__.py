"""NKI-style kernel emission: compiled functions become readable ``@nki.jit`` Python kernels.

    program = emit_program(fn, target="trn2")   # fn: after the ``nki`` pass pipeline
    print(program.source)                       # the module: one @nki.jit function per kernel
    program.plan                                # the launch plan: slots and steps (kernels, host steps)

Modules: ``plan`` (which ops share a loop nest; ``host_ops``: the ops it leaves to the host), ``shapes``
(affine maps of values onto loop nests), ``access`` (DMA expressions), ``body`` / ``op_rules`` /
``instructions`` (loop bodies, one rule per op, fusion), ``stages`` / ``matmul`` (loop nests; ``TRANSFERS``: one
DMA rule per data-movement op), ``kernel`` / ``program`` (functions and the module), ``normalize`` and
``source`` (helpers). See docs/nki.md ("Emission").

May import: errors, hardware, ir, passes. The emitted source imports ``neuroncc.nki`` when it runs.
"""

from neuroncc.codegen.nki.host_ops import HOST_OPS
from neuroncc.codegen.nki.op_rules import OP_RULES
from neuroncc.codegen.nki.plan import plan_region
from neuroncc.codegen.nki.program import NkiLaunchPlan, NkiProgram, NkiSlot, PlanStep, emit_program, graph_digest
from neuroncc.codegen.nki.stages import TRANSFERS

__all__ = ["HOST_OPS", "NkiLaunchPlan", "NkiProgram", "NkiSlot", "OP_RULES", "PlanStep", "TRANSFERS",
           "emit_program", "graph_digest", "plan_region"]
