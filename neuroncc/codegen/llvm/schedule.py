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
same outer index (checked by following each dim through the computed ops: ``dimflow.outer_dims_preserved``);
otherwise a new phase starts, with a barrier between them.

:func:`plan_kernel` is the whole planner: a flat sequence of named steps, each taking a plan and returning a
new one (the loop shapes are in ``kernel_plan.py``; the refinements in ``refine.py`` and ``transpose.py``).
"""

from __future__ import annotations

from dataclasses import replace

from neuroncc.codegen.llvm import refine, transpose
from neuroncc.codegen.llvm.access import ACCESS, CHECKED_INDEX_OPS, NEED_A_DIM, SCATTERS, checks_divisor
from neuroncc.codegen.llvm.dimflow import outer_dims_preserved
from neuroncc.codegen.llvm.elementwise import ELEMENTWISE
from neuroncc.codegen.llvm.kernel_plan import (
    BlockedMap, Computed, ExternCall, ExtraArg, ExtraKind, KernelPlan, MapStage, Phase, ReduceStage, RowLoop,
    ScatterLoop, ScatterStage, Stage, TransposedMap, written_by,
)
from neuroncc.codegen.llvm.scalars import storage_itemsize
from neuroncc.codegen.llvm.views import Layout, view_layout
from neuroncc.errors import CodegenError
from neuroncc.ir.graph import Function, Op, Value
from neuroncc.ir.opdef import Category, Trait
from neuroncc.ir.ops import REGISTRY
from neuroncc.ir.types import contiguous_strides
from neuroncc.passes.tile import CPU_INNER_BLOCK


def plan_kernel(region: Function, params: list[Layout], outputs: list[Layout], block: int = CPU_INNER_BLOCK,
                vector_width: int = 0) -> KernelPlan:
    """Plan the loop nests of ``region`` given the layouts of its parameters and output buffers.

    ``block`` and ``vector_width`` are the kernel's tile decisions (``inner_block``, ``vector_width``; the tile
    pass's defaults when a kernel has none): map-only phases over a longer last dim run it in blocks of
    ``block`` elements, and the loop vectorizer uses at most ``vector_width`` float32 lanes.

    Raises CodegenError for anything the native code generator does not handle (the launcher then runs the
    region in the reference interpreter).
    """
    plan, stages = lay_out(region, params, outputs)  # values -> buffers or inline; the stages writing buffers
    plan = replace(plan, vector_width=vector_width)   # the loop vectorizer's lane cap, for the emitter
    plan = form_phases(plan, stages)                  # stages -> row loops over the outer dims they share
    plan = refine.block_long_rows(plan, block)        # map-only over a long last dim: blocks of it in parallel
    plan = refine.cache_rows(plan)                    # a transcendental reduction input read again: row cache
    plan = refine.split_columns(plan)                 # a lone reduction keeping the last dim: column blocks
    plan = refine.parallel_kept_dims(plan)            # a lone reduction keeping middle dims: those in parallel
    plan = refine.accumulate_column_partials(plan)    # column sums join the row loop over their rows
    plan = refine.split_full_reductions(plan)         # a lone full reduction: parallel partials, combined
    plan = refine.cache_written_rows(plan)            # a written transcendental value read again: row cache
    plan = transpose.block_transposed_rows(plan)      # a transposing map: blocks of output rows via a tile
    return block_matmul_rows(plan)                    # whether the epilogue can follow the matmul by row blocks


def lay_out(region: Function, params: list[Layout], outputs: list[Layout]) -> tuple[KernelPlan, list[Stage]]:
    """Where every value of ``region`` is read from (a layout over an argument slot, or computed inline), and
    the stages that write buffers, in order: a plan without phases yet."""
    n_params, n_outputs = len(params), len(outputs)
    access: dict[Value, Layout | Computed] = {}
    extra: list[ExtraArg] = []
    extern: ExternCall | None = None
    may_fail = False
    written: set[int] = set()  # argument slots written by stages or the extern (their views stay computed)
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
        t = value.type
        extra.append(ExtraArg(ExtraKind.SCRATCH, nbytes=max(t.numel * storage_itemsize(t.dtype), 1)))
        slot = n_params + n_outputs + len(extra) - 1
        return Layout(slot, 0, t.shape, contiguous_strides(t.shape), t.dtype)

    def queue_outputs(value: Value) -> None:
        for slot in output_slots.pop(value, []):
            pending_outputs.extend(cat_pieces(access, value, outputs[slot]))

    for param, layout in zip(region.params, params):
        access[param] = layout
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
            if seen_compute or extern is not None:
                raise CodegenError(f"op '{op.name}' is not the first compute op of its kernel region")
            operand_layouts = [access.get(v) for v in op.operands]
            if not all(isinstance(a, Layout) and a.arg not in written for a in operand_layouts):
                raise CodegenError(f"op '{op.name}': operands must be parameters or strided views of them")
            results = tuple(buffer_for(r, contiguous_only=True) for r in op.results)
            extern = ExternCall(op_index, tuple(operand_layouts), results)  # type: ignore[arg-type]
            for result, layout in zip(op.results, results):
                access[result] = layout
                written.add(layout.arg)
            seen_compute = True
        elif op.has(Trait.VIEW):
            source = access[op.operands[0]]
            for index, result in enumerate(op.results):
                view = view_layout(op, source, index) if isinstance(source, Layout) and source.arg not in written \
                    else None
                access[result] = view if view is not None else Computed(op, index)
        elif op.has(Trait.STORED) and op.result.type.numel > 1:
            extra.append(ExtraArg(ExtraKind.CONSTANT, op_index=op_index))
            slot = n_params + n_outputs + len(extra) - 1
            access[op.result] = Layout.of(slot, op.result.type)
        elif category is Category.REDUCTION:
            target = buffer_for(op.result)
            stages.append(ReduceStage(op, target))
            access[op.result] = target
            written.add(target.arg)
            seen_compute = True
        elif op.has(Trait.INDEXED_WRITE):
            target = buffer_for(op.result)
            stages.append(MapStage(op.result.type.shape, ((op.operands[0], target),)))
            stages.append(ScatterStage(op, target, SCATTERS[op.name].domain(op)))
            access[op.result] = target
            written.add(target.arg)
            seen_compute = True
        elif category is Category.KERNEL:
            raise CodegenError("nested kernel ops are not supported in a kernel region")
        else:
            if op.name not in ELEMENTWISE and op.name not in ACCESS:
                raise CodegenError(f"no native lowering for op '{op.name}'")
            for index, result in enumerate(op.results):
                access[result] = Computed(op, index)
            seen_compute = seen_compute or category is not Category.CONSTANT
        divisor = access.get(op.operands[1]) if len(op.operands) > 1 else None
        may_fail = may_fail or op.name in CHECKED_INDEX_OPS or \
            checks_divisor(op, divisor.op if isinstance(divisor, Computed) else None)
        for result in op.results:
            queue_outputs(result)
        if pending_outputs:
            _append_map_items(stages, pending_outputs)
            pending_outputs.clear()
    _append_map_items(stages, pending_outputs)
    plan = KernelPlan(region, access, phases=(), n_params=n_params, n_outputs=n_outputs, extra=tuple(extra),
                      extern=extern, may_fail=may_fail, written=frozenset(written))
    return plan, stages


#: A concatenation written as an output is written piece by piece up to this many pieces (each piece is a
#: loop nest of its own; past this, one nest that selects the piece per element is the smaller code).
MAX_CAT_PIECES = 16


def cat_pieces(access: dict[Value, Layout | Computed], value: Value, target: Layout) -> list[tuple[Value, Layout]]:
    """The (value, layout) items that write ``value`` into ``target``: an output computed by ``cat`` is its
    pieces, each written into its slice of ``target`` (nested concatenations too).

    Computed inline, a concatenation reads every piece at a clamped index and selects one per element: each
    element costs a load of every piece, and the clamp hides the index's form, so a piece's reshape after a
    permute divides per element (the attention backward's dq/dk/dv into the in_proj gradient's [B, L, 3 * H *
    E], ``fused_7_mul_cat``: 4% of a copy). A piece written into its slice reads only itself, along a loop
    whose reshapes fold into factor loops (``affine.py``)."""
    computed = access.get(value)
    if not isinstance(computed, Computed) or not computed.op.has(Trait.CONCATENATION):
        return [(value, target)]
    op = computed.op
    dim = op.attrs["dim"] % max(value.type.rank, 1)
    if len(op.operands) > MAX_CAT_PIECES or any(p.type.dtype != value.type.dtype for p in op.operands):
        return [(value, target)]
    items, start = [], 0
    for piece in op.operands:
        size = piece.type.shape[dim]
        if size:
            offset = target.offset + start * target.strides[dim]
            items += cat_pieces(access, piece, replace(target, offset=offset, shape=piece.type.shape))
        start += size
    return items


def _append_map_items(stages: list[Stage], items: list[tuple[Value, Layout]]) -> None:
    """Each output joins the map stage before it when of the same shape and another buffer, else starts one."""
    for value, layout in items:
        last = stages[-1] if stages else None
        if isinstance(last, MapStage) and last.shape == value.type.shape and layout.arg not in last.written:
            stages[-1] = replace(last, items=(*last.items, (value, layout)))
        else:
            stages.append(MapStage(value.type.shape, ((value, layout),)))


def form_phases(plan: KernelPlan, stages: list[Stage]) -> KernelPlan:
    """Group the stages into row loops: each stage joins the phase before it over the outer dims they share
    when it reads what that phase writes only at its own outer index (see the module docstring); a scatter
    runs alone, serially."""
    phases: list[RowLoop | ScatterLoop] = []
    for stage in stages:
        current = phases[-1] if phases else None
        if isinstance(current, RowLoop) and not isinstance(stage, ScatterStage):
            k = min(len(current.outer), stage.max_outer, _common_prefix(current.outer, stage.shape))
            while k > 0 and not _consistent(plan, (*current.stages, stage), k):
                k -= 1
            if k >= 1:  # (stages without outer dims stay alone: a column reduction can then be split)
                phases[-1] = RowLoop((*current.stages, stage), current.outer[:k])
                continue
        if isinstance(stage, ScatterStage):
            phases.append(ScatterLoop(stage))
        else:
            phases.append(RowLoop((stage,), stage.shape[: stage.max_outer]))
    return replace(plan, phases=tuple(phases))


def _common_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _consistent(plan: KernelPlan, stages: tuple[Stage, ...], k: int) -> bool:
    """True when every read of a buffer written by one of ``stages`` happens at the reader's own outer index."""
    written = written_by(stages) & plan.written
    for stage in stages:
        for root, rank in stage.roots:
            dims = tuple(d if d < k else -1 for d in range(rank))
            if not outer_dims_preserved(plan.access, root, dims, k, written, set()):
                return False
    return True


def block_matmul_rows(plan: KernelPlan) -> KernelPlan:
    """Whether every phase reads the mm/addmm result only at its own outer row, so the epilogue can run on
    each block of rows right after the matmul writes it (while it is in cache)."""
    return replace(plan, row_blocked=_row_blockable(plan))


def _is_matrix_product_2d(op: Op) -> bool:
    """mm, addmm: a matrix product without batch dims."""
    return op.has(Trait.MATRIX_PRODUCT) and op.results[0].type.rank == 2


def _row_blockable(plan: KernelPlan) -> bool:
    extern = plan.extern
    if extern is None or not _is_matrix_product_2d(plan.region.ops[extern.op_index]):
        return False
    rows = extern.results[0].shape[0]
    for phase in plan.phases:
        outer = _outer_rows(phase)
        if outer is None or outer[0] != rows:
            return False
        # blocks interleave phases, so every buffer written in the kernel must be read at the reader's row
        for stage in phase.stages:
            for root, rank in stage.roots:
                dims = tuple(0 if d == 0 else -1 for d in range(rank))
                if not outer_dims_preserved(plan.access, root, dims, 1, set(plan.written), set()):
                    return False
    return bool(plan.phases)


def _outer_rows(phase: Phase) -> tuple[int, ...] | None:
    """The sizes of the outer dims whose flat index a row-blocked launch can restrict (None: none can: a
    phase without outer dims, a single dim in blocks, or a parallel loop over something else)."""
    match phase:
        case RowLoop(outer=outer) if outer:
            return outer
        case BlockedMap(shape=shape) if len(shape) > 1:
            return shape
        case TransposedMap(shape=shape) if len(shape) > 2:
            return shape[:-1]
    return None
