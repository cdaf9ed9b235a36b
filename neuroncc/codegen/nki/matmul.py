"""Matmul stages: mm / bmm / addmm on TensorE, blocked for SBUF reuse, with the fused epilogue.

The loop nest follows the final kernel of AWS's NKI matmul tutorial: the output is computed in blocks of
``[tiles_m * 128, tiles_n * 512]``; for each block of K, the stationary operand (``A^T``, K on partitions)
and the moving operand (``B``, K on partitions) are brought into SBUF once and every (m, n) tile pair of
the block multiplies from there, accumulating K tiles in PSUM and K blocks in an fp32 SBUF accumulator.
An operand stored with K innermost (``A`` of ``x @ w``, ``B`` of ``x @ w.T``) is loaded with rows on the
partitions and turned by TensorE transposes (four 128 x 128 blocks per PSUM tile, one copy back to SBUF).
When both operands are K-major (``lhsT.T @ rhs``: the layout pass folds the transpose into ``transpose_a``)
and the tile pass set ``matmul_k_group = g``, each group of ``g`` K tiles loads partition-major in one DMA
per operand: partition ``p`` holds the group's K rows ``p * g .. p * g + g - 1``, one contiguous run of ``g``
rows, and K tile ``j`` of the group is every partition's ``j``-th row (both operands agree, so the sum over K
is the same).
The tiles and blocks are the ``tile`` pass's (``matmul_tile``, ``matmul_blocks``: chosen to fit SBUF and keep
TensorE, not DMA, the bottleneck); a matmul the pass did not see (one a convolution becomes) is blocked by
the pass's rule, :func:`~neuroncc.passes.tile_nki.choose_matmul_blocks`.

The epilogue (bias, activation, residual...) runs per ``[128, 512]`` output tile through the tile-stage
machinery (:class:`~neuroncc.codegen.nki.body.Body`), reading the accumulated tile straight from PSUM or
the accumulator, and stores the results.
"""

from __future__ import annotations

from dataclasses import dataclass

from neuroncc.codegen.nki.access import HbmSide, Index, TileSide, transfer
from neuroncc.codegen.nki.body import Body, KernelContext, StageLayout, ceil_div
from neuroncc.codegen.nki.instructions import Ref, optimize, render
from neuroncc.codegen.nki.op_rules import emit_op
from neuroncc.codegen.nki.plan import Stage
from neuroncc.codegen.nki.shapes import AffineMap, view_window
from neuroncc.codegen.nki.source import SourceWriter, nki_dtype
from neuroncc.codegen.nki.stages import hoist
from neuroncc.errors import PassError
from neuroncc.hardware.neuron import PARTITIONS
from neuroncc.ir import Op, Value
from neuroncc.passes.tile_nki import TRANSPOSES_PER_COPY, MatmulBlocks, choose_matmul_blocks


@dataclass(frozen=True)
class Operand:
    """A matmul operand as TensorE reads it: root tensor, flat offset, steps along (batch, rows, K)."""

    root: Value
    offset: int
    batch: int
    outer: int  # step along M (for A) or N (for B)
    k: int  # step along K

    @property
    def k_outer(self) -> bool:
        """K is the slower-moving dim: the operand loads with K on partitions directly."""
        return self.k > self.outer


def _operand(ctx: KernelContext, op: Op, position: int, transposed: bool, moving: bool) -> Operand:
    """Operand A ([M, K], or stored [K, M] when transposed) or, with ``moving``, B ([K, N] / stored [N, K])."""
    found = view_window(op.operands[position], ctx.plan.producers)
    if found is None:
        raise ctx.fail(f"'{op.name}' reads operand #{position} through a view that needs a copy")
    root, window = found
    strides = window.strides
    batch = strides[0] if len(strides) == 3 else 0
    rows, cols = strides[-2], strides[-1]
    k_is_rows = transposed != moving  # A: K is the column dim unless transposed; B: the row dim unless transposed
    outer, k = (cols, rows) if k_is_rows else (rows, cols)
    return Operand(root, window.offset, batch, outer, k)


def _loop(w: SourceWriter, var: str, count: str | int) -> None:
    """Open ``for var in nl.affine_range(count)`` unless the loop has one iteration (``var`` is then "0")."""
    if var != "0":
        w.open(f"for {var} in nl.affine_range({count}):")


def _end(w: SourceWriter, var: str) -> None:
    if var != "0":
        w.close()


def _count(total: int, block: int, tile: int, start: str) -> str:
    """Tiles of ``tile`` in the block starting at ``start`` (fewer in a partial last block)."""
    per_block = block // tile
    if total % block == 0:
        return str(per_block)
    return f"min({per_block}, ({total} - {start} + {tile - 1}) // {tile})"


def _size(total: int, tile: int, start: str) -> str:
    return str(tile) if total % tile == 0 else f"min({tile}, {total} - ({start}))"


def _limit(index: Index) -> str | None:
    return None if index.size == str(index.bound) else index.size


def _ds(var: str, size: int) -> str:
    """The ``var``-th block of ``size`` elements of a dim."""
    return f"0:{size}" if var == "0" else f"nl.ds({var} * {size}, {size})"


def _plus(*terms: str) -> str:
    kept = [t for t in terms if t != "0"]
    return " + ".join(kept) or "0"


class _MatmulEmitter:
    def __init__(self, ctx: KernelContext, stage: Stage, writer: SourceWriter, in_hbm: set[Value]):
        self.ctx, self.stage, self.writer, self.in_hbm = ctx, stage, writer, in_hbm
        self.op = op = stage.ops[0]
        self.names = ctx.names
        first = len(op.operands) - 2  # the factors are the last two operands (addmm's first is its bias)
        self.a = _operand(ctx, op, first, op.attrs["transpose_a"], moving=False)
        self.b = _operand(ctx, op, first + 1, op.attrs["transpose_b"], moving=True)
        self.domain = op.result.type.shape
        self.batch = self.domain[0] if len(self.domain) == 3 else 1  # bmm
        self.m, self.n = self.domain[-2], self.domain[-1]
        a_type = op.operands[first].type
        self.k = a_type.shape[-2] if op.attrs["transpose_a"] else a_type.shape[-1]
        self.dtype = nki_dtype(a_type.dtype)
        self.blocks: MatmulBlocks = ctx.tiling.matmul or self.own_blocks(a_type.dtype.itemsize)

    def own_blocks(self, itemsize: int) -> MatmulBlocks:
        """Blocks for a matmul the tile pass did not see (the kernel's is another op), by the pass's rule."""
        try:
            return choose_matmul_blocks(self.m, self.n, self.k, itemsize, self.a.k_outer, self.b.k_outer,
                                        self.ctx.core)
        except PassError as error:
            raise self.ctx.fail(str(error)) from None

    def fresh(self, base: str) -> str:
        return self.names.fresh(base)

    def var(self, base: str, count: str | int) -> str:
        """A loop variable, or "0" for a loop of one iteration (not emitted)."""
        return "0" if str(count) == "1" else self.fresh(base)

    # ---- operand loads -----------------------------------------------------------------------------

    def _hbm(self, operand: Operand, batch: str, outer: Index, k: Index) -> HbmSide:
        amap = AffineMap(operand.offset, (operand.batch, operand.outer, operand.k))
        return HbmSide(self.ctx.hbm_name(operand.root), operand.root.type.shape, amap,
                       (Index.point(batch, self.batch), outer, k))

    def load_k_major(self, operand: Operand, dst: str, batch: str, outer: Index, k: Index) -> None:
        """DMA an operand block with K on partitions into ``dst`` ([k, outer])."""
        tile = TileSide(dst, (2, 1), (True, True), (_limit(k), _limit(outer)))
        side = self._hbm(operand, batch, outer, k)
        transfer(self.writer, self.names, tile, side, side.indexes)

    def load_grouped(self, operand: Operand, dst: str, start: str, block: int, total: int, k2: str) -> None:
        """DMA a K-major operand's K block into ``dst`` ([128, tiles_k, block]) in partition-major groups of
        ``g = k_group`` K tiles: K index ``k2 * block_k + q * 128 g + p * g + j`` on partition ``p`` of tile
        ``q * g + j``, so partition ``p`` reads ``g`` consecutive rows per DMA (one run when the block spans
        whole rows). The domain of one DMA is (batch, outer, K partition, K tile of the group)."""
        blocks, w = self.blocks, self.writer
        group, parts = blocks.k_group, blocks.tk
        groups = blocks.tiles_k // group
        q = self.var("kg", groups)
        _loop(w, q, groups)
        amap = AffineMap(operand.offset, (operand.batch, operand.outer, operand.k * group, operand.k))
        outer = Index.span(start, _size(total, block, start), block, total)
        first = _plus(f"{k2} * {blocks.tiles_k // group * parts}" if k2 != "0" else "0",
                      f"{q} * {parts}" if q != "0" else "0")
        k_part = Index.span(first, str(parts), parts, self.k // group)
        k_tile = Index.span("0", str(group), group, group)
        indexes = (Index.point(self.batch_var, self.batch), outer, k_part, k_tile)
        side = HbmSide(self.ctx.hbm_name(operand.root), operand.root.type.shape, amap, indexes)
        tiles = ":" if groups == 1 else f"nl.ds({q} * {group}, {group})"
        tile = TileSide(f"{dst}[:, {tiles}, :]" if groups > 1 else dst, (2, 3, 1), (True, True, True),
                        (None, None, _limit(outer)))
        transfer(w, self.names, tile, side, indexes)
        _end(w, q)

    def load_transposed(self, operand: Operand, block: str, block_outer: int, start: str, total: int,
                        k2: str) -> None:
        """Fill ``block`` ([k, tiles_k, block_outer]) from an operand stored with K innermost: DMA groups of
        row tiles with rows on partitions, transpose 128 x 128 pieces on TensorE into PSUM, copy back."""
        w, blocks = self.writer, self.blocks
        tile_rows = min(PARTITIONS, block_outer)
        block_tiles = ceil_div(block_outer, tile_rows)
        group = max(g for g in range(1, TRANSPOSES_PER_COPY + 1) if block_tiles % g == 0)
        block_k = blocks.block_k
        groups = ceil_div(block_tiles, group)
        g = self.var("g", groups)
        _loop(w, g, groups)
        rows = self.fresh("rows_tile")
        w.line(f"{rows} = nl.ndarray(({tile_rows}, {group}, {block_k}), dtype=nl.{self.dtype}, buffer=nl.sbuf)")
        first_row = _plus(start, f"{g} * {group * tile_rows}" if g != "0" else "0")
        count = str(group) if total % (group * tile_rows) == 0 else \
            f"min({group}, ({total} - ({first_row}) + {tile_rows - 1}) // {tile_rows})"
        t = self.var("t", count)
        _loop(w, t, count)
        row0 = _plus(first_row, f"{t} * {tile_rows}" if t != "0" else "0")
        k0 = f"{k2} * {block_k}" if k2 != "0" else "0"
        outer = Index.span(row0, _size(total, tile_rows, row0), tile_rows, total)
        k_index = Index.span(k0, _size(self.k, block_k, k0), block_k, self.k)
        tile = TileSide(f"{rows}[:, {t}, :]", (1, 2), (True, True), (_limit(outer), _limit(k_index)))
        side = self._hbm(operand, self.batch_var, outer, k_index)
        transfer(w, self.names, tile, side, side.indexes)
        _end(w, t)
        bk = self.var("bk", blocks.tiles_k)
        _loop(w, bk, blocks.tiles_k)
        flipped = self.fresh("flipped")
        w.line(f"{flipped} = nl.ndarray(({blocks.tk}, {group * tile_rows}), dtype=nl.{self.dtype}, buffer=nl.psum)")
        t = self.var("t", group)
        _loop(w, t, group)
        w.line(f"nisa.nc_transpose(dst={flipped}[:, {_ds(t, tile_rows)}], data={rows}[:, {t}, {_ds(bk, blocks.tk)}])")
        _end(w, t)
        w.line(f"nisa.tensor_copy(dst={block}[:, {bk}, {_ds(g, group * tile_rows)}], src={flipped})")
        _end(w, bk)
        _end(w, g)

    # ---- the loop nest -----------------------------------------------------------------------------

    def emit(self) -> None:
        w, blocks = self.writer, self.blocks
        m, n, k = self.m, self.n, self.k
        n_blocks, m_blocks, k_blocks = ceil_div(n, blocks.block_n), ceil_div(m, blocks.block_m), ceil_div(k, blocks.block_k)
        self.batch_var = self.var("b", self.batch)
        n2, m2, k2 = self.var("n2", n_blocks), self.var("m2", m_blocks), self.var("k2", k_blocks)
        m0 = f"{m2} * {blocks.block_m}" if m2 != "0" else "0"
        n0 = f"{n2} * {blocks.block_n}" if n2 != "0" else "0"
        tiles_n, tiles_m = _count(n, blocks.block_n, blocks.tn, n0), _count(m, blocks.block_m, blocks.tm, m0)
        bn, bm = self.var("bn", tiles_n), self.var("bm", tiles_m)
        acc = self.fresh("acc") if k_blocks > 1 else None
        partial = self.fresh("partial")
        tile_view = f"[:, {bm}, {_ds(bn, blocks.tn)}]"
        product = Ref(acc, (blocks.tm, blocks.tn), "float32", view=tile_view) if acc else \
            Ref(partial, (blocks.tm, blocks.tn), "float32", buffer="psum")
        prologue, epilogue = self.epilogue(product, m0, n0, bm, bn)
        w.comment(f"{self.op.name}: [{m}, {k}] x [{k}, {n}] on TensorE, output blocks of {blocks.block_m} x "
                  f"{blocks.block_n}, K blocks of {blocks.block_k}; epilogue: "
                  f"{', '.join(op.name for op in self.stage.ops[1:]) or 'none'}")
        for instr in prologue:
            render(w, instr, self.names)
        _loop(w, self.batch_var, self.batch)
        _loop(w, n2, n_blocks)
        _loop(w, m2, m_blocks)
        if acc:
            w.line(f"{acc} = nl.zeros(({blocks.tm}, {blocks.tiles_m}, {blocks.block_n}), dtype=nl.float32, "
                   f"buffer=nl.sbuf)")
        _loop(w, k2, k_blocks)
        lhs, rhs = self.load_blocks(m0, n0, k2)
        _loop(w, bn, tiles_n)
        _loop(w, bm, tiles_m)
        w.line(f"{partial} = nl.ndarray(({blocks.tm}, {blocks.tn}), dtype=nl.float32, buffer=nl.psum)")
        k0 = f"{k2} * {blocks.block_k}" if k2 != "0" else "0"
        tiles_k = _count(k, blocks.block_k, blocks.tk, k0)
        bk = self.var("bk", tiles_k)
        _loop(w, bk, tiles_k)
        k_rows = _size(k, blocks.tk, _plus(k0, f"{bk} * {blocks.tk}" if bk != "0" else "0"))
        rows = ":" if k_rows == str(blocks.tk) else f"0:{k_rows}"
        w.line(f"nisa.nc_matmul(dst={partial}, stationary={lhs}[{rows}, {bk}, {_ds(bm, blocks.tm)}], "
               f"moving={rhs}[{rows}, {bk}, {_ds(bn, blocks.tn)}])")
        _end(w, bk)
        if acc:
            w.line(f"nisa.tensor_tensor(dst={acc}{tile_view}, data1={acc}{tile_view}, data2={partial}, op=nl.add)")
            _end(w, bm)
            _end(w, bn)
            _end(w, k2)
            _loop(w, bm, tiles_m)
            _loop(w, bn, tiles_n)
        for instr in epilogue:
            render(w, instr, self.names)
        for var in (bm, bn):
            _end(w, var)
        for var in (m2, n2, self.batch_var):
            _end(w, var)

    def load_blocks(self, m0: str, n0: str, k2: str) -> tuple[str, str]:
        w, blocks = self.writer, self.blocks
        lhs, rhs = self.fresh("lhsT"), self.fresh("rhs")
        k0 = f"{k2} * {blocks.block_k}" if k2 != "0" else "0"
        for name, operand, start, block, total in ((lhs, self.a, m0, blocks.block_m, self.m),
                                                   (rhs, self.b, n0, blocks.block_n, self.n)):
            # transposed loads fill whole 128-row pieces: round the block up to them
            width = block if operand.k_outer else ceil_div(block, min(PARTITIONS, block)) * min(PARTITIONS, block)
            w.line(f"{name} = nl.ndarray(({blocks.tk}, {blocks.tiles_k}, {width}), dtype=nl.{self.dtype}, "
                   f"buffer=nl.sbuf)")
            if blocks.k_group > 1:
                self.load_grouped(operand, name, start, block, total, k2)
            elif operand.k_outer:
                count = _count(self.k, blocks.block_k, blocks.tk, k0)
                bk = self.var("bk", count)
                _loop(w, bk, count)
                kk = _plus(k0, f"{bk} * {blocks.tk}" if bk != "0" else "0")
                outer = Index.span(start, _size(total, block, start), block, total)
                k_index = Index.span(kk, _size(self.k, blocks.tk, kk), blocks.tk, self.k)
                self.load_k_major(operand, f"{name}[:, {bk}, :]", self.batch_var, outer, k_index)
                _end(w, bk)
            else:
                self.load_transposed(operand, name, block, start, total, k2)
        return lhs, rhs

    # ---- the epilogue ------------------------------------------------------------------------------

    def epilogue(self, product: Ref, m0: str, n0: str, bm: str, bn: str) -> tuple[list, list]:
        """The epilogue's records for one output tile: (loop-invariant part, per-tile part)."""
        blocks = self.blocks
        stage, op = self.stage, self.op
        rank = len(self.domain)
        row0 = _plus(m0, f"{bm} * {blocks.tm}" if bm != "0" else "0")
        col0 = _plus(n0, f"{bn} * {blocks.tn}" if bn != "0" else "0")
        rows, cols = _size(self.m, blocks.tm, row0), _size(self.n, blocks.tn, col0)
        indexes = ([Index.point(self.batch_var, self.batch)] if rank == 3 else []) + [
            Index.span(row0, rows, blocks.tm, self.m), Index.span(col0, cols, blocks.tn, self.n)]
        limits = {d: size for d, size, tile in ((rank - 2, rows, blocks.tm), (rank - 1, cols, blocks.tn))
                  if size != str(tile)}
        varying = {d for d, many in ((0, self.batch > 1), (rank - 2, self.m > blocks.tm),
                                     (rank - 1, self.n > blocks.tn)) if many and d < rank}
        layout = StageLayout(self.domain, rank - 2, (rank - 1,), {rank - 2: blocks.tm, rank - 1: blocks.tn},
                             tuple(indexes), frozenset(varying), limits)
        body = Body(self.ctx, stage, layout)
        body.values[op.result] = self.product_value(body, product)
        for epilogue_op in stage.ops[1:]:
            emit_op(body, epilogue_op)
        for value in stage.placements:
            if value in self.in_hbm:
                body.store(value, body.materialize(body.values[value], layout.tile_shape(stage.placements[value]),
                                                   nki_dtype(value.type.dtype)))
        return hoist(optimize(body.instrs, self.names.fresh))

    def product_value(self, body: Body, product: Ref) -> Ref:
        """The matmul's result tile (in its dtype): alpha * product + beta * bias for addmm."""
        op = self.op
        dtype = nki_dtype(op.result.type.dtype)
        result = body.new(op.result.hint or op.name, product.shape, dtype)
        if len(op.operands) == 2:  # no bias
            body.add("tensor_copy", result, src=product)
            return result
        alpha, beta = float(op.attrs["alpha"]), float(op.attrs["beta"])
        bias = body.operand(op, 0)
        scaled = product
        if alpha != 1.0:
            scaled = body.binary("nl.multiply", product, alpha, body.new("scaled", product.shape, "float32"))
        if beta != 1.0:
            bias = body.binary("nl.multiply", bias, beta, body.new("bias_scaled", product.shape, "float32")) \
                if isinstance(bias, Ref) else bias * beta
        return body.binary("nl.add", scaled, bias, result)


def emit_matmul_stage(ctx: KernelContext, stage: Stage, writer: SourceWriter, in_hbm: set[Value]) -> None:
    _MatmulEmitter(ctx, stage, writer, in_hbm).emit()
