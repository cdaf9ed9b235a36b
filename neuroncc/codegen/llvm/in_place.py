"""Whether a planned kernel may compute one of its outputs straight into one of its parameters' buffers.

A function may donate a parameter's buffer to an output (its ``donated`` metadata, see ``ir/graph.py``): the
caller stores that output into the parameter's tensor after the call and never reads the old value again (an
optimizer step's ``param.copy_(new_param)``). The launch plan (``program.py``) then lets the kernel computing
the output write it where the caller wants it, instead of into a fresh buffer that is copied there afterwards:
the AdamW step moves 28 bytes per parameter instead of 52.

That is right only if the kernel reads every element of the parameter before overwriting it, and the emitter
does not keep intermediate values: each stage recomputes what it needs from buffers (``schedule.py``), so the
question is asked of the kernel's plan, not of its region. :func:`writes_in_place` says yes when

- one map stage writes the output, in a plain row or blocked loop (no transposing tile, no scatter);
- that stage reads the parameter only at the index it writes (through elementwise ops of the output's shape,
  never through a movement, index or broadcast), and the output's own expression reads it: its one load per
  element (the emitter memoizes values per loop body, so items of the stage that read the same element share
  that load) comes before the store by data dependence, even with the ``noalias`` pointers of the kernel;
- no other stage and no extern call reads the parameter at all.

Anything else keeps the output's own buffer; the caller then copies it (the answer is only ever "no" when in
doubt).
"""

from __future__ import annotations

from neuroncc.codegen.llvm.elementwise import ELEMENTWISE
from neuroncc.codegen.llvm.kernel_plan import BlockedMap, Computed, KernelPlan, MapStage, RowLoop
from neuroncc.codegen.llvm.views import Layout
from neuroncc.ir.graph import Value

#: How a stage reads a parameter: not at all, only at the index it writes, or at some other index.
NONE, SAME_INDEX, OTHER = 0, 1, 2


def writes_in_place(plan: KernelPlan, param: int, output: int) -> bool:
    """May region output ``output`` be stored into the buffer of region parameter ``param`` (both positions,
    with the same layout; see the module docstring)?"""
    param_slot, output_slot = param, plan.n_params + output
    source = plan.access.get(plan.region.params[param])
    if not isinstance(source, Layout) or source.arg != param_slot:
        return False
    if plan.extern is not None and any(a.arg == param_slot for a in plan.extern.operands):
        return False
    writer = None
    for phase in plan.phases:
        for stage in phase.stages:
            if output_slot in stage.written:
                if writer is not None or not isinstance(stage, MapStage) or \
                        not isinstance(phase, RowLoop | BlockedMap):
                    return False
                writer = stage
    if writer is None:
        return False
    positions = [i for i, (_, target) in enumerate(writer.items) if target.arg == output_slot]
    if len(positions) != 1:
        return False
    value, target = writer.items[positions[0]]
    if (target.offset, target.shape, target.strides, target.dtype) != \
            (source.offset, source.shape, source.strides, source.dtype):
        return False
    reads = _Reads(plan, source)
    if reads.of(value, writer.shape) != SAME_INDEX:
        return False  # the store would not depend on the load: not ordered after it
    for phase in plan.phases:
        for stage in phase.stages:
            if stage is writer:
                if any(reads.of(v, writer.shape) == OTHER for v, _ in writer.items):
                    return False
            elif _stage_reads(reads, stage) != NONE:
                return False
    return True


def _stage_reads(reads: _Reads, stage: object) -> int:
    """How ``stage`` reads the parameter (any read counts: the stage is not the writer)."""
    roots = [v for v, _ in getattr(stage, "roots", ())]
    op = getattr(stage, "op", None)  # a scatter reads its operands (its roots are empty)
    if op is not None:
        roots += list(op.operands)
    return max((reads.of(v, None) for v in roots), default=NONE)


class _Reads:
    """``of(value, shape)``: how computing ``value`` reads the parameter laid out as ``source``; SAME_INDEX only
    when every read is at the index ``value`` is computed at, ``value`` having ``shape``."""

    def __init__(self, plan: KernelPlan, source: Layout):
        self.plan, self.source = plan, source
        self._memo: dict[tuple[Value, bool], int] = {}

    def of(self, value: Value, shape: tuple[int, ...] | None) -> int:
        return self._walk(value, shape is not None and value.type.shape == shape == self.source.shape)

    def _walk(self, root: Value, same_index: bool) -> int:
        """Depth first over the inline expression (an explicit stack: unrolled recurrences run hundreds of
        ops deep)."""
        memo, size = self._memo, self.source.shape
        pending: list[tuple[Value, bool, bool]] = [(root, same_index, False)]
        while pending:
            value, same, operands_done = pending.pop()
            if (value, same) in memo and not operands_done:
                continue
            access = self.plan.access.get(value)
            if isinstance(access, Layout):
                if access.arg != self.source.arg:
                    memo[(value, same)] = NONE
                else:
                    memo[(value, same)] = SAME_INDEX if same and access == self.source else OTHER
                continue
            if not isinstance(access, Computed):
                memo[(value, same)] = OTHER  # not planned: do not guess
                continue
            op = access.op
            # an elementwise op computes element i from elements i of operands of its own shape
            keeps = same and op.name in ELEMENTWISE and op.results[access.index].type.shape == size
            operands = [(v, keeps and v.type.shape == size) for v in op.operands]
            if operands_done:
                memo[(value, same)] = max((memo[o] for o in operands), default=NONE)
            else:
                pending.append((value, same, True))
                pending.extend((v, s, False) for v, s in operands)
        return memo[(root, same_index)]


__all__ = ["writes_in_place"]
