"""Whether a planned kernel may compute one of its outputs straight into one of its parameters' buffers.

A function may donate a parameter's buffer to an output (its ``donated`` metadata, see ``ir/graph.py``): the
caller stores that output into the parameter's tensor after the call and never reads the old value again (an
optimizer step's ``param.copy_(new_param)``). The launch plan (``program.py``) then lets the kernel computing
the output write it where the caller wants it, instead of into a fresh buffer that is copied there afterwards:
the AdamW step moves 28 bytes per parameter instead of 52.

That is right only if the kernel reads every element of the parameter before overwriting it, and the emitter
does not keep intermediate values: each stage recomputes what it needs from buffers (``schedule.py``), so the
question is asked of the kernel's plan, not of its region. :func:`writes_in_place` says yes when

- one map stage writes the output, in a plain row, chunked row or blocked loop (no transposing tile, no
  scatter);
- that stage reads the parameter only at the index it writes (through elementwise ops of the output's shape,
  never through a movement, index or broadcast), and the output's own expression reads it: its one load per
  element (the emitter memoizes values per loop body, so items of the stage that read the same element share
  that load) comes before the store by data dependence, even with the ``noalias`` pointers of the kernel;
- no other stage and no extern call reads the parameter at all. A value an earlier stage of the same row
  phase stored into its row cache is loaded from there, not recomputed (``refine.cache_written_rows``: the
  column sum of ReLU's backward reads the gradient it wrote), and the phase merging column partials reads
  only the partials.

Anything else keeps the output's own buffer; the caller then copies it (the answer is only ever "no" when in
doubt).
"""

from __future__ import annotations

import math

from neuroncc.codegen.llvm.elementwise import ELEMENTWISE
from neuroncc.codegen.llvm.kernel_plan import (
    BlockedMap, ChunkedRows, CombineColumns, Computed, KernelPlan, MapStage, Phase, RowLoop,
)
from neuroncc.codegen.llvm.views import Layout
from neuroncc.ir.graph import Value
from neuroncc.ir.types import contiguous_strides

#: How a stage reads a parameter: not at all, only at the index it writes, or at some other index.
NONE, SAME_INDEX, OTHER = 0, 1, 2


def writes_in_place(plan: KernelPlan, param: int, output: int) -> bool:
    """May region output ``output`` be stored into the buffer of region parameter ``param`` (both positions,
    with the same layout, or both row-major with as many elements; see the module docstring)?"""
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
                        not isinstance(phase, RowLoop | BlockedMap | ChunkedRows):
                    return False
                writer = stage
    if writer is None:
        return False
    positions = [i for i, (_, target) in enumerate(writer.items) if target.arg == output_slot]
    if len(positions) != 1:
        return False
    value, target = writer.items[positions[0]]
    if _row_major(source) and _row_major(target) and math.prod(source.shape) == math.prod(target.shape):
        source = Layout(source.arg, source.offset, target.shape, target.strides, source.dtype)  # reshaped
    if (target.offset, target.shape, target.strides, target.dtype) != \
            (source.offset, source.shape, source.strides, source.dtype):
        return False
    for phase in plan.phases:
        if isinstance(phase, CombineColumns):
            continue  # it merges the chunks' column partials: scratch only
        cached = _row_cache(phase)
        for number, stage in enumerate(phase.stages):
            reads = _Reads(plan, source, frozenset(v for v, producer in cached.items() if producer < number))
            if stage is writer:
                if reads.of(value, writer.shape) != SAME_INDEX:
                    return False  # the store would not depend on the load: not ordered after it
                if any(reads.of(v, writer.shape) == OTHER for v, _ in writer.items):
                    return False
            elif _stage_reads(reads, stage) != NONE:
                return False
    return True


def _row_major(layout: Layout) -> bool:
    """Contiguous in row-major order: the same element numbering as any other shape of as many elements (the
    output may be a reshape of the parameter: ReLU's backward reads the [2048, 2048] product as [8, 256, 2048])."""
    return layout.is_contiguous and layout.strides == contiguous_strides(layout.shape)


def _row_cache(phase: Phase) -> dict[Value, int]:
    """Value -> the number (in ``phase.stages``) of the stage that stores it into the phase's row cache."""
    if isinstance(phase, ChunkedRows):
        return dict(phase.rows.row_cache)
    return dict(phase.row_cache) if isinstance(phase, RowLoop) else {}


def _stage_reads(reads: _Reads, stage: object) -> int:
    """How ``stage`` reads the parameter (any read counts: the stage is not the writer)."""
    roots = [v for v, _ in getattr(stage, "roots", ())]
    op = getattr(stage, "op", None)  # a scatter reads its operands (its roots are empty)
    if op is not None:
        roots += list(op.operands)
    return max((reads.of(v, None) for v in roots), default=NONE)


class _Reads:
    """``of(value, shape)``: how computing ``value`` reads the parameter laid out as ``source``; SAME_INDEX only
    when every read is at the index ``value`` is computed at, ``value`` having ``shape``. Values in ``loaded``
    come from a row cache: they read nothing."""

    def __init__(self, plan: KernelPlan, source: Layout, loaded: frozenset[Value] = frozenset()):
        self.plan, self.source, self.loaded = plan, source, loaded
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
            if value in self.loaded:
                memo[(value, same)] = NONE
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
