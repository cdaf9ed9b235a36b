"""Several rows per partition: short rows move ``k`` at a time, so every DMA run reaches 4 KiB.

A row-wise tile stage (softmax, LayerNorm, a row sum) puts one row on each partition. A bf16 row of 1024
elements is a 2 KiB run per partition, and DMA runs under 4 KiB move at 75% of the bandwidth at best
(``neuroncc.hardware.neuron.dma_efficiency``). When the rows are short, :func:`split_rows` maps ``k``
consecutive rows to one partition, as the hand-written kernels do: each load and store moves a ``[128, k,
row]`` tile (one contiguous run of ``k * row`` elements per partition; the HBM view is the tensor reshaped to
``[rows / k, k, row]``), and the loop body is repeated for the ``k`` row segments ``tile[:, j]``. Every row
statistic stays a per-partition column, so the fused forms of the body (an activation's bias and row sum, a
tensor_scalar with a column operand) still apply to each segment. The partition loop steps over blocks of
the kernel's partitions (``tile[0]``, 128) of the ``rows / k`` row groups.

The rewrite works on the optimized instruction list of a stage (:func:`neuroncc.codegen.nki.instructions.
optimize`), after the layout is chosen, and declines (returns None) whenever the body holds something it
does not know how to repeat.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

from neuroncc.codegen.nki.access import HbmSide, Index, TileSide, transfer
from neuroncc.codegen.nki.body import KernelContext, StageLayout, ceil_div, prod
from neuroncc.codegen.nki.instructions import Instr, Ref
from neuroncc.codegen.nki.shapes import AffineMap
from neuroncc.hardware.neuron import DMA_FULL_RATE_BYTES

#: At most this many rows per partition: the loop body is repeated once per row segment.
MAX_ROWS_PER_PARTITION = 8
_ITEMSIZE = {"float32": 4, "int32": 4, "uint32": 4, "bfloat16": 2, "float16": 2, "int16": 2, "uint16": 2,
             "int8": 1, "uint8": 1, "bool_": 1}


def _partition_loop_var(layout: StageLayout) -> str:
    return layout.indexes[layout.partition].start.split(" ")[0]


def _row_run(layout: StageLayout, amap: AffineMap) -> int | None:
    """Elements per row this map reads contiguously, when consecutive rows follow each other in HBM (the map
    steps its tile dims row-major, innermost by 1, and the partition dim by the row's length); else None."""
    expect = 1
    for d in reversed(layout.tile_dims):
        if layout.domain[d] == 1 or amap.coeffs[d] == 0:
            continue
        if amap.coeffs[d] != expect:
            return None
        expect *= layout.domain[d]
    return expect if amap.coeffs[layout.partition] == expect else None


def rows_per_partition(ctx: KernelContext, layout: StageLayout, instrs: list[Instr]) -> int:
    """How many consecutive rows to map to one partition (1: keep one row per partition).

    More than one when the stage is row-wise (tile dims whole and after the partition dim, no partition
    sum), every HBM tile it moves along the rows holds whole contiguous rows, the longest of them is under
    ``DMA_FULL_RATE_BYTES``, the rows divide into ``k`` groups that still fill the kernel's partitions, and
    the repeated body fits the kernel's SBUF budget. ``k`` is the power of two that makes the runs reach 4 KiB,
    or the largest smaller one that divides the rows (at most :data:`MAX_ROWS_PER_PARTITION`)."""
    p = layout.partition
    if p is None or layout.partition_reduce or not layout.tile_dims or any(d < p for d in layout.tile_dims):
        return 1
    if any(instr.kind == "iota" for instr in instrs):  # its index pattern is the one-row-per-partition layout's
        return 1
    if any(layout.bounds[d] != layout.domain[d] for d in layout.tile_dims):
        return 1
    runs = []
    for instr in instrs:
        side = instr.args.get("hbm_side")
        if instr.kind != "dma" or side is None or side.amap.coeffs[p] == 0:
            continue
        run = _row_run(layout, side.amap)
        tile = instr.args["src"] if instr.stores else instr.dst
        if run is None:
            return 1
        runs.append(run * _ITEMSIZE.get(tile.dtype, 4))
    if not runs or max(runs) >= DMA_FULL_RATE_BYTES:
        return 1
    k = 1
    while max(runs) * k < DMA_FULL_RATE_BYTES:
        k *= 2
    rows = layout.domain[p]
    k = min(k, MAX_ROWS_PER_PARTITION)
    while k > 1 and (rows % k or rows // k < ctx.tiling.partitions):
        k //= 2  # fewer rows per partition still lengthen the runs
    if k == 1:
        return 1
    tile_bytes = sum(prod(i.dst.shape[1:]) * _ITEMSIZE.get(i.dst.dtype, 4) for i in instrs if i.dst is not None)
    if tile_bytes * k > ctx.tiling.sbuf_budget:
        return 1
    return k


class _Splitter:
    """The instruction list of one stage rewritten for ``k`` rows per partition (module docstring)."""

    def __init__(self, ctx: KernelContext, layout: StageLayout, loops: list, k: int):
        self.ctx, self.layout, self.k = ctx, layout, k
        p = self.p = layout.partition
        groups = layout.domain[p] // k
        var = _partition_loop_var(layout)
        (loop,) = [loop for loop in loops if loop.var == var]
        block = ctx.tiling.partitions
        size = str(block)
        new_loop = replace(loop, count=ceil_div(groups, block), size_var=None, size_expr="")
        if groups % block:
            size = loop.size_var or ctx.names.fresh("rows")
            new_loop = replace(new_loop, size_var=size, size_expr=f"min({block}, {groups} - {var} * {block})")
        self.limit = size if groups % block else None
        self.loops = [new_loop if item is loop else item for item in loops]
        rows = Index.span(f"{var} * {block}", size, block, groups)
        if new_loop.count == 1:  # exactly 128 row groups: no partition loop
            self.loops.remove(new_loop)
            rows = Index.span("0", str(groups), groups, groups)
        self.indexes = layout.indexes[:p] + (rows, Index.span("0", str(k), k, k)) + layout.indexes[p + 1:]
        self.axes = (p, p + 1) + tuple(d + 1 for d in layout.tile_dims)

    def side(self, side: HbmSide) -> HbmSide:
        c = side.amap.coeffs
        amap = AffineMap(side.amap.offset, c[:self.p] + (c[self.p] * self.k, c[self.p]) + c[self.p + 1:])
        return HbmSide(side.name, side.shape, amap, self.indexes)

    def tile(self, ref: Ref, side: HbmSide) -> TileSide:
        varies = (True, True) + tuple(side.amap.coeffs[axis] != 0 for axis in self.axes[2:])
        return TileSide(ref.tile, self.axes, varies, (self.limit,) + (None,) * (len(self.axes) - 1))

    def wide(self, ref: Ref, base: str) -> Ref:
        return Ref(self.ctx.names.fresh(base), (ref.shape[0], self.k) + ref.shape[1:], ref.dtype)

    def dma(self, dst: Ref | None, tile: TileSide, side: HbmSide, store: bool, src: Ref | None = None) -> Instr:
        indexes = self.indexes

        def render(writer, names) -> None:
            if store:
                transfer(writer, names, side, tile, indexes)
            else:
                transfer(writer, names, tile, side, indexes)

        args = {"src": src, "loop_free": False, "hbm_side": side} if store else {"hbm_side": side}
        return Instr("dma", dst, args, fresh=not store, render=render, stores=store)

    def run(self, instrs: list[Instr]) -> list[Instr] | None:
        p = self.p
        dependent: set[str] = set()
        wide_loads: dict[str, Ref] = {}
        before: list[Instr] = []
        loads: list[Instr] = []
        body: list[Instr] = []
        stores: list[tuple[Ref, HbmSide]] = []
        for instr in instrs:
            side = instr.args.get("hbm_side")
            if instr.kind == "dma" and not instr.stores:
                if side is None:
                    return None
                if side.amap.coeffs[p] == 0:
                    before.append(instr)
                    continue
                wide = self.wide(instr.dst, instr.dst.tile)
                wide_side = self.side(side)
                loads.append(self.dma(wide, self.tile(wide, wide_side), wide_side, store=False))
                wide_loads[instr.dst.tile] = wide
                dependent.add(instr.dst.tile)
            elif instr.kind == "dma":
                if side is None:
                    return None
                source = instr.args["src"]
                if (side.amap.coeffs[p] != 0) != (source.tile in dependent) or source.view:
                    return None
                if side.amap.coeffs[p] == 0:
                    before.append(instr)
                else:
                    stores.append((source, side))
            elif any(ref.tile in dependent for ref in instr.reads()):
                if instr.render is not None or instr.kind in ("matmul", "alloc", "reduce_loop"):
                    return None
                body.append(instr)
                dependent.add(instr.dst.tile)
                dependent.update(ref.tile for ref in instr.also_allocates)
            else:
                if body and instr.kind == "predicated":
                    return None  # it may update a tile the repeated body read earlier
                before.append(instr)
        if not body and not stores:
            return None
        staging: dict[str, Ref] = {}
        out_stores: list[Instr] = []
        allocs: list[Instr] = []
        for source, side in stores:
            wide_side = self.side(side)
            if source.tile in wide_loads:
                wide = wide_loads[source.tile]
            elif source.tile not in staging:
                wide = staging[source.tile] = self.wide(source, f"{source.tile}_rows")
                anchor = next(iter(wide_loads.values()))
                # reads a wide load only so that it stays in the loop (one staging tile per iteration)
                allocs.append(Instr("alloc", wide, {"after": anchor}, render=lambda writer, names: None))
            else:
                wide = staging[source.tile]
            out_stores.append(self.dma(None, self.tile(wide, wide_side), wide_side, store=True, src=wide))
        segments = [self.segment(body, wide_loads, staging, j) for j in range(self.k)]
        if any(segment is None for segment in segments):
            return None
        # interleaved, one instruction of each segment in turn: while one engine works on segment j the
        # other can start segment j + 1 (each engine runs its instructions in program order)
        copies = [instr for step in itertools.zip_longest(*segments) for instr in step if instr is not None]
        return before + loads + allocs + copies + out_stores

    def segment(self, body: list[Instr], wide_loads: dict[str, Ref], staging: dict[str, Ref],
                j: int) -> list[Instr] | None:
        """The body for row segment ``j``: loaded tiles read as ``wide[:, j]``, stored tiles written there."""
        view = f"[:, {j}]"
        names = self.ctx.names
        mapping: dict[str, Ref] = {tile: Ref(wide.tile, (wide.shape[0],) + wide.shape[2:], wide.dtype, view=view)
                                   for tile, wide in wide_loads.items()}
        written: set[str] = set()

        def sub(ref: Ref) -> Ref | None:
            new = mapping.get(ref.tile)
            if new is None:
                return ref
            if ref.view:
                return None if new.view else replace(new, view=ref.view, shape=ref.shape)
            return new

        out: list[Instr] = []
        for instr in body:
            args = {}
            for key, value in instr.args.items():
                if isinstance(value, Ref):
                    value = sub(value)
                    if value is None:
                        return None
                args[key] = value
            dst, fresh = instr.dst, instr.fresh
            if dst.view:
                return None
            if dst.tile in mapping:
                dst = mapping[dst.tile]
            elif dst.tile in staging and instr.fresh:
                wide = staging[dst.tile]
                dst = mapping[instr.dst.tile] = Ref(wide.tile, dst.shape, dst.dtype, view=view)
                fresh = False
                written.add(instr.dst.tile)
            else:
                dst = mapping[instr.dst.tile] = replace(dst, tile=names.fresh(dst.tile))
            extras = []
            for ref in instr.also_allocates:
                mapping[ref.tile] = replace(ref, tile=names.fresh(ref.tile))
                extras.append(mapping[ref.tile])
            for key, value in args.items():  # a fused row sum names its tile in the args too
                if isinstance(value, Ref) and value.tile in {r.tile for r in instr.also_allocates}:
                    args[key] = mapping[value.tile]
            out.append(Instr(instr.kind, dst, args, fresh=fresh, also_allocates=tuple(extras), phase=instr.phase))
        for tile, wide in staging.items():
            if tile not in written:  # made by a fused row sum: copy it into its row segment
                source = mapping[tile]
                out.append(Instr("tensor_copy", Ref(wide.tile, source.shape, wide.dtype, view=view),
                                 {"src": source}, fresh=False))
        return out


def split_rows(ctx: KernelContext, layout: StageLayout, loops: list, instrs: list[Instr],
               k: int) -> tuple[list[Instr], list] | None:
    """``instrs`` and ``loops`` rewritten for ``k`` rows per partition, or None when the body cannot be."""
    splitter = _Splitter(ctx, layout, loops, k)
    rewritten = splitter.run(instrs)
    if rewritten is None:
        return None
    return rewritten, splitter.loops
