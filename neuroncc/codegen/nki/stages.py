"""Emitting tile stages (elementwise ops and reductions) and transfer stages (HBM-to-HBM data movement).

A tile stage is written as

    # prologue: loop-invariant loads and their broadcasts (a LayerNorm weight row, ...)
    for b in nl.affine_range(...):          # looped domain dims, one index at a time
        for i in nl.affine_range(...):      # blocks of 128 partitions
            <loads, op instructions, stores>

Its body is built by the op rules, fused by :func:`~neuroncc.codegen.nki.instructions.optimize`, and every
record whose inputs do not change between iterations moves to the prologue.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from neuroncc.codegen.nki import philox_keys
from neuroncc.codegen.nki.access import HbmSide, Index, transfer
from neuroncc.codegen.nki.body import Body, KernelContext, StageLayout, ceil_div, prod
from neuroncc.codegen.nki.instructions import Instr, optimize, render
from neuroncc.codegen.nki.multirow import rows_per_partition, split_rows
from neuroncc.codegen.nki.op_rules import emit_op, is_plain_copy
from neuroncc.codegen.nki.plan import RegionPlan, Stage, stage_maps
from neuroncc.codegen.nki.shapes import AffineMap, map_through_window, operand_grouping, view_window
from neuroncc.codegen.nki.source import SourceWriter, nki_dtype
from neuroncc.ir import Category, Op, Trait, Value
from neuroncc.ir.types import contiguous_strides
from neuroncc.passes.layout import partition_among
from neuroncc.passes.tile_nki import footprint


@dataclass
class Loop:
    """One emitted loop: ``for var in nl.affine_range(count)``, then ``size = min(...)`` when the last
    block is partial."""

    var: str
    count: int
    size_var: str | None = None
    size_expr: str = ""


def _contiguous(amap: AffineMap, group: list[int], domain: tuple[int, ...]) -> bool:
    """Does ``amap`` step through the domain dims ``group`` as through one row-major dim?"""
    dims = [d for d in group if domain[d] > 1]
    for outer, inner in zip(dims, dims[1:]):
        if amap.coeffs[outer] != amap.coeffs[inner] * prod([domain[e] for e in range(outer + 1, inner + 1)]):
            return False
    return True


def merge_groups(ctx: KernelContext, stage: Stage) -> list[list[int]]:
    """Runs of adjacent domain dims every map of the stage steps through contiguously, and that are all
    reduced or all kept: each run becomes one layout dim (``[B, S, D]`` rows become ``[B * S, D]``)."""
    maps = stage_maps(ctx.plan, stage)
    domain = stage.domain
    groups = [[d] for d in range(len(domain))]

    def reduced(group: list[int]) -> set[bool]:
        return {d in stage.reduced for d in group if domain[d] > 1}

    innermost = max((d for d, n in enumerate(domain) if n > 1), default=-1)
    i = 0
    while i < len(groups) - 1:
        candidate = groups[i] + groups[i + 1]
        keeps_free_axis = innermost not in groups[i + 1] or reduced(candidate) == {True}
        if keeps_free_axis and len(reduced(candidate)) <= 1 and all(_contiguous(m, candidate, domain) for m in maps):
            groups[i:i + 2] = [candidate]
        else:
            i += 1
    return groups


def _partition_reduction(ctx: KernelContext, stage: Stage, domain: tuple[int, ...], reduced: set[int]) -> int | None:
    """The layout dim to sum over on the partitions (TensorE), when that beats a transposing read.

    That is the case when every reduction of the stage is a float sum or mean over the outermost dim (a bias
    gradient: ``sum(dims=[0])`` of ``[N, C]``) and nothing in the stage reads a reduction's result (it is
    complete only after the last row block)."""
    busy = [d for d, n in enumerate(domain) if n > 1]
    if len(reduced) != 1 or len(busy) < 2 or min(busy) not in reduced:
        return None
    reductions = [op for op in stage.ops if op.opdef.category is Category.REDUCTION]
    if any(not op.has(Trait.SUM_REDUCTION) or not op.result.type.dtype.is_float for op in reductions):
        return None
    results = {op.result for op in reductions}
    for op in stage.ops:
        for value in op.operands:
            found = view_window(value, ctx.plan.producers)
            if found is not None and found[0] in results:
                return None
    return min(busy)


def tile_layout(ctx: KernelContext, stage: Stage) -> tuple[StageLayout, list[Loop]]:
    """Lay a tile stage out as the kernel's ``tile`` decisions say: merged dims, partitions, tile dims and
    their blocks, loops (module docstring of :mod:`neuroncc.codegen.nki.body`).

    A loop nest over the kernel's domain puts the kernel's ``partition_dim`` on the partitions and takes its
    free block; one whose dims merge, or over another domain (a reshaped value), picks its partition dim by
    the layout pass's rule (:func:`~neuroncc.passes.layout.partition_among`). A float sum over the rows that
    nothing in the stage reads back puts the rows on the partitions and sums them on TensorE."""
    tiling = ctx.tiling
    groups = merge_groups(ctx, stage)
    domain = tuple(prod([stage.domain[d] for d in group]) for group in groups)
    reduced = {i for i, group in enumerate(groups) if any(d in stage.reduced and stage.domain[d] > 1 for d in group)}
    candidates = [d for d, n in enumerate(domain) if n > 1 and d not in reduced]
    over_kernel = stage.domain == tiling.domain
    if over_kernel and len(groups) == len(stage.domain) and tiling.partition_dim in candidates:
        p = tiling.partition_dim
    else:
        p = partition_among(domain, candidates)
    across = _partition_reduction(ctx, stage, domain, reduced)
    if across is not None:
        p, reduced = across, set()  # summed on TensorE across the row blocks, not in the free axes
    # The innermost other dim joins the tiles' free axes when it comes after the partition dim (a dim before
    # it would make every load a transposing one); the rest are looped one index at a time.
    others = [d for d, n in enumerate(domain) if n > 1 and d != p and d not in reduced]
    inner = others[-1] if others and (p is None or others[-1] > p) else None
    tile_dims = tuple(sorted(reduced | ({inner} if inner is not None else set())))
    bounds = {d: domain[d] for d in tile_dims}
    if p is not None:
        bounds[p] = min(tiling.partitions, domain[p])
    if inner is not None and over_kernel and tiling.free:
        bounds[inner] = min(bounds[inner], tiling.free)
    if across is not None and inner is not None:
        bounds[inner] = min(bounds[inner], ctx.core.psum_free_fp32)  # each block's sum fills one PSUM bank at most
    # a random op's Philox rounds keep more tiles live than its operands and result
    tiles = len(stage.ops) + sum(len(op.operands) for op in stage.ops) + \
        philox_keys.LIVE_TILES * sum(1 for op in stage.ops if op.opdef.category is Category.RANDOM)

    def need() -> int:
        return footprint(tiles, prod([bounds[d] for d in tile_dims]))

    # A stage holding more tiles than the pass counted (copies added by normalization) still keeps to the
    # budget.
    while inner is not None and need() > tiling.sbuf_budget and bounds[inner] > 1:
        bounds[inner] = 1 << ((bounds[inner] - 1).bit_length() - 1)
    if need() > ctx.core.sbuf_partition_bytes:
        raise ctx.fail(f"a loop nest over {list(domain)} reducing dims {sorted(reduced)} needs about "
                       f"{need()} bytes of SBUF per partition (the reduced dims stay whole in a tile)")
    loops: list[Loop] = []
    indexes: list[Index] = []
    varying: set[int] = set()
    limits: dict[int, str] = {}
    for d, n in enumerate(domain):
        if n == 1:
            indexes.append(Index.span("0", "1", 1, 1) if d in tile_dims else Index.point("0", 1))
        elif d == p or d in tile_dims:
            block = bounds[d]
            count = ceil_div(n, block)
            if count == 1:
                indexes.append(Index.span("0", str(n), n, n))
                continue
            var = ctx.names.fresh("i" if d == p else "j")
            loop = Loop(var, count)
            size = str(block)
            if n % block:
                loop.size_var = size = ctx.names.fresh("rows" if d == p else "cols")
                loop.size_expr = f"min({block}, {n} - {var} * {block})"
                limits[d] = size
            loops.append(loop)
            varying.add(d)
            indexes.append(Index.span(f"{var} * {block}", size, block, n))
        else:
            var = ctx.names.fresh(f"b{d}")
            loops.insert(sum(1 for x in loops if x.var.startswith("b")), Loop(var, n))
            varying.add(d)
            indexes.append(Index.point(var, n))
    if across is not None:  # the row blocks innermost: each sum accumulates over them in PSUM
        loops = [loop for loop in loops if loop.var != _loop_var(indexes[p])] + \
                [loop for loop in loops if loop.var == _loop_var(indexes[p])]
    layout = StageLayout(domain, p, tile_dims, bounds, tuple(indexes), frozenset(varying), limits,
                         tuple(tuple(g) for g in groups), stage.domain, partition_reduce=across is not None)
    return layout, loops


def _loop_var(index: Index) -> str:
    return index.start.split(" ")[0]


def assign_phases(instrs: list[Instr]) -> None:
    """Whatever reads a result completed after the row loop (a partition sum) runs after it too."""
    late: set[str] = set()
    for instr in instrs:
        if instr.phase == "post" or any(ref.tile in late for ref in instr.reads()):
            instr.phase = "post"
            if instr.dst is not None:
                late.add(instr.dst.tile)


def hoist(instrs: list[Instr]) -> tuple[list[Instr], list[Instr]]:
    """Split a body into the records that do not change between iterations (prologue) and the rest.

    A tile that a loop-body predicated copy updates stays in the loop with its producer (hoisting it would
    carry one iteration's selection into the next).
    """
    pinned: set[str] = set()
    while True:
        hoisted: set[str] = set()
        flags = []
        for instr in instrs:
            if instr.kind == "dma":
                source = instr.args.get("src")
                ok = bool(instr.args.get("loop_free")) and (source is None or source.tile in hoisted)
            else:  # an iota whose offset names loop variables says so with loop_free=False
                ok = all(ref.tile in hoisted for ref in instr.reads()) and instr.args.get("loop_free", True)
            if instr.dst is not None and instr.dst.tile in pinned:
                ok = False
            flags.append(ok)
            if ok:
                if instr.dst is not None:
                    hoisted.add(instr.dst.tile)
                hoisted.update(ref.tile for ref in instr.also_allocates)
        stray = {i.dst.tile for i, ok in zip(instrs, flags) if i.kind == "predicated" and not ok
                 and i.dst.tile in hoisted}
        if not stray:
            break
        pinned |= stray
    prologue = [i for i, ok in zip(instrs, flags) if ok]
    body = [i for i, ok in zip(instrs, flags) if not ok]
    return prologue, body


def _pure_copies(ctx: KernelContext, stage: Stage, in_hbm: set[Value]) -> list[tuple[Value, Value, AffineMap]] | None:
    """A stage of ``copy`` ops reading HBM (a relayout: a permute or reshape materialised) as (destination,
    source root, source map over the stage domain) per stored value; None for any other stage."""
    if not all(is_plain_copy(op) for op in stage.ops):
        return None
    sources: dict[Value, tuple[Value, AffineMap]] = {}
    moves = []
    for op in stage.ops:
        found = view_window(op.operands[0], ctx.plan.producers)
        if found is None or ctx.plan.homes[found[0]].kind == "immediate":
            return None
        root, window = found
        if root in stage.placements:  # a copy of a copy made here: the tile holds the same elements
            root, amap = sources[root]
        else:
            grouping = operand_grouping(stage.groupings[op], op.result.type.shape, op.operands[0].type.shape)
            amap = map_through_window(grouping, stage.domain, window)
        sources[op.result] = (root, amap)
        if op.result in in_hbm:
            moves.append((op.result, root, amap))
    return moves


def emit_tile_stage(ctx: KernelContext, stage: Stage, writer: SourceWriter, in_hbm: set[Value]) -> None:
    moves = _pure_copies(ctx, stage, in_hbm)
    if moves is not None:  # straight DMAs between HBM tensors, no trip through SBUF
        writer.comment(f"copy over {list(stage.domain)}: DMA between HBM tensors")
        indexes = _full_indexes(stage.domain)
        for value, root, amap in moves:
            transfer(writer, ctx.names, HbmSide(ctx.hbm_name(value), value.type.shape, stage.placements[value], indexes),
                     HbmSide(ctx.hbm_name(root), root.type.shape, amap, indexes), indexes)
        return
    layout, loops = tile_layout(ctx, stage)
    body = Body(ctx, stage, layout)
    for op in stage.ops:
        emit_op(body, op)
    for value in stage.placements:
        if value in in_hbm:
            shape = layout.tile_shape(layout.lift(stage.placements[value]))
            body.store(value, body.materialize(body.values[value], shape, _dtype_of(value)))
    instrs = optimize(body.instrs, ctx.names.fresh)
    rows = rows_per_partition(ctx, layout, instrs)
    split = split_rows(ctx, layout, loops, instrs, rows) if rows > 1 else None
    if split is not None:  # short rows: several per partition, so each DMA run reaches 4 KiB
        instrs, loops = split
    assign_phases(instrs)
    prologue, looped = hoist([i for i in instrs if i.phase == "body"])
    writer.comment(describe_stage(stage, layout, rows if split is not None else 1))
    for instr in prologue:
        render(writer, instr, ctx.names)
    if not looped:
        return  # everything was loop-invariant
    if layout.partition_reduce:  # [outer loops] pre; [row loop] body; post
        outer, rows = (loops[:-1], loops[-1:]) if loops and loops[-1].var == _loop_var(
            layout.indexes[layout.partition]) else (loops, [])
        open_loops(writer, outer)
        for instr in (i for i in instrs if i.phase == "pre"):
            render(writer, instr, ctx.names)
        open_loops(writer, rows)
        for instr in looped:
            render(writer, instr, ctx.names)
        for _ in rows:
            writer.close()
        for instr in (i for i in instrs if i.phase == "post"):
            render(writer, instr, ctx.names)
        for _ in outer:
            writer.close()
        return
    open_loops(writer, loops)
    for instr in looped:
        render(writer, instr, ctx.names)
    for _ in loops:
        writer.close()


def open_loops(writer: SourceWriter, loops: list[Loop]) -> None:
    for loop in loops:
        writer.open(f"for {loop.var} in nl.affine_range({loop.count}):")
        if loop.size_var:
            writer.line(f"{loop.size_var} = {loop.size_expr}")


def _dtype_of(value: Value) -> str:
    return nki_dtype(value.type.dtype)


def describe_stage(stage: Stage, layout: StageLayout, rows_per_partition: int = 1) -> str:
    names = ", ".join(dict.fromkeys(op.name for op in stage.ops))
    laid = f" laid out as {list(layout.domain)}" if layout.domain != stage.domain else ""
    where = f"dim {layout.partition} on partitions" if layout.partition is not None else "one partition"
    if rows_per_partition > 1:
        where += f" ({rows_per_partition} consecutive rows per partition)"
    inner = f", dims {list(layout.tile_dims)} in the free axes" if layout.tile_dims else ""
    return f"{names} over {list(stage.domain)}{laid}: {where}{inner}"


# ---- transfer stages -------------------------------------------------------------------------------------


def _full_indexes(shape: tuple[int, ...]) -> tuple[Index, ...]:
    return tuple(Index.span("0", str(n), n, n) for n in shape)


def _window_map(ctx: KernelContext, value: Value) -> tuple[Value, AffineMap]:
    found = view_window(value, ctx.plan.producers)
    if found is None:
        raise ctx.fail(f"{value!r} is read through a view that needs a copy")
    root, window = found
    return root, AffineMap(window.offset, window.strides)


def _copy_piece(ctx: KernelContext, writer: SourceWriter, shape: tuple[int, ...], dst: Value, dst_map: AffineMap,
                src: Value) -> None:
    """DMA all of ``src`` (read through its view chain) into the ``dst_map`` box of ``dst``."""
    root, window = _window_map(ctx, src)
    if ctx.plan.homes[root].kind == "immediate":
        raise ctx.fail(f"a transfer of a constant into {dst!r}")
    _direct(ctx, writer, shape, dst, dst_map, root, window)


def emit_transfer_stage(ctx: KernelContext, stage: Stage, writer: SourceWriter) -> None:
    (op,) = stage.ops
    shape = op.result.type.shape
    writer.comment(f"{op.name} into {list(shape)}: DMA between HBM tensors")
    rule = TRANSFERS.get(op.name)
    if rule is None:
        raise ctx.fail(f"op '{op.name}' is not a transfer")
    rule.emit(ctx, writer, op, contiguous_strides(shape))


def immediate_root(plan: RegionPlan, value: Value) -> float | int | None:
    """The number every element of ``value`` holds when it is (a view of) a constant, else None."""
    found = view_window(value, plan.producers)
    if found is None:
        return None
    home = plan.homes[found[0]]
    return home.number if home.kind == "immediate" else None


def _cat(ctx: KernelContext, writer: SourceWriter, op: Op, strides: tuple[int, ...]) -> None:
    """Each piece copied to its offset along ``dim``."""
    dim = op.attrs["dim"] % op.result.type.rank
    start = 0
    for value in op.operands:
        piece = value.type.shape
        _copy_piece(ctx, writer, piece, op.result, AffineMap(start * strides[dim], strides), value)
        start += piece[dim]


def _flip(ctx: KernelContext, writer: SourceWriter, op: Op, strides: tuple[int, ...]) -> None:
    """The input read with negated coefficients along the flipped dims, from their last element."""
    shape = op.result.type.shape
    root, window = _window_map(ctx, op.operands[0])
    coeffs, offset = list(window.coeffs), window.offset
    for d in op.attrs["dims"]:
        d %= len(shape)
        offset += (shape[d] - 1) * coeffs[d]
        coeffs[d] = -coeffs[d]
    _direct(ctx, writer, shape, op.result, AffineMap(0, strides), root, AffineMap(offset, tuple(coeffs)))


def _scatter_into(target: Callable[[Op, tuple[int, ...], tuple[int, ...], int], tuple[int, tuple[int, ...]]]):
    """slice_scatter / select_scatter: the base copied (unless it was allocated filled), then the source written
    through ``target(op, shape, strides, dim)``: its (offset, strides) in the output."""
    def emit(ctx: KernelContext, writer: SourceWriter, op: Op, strides: tuple[int, ...]) -> None:
        out, (base, source) = op.result, op.operands
        shape = out.type.shape
        if out not in ctx.fills:  # a constant base was allocated filled
            _copy_piece(ctx, writer, shape, out, AffineMap(0, strides), base)
        offset, dst_strides = target(op, shape, strides, op.attrs["dim"] % len(shape))
        _copy_piece(ctx, writer, source.type.shape, out, AffineMap(offset, dst_strides), source)

    return emit


def _slice_target(op: Op, shape: tuple[int, ...], strides: tuple[int, ...], dim: int) -> tuple[int, tuple[int, ...]]:
    dst_strides = strides[:dim] + (strides[dim] * op.attrs["step"],) + strides[dim + 1:]
    return _clamped_start(op.attrs["start"], shape[dim]) * strides[dim], dst_strides


def _select_target(op: Op, shape: tuple[int, ...], strides: tuple[int, ...], dim: int) -> tuple[int, tuple[int, ...]]:
    return (op.attrs["index"] % shape[dim]) * strides[dim], strides[:dim] + strides[dim + 1:]


def _as_strided(ctx: KernelContext, writer: SourceWriter, op: Op, strides: tuple[int, ...]) -> None:
    """A direct copy through the op's own strides (of a contiguous operand only)."""
    root, window = _window_map(ctx, op.operands[0])
    if window.coeffs != contiguous_strides(op.operands[0].type.shape) or window.offset:
        raise ctx.fail("as_strided of a strided view is not emitted (copy its operand first)")
    src = AffineMap(op.attrs["offset"], tuple(op.attrs["strides"]))
    _direct(ctx, writer, op.result.type.shape, op.result, AffineMap(0, strides), root, src)


def _base_fill(plan: RegionPlan, op: Op) -> float | int | None:
    return immediate_root(plan, op.operands[0])  # scattering into a constant: allocate it filled


@dataclass(frozen=True)
class Transfer:
    """How a data-movement op runs as DMA between HBM tensors: ``emit(ctx, writer, op, output strides)``, and
    the number its output is allocated filled with first, if any (``fill(plan, op)``)."""

    emit: Callable[[KernelContext, SourceWriter, Op, tuple[int, ...]], None]
    fill: Callable[[RegionPlan, Op], float | int | None] = lambda plan, op: None


#: Data-movement op -> its DMA rule (one entry per op; :func:`~neuroncc.codegen.nki.plan.is_transfer` ops).
TRANSFERS: dict[str, Transfer] = {
    "cat": Transfer(_cat),
    "constant_pad": Transfer(lambda ctx, writer, op, strides: _pad(ctx, writer, op, strides),
                             fill=lambda plan, op: op.attrs["value"]),  # allocated filled with the pad value
    "flip": Transfer(_flip),
    "slice_scatter": Transfer(_scatter_into(_slice_target), fill=_base_fill),
    "select_scatter": Transfer(_scatter_into(_select_target), fill=_base_fill),
    "repeat": Transfer(lambda ctx, writer, op, strides: _repeat(ctx, writer, op, strides)),
    "as_strided": Transfer(_as_strided),
}


def _clamped_start(start: int, size: int) -> int:
    return max(0, min(start + size if start < 0 else start, size))


def _direct(ctx: KernelContext, writer: SourceWriter, shape: tuple[int, ...], dst: Value, dst_map: AffineMap,
            root: Value, src_map: AffineMap) -> None:
    if 0 in shape:
        return
    indexes = _full_indexes(shape)
    transfer(writer, ctx.names, HbmSide(ctx.hbm_name(dst), dst.type.shape, dst_map, indexes),
             HbmSide(ctx.hbm_name(root), root.type.shape, src_map, indexes), indexes)


def _pad(ctx: KernelContext, writer: SourceWriter, op, strides: tuple[int, ...]) -> None:
    """The output was allocated filled with the pad value; copy the (possibly cropped) input inside it."""
    source = op.operands[0]
    root, window = _window_map(ctx, source)
    rank = source.type.rank
    box = list(source.type.shape)
    src_offset, dst_offset = window.offset, 0
    pad = op.attrs["pad"]
    for i in range(len(pad) // 2):
        d = rank - 1 - i
        before, after = pad[2 * i], pad[2 * i + 1]
        if before < 0:
            src_offset += -before * window.coeffs[d]
            box[d] += before
        else:
            dst_offset += before * strides[d]
        if after < 0:
            box[d] += after
    _direct(ctx, writer, tuple(box), op.result, AffineMap(dst_offset, strides), root,
            AffineMap(src_offset, window.coeffs))


def _repeat(ctx: KernelContext, writer: SourceWriter, op, strides: tuple[int, ...]) -> None:
    """Domain ``[r0, s0, r1, s1, ...]``: the output steps by ``s_k`` blocks along ``r_k``, the input not at all."""
    root, window = _window_map(ctx, op.operands[0])
    repeats = op.attrs["repeats"]
    lead = len(repeats) - op.operands[0].type.rank
    sizes = (1,) * lead + op.operands[0].type.shape
    in_coeffs = (0,) * lead + window.coeffs
    shape, dst, src = [], [], []
    for k, (r, n) in enumerate(zip(repeats, sizes)):
        shape += [r, n]
        dst += [strides[k] * n, strides[k]]
        src += [0, in_coeffs[k]]
    _direct(ctx, writer, tuple(shape), op.result, AffineMap(0, tuple(dst)), root, AffineMap(window.offset, tuple(src)))
