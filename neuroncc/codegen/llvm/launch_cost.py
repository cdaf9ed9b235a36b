"""The work a phase's parallel loop does per outer iteration, as the launcher's threading decision counts it.

A phase's ``work`` (``kernel_plan.py``) counts the elements it touches. Whether a second thread pays for its
wake-up and the barrier depends on how long those elements take, and a transcendental function (exp, erf,
log, tanh: a polynomial of 15-30 vector instructions) costs several times a load, an add and a store. Measured
on the issue #18 classifier step (Zen 3, 2 cores, kernels of 32K-131K elements, 1 vs 2 threads, us): layer
norm 94 vs 111, a row-sum backward 32 vs 45, two more plain kernels 81 vs 85 and 114 vs 122 (a second thread
loses on plain work of this size), but GELU's gradient 455 vs 219, the attention softmax 204 vs 121 and its
backward 194 vs 124 (it wins on transcendental work). So the launcher counts a phase that computes a
transcendental function ``TRANSCENDENTAL_WEIGHT`` times its elements, against thresholds raised by as much
(``executors/cpu/threads.py``): transcendental phases split where they did, plain phases need 8x the
elements they did.
"""

from __future__ import annotations

from neuroncc.codegen.llvm.kernel_plan import KernelPlan, Phase
from neuroncc.ir.graph import Value

#: Work units per element touched by a phase that computes a transcendental function (1 otherwise).
TRANSCENDENTAL_WEIGHT = 8


def launch_work(plan: KernelPlan, phase: Phase) -> int:
    """``phase.work`` in the launcher's units (see the module docstring)."""
    roots = [root for stage in phase.stages for root, _ in stage.roots]
    seen: set[Value] = set()
    if any(plan.computes_transcendental(root, seen) for root in roots):
        return phase.work * TRANSCENDENTAL_WEIGHT
    return phase.work

