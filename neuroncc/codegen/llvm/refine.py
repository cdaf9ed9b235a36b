"""Phase refinements: how a phase's loops are shaped once the scheduler has formed it.

Each step takes a plan and returns a new one, turning a phase into another loop shape (``kernel_plan.py``)
where its rule applies: blocking long rows of map-only phases, row caching of expensive reduction inputs (and
of expensive written values that a later stage reads again), and
the three ways a lone reduction without kept leading dims still gets a parallel outer loop (columns, kept
middle dims, partials). One rule works across phases: a column sum over the rows of a row-parallel phase
joins it, as per-chunk partials (``accumulate_column_partials``). A step only matches the shapes it refines,
so refinements cannot undo or stack on each other.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any
from dataclasses import replace

from neuroncc.codegen.llvm.dimflow import outer_dims_preserved
from neuroncc.codegen.llvm.elementwise import float_difference, widens_bf16
from neuroncc.codegen.llvm.kernel_plan import (
    BlockedMap, ChunkedRows, ColumnSum, CombineColumns, CombinePartials, Computed, KernelPlan, KeptDims,
    MapStage, PartialReduce, Phase, ReduceStage, RowLoop, SplitColumns, Stage, written_by,
)
from neuroncc.codegen.llvm.views import Layout
from neuroncc.ir.types import contiguous_strides
from neuroncc.codegen.llvm.reductions import COMBINERS
from neuroncc.codegen.llvm.scalars import storage_itemsize
from neuroncc.ir.graph import Value
from neuroncc.ir.opdef import Category, Trait
from neuroncc.ir.ops import REGISTRY


def _each_phase(plan: KernelPlan, rule: Callable[[Phase], Phase]) -> KernelPlan:
    """``plan`` with ``rule`` applied to each of its phases (a rule returns its phase when it does not apply)."""
    return replace(plan, phases=tuple(rule(phase) for phase in plan.phases))


def _lone_reduction(phase: Phase) -> ReduceStage | None:
    """The reduce stage of a row loop without outer dims that runs only it."""
    if isinstance(phase, RowLoop) and not phase.outer and len(phase.stages) == 1 and \
            isinstance(phase.stages[0], ReduceStage):
        return phase.stages[0]
    return None


def block_long_rows(plan: KernelPlan, block: int) -> KernelPlan:
    """Map-only phases over one shape iterate all dims in the outer loop, blocking the last (parallel 1-d)."""
    def rule(phase: Phase) -> Phase:
        if not isinstance(phase, RowLoop) or not all(isinstance(s, MapStage) for s in phase.stages):
            return phase
        shapes = {s.shape for s in phase.stages}
        if len(shapes) != 1:
            return phase
        (shape,) = shapes
        if not shape or shape[-1] <= block or len(phase.outer) != len(shape) - 1:
            return phase
        return BlockedMap(phase.stages, shape, block)  # type: ignore[arg-type]  # map stages only

    return _each_phase(plan, rule)


def parallel_kept_dims(plan: KernelPlan) -> KernelPlan:
    """A reduction over leading dims that keeps dims in the middle and reduces the last (batch-norm
    statistics: [N, C, H, W] over (0, 2, 3)) iterates its kept dims in the parallel outer loop."""
    def rule(phase: Phase) -> Phase:
        stage = _lone_reduction(phase)
        if stage is None:
            return phase
        rank = len(stage.shape)
        kept = tuple(d for d in range(rank) if d not in stage.reduced)
        if kept and rank - 1 in stage.reduced and math.prod(stage.shape[d] for d in kept) >= 2:
            return KeptDims(stage, kept)
        return phase

    return _each_phase(plan, rule)


PARTIALS_MAX = 64


def split_full_reductions(plan: KernelPlan) -> KernelPlan:
    """A lone reduction over all dims (losses, norms) becomes partial reductions over ranges of dim 0, in
    parallel, then a serial phase combining the partials."""
    phases: list[Phase] = []
    for phase in plan.phases:
        stage = _lone_reduction(phase)
        shape = stage.shape if stage is not None else ()
        total = math.prod(shape)
        if stage is None or not COMBINERS[stage.op.name].merges_partials or not shape or \
                stage.reduced != tuple(range(len(shape))) or total < 1 << 16 or shape[0] < 2:
            phases.append(phase)
            continue
        parts = min(shape[0], PARTIALS_MAX, max(2, total >> 15))
        plan, slot = plan.with_scratch(parts * 8)
        phases += [PartialReduce(stage, parts, slot), CombinePartials(stage, parts, slot)]
    return replace(plan, phases=tuple(phases))


#: Column splits: at least this many columns per outer iteration (whole vectors), at most 8 per thread pair.
SPLIT_MIN = 64


def split_columns(plan: KernelPlan) -> KernelPlan:
    """A reduction over leading dims that keeps only the last dim (bias gradients, column sums) has no outer
    dims to parallelize; split its columns instead."""
    def rule(phase: Phase) -> Phase:
        stage = _lone_reduction(phase)
        if stage is None:
            return phase
        rank = len(stage.shape)
        kept = [d for d in range(rank) if d not in stage.reduced]
        if not stage.reduced or kept != [rank - 1] or not COMBINERS[stage.op.name].column_split:
            return phase
        columns = stage.shape[-1]
        split = min(max(SPLIT_MIN, -(-columns // 8 // 16) * 16), 4096)
        # A power of two dividing the columns, when there is one in range: every block then has the same
        # static width, and a block never straddles a reshape's split of the dim (c // 512: 3 x 8 x 64
        # columns of a QKV bias gradient), so the emitter's index division folds per block, not per element.
        aligned = 1 << (split.bit_length() - 1)
        if aligned >= SPLIT_MIN and columns % aligned == 0:
            split = aligned
        return SplitColumns(stage, split) if columns >= 2 * split else phase

    return _each_phase(plan, rule)


ROW_CACHE_MAX = 16384  # elements of one cached row (kept on the stack)


def cache_rows(plan: KernelPlan) -> KernelPlan:
    """Row caching: a reduction input that a later stage of the phase reads again (softmax's exp(x - max))
    is stored into a per-row stack buffer while reducing, and loaded, not recomputed, by the later stage."""
    def rule(phase: Phase) -> Phase:
        if not isinstance(phase, RowLoop) or not phase.outer:
            return phase
        k = len(phase.outer)
        row_cache: dict[Value, int] = {}
        for position, stage in enumerate(phase.stages):
            if not isinstance(stage, ReduceStage) or stage.reduced != tuple(range(k, len(stage.shape))):
                continue
            value = stage.op.operands[0]
            # transcendental functions are worth computing once per row rather than once per stage reading them
            if value in row_cache or not plan.computes_transcendental(value):
                continue
            if math.prod(stage.shape[k:]) > ROW_CACHE_MAX:
                continue
            for later in phase.stages[position + 1:]:
                if later.shape == stage.shape and any(_reads_in_place(plan, root, value, stage.shape, set())
                                                      for root, _ in later.roots):
                    row_cache[value] = position
                    break
        return replace(phase, row_cache=row_cache) if row_cache else phase

    return _each_phase(plan, rule)


def widened_row_cache(plan: KernelPlan, phase: RowLoop, read_by: int | None = None) -> dict[Value, int]:
    """Row caches of bf16 rows widened to float32 (``CpuTarget.caches_widened_bf16_rows``; the emitter adds them
    to ``phase``'s): a cast of bf16 to float32 that a reduction over the row sums (or takes the variance of) and a
    later stage reads again at its own index, stored by that reduction's first pass: bf16 LayerNorm's ``cast(x)``,
    which its variance's deviation pass and its write pass then load as float32 from L1. The cached values are
    the ones the cast computes: the results do not change. ``read_by``: only the rows that this stage reads
    again (``CpuTarget.caches_widened_bf16_rows_for_exp``: bf16 softmax's exp pass)."""
    k = len(phase.outer)
    if not k:
        return {}
    cache: dict[Value, int] = {}
    for position, stage in enumerate(phase.stages):
        if not isinstance(stage, ReduceStage) or stage.reduced != tuple(range(k, len(stage.shape))):
            continue
        value = stage.op.operands[0]
        access = plan.access.get(value)
        if value in cache or value in phase.row_cache or not isinstance(access, Computed) \
                or not widens_bf16(access.op) \
                or math.prod(stage.shape[k:]) > ROW_CACHE_MAX:
            continue
        later_stages = phase.stages[position + 1:] if read_by is None else phase.stages[read_by:read_by + 1]
        if read_by is not None and read_by <= position:
            continue
        if any(later.shape == stage.shape and any(_reads_in_place(plan, root, value, stage.shape, set())
                                                  for root, _ in later.roots)
               for later in later_stages):
            cache[value] = position
    return cache


def deviation_row_cache(plan: KernelPlan, phase: RowLoop, means: dict[int, Any]) -> dict[Value, int]:
    """Row caches of a variance's deviations (``CpuTarget.caches_variance_deviations``; the emitter adds them to
    ``phase``'s): a later stage's ``x - mean`` of the variance's operand ``x``, a bf16 row widened, and the mean
    stage it shares (``means``: ``stages.shared_means`` of the phase's stages, by the variance's number) is the value the variance's deviation pass computes, one ``fsub`` of
    the same two values, so that pass stores it (``stages._Reducer._x``) and the later stage (bf16 LayerNorm's
    write pass) loads it as float32 from L1 instead of widening x and subtracting again. The results do not
    change."""
    k = len(phase.outer)
    if not k:
        return {}
    cache: dict[Value, int] = {}
    for number, shared in means.items():
        variance = phase.stages[number]
        assert isinstance(variance, ReduceStage)
        x, shape = variance.op.operands[0], variance.shape
        widened = plan.access.get(x)
        if not isinstance(widened, Computed) or not widens_bf16(widened.op) or math.prod(shape[k:]) > ROW_CACHE_MAX:
            continue
        for value, access in plan.access.items():
            if isinstance(access, Computed) and float_difference(access.op) and value.type.shape == shape \
                    and tuple(access.op.operands) == (x, shared.stage.op.results[0]) and value not in phase.row_cache \
                    and any(later.shape == shape and any(_reads_in_place(plan, root, value, shape, set())
                                                         for root, _ in later.roots)
                            for later in phase.stages[number + 1:]):
                cache[value] = number
    return cache


def cache_written_rows(plan: KernelPlan) -> KernelPlan:
    """Row caching of written values: an expensive value that a map stage of a row phase writes (an output)
    and a later stage of the phase reads again at the same row (the bias gradient's column sum of GELU's
    gradient, ``fused_2_mul_erf_add``: erf and exp computed twice per element, the second time 4 lanes wide
    beside the float64 partials) is also stored into the per-row stack buffer as the map stage computes it,
    and loaded, not recomputed, by the later stages (the emitter's row cache, as in :func:`cache_rows`).
    So is a computed value whose recomputation by later reductions would read a parameter of its own size
    again (ReLU's backward ``where(mask, 0, product)`` and its bias gradient): then only the writing stage reads
    that parameter, so the output may be computed over it (``in_place.writes_in_place``; the arena's in-place
    reuse).
    Runs after the column sums have joined their row phases."""
    def rule(phase: Phase) -> Phase:
        if isinstance(phase, ChunkedRows):
            rows = phase.rows
            later_sums = [(len(rows.stages) + n, s.stage) for n, s in enumerate(phase.sums)]
            cache = _written_row_cache(plan, rows, later_sums)
            return replace(phase, rows=replace(rows, row_cache={**rows.row_cache, **cache})) if cache else phase
        if isinstance(phase, RowLoop):
            cache = _written_row_cache(plan, phase, [])
            return replace(phase, row_cache={**phase.row_cache, **cache}) if cache else phase
        return phase

    return _each_phase(plan, rule)


def _written_row_cache(plan: KernelPlan, phase: RowLoop, sums: list[tuple[int, ReduceStage]]) -> dict[Value, int]:
    """Values written by map stages of ``phase`` (row loop, its stages numbered from 0, then the column
    ``sums`` with their numbers) that a later stage reads only at the row being computed."""
    k = len(phase.outer)
    if not k:
        return {}
    later: list[tuple[int, Stage]] = [*enumerate(phase.stages), *sums]
    cache: dict[Value, int] = {}
    for number, stage in enumerate(phase.stages):
        if not isinstance(stage, MapStage) or stage.shape[:k] != phase.outer:
            continue
        for value, _ in stage.items:
            if value in phase.row_cache or value in cache or value.type.shape != stage.shape or \
                    math.prod(stage.shape[k:]) > ROW_CACHE_MAX:
                continue
            expensive = plan.computes_transcendental(value)
            if not expensive and not _reads_a_param_of_its_size(plan, value):
                continue
            readers = [(n, s) for n, s in later if n > number and _reads_value(plan, s, value)]
            if readers and all(_reads_row_only(plan, phase, s, value, (n, s) in sums) for n, s in readers) and \
                    (expensive or all(isinstance(s, ReduceStage) for _, s in readers)):
                cache[value] = number
    return cache


def _reads_a_param_of_its_size(plan: KernelPlan, value: Value) -> bool:
    """Whether computing ``value`` (an op's result, not a loaded value) inline loads a kernel parameter with as
    many elements of the same size (a buffer its output could take over in place)."""
    if not isinstance(plan.access.get(value), Computed):
        return False
    size = (value.type.numel, storage_itemsize(value.type.dtype))
    seen: set[Value] = set()
    pending = [value]
    while pending:
        v = pending.pop()
        access = plan.access.get(v)
        if v in seen:
            continue
        seen.add(v)
        if isinstance(access, Layout):
            if access.arg < plan.n_params and (math.prod(access.shape), storage_itemsize(access.dtype)) == size:
                return True
        elif isinstance(access, Computed):
            pending += access.op.operands
    return False


def _reads_value(plan: KernelPlan, stage: Stage, value: Value) -> bool:
    marker = Layout(-1, 0, value.type.shape, contiguous_strides(value.type.shape), value.type.dtype)
    access = {**plan.access, value: marker}
    return not all(outer_dims_preserved(access, root, tuple(-1 for _ in root.type.shape), 1, {-1}, set())
                   for root, _ in stage.roots)


def _reads_row_only(plan: KernelPlan, phase: RowLoop, stage: Stage, value: Value, column_sum: bool) -> bool:
    """Whether ``stage`` reads ``value`` only at the phase's current outer index (a column sum: at its row)."""
    marker = Layout(-1, 0, value.type.shape, contiguous_strides(value.type.shape), value.type.dtype)
    marked = replace(plan, access={**plan.access, value: marker})
    k = len(phase.outer)
    if column_sum:
        assert isinstance(stage, ReduceStage)
        count = len(stage.reduced)
        return _rows_preserved(marked, stage.op.operands[0], count, phase.outer, {-1})
    return all(outer_dims_preserved(marked.access, root, tuple(d if d < k else -1 for d in range(rank)), k, {-1},
                                    set()) for root, rank in stage.roots)


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


def accumulate_column_partials(plan: KernelPlan) -> KernelPlan:
    """A column reduction (bias gradients, LayerNorm weight gradients: a sum over the leading dims that keeps
    the rest) right after a row-parallel phase whose rows are exactly its reduced dims joins that phase: the
    phase's parallel loop then iterates chunks of contiguous rows, and each chunk accumulates the column sums
    of its rows into float64 partials while the rows are in cache; a small serial phase merges the partials.
    Without this the reduction is a phase of its own that recomputes (or re-reads) every row."""
    plan = _join_following(plan)
    phases = list(plan.phases)
    for position in range(len(phases) - 1):  # a column sum right before a row phase that does not read it
        before, host = phases[position], phases[position + 1]
        if isinstance(host, RowLoop) and _can_host(host) and \
                _column_sum(plan, host, before, *_rows_and_chunks(host), []) is not None and \
                all(_reads_none(plan, root, set(before.stages[0].written))
                    for stage in host.stages for root, _ in stage.roots):
            phases[position], phases[position + 1] = host, before
    return _join_following(replace(plan, phases=tuple(phases)))


def _join_following(plan: KernelPlan) -> KernelPlan:
    """Each row phase takes the column sums that follow it (see ``accumulate_column_partials``)."""
    phases: list[Phase] = []
    position = 0
    while position < len(plan.phases):
        host = plan.phases[position]
        position += 1
        if not isinstance(host, RowLoop) or not _can_host(host):
            phases.append(host)
            continue
        rows, chunks = _rows_and_chunks(host)
        joined: list[ReduceStage] = []
        while position < len(plan.phases):
            stage = _column_sum(plan, host, plan.phases[position], rows, chunks, joined)
            if stage is None:
                break
            joined.append(stage)
            position += 1
        if not joined:
            phases.append(host)
            continue
        sums: list[ColumnSum] = []
        for stage in joined:
            plan, slot = plan.with_scratch(chunks * (math.prod(stage.shape) // rows) * 8)
            sums.append(ColumnSum(stage, slot))
        phases += [ChunkedRows(host, tuple(sums), chunks), CombineColumns(tuple(sums), chunks)]
    return replace(plan, phases=tuple(phases))


def _can_host(phase: RowLoop) -> bool:
    """A parallel phase over whole rows (its outer dims) that column sums can join."""
    return len(phase.outer) >= 1 and math.prod(phase.outer) >= 2


def _rows_and_chunks(host: RowLoop) -> tuple[int, int]:
    rows = math.prod(host.outer)
    return rows, _chunk_count(rows)


def _chunk_count(rows: int) -> int:
    """At most CHUNKS_MAX chunks, preferably of equal size (a divisor of the rows), none empty."""
    most = min(rows, CHUNKS_MAX)
    for count in range(most, (most + 1) // 2 - 1, -1):
        if rows % count == 0:
            return count
    return -(-rows // -(-rows // most))


def _column_sum(plan: KernelPlan, host: RowLoop, phase: Phase, rows: int, chunks: int,
                joined: list[ReduceStage]) -> ReduceStage | None:
    """The reduce stage of ``phase`` when it is a lone float column sum over ``rows`` that reads the buffers
    written by ``host`` (and by the column sums already joined) only at its own row, else None."""
    stage = _lone_reduction(phase) if isinstance(phase, RowLoop) else \
        phase.stage if isinstance(phase, (SplitColumns, KeptDims)) else None
    if isinstance(phase, CombineColumns) and len(phase.sums) == 1:  # kept from the flag-based planner (same code)
        stage = phase.sums[0].stage
    if stage is None:
        return None
    shape, reduced = stage.shape, stage.reduced
    count = len(reduced)
    # column partials are float64 sums (the combining phase finishes them: mean divides)
    if not stage.op.has(Trait.SUM_REDUCTION) or not stage.op.operands[0].type.dtype.is_float or not count \
            or reduced != tuple(range(count)) or count >= len(shape) or math.prod(shape[:count]) != rows:
        return None
    if chunks * (math.prod(shape) // rows) * 8 > CHUNK_PARTIALS_MAX_BYTES:
        return None
    written = written_by(host.stages) & plan.written
    unfinished = written_by(joined)  # complete only after the combining phase
    for root, rank in stage.roots:
        if not _reads_none(plan, root, unfinished) or not _rows_preserved(plan, root, count, host.outer, written):
            return None
    return stage


def _reads_none(plan: KernelPlan, value: Value, args: set[int]) -> bool:
    return outer_dims_preserved(plan.access, value, tuple(-1 for _ in value.type.shape), 1, args, set())


def _rows_preserved(plan: KernelPlan, value: Value, count: int, rows: tuple[int, ...], written: set[int]) -> bool:
    """Whether ``value``, whose first ``count`` dims enumerate the phase's flat row (row-major), reads the
    buffers in ``written`` only at that row. Reshapes keep the flat row in the operand dims of the same
    product (they are row-major); once the dims are the phase's own outer dims, the scheduler's dim flow
    takes over."""
    shape = value.type.shape
    if shape[:count] == rows:
        dims = tuple(d if d < count else -1 for d in range(len(shape)))
        return outer_dims_preserved(plan.access, value, dims, count, written, set())
    access = plan.access[value]
    if isinstance(access, Computed) and access.op.has(Trait.RESHAPE):
        (operand,) = access.op.operands
        flat, total = math.prod(shape[:count]), 1
        for width, size in enumerate(operand.type.shape):
            if total == flat:
                return _rows_preserved(plan, operand, width, rows, written)
            total *= size
    return _reads_none(plan, value, written)
