"""Small batched float32 matmuls as generated code: ``C[b] = A[b] @ B[b]`` with static shapes and strides.

MKL's ``sgemm_batch`` (``executors/cpu/blas.py``) pays a fixed cost per product of the batch (argument
checks, packing, a kernel sized for large matrices): on small heads that cost is most of the call (attention
with 128 heads of 16 x 16 x 16: ~90 us a bmm for 524K multiply-adds, which AVX2 FMAs do in ~15 us). Where
that loses (:func:`plan_small_matmul`, by :attr:`CpuTarget.small_bmm_max_macs`) the launch planner makes the
bmm a phase function of its own (``void phase(ptr args, i64 start, i64 end)`` over batch items, the
parallel dim), the first phase of the kernel whose extern it was, or the one phase of a top-level bmm.

Per batch item the output is computed tile by tile in vector registers: a tile is ``rows`` output rows x
``vectors`` vectors of columns, its accumulators start at zero, and each step over k loads the tile's
vectors of B's row k once and multiplies them by a broadcast of each tile row's A[i, k] (one FMA per
accumulator), then the tile is stored. A row's last partial vector is read and written with masked loads and
stores (its lanes past the row are zero and never stored). The sum over k runs in order 0..K-1 with one
rounding per FMA (exact products), like a plain loop: not MKL's bits, within the same error bound.
B is read in place when its rows are contiguous; otherwise (B transposed: ``q @ k^T``) each item's B is first
copied into a [K, N rounded up to vectors] stack buffer, by squares of lanes x lanes transposed in registers
where B's columns are contiguous and whole squares, else element by element. A is read one scalar at a time,
so any layout of A is free (``p^T @ dO`` reads it down columns).

A 2-d product (mm, addmm) runs the same way with its rows as the batch: items of :data:`MM_ROWS_PER_ITEM`
rows of A and C over one B (batch stride 0), which a transposed B (a linear's weight, ``x @ W^T``) is packed
from once per call of the phase (per chunk of items a thread takes), not per item. addmm's bias (alpha and
beta 1) is added to each finished sum as it is stored, as ATen adds it to the finished product. MKL's sgemm
runs the small classifier's products at ~60-75% of a Zen 4 core's FMA peak; these tiles at ~85-95%
(:attr:`CpuTarget.small_mm_max_macs` decides which products take them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from llvmlite import ir

from neuroncc.codegen.llvm.entries import add_phase_entry, mark_optimize_first
from neuroncc.codegen.llvm.scalars import F32, I1, I32, I64, PTR, VOID, intrinsic
from neuroncc.codegen.llvm.transpose import transpose_in_registers
from neuroncc.codegen.llvm.views import Layout
from neuroncc.hardware.host import CACHE_LINE_BYTES, CpuTarget
from neuroncc.ir.dtypes import DType
from neuroncc.ir.graph import Op
from neuroncc.ir.opdef import Trait

#: Vector loads and stores of rows are only as aligned as one float32 element (rows start anywhere).
ELEMENT_ALIGN = DType.f32.itemsize

#: The largest stack buffer (bytes) an item's B is packed into: it stays in L1 with A's rows and the output.
MAX_PACKED_BYTES = 16 << 10

#: The largest stack buffer (bytes) a 2-d product's one B is packed into, once per call of the phase: it is
#: read by every row tile, from L1 and L2 (the classifier's qkv weight, 64 x 192: 48 KiB).
MAX_SHARED_PACKED_BYTES = 64 << 10

#: Rows of a 2-d product per batch item of its phase: the unit a thread takes (of the classifier's 512-row
#: products, 32 items). Zen 4, 1 and 2 threads, items of 8 / 16 / 32 / 64 rows: 16 as fast as any on every
#: product of the classifier, 8 up to 12% slower where K is 512 (more tiles' partial rows).
MM_ROWS_PER_ITEM = 16

#: Work units (the launcher's per-element units, ``launch_cost.py``) per vector multiply-add: the OpenMP team
#: splits a product from TEAM_MIN_WORK / 4 vector FMAs. At 1 unit the 2M multiply-adds of a [512, 64] x
#: [64, 64] product stayed on one thread at 2 threads (Zen 4: 41 us, against 27 us split; MKL 36 us).
VECTOR_FMA_WORK = 4


@dataclass(frozen=True, slots=True)
class Operand:
    """One operand as the product reads it: argument slot, element offset, (batch, row, column) strides."""

    arg: int
    offset: int
    strides: tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class SmallMatmul:
    """One batched product run by generated code: ``c[i] = a[i] @ b[i]`` for i < batch, a [rows, depth],
    b [depth, cols], c [rows, cols] with unit column stride; ``lanes`` float32 per vector, ``registers``
    vector registers, ``fma``: the CPU fuses multiply-adds."""

    batch: int
    rows: int
    cols: int
    depth: int
    a: Operand
    b: Operand
    c: Operand
    lanes: int
    registers: int
    fma: bool
    #: vectors of columns per tile (:attr:`CpuTarget.matmul_tile_vectors`); 0: by :attr:`column_blocks`'s score
    tile_vectors: int = 0
    #: addmm's bias, (batch, row, column) strides (0 where broadcast), added to each finished sum; None: mm, bmm
    bias: Operand | None = None

    @property
    def vectors(self) -> int:
        """Vectors per output row (the last one partial when cols is not a multiple of lanes)."""
        return -(-self.cols // self.lanes)

    @property
    def packs_b(self) -> bool:
        """Whether each item's B is copied into a stack buffer first (its rows are not contiguous)."""
        return self.b.strides[2] != 1 and self.cols > 1

    @property
    def packs_by_squares(self) -> bool:
        """Whether the copy is by squares of lanes x lanes transposed in registers (B's columns contiguous,
        whole squares), else element by element."""
        return self.b.strides[1] == 1 and self.depth % self.lanes == 0 and self.cols % self.lanes == 0

    @property
    def packed_bytes(self) -> int:
        """Bytes of the stack buffer B is packed into (0: B is read in place)."""
        return self.depth * self.vectors * self.lanes * 4 if self.packs_b else 0

    @property
    def column_blocks(self) -> tuple[tuple[int, int], ...]:
        """(first vector, vectors) of each block of columns a tile covers. Where the target fixes the width,
        blocks of :attr:`tile_vectors`, the narrower rest joining the last block while that stays at most a
        quarter of the registers' vectors (AVX2: 2-vector blocks, an odd count's last block 3 vectors x 4
        rows: Zen 3, a 128 x 24^3 bmm, 3 x 4 0.89-0.98 of 2 x 6 + 1 x 14's time). Else blocks of near-equal
        size, the block width whose tiles do the most multiply-adds per load (``vectors x rows`` accumulators
        for ``vectors + rows`` loads per step over k: B's vectors and A's broadcasts), the widest of equals, at
        most a quarter of the registers' vectors. With AVX-512 (32 registers): 4 vectors x 6 rows or 6 x 4
        (2.4 FMAs a load); 8 x 2 (1.6) ran a [512, 64] x [64, 128] product at 88 GFLOP/s on Zen 4 against
        105 in 4 x 6 tiles."""
        most = max(self.registers // 4, 1)
        if self.tile_vectors:
            firsts = list(range(0, self.vectors, self.tile_vectors))
            if len(firsts) > 1 and self.vectors - firsts[-1] < self.tile_vectors and self.vectors - firsts[-2] <= most:
                firsts.pop()
            return tuple((first, end - first) for first, end in zip(firsts, [*firsts[1:], self.vectors]))
        fewest = -(-self.vectors // most)
        best_size, best_score = -(-self.vectors // fewest), -1.0
        for blocks in range(fewest, self.vectors + 1):
            size = -(-self.vectors // blocks)
            rows = self.tile_rows(size)
            score = size * rows / (size + rows)
            if score > best_score + 1e-9:
                best_size, best_score = size, score
        return tuple((first, min(best_size, self.vectors - first)) for first in range(0, self.vectors, best_size))

    def tile_rows(self, vectors: int) -> int:
        """Rows per tile of ``vectors`` columns: accumulators, B's vectors and one broadcast fill the registers."""
        return max(1, min(self.rows, (self.registers - vectors - 1) // vectors))

    @property
    def work(self) -> int:
        """Work per batch item, in the launcher's per-element units (:data:`VECTOR_FMA_WORK` per vector FMA)."""
        return max(self.rows * self.cols * self.depth // self.lanes, 1) * VECTOR_FMA_WORK


def _logical(layout: Layout, transposed: bool) -> Operand:
    """The stored [batch, x, y] operand as the product reads it (transposed: its last two dims swapped)."""
    sb, s1, s2 = layout.strides
    return Operand(layout.arg, layout.offset, (sb, s2, s1) if transposed else (sb, s1, s2))


def plan_small_matmul(op: Op, operands: Sequence[Layout], result: Layout, target: CpuTarget,
                      max_macs: int | None = None) -> SmallMatmul | None:
    """The generated-code plan of matmul ``op`` over ``operands`` (stored layouts, op order) into ``result``,
    or None where BLAS or ATen runs it: the one place that decides. Generated: float32 bmm, nothing empty,
    at most ``max_macs`` (default ``target.small_bmm_max_macs``) multiply-adds per batch item, unit column
    stride in the result, a packed B of at most :data:`MAX_PACKED_BYTES`; float32 mm and addmm (alpha and beta
    1, a bias with unit column stride) of at most ``max_macs`` (default ``target.small_mm_max_macs``)
    multiply-adds in all, by :func:`_plan_2d`."""
    if len(result.shape) == 2:
        return _plan_2d(op, operands, result, target,
                        target.small_mm_max_macs if max_macs is None else max_macs)
    if max_macs is None:
        max_macs = target.small_bmm_max_macs
    if not op.has(Trait.MATRIX_PRODUCT) or len(operands) != 2 or len(result.shape) != 3:
        return None
    if any(layout.dtype is not DType.f32 for layout in (*operands, result)):
        return None
    batch, rows, cols = result.shape
    a = _logical(operands[0], bool(op.attrs.get("transpose_a", False)))
    b = _logical(operands[1], bool(op.attrs.get("transpose_b", False)))
    depth = operands[0].shape[1] if op.attrs.get("transpose_a", False) else operands[0].shape[2]
    if min(batch, rows, cols, depth) < 1 or rows * cols * depth > max_macs:
        return None
    if result.strides[2] != 1 and cols > 1:
        return None
    c = Operand(result.arg, result.offset, (result.strides[0], result.strides[1], 1))
    plan = SmallMatmul(batch, rows, cols, depth, a, b, c, target.f32_lanes, target.vector_registers,
                       target.has("fma"), target.matmul_tile_vectors)
    if plan.packs_b and depth * plan.vectors * plan.lanes * 4 > MAX_PACKED_BYTES:
        return None
    return plan


def rows_per_item(rows: int) -> int | None:
    """Rows of a 2-d product per batch item: :data:`MM_ROWS_PER_ITEM` where they divide ``rows``, else the
    largest divisor of ``rows`` from 4 up to twice that, else all rows in one item up to twice that; None
    (BLAS) for more rows with no such divisor (every item has the same rows)."""
    if rows % MM_ROWS_PER_ITEM == 0:
        return MM_ROWS_PER_ITEM
    divisors = [r for r in range(4, 2 * MM_ROWS_PER_ITEM + 1) if rows % r == 0]
    if divisors:
        return max(divisors)
    return rows if rows <= 2 * MM_ROWS_PER_ITEM else None


def _plan_2d(op: Op, operands: Sequence[Layout], result: Layout, target: CpuTarget,
             max_macs: int) -> SmallMatmul | None:
    """mm or addmm as items of :func:`rows_per_item` rows over one B (batch stride 0), or None."""
    if not op.has(Trait.MATRIX_PRODUCT) or len(operands) not in (2, 3):
        return None
    if any(layout.dtype is not DType.f32 for layout in (*operands, result)):
        return None
    bias_layout = operands[0] if len(operands) == 3 else None
    if bias_layout is not None and (op.attrs.get("alpha", 1) != 1 or op.attrs.get("beta", 1) != 1):
        return None
    first, second = operands[-2:]
    if len(first.shape) != 2 or len(second.shape) != 2:
        return None
    rows, cols = result.shape
    a = _logical_2d(first, bool(op.attrs.get("transpose_a", False)))
    b = _logical_2d(second, bool(op.attrs.get("transpose_b", False)))
    depth = first.shape[0] if op.attrs.get("transpose_a", False) else first.shape[1]
    if min(rows, cols, depth) < 1 or rows * cols * depth > max_macs:
        return None
    if result.strides[1] != 1 and cols > 1:
        return None
    per_item = rows_per_item(rows)
    if per_item is None:
        return None
    bias = None
    if bias_layout is not None:
        bias_strides = _broadcast_strides(bias_layout, (rows, cols))
        if bias_strides is None:
            return None
        bias = Operand(bias_layout.arg, bias_layout.offset, (per_item * bias_strides[0], *bias_strides))
    plan = SmallMatmul(rows // per_item, per_item, cols, depth,
                       Operand(a.arg, a.offset, (per_item * a.strides[1], *a.strides[1:])),
                       Operand(b.arg, b.offset, (0, *b.strides[1:])),
                       Operand(result.arg, result.offset, (per_item * result.strides[0], result.strides[0], 1)),
                       target.f32_lanes, target.vector_registers, target.has("fma"),
                       target.matmul_tile_vectors, bias)
    if plan.packed_bytes > MAX_SHARED_PACKED_BYTES:
        return None
    return plan


def _logical_2d(layout: Layout, transposed: bool) -> Operand:
    """A stored [x, y] factor as the product reads it, as a (0, row, column)-strided operand."""
    s0, s1 = layout.strides
    return Operand(layout.arg, layout.offset, (0, s1, s0) if transposed else (0, s0, s1))


def _broadcast_strides(layout: Layout, shape: tuple[int, int]) -> tuple[int, int] | None:
    """(row, column) strides of ``layout`` broadcast to ``shape`` (0 along a broadcast dim), or None when its
    columns are not contiguous (the bias is read as vectors of a row)."""
    rank = len(layout.shape)
    if rank > 2:
        return None
    sizes = (1,) * (2 - rank) + tuple(layout.shape)
    strides = (0,) * (2 - rank) + tuple(layout.strides)
    row = 0 if sizes[0] == 1 else strides[0]
    if sizes[1] == 1:
        if shape[1] > 1:
            return None  # one bias per row, broadcast along it: not a vector of the row
        column = 1
    else:
        column = strides[1]
    return (row, 1) if column == 1 else None


def emit_small_matmul(plan: SmallMatmul, symbol: str, n_args: int) -> str:
    """The LLVM module (text) of phase function ``symbol`` computing ``plan`` over batch items [start, end);
    its argument array has ``n_args`` pointers (the operands' and result's slots among them)."""
    module = ir.Module(name=symbol)
    body = ir.Function(module, ir.FunctionType(VOID, [PTR] * n_args + [I64, I64]), f"{symbol}.body")
    body.linkage = "internal"
    for arg in body.args[:n_args]:
        arg.add_attribute("noalias")  # the kernel's buffers never overlap (two reads of one buffer may)
    add_phase_entry(module, symbol, n_args)
    mark_optimize_first(module)  # the graph's arithmetic: quick code would run it several times slower
    _Emitter(plan, body).emit()
    return str(module)


class _Emitter:
    """Builds the body of one small matmul phase (see the module docstring)."""

    def __init__(self, plan: SmallMatmul, function: ir.Function):
        self.plan = plan
        self.function = function
        self.vector = ir.VectorType(F32, plan.lanes)
        self.b = ir.IRBuilder(function.append_basic_block("entry"))
        self.zero = ir.Constant(self.vector, None)

    def emit(self) -> None:
        plan, b = self.plan, self.b
        packed = None
        if plan.packs_b:  # rows of vectors x lanes: its padding is never read (masked loads)
            packed = b.alloca(ir.ArrayType(F32, plan.depth * plan.vectors * plan.lanes))
            packed.align = CACHE_LINE_BYTES
        start, end = self.function.args[-2], self.function.args[-1]
        if packed is not None and plan.b.strides[0] == 0:  # one B for every item: packed once per call
            self._pack(self._pointer(self.function.args[plan.b.arg], plan.b.offset), packed)
            self._range(start, end, lambda item: self._item(item, packed, packed_already=True))
        else:
            self._range(start, end, lambda item: self._item(item, packed))
        b.ret_void()

    # ---- addresses and loops -------------------------------------------------------------------------

    def _pointer(self, base: ir.Value, index: ir.Value | int) -> ir.Value:
        if isinstance(base, ir.AllocaInstr):  # the packed B: a typed array on the stack
            return self.b.gep(base, [ir.Constant(I64, 0), self._i64(index)], inbounds=True)
        return self.b.gep(base, [self._i64(index)], source_etype=F32, inbounds=True)

    def _i64(self, value: ir.Value | int) -> ir.Value:
        return ir.Constant(I64, value) if isinstance(value, int) else value

    def _affine(self, constant: int, *terms: tuple[ir.Value | int, int]) -> ir.Value | int:
        """constant + sum(index * stride): folded while every index is a Python int."""
        total: ir.Value | int = constant
        for index, stride in terms:
            if stride == 0:
                continue
            if isinstance(index, int):
                product: ir.Value | int = index * stride
            else:
                product = self.b.mul(index, ir.Constant(I64, stride)) if stride != 1 else index
            if isinstance(total, int) and isinstance(product, int):
                total += product
            elif isinstance(total, int) and total == 0:
                total = product
            else:
                total = self.b.add(self._i64(total), self._i64(product))
        return total

    def _range(self, lo: ir.Value | int, hi: ir.Value | int, body: Callable[[ir.Value], None]) -> None:
        """for i in [lo, hi): body(i) (no iteration when lo >= hi)."""
        b = self.b
        before = b.block
        loop, done = self.function.append_basic_block("loop"), self.function.append_basic_block("done")
        lo, hi = self._i64(lo), self._i64(hi)
        b.cbranch(b.icmp_signed("<", lo, hi), loop, done)
        b.position_at_end(loop)
        index = b.phi(I64)
        index.add_incoming(lo, before)
        body(index)
        following = b.add(index, ir.Constant(I64, 1))
        index.add_incoming(following, b.block)
        b.cbranch(b.icmp_signed("<", following, hi), loop, done)
        b.position_at_end(done)

    def _carried(self, count: int, initial: list[ir.Value],
                 step: Callable[[ir.Value, list[ir.Value]], list[ir.Value]]) -> list[ir.Value]:
        """values = step(k, values) for k in [0, count) (count >= 1), the values carried in registers."""
        b = self.b
        before = b.block
        loop, done = self.function.append_basic_block("k"), self.function.append_basic_block("k.done")
        b.branch(loop)
        b.position_at_end(loop)
        k = b.phi(I64)
        k.add_incoming(ir.Constant(I64, 0), before)
        carried = []
        for value in initial:
            phi = b.phi(value.type)
            phi.add_incoming(value, before)
            carried.append(phi)
        updated = step(k, carried)
        following = b.add(k, ir.Constant(I64, 1))
        k.add_incoming(following, b.block)
        for phi, value in zip(carried, updated):
            phi.add_incoming(value, b.block)
        b.cbranch(b.icmp_signed("<", following, ir.Constant(I64, count)), loop, done)
        b.position_at_end(done)
        return updated

    # ---- one batch item --------------------------------------------------------------------------------

    def _item(self, item: ir.Value, packed: Any, packed_already: bool = False) -> None:
        plan, args = self.plan, self.function.args
        bases = [self._pointer(args[o.arg], self._affine(o.offset, (item, o.strides[0])))
                 for o in (plan.a, plan.b, plan.c)]
        a_base, b_base, c_base = bases
        self.bias_base = None if plan.bias is None else \
            self._pointer(args[plan.bias.arg], self._affine(plan.bias.offset, (item, plan.bias.strides[0])))
        b_strides = plan.b.strides[1:]
        if packed is not None:
            if not packed_already:
                self._pack(b_base, packed)
            b_base, b_strides = packed, (plan.vectors * plan.lanes, 1)
        for first, vectors in plan.column_blocks:
            rows = plan.tile_rows(vectors)
            whole = plan.rows // rows
            if whole:
                self._range(0, whole, lambda tile: self._tile(a_base, b_base, b_strides, c_base,
                                                              self.b.mul(tile, ir.Constant(I64, rows)), rows,
                                                              first, vectors))
            if plan.rows % rows:
                self._tile(a_base, b_base, b_strides, c_base, whole * rows, plan.rows % rows, first, vectors)

    def _pack(self, source: ir.Value, packed: ir.Value) -> None:
        """packed[k, n] = B[k, n] for the item's B: by squares (:meth:`_pack_square`), else element by element
        with B's smaller stride innermost."""
        plan = self.plan
        row = plan.vectors * plan.lanes
        stride_k, stride_n = plan.b.strides[1:]
        if plan.packs_by_squares:
            lanes = plan.lanes
            self._range(0, plan.cols // lanes, lambda n: self._range(
                0, plan.depth // lanes, lambda k: self._pack_square(source, packed, n, k)))
            return

        def copy(k: ir.Value, n: ir.Value) -> None:
            value = self.b.load(self._pointer(source, self._affine(0, (k, stride_k), (n, stride_n))), typ=F32)
            self.b.store(value, self._pointer(packed, self._affine(0, (k, row), (n, 1))))

        if abs(stride_k) < abs(stride_n):
            self._range(0, plan.cols, lambda n: self._range(0, plan.depth, lambda k: copy(k, n)))
        else:
            self._range(0, plan.depth, lambda k: self._range(0, plan.cols, lambda n: copy(k, n)))

    def _pack_square(self, source: ir.Value, packed: ir.Value, n: ir.Value, k: ir.Value) -> None:
        """Square (n, k) of lanes x lanes: B's columns n*lanes.. are loaded as vectors along k, transposed in
        registers (one bit of the row and column numbers per round: log2(lanes) rounds of two-source shuffles,
        as ``transpose.py``'s copy) and stored as vectors of packed rows k*lanes.."""
        plan, b, lanes = self.plan, self.b, self.plan.lanes
        row, stride_n = plan.vectors * lanes, plan.b.strides[2]
        n0, k0 = b.mul(n, ir.Constant(I64, lanes)), b.mul(k, ir.Constant(I64, lanes))
        vectors = [b.load(self._pointer(source, self._affine(0, (n0, stride_n), (j, stride_n), (k0, 1))),
                          typ=self.vector, align=ELEMENT_ALIGN) for j in range(lanes)]
        transpose_in_registers(b, vectors)
        for j in range(lanes):
            target = self._pointer(packed, self._affine(0, (k0, row), (j, row), (n0, 1)))
            b.store(vectors[j], b.bitcast(target, self.vector.as_pointer()), align=ELEMENT_ALIGN)

    def _tile(self, a_base: ir.Value, b_base: ir.Value, b_strides: tuple[int, int], c_base: ir.Value,
              row0: ir.Value | int, rows: int, first: int, vectors: int) -> None:
        """Output rows [row0, row0 + rows) x vectors [first, first + vectors): accumulate over k, store."""
        plan, b = self.plan, self.b
        stride_m, stride_k = plan.a.strides[1:]
        mask = ir.Constant(ir.VectorType(I32, plan.lanes), [0] * plan.lanes)

        def step(k: ir.Value, sums: list[ir.Value]) -> list[ir.Value]:
            row = [self._load(self._pointer(b_base, self._affine((first + v) * plan.lanes, (k, b_strides[0]))),
                              plan.cols - (first + v) * plan.lanes) for v in range(vectors)]
            updated = []
            for r in range(rows):
                scalar = b.load(self._pointer(a_base, self._affine(0, (row0, stride_m), (r, stride_m),
                                                                   (k, stride_k))), typ=F32)
                splat = b.shuffle_vector(b.insert_element(ir.Constant(self.vector, ir.Undefined), scalar,
                                                          ir.Constant(I32, 0)), ir.Constant(self.vector, ir.Undefined),
                                         mask)
                for v in range(vectors):
                    updated.append(self._multiply_add(splat, row[v], sums[r * vectors + v]))
            return updated

        sums = self._carried(plan.depth, [self.zero] * (rows * vectors), step)
        bias_rows: dict[int, list[ir.Value]] = {}  # a broadcast bias row is loaded once per tile
        for r in range(rows):
            for v in range(vectors):
                column = (first + v) * plan.lanes
                target = self._pointer(c_base, self._affine(column, (row0, plan.c.strides[1]), (r, plan.c.strides[1])))
                value = sums[r * vectors + v]
                if plan.bias is not None:
                    key = r if plan.bias.strides[1] else 0
                    if key not in bias_rows:
                        bias_rows[key] = [self._load(self._pointer(self.bias_base, self._affine(
                            (first + u) * plan.lanes, (row0, plan.bias.strides[1]), (r, plan.bias.strides[1]))),
                            plan.cols - (first + u) * plan.lanes) for u in range(vectors)]
                    value = b.fadd(value, bias_rows[key][v])
                self._store(value, target, plan.cols - column)

    def _multiply_add(self, x: ir.Value, y: ir.Value, z: ir.Value) -> ir.Value:
        if self.plan.fma:
            fma = intrinsic(self.b.module, f"llvm.fma.v{self.plan.lanes}f32", self.vector, [self.vector] * 3)
            return self.b.call(fma, [x, y, z])
        return self.b.fadd(self.b.fmul(x, y), z)

    def _mask(self, remaining: int) -> ir.Constant:
        return ir.Constant(ir.VectorType(I1, self.plan.lanes), [int(lane < remaining) for lane in range(self.plan.lanes)])

    def _load(self, source: ir.Value, remaining: int) -> ir.Value:
        """A vector of a row of B, its lanes past the row's end (the last ``remaining`` < lanes) zero."""
        if remaining >= self.plan.lanes:
            return self.b.load(source, typ=self.vector, align=ELEMENT_ALIGN)
        load = intrinsic(self.b.module, f"llvm.masked.load.v{self.plan.lanes}f32.p0", self.vector,
                         [PTR, I32, self._mask(remaining).type, self.vector])
        return self.b.call(load, [source, ir.Constant(I32, 4), self._mask(remaining), self.zero])

    def _store(self, value: ir.Value, target: ir.Value, remaining: int) -> None:
        """Store a vector of an output row, only its first ``remaining`` lanes when the row ends inside it."""
        lanes = self.plan.lanes
        if remaining >= lanes:
            self.b.store(value, target, align=ELEMENT_ALIGN)
            return
        store = intrinsic(self.b.module, f"llvm.masked.store.v{lanes}f32.p0", VOID,
                          [self.vector, PTR, I32, self._mask(remaining).type])
        self.b.call(store, [value, target, ir.Constant(I32, 4), self._mask(remaining)])


__all__ = ["MAX_PACKED_BYTES", "MAX_SHARED_PACKED_BYTES", "MM_ROWS_PER_ITEM", "Operand", "SmallMatmul",
           "emit_small_matmul", "plan_small_matmul", "rows_per_item"]
