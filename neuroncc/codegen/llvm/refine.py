"""Phase refinements: how a phase's loops are shaped once the scheduler has formed it.

Each rule looks at one phase and, when it applies, changes how its outer loop is split or what it caches:
blocking long rows of map-only phases, row caching of expensive reduction inputs, and the three ways a lone
reduction without kept leading dims still gets a parallel outer loop (columns, kept middle dims, partials).
One rule works across phases: a column sum over the rows of a row-parallel phase joins it, as per-chunk
partials (``accumulate_column_partials``).
"""

from __future__ import annotations

import math

from neuroncc.codegen.llvm.reductions import COMBINERS
from neuroncc.codegen.llvm.schedule import (
    Computed, ExtraArg, KernelPlan, MapStage, Phase, ReduceStage, outer_dims_preserved,
)
from neuroncc.ir.graph import Value
from neuroncc.ir.opdef import Category, Trait
from neuroncc.ir.ops import REGISTRY


def block_long_rows(phase: Phase, block: int) -> None:
    """Map-only phases over one shape iterate all dims in the outer loop, blocking the last (parallel 1-d)."""
    shapes = {s.shape for s in phase.stages}
    if len(shapes) != 1 or any(s.kind != "map" for s in phase.stages):
        return
    (shape,) = shapes
    if not shape or shape[-1] <= block or phase.outer != len(shape) - 1:
        return
    phase.outer, phase.outer_shape, phase.block = len(shape), shape, block


def parallel_kept_dims(phase: Phase) -> None:
    """A reduction over leading dims that keeps dims in the middle and reduces the last (batch-norm
    statistics: [N, C, H, W] over (0, 2, 3)) iterates its kept dims in the parallel outer loop."""
    if phase.outer or phase.split or len(phase.stages) != 1 or not isinstance(phase.stages[0], ReduceStage):
        return
    stage = phase.stages[0]
    rank = len(stage.shape)
    kept = tuple(d for d in range(rank) if d not in stage.reduced)
    if kept and rank - 1 in stage.reduced and math.prod(stage.shape[d] for d in kept) >= 2:
        phase.kept = kept


PARTIALS_MAX = 64


def split_full_reduction(plan: KernelPlan, phase: Phase) -> list[Phase]:
    """A lone reduction over all dims (losses, norms) becomes partial reductions over ranges of dim 0, in
    parallel, then a serial phase combining the partials."""
    if phase.outer or phase.chunk_combine or len(phase.stages) != 1 or not isinstance(phase.stages[0], ReduceStage):
        return [phase]
    stage = phase.stages[0]
    shape = stage.shape
    total = math.prod(shape)
    if not COMBINERS[stage.op.name].merges_partials or not shape or stage.reduced != tuple(range(len(shape))) \
            or total < 1 << 16 or shape[0] < 2:
        return [phase]
    parts = min(shape[0], PARTIALS_MAX, max(2, total >> 15))
    plan.extra.append(ExtraArg("scratch", nbytes=parts * 8))
    slot = plan.n_params + plan.n_outputs + len(plan.extra) - 1
    return [Phase([stage], 0, (), partials=parts, partials_arg=slot),
            Phase([stage], 0, (), partials=0, partials_arg=slot, combine=True)]


#: Column splits: at least this many columns per outer iteration (whole vectors), at most 8 per thread pair.
SPLIT_MIN = 64


def split_columns(phase: Phase) -> None:
    """A reduction over leading dims that keeps only the last dim (bias gradients, column sums) has no outer
    dims to parallelize; split its columns instead."""
    if phase.outer or len(phase.stages) != 1 or not isinstance(phase.stages[0], ReduceStage):
        return
    stage = phase.stages[0]
    rank = len(stage.shape)
    kept = [d for d in range(rank) if d not in stage.reduced]
    if not stage.reduced or kept != [rank - 1] or not COMBINERS[stage.op.name].column_split:
        return
    columns = stage.shape[-1]
    split = min(max(SPLIT_MIN, -(-columns // 8 // 16) * 16), 4096)
    # A power of two dividing the columns, when there is one in range: every block then has the same static
    # width, and a block never straddles a reshape's split of the dim (c // 512: 3 x 8 x 64 columns of a
    # QKV bias gradient), so the emitter's index division folds per block instead of per element.
    aligned = 1 << (split.bit_length() - 1)
    if aligned >= SPLIT_MIN and columns % aligned == 0:
        split = aligned
    if columns >= 2 * split:
        phase.split = split


ROW_CACHE_MAX = 16384  # elements of one cached row (kept on the stack)


def cache_rows(plan: KernelPlan, phase: Phase) -> None:
    """Row caching: a reduction input that a later stage of the phase reads again (softmax's exp(x - max))
    is stored into a per-row stack buffer while reducing, and loaded, not recomputed, by the later stage."""
    k = phase.outer
    if phase.block or k == 0:
        return
    for position, stage in enumerate(phase.stages):
        if not isinstance(stage, ReduceStage) or stage.reduced != tuple(range(k, len(stage.shape))):
            continue
        value = stage.op.operands[0]
        if value in phase.row_cache or not _expensive(plan, value, set()):
            continue
        if math.prod(stage.shape[k:]) > ROW_CACHE_MAX:
            continue
        for later in phase.stages[position + 1:]:
            if later.shape == stage.shape and any(_reads_in_place(plan, root, value, stage.shape, set())
                                                  for root, _ in later.roots):
                phase.row_cache[value] = position
                break


def _expensive(plan: KernelPlan, value: Value, seen: set) -> bool:
    access = plan.access[value]
    if not isinstance(access, Computed) or value in seen:
        return False
    seen.add(value)
    # transcendental functions are worth computing once per row rather than once per stage that reads them
    return access.op.has(Trait.TRANSCENDENTAL) or any(_expensive(plan, v, seen) for v in access.op.operands)


def _reads_in_place(plan: KernelPlan, root: Value, target: Value, shape: tuple[int, ...], seen: set) -> bool:
    """Whether ``root`` reads ``target`` at its own index through elementwise ops of one shape."""
    if root is target:
        return True
    access = plan.access[root]
    if not isinstance(access, Computed) or root in seen or root.type.shape != shape:
        return False
    seen.add(root)
    if REGISTRY.get(access.op.name).category is not Category.ELEMENTWISE:
        return False
    return any(_reads_in_place(plan, v, target, shape, seen) for v in access.op.operands)


#: Column partials: at most this many chunks of rows (each thread takes whole chunks) ...
CHUNKS_MAX = 16
#: ... and at most this many bytes of float64 partials per column reduction.
CHUNK_PARTIALS_MAX_BYTES = 1 << 21


def accumulate_column_partials(plan: KernelPlan, phases: list[Phase], stage_args: set[int]) -> list[Phase]:
    """A column reduction (bias gradients, LayerNorm weight gradients: a sum over the leading dims that keeps
    the rest) right after a row-parallel phase whose rows are exactly its reduced dims joins that phase: the
    phase's parallel loop then iterates chunks of contiguous rows, and each chunk accumulates the column sums
    of its rows into float64 partials while the rows are in cache; a small serial phase merges the partials.
    Without this the reduction is a phase of its own that recomputes (or re-reads) every row."""
    phases = _join_following(plan, phases, stage_args)
    for position in range(len(phases) - 1):  # a column sum right before a row phase that does not read it
        before, host = phases[position], phases[position + 1]
        if _can_host(host) and _joins(plan, host, before, *_rows_and_chunks(host), [], stage_args) and \
                all(_reads_none(plan, root, {before.stages[0].target.arg})  # type: ignore[union-attr]
                    for stage in host.stages for root, _ in stage.roots):
            phases[position], phases[position + 1] = host, before
    return _join_following(plan, phases, stage_args)


def _join_following(plan: KernelPlan, phases: list[Phase], stage_args: set[int]) -> list[Phase]:
    """Each row phase takes the column sums that follow it (see ``accumulate_column_partials``)."""
    result: list[Phase] = []
    position = 0
    while position < len(phases):
        host = phases[position]
        result.append(host)
        position += 1
        if not _can_host(host):
            continue
        rows, chunks = _rows_and_chunks(host)
        joined: list[ReduceStage] = []
        while position < len(phases) and _joins(plan, host, phases[position], rows, chunks, joined, stage_args):
            joined.append(phases[position].stages[0])  # type: ignore[arg-type]
            position += 1
        if not joined:
            continue
        host.chunks = chunks
        combine = Phase(list(joined), 0, (), chunk_combine=chunks)
        for number, stage in enumerate(joined):
            plan.extra.append(ExtraArg("scratch", nbytes=chunks * (math.prod(stage.shape) // rows) * 8))
            slot = plan.n_params + plan.n_outputs + len(plan.extra) - 1
            host.chunk_partials[len(host.stages)] = slot
            combine.chunk_partials[number] = slot
            host.stages.append(stage)
        result.append(combine)
    return result


def _can_host(phase: Phase) -> bool:
    """A parallel phase over whole rows (its outer dims) that column sums can join."""
    plain = not (phase.serial or phase.block or phase.split or phase.kept or phase.partials or phase.chunks)
    return plain and phase.outer >= 1 and math.prod(phase.outer_shape[: phase.outer]) >= 2


def _rows_and_chunks(host: Phase) -> tuple[int, int]:
    rows = math.prod(host.outer_shape[: host.outer])
    return rows, _chunk_count(rows)


def _chunk_count(rows: int) -> int:
    """At most CHUNKS_MAX chunks, preferably of equal size (a divisor of the rows), none empty."""
    most = min(rows, CHUNKS_MAX)
    for count in range(most, (most + 1) // 2 - 1, -1):
        if rows % count == 0:
            return count
    return -(-rows // -(-rows // most))


def _joins(plan: KernelPlan, host: Phase, phase: Phase, rows: int, chunks: int, joined: list[ReduceStage],
           stage_args: set[int]) -> bool:
    """Whether ``phase`` is a lone float column sum over ``rows`` that reads the buffers written by ``host``
    (and by the column sums already joined) only at its own row."""
    if phase.outer or len(phase.stages) != 1 or not isinstance(phase.stages[0], ReduceStage):
        return False
    stage = phase.stages[0]
    shape, reduced = stage.shape, stage.reduced
    count = len(reduced)
    # column partials are float64 sums (the combining phase finishes them: mean divides)
    if not stage.op.has(Trait.SUM_REDUCTION) or not stage.op.operands[0].type.dtype.is_float or not count \
            or reduced != tuple(range(count)) or count >= len(shape) or math.prod(shape[:count]) != rows:
        return False
    if chunks * (math.prod(shape) // rows) * 8 > CHUNK_PARTIALS_MAX_BYTES:
        return False
    written = {s.target.arg for s in host.stages if not isinstance(s, MapStage)}
    written |= {t.arg for s in host.stages if isinstance(s, MapStage) for _, t in s.items}
    written &= stage_args
    unfinished = {s.target.arg for s in joined}  # complete only after the combining phase
    for root, rank in stage.roots:
        if not _reads_none(plan, root, unfinished) or \
                not _rows_preserved(plan, root, count, host.outer_shape[: host.outer], written):
            return False
    return True


def _reads_none(plan: KernelPlan, value: Value, args: set[int]) -> bool:
    return outer_dims_preserved(plan, value, tuple(-1 for _ in value.type.shape), 1, args, set())


def _rows_preserved(plan: KernelPlan, value: Value, count: int, rows: tuple[int, ...], written: set[int]) -> bool:
    """Whether ``value``, whose first ``count`` dims enumerate the phase's flat row (row-major), reads the
    buffers in ``written`` only at that row. Reshapes keep the flat row in the operand dims of the same
    product (they are row-major); once the dims are the phase's own outer dims, the scheduler's dim flow
    takes over."""
    shape = value.type.shape
    if shape[:count] == rows:
        dims = tuple(d if d < count else -1 for d in range(len(shape)))
        return outer_dims_preserved(plan, value, dims, count, written, set())
    access = plan.access[value]
    if isinstance(access, Computed) and access.op.has(Trait.RESHAPE):
        (operand,) = access.op.operands
        flat, total = math.prod(shape[:count]), 1
        for width, size in enumerate(operand.type.shape):
            if total == flat:
                return _rows_preserved(plan, operand, width, rows, written)
            total *= size
    return _reads_none(plan, value, written)
