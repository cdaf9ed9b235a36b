"""Region -> loop-nest plan: which values get buffers, which loops compute them, in what order.

Every value of a kernel region is either *laid out* (a :class:`Layout` over a buffer: a parameter, an output,
a scratch buffer, a constant, an extern matmul result, or a strided view of one) or *computed* (an op whose
value at any index is generated inline from its operands' values, recursively). Only three things write
buffers, and each is a *stage*:

- a map stage writes computed values (region outputs, a scatter's base copy) over their shape;
- a reduce stage loops over a reduction's input and writes the reduced result;
- a scatter stage (scatter, index_put) writes data-dependent positions, serially.

Stages run in *phases*. A phase is one parallel loop over the leading ("outer") dims its stages share; for each
outer index it runs every stage's inner loops in turn, so a row reduction and the elementwise pass that
consumes it run back to back on the same row while it is in cache (softmax: max, sum-exp, write). A stage joins
the current phase only if every buffer it reads that an earlier stage of the same phase writes is read at the
same outer index (checked by following each dim through the computed ops: :func:`outer_dims_preserved`);
otherwise a new phase starts, with a barrier between them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from neuroncc.codegen.llvm.access import ACCESS, CHECKED_INDEX_OPS, NEED_A_DIM, SCATTERS
from neuroncc.codegen.llvm.dimflow import operand_dim_maps
from neuroncc.codegen.llvm.elementwise import ELEMENTWISE
from neuroncc.codegen.llvm.views import Layout, view_layout
from neuroncc.errors import CodegenError
from neuroncc.ir.graph import Function, Op, Value
from neuroncc.ir.opdef import Category, Trait
from neuroncc.ir.ops import REGISTRY
from neuroncc.ir.types import contiguous_strides
from neuroncc.passes.tile import CPU_INNER_BLOCK


@dataclass(frozen=True)
class Computed:
    """A value generated inline from its op's operands (result ``index`` of ``op``)."""

    op: Op
    index: int = 0


@dataclass
class MapStage:
    shape: tuple[int, ...]
    items: list[tuple[Value, Layout]]  # (value to compute, where to write it)

    kind = "map"

    @property
    def max_outer(self) -> int:
        return max(len(self.shape) - 1, 0)

    @property
    def roots(self) -> list[tuple[Value, int]]:
        return [(v, len(self.shape)) for v, _ in self.items]

    @property
    def inner_size(self) -> int:
        return math.prod(self.shape)


@dataclass
class ReduceStage:
    op: Op
    target: Layout

    kind = "reduce"

    @property
    def shape(self) -> tuple[int, ...]:
        return self.op.operands[0].type.shape

    @property
    def reduced(self) -> tuple[int, ...]:
        return self.op.opdef.reduced_dims(self.op.attrs, len(self.shape))

    @property
    def max_outer(self) -> int:
        leading = 0
        while leading < len(self.shape) and leading not in self.reduced:
            leading += 1
        return min(leading, max(len(self.shape) - 1, 0))

    @property
    def roots(self) -> list[tuple[Value, int]]:
        return [(self.op.operands[0], len(self.shape))]


@dataclass
class ScatterStage:
    op: Op
    target: Layout
    shape: tuple[int, ...]  # the points written (access.SCATTERS[op].domain)

    kind = "scatter"
    max_outer = 0

    @property
    def roots(self) -> list[tuple[Value, int]]:
        return []


Stage = MapStage | ReduceStage | ScatterStage


@dataclass
class Phase:
    stages: list[Stage]
    outer: int  # number of leading dims iterated by the parallel loop
    outer_shape: tuple[int, ...]
    block: int = 0  # when > 0, the last outer dim is iterated in blocks of this many elements
    row_cache: dict[Value, int] = field(default_factory=dict)  # value -> stage that stores its row (see below)
    split: int = 0  # a lone column reduction: each outer iteration reduces this many of its last-dim columns
    kept: tuple[int, ...] = ()  # a lone reduction without kept leading dims: the kept dims it iterates in parallel
    partials: int = 0  # a full reduction split in this many partial results (then combined by the next phase)
    partials_arg: int = -1  # scratch slot of the partial results
    combine: bool = False  # this phase combines the partials of the previous one
    transposed: bool = False  # a transposing map phase: blocks of output rows, columns outside (``transpose``)
    # column partials (see ``refine.accumulate_column_partials``): the outer loop iterates this many chunks of
    # contiguous rows; the reduce stages at these positions accumulate their chunk's column sums into
    # [chunks, columns] float64 partials in the scratch slot given, merged by a following ``chunk_combine`` phase
    chunks: int = 0
    chunk_partials: dict[int, int] = field(default_factory=dict)  # stage position -> scratch slot
    chunk_combine: int = 0  # this phase merges that many chunk partials of each of its (reduce) stages

    @property
    def trip_counts(self) -> tuple[int, ...]:
        if self.partials:
            return (self.partials,)
        if self.chunks:
            return (self.chunks,)
        if self.combine or self.chunk_combine:
            return ()
        if self.kept:
            return (math.prod(self.stages[0].shape[d] for d in self.kept),)
        if self.split:
            return (-(-self.stages[0].shape[-1] // self.split),)
        counts = list(self.outer_shape[: self.outer])
        if self.block and counts:
            counts[-1] = -(-counts[-1] // self.block)
        return tuple(counts)

    @property
    def n_outer(self) -> int:
        return math.prod(self.trip_counts)

    @property
    def serial(self) -> bool:
        return self.combine or bool(self.chunk_combine) or any(s.kind == "scatter" for s in self.stages)

    @property
    def work(self) -> int:
        """Elements touched per outer iteration (for the launcher's threading decision)."""
        per_outer = 0
        if self.chunk_combine:
            return sum(self.chunk_combine * max(math.prod(s.shape[d] for d in range(len(s.shape))
                                                          if d not in s.reduced), 1)  # type: ignore[union-attr]
                       for s in self.stages)
        if self.chunks:
            rows = math.prod(self.outer_shape[: self.outer])
            for position, stage in enumerate(self.stages):
                kept = math.prod(stage.shape) // rows if position in self.chunk_partials else \
                    math.prod(stage.shape[self.outer:])
                per_outer += max(kept, 1)
            return per_outer * -(-rows // self.chunks)
        for stage in self.stages:
            per_outer += max(math.prod(stage.shape) // max(math.prod(stage.shape[: self.outer]), 1), 1)
        if self.transposed:
            per_outer *= self.block
        elif self.block:
            per_outer = per_outer // max(self.outer_shape[self.outer - 1], 1) * self.block
        if self.split:
            per_outer = per_outer // max(self.stages[0].shape[-1], 1) * self.split
        if self.partials:
            per_outer = per_outer // self.partials
        if self.kept:
            per_outer = per_outer // self.n_outer
        return per_outer


@dataclass(frozen=True)
class ExtraArg:
    """An argument slot after params and outputs: a scratch buffer or a region constant."""

    kind: str  # "scratch" | "constant"
    nbytes: int = 0
    op_index: int = -1  # for constants: index of the constant op in the region


@dataclass
class ExternCall:
    """The region's leading matmul/convolution, run through ATen before the generated epilogue."""

    op_index: int
    operands: tuple[Layout, ...]
    results: tuple[Layout, ...]


@dataclass
class KernelPlan:
    region: Function
    access: dict[Value, Layout | Computed]
    phases: list[Phase]
    n_params: int
    n_outputs: int
    extra: list[ExtraArg] = field(default_factory=list)
    extern: ExternCall | None = None
    may_fail: bool = False  # reads data-dependent indices that may be out of range
    row_blocked: bool = False  # the extern matmul can run block of rows by block, each followed by the phases
    aligned_args: frozenset[int] = frozenset()  # argument slots whose buffers start 64-byte aligned
    vector_width: int = 0  # the kernel's tile decision: at most this many float32 lanes per vector (0: no cap)

    @property
    def error_slot(self) -> int:
        return self.n_params + self.n_outputs + len(self.extra)

    @property
    def n_args(self) -> int:
        return self.error_slot + 1


def plan_kernel(region: Function, params: list[Layout], outputs: list[Layout], block: int = CPU_INNER_BLOCK,
                vector_width: int = 0) -> KernelPlan:
    """Plan the loop nests of ``region`` given the layouts of its parameters and output buffers.

    ``block`` and ``vector_width`` are the kernel's tile decisions (``inner_block``, ``vector_width``; the tile
    pass's defaults when a kernel has none): map-only phases over a longer last dim run it in blocks of
    ``block`` elements, and the loop vectorizer uses at most ``vector_width`` float32 lanes.

    Raises CodegenError for anything the native code generator does not handle (the launcher then runs the
    region in the reference interpreter).
    """
    plan = KernelPlan(region, {}, [], len(params), len(outputs), vector_width=vector_width)
    stage_args: set[int] = set()  # argument slots written by stages (their views stay computed)
    output_slots: dict[Value, list[int]] = {}
    for position, value in enumerate(region.outputs):
        output_slots.setdefault(value, []).append(position)
    stages: list[Stage] = []
    pending_outputs: list[tuple[Value, Layout]] = []

    def buffer_for(value: Value, contiguous_only: bool = False) -> Layout:
        """The output buffer of the first output position ``value`` occupies, else a new scratch buffer."""
        slots = output_slots.get(value, [])
        if slots:
            layout = outputs[slots[0]]
            if not contiguous_only or layout.is_contiguous:
                output_slots[value] = slots[1:]
                return layout
        from neuroncc.codegen.llvm.scalars import storage_itemsize

        t = value.type
        plan.extra.append(ExtraArg("scratch", nbytes=max(t.numel * storage_itemsize(t.dtype), 1)))
        slot = plan.n_params + plan.n_outputs + len(plan.extra) - 1
        return Layout(slot, 0, t.shape, contiguous_strides(t.shape), t.dtype)

    def queue_outputs(value: Value) -> None:
        for slot in output_slots.pop(value, []):
            pending_outputs.append((value, outputs[slot]))

    for param, layout in zip(region.params, params):
        plan.access[param] = layout
        queue_outputs(param)
    seen_compute = False
    for op_index, op in enumerate(region.ops):
        if op.name not in REGISTRY:
            raise CodegenError(f"unknown op '{op.name}' in kernel region")
        category = REGISTRY.get(op.name).category
        if op.name in NEED_A_DIM and op.operands[0].type.rank == 0:
            # 0-dim data tensors (e.g. the backward of max over dim 0 of a scalar) have no dimension to index
            raise CodegenError(f"op '{op.name}' on a 0-dim tensor has no native lowering")
        if category is Category.MATMUL:
            if seen_compute or plan.extern is not None:
                raise CodegenError(f"op '{op.name}' is not the first compute op of its kernel region")
            operand_layouts = [plan.access.get(v) for v in op.operands]
            if not all(isinstance(a, Layout) and a.arg not in stage_args for a in operand_layouts):
                raise CodegenError(f"op '{op.name}': operands must be parameters or strided views of them")
            results = tuple(buffer_for(r, contiguous_only=True) for r in op.results)
            plan.extern = ExternCall(op_index, tuple(operand_layouts), results)  # type: ignore[arg-type]
            for result, layout in zip(op.results, results):
                plan.access[result] = layout
                stage_args.add(layout.arg)
            seen_compute = True
        elif op.has(Trait.VIEW):
            source = plan.access[op.operands[0]]
            for index, result in enumerate(op.results):
                view = view_layout(op, source, index) if isinstance(source, Layout) and source.arg not in stage_args \
                    else None
                plan.access[result] = view if view is not None else Computed(op, index)
        elif op.has(Trait.STORED) and op.result.type.numel > 1:
            plan.extra.append(ExtraArg("constant", op_index=op_index))
            slot = plan.n_params + plan.n_outputs + len(plan.extra) - 1
            plan.access[op.result] = Layout.of(slot, op.result.type)
        elif category is Category.REDUCTION:
            target = buffer_for(op.result)
            stages.append(ReduceStage(op, target))
            plan.access[op.result] = target
            stage_args.add(target.arg)
            seen_compute = True
        elif op.has(Trait.INDEXED_WRITE):
            target = buffer_for(op.result)
            stages.append(MapStage(op.result.type.shape, [(op.operands[0], target)]))
            stages.append(ScatterStage(op, target, SCATTERS[op.name].domain(op)))
            plan.access[op.result] = target
            stage_args.add(target.arg)
            seen_compute = True
        elif category is Category.KERNEL:
            raise CodegenError("nested kernel ops are not supported in a kernel region")
        else:
            if op.name not in ELEMENTWISE and op.name not in ACCESS:
                raise CodegenError(f"no native lowering for op '{op.name}'")
            for index, result in enumerate(op.results):
                plan.access[result] = Computed(op, index)
            seen_compute = seen_compute or category is not Category.CONSTANT
        plan.may_fail = plan.may_fail or op.name in CHECKED_INDEX_OPS
        for result in op.results:
            queue_outputs(result)
        if pending_outputs:
            _append_map_items(stages, pending_outputs)
            pending_outputs.clear()
    _append_map_items(stages, pending_outputs)
    plan.phases = _form_phases(plan, stages, stage_args, block)
    from neuroncc.codegen.llvm.transpose import block_transposed_rows

    for phase in plan.phases:
        block_transposed_rows(plan, phase)
    plan.row_blocked = _row_blockable(plan, stage_args)
    return plan


def _is_matrix_product_2d(op: Op) -> bool:
    """mm, addmm: a matrix product without batch dims."""
    return op.has(Trait.MATRIX_PRODUCT) and op.results[0].type.rank == 2


def _row_blockable(plan: KernelPlan, stage_args: set[int]) -> bool:
    """Whether every phase reads the mm/addmm result only at its own outer row, so the epilogue can run on
    each block of rows right after the matmul writes it (while it is in cache)."""
    extern = plan.extern
    if extern is None or not _is_matrix_product_2d(plan.region.ops[extern.op_index]):
        return False
    rows = extern.results[0].shape[0]
    extern_args = {r.arg for r in extern.results}
    for phase in plan.phases:
        if phase.outer < 1 or phase.outer_shape[0] != rows or (phase.block and phase.outer == 1):
            return False
        # blocks interleave phases, so every buffer written in the kernel must be read at the reader's row
        if not _consistent_with(plan, phase.stages, stage_args | extern_args):
            return False
    return bool(plan.phases)


def _consistent_with(plan: KernelPlan, stages: list[Stage], args: set[int]) -> bool:
    for stage in stages:
        for root, rank in stage.roots:
            dims = tuple(0 if d == 0 else -1 for d in range(rank))
            if not outer_dims_preserved(plan, root, dims, 1, args, set()):
                return False
    return True


def _append_map_items(stages: list[Stage], items: list[tuple[Value, Layout]]) -> None:
    for value, layout in items:
        last = stages[-1] if stages else None
        if isinstance(last, MapStage) and last.shape == value.type.shape and \
                all(target.arg != layout.arg for _, target in last.items):
            last.items.append((value, layout))
        else:
            stages.append(MapStage(value.type.shape, [(value, layout)]))


def _form_phases(plan: KernelPlan, stages: list[Stage], stage_args: set[int], block: int) -> list[Phase]:
    phases: list[Phase] = []
    for stage in stages:
        current = phases[-1] if phases else None
        if current is not None and not current.serial and stage.kind != "scatter":
            k = min(current.outer, stage.max_outer, _common_prefix(current.outer_shape, stage.shape))
            while k > 0 and not _consistent(plan, current.stages + [stage], k, stage_args):
                k -= 1
            if k >= 1:  # (stages without outer dims stay alone: a column reduction can then be split)
                current.stages.append(stage)
                current.outer = k
                continue
        k = stage.max_outer
        phases.append(Phase([stage], k, stage.shape[:k]))
    from neuroncc.codegen.llvm import refine

    for phase in phases:
        refine.block_long_rows(phase, block)
        refine.cache_rows(plan, phase)
        refine.split_columns(phase)
        refine.parallel_kept_dims(phase)
    phases = refine.accumulate_column_partials(plan, phases, stage_args)
    return [split for phase in phases for split in refine.split_full_reduction(plan, phase)]


def _common_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _consistent(plan: KernelPlan, stages: list[Stage], k: int, stage_args: set[int]) -> bool:
    """True when every read of a buffer written by one of ``stages`` happens at the reader's own outer index."""
    written = {s.target.arg for s in stages if not isinstance(s, MapStage)}
    written |= {t.arg for s in stages if isinstance(s, MapStage) for _, t in s.items}
    for stage in stages:
        for root, rank in stage.roots:
            dims = tuple(d if d < k else -1 for d in range(rank))
            if not outer_dims_preserved(plan, root, dims, k, written & stage_args, set()):
                return False
    return True


def outer_dims_preserved(plan: KernelPlan, value: Value, dims: tuple[int, ...], k: int, written: set[int],
                         visited: set) -> bool:
    """Follow outer dim ids (``dims[d]`` = outer dim carried by dim d of ``value``, or -1) down to buffers."""
    key = (value, dims)
    if key in visited:
        return True
    visited.add(key)
    access = plan.access[value]
    if isinstance(access, Layout):
        if access.arg not in written:
            return True
        return all(j < len(dims) and dims[j] == j for j in range(k))
    op = access.op
    for operand, operand_dims in zip(op.operands, operand_dim_maps(op, access.index, dims)):
        if not outer_dims_preserved(plan, operand, operand_dims, k, written, visited):
            return False
    return True
