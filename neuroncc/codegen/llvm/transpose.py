"""Transposing map phases: blocked loop order so that a transpose runs near memory speed.

A map stage is a loop nest whose innermost loop runs over the output's last dim. When its values read a
buffer with a non-unit stride along that dim while another output dim reads it with unit stride (``x.T``,
``x.transpose(-1, -2)``, possibly batched, under elementwise ops or a broadcast), every element of an output
row comes from a different source line: a 2048 x 2048 f32 transpose took 24 ms on one thread for 32 MB of
traffic that a plain copy moves in 0.7 ms.

Such a phase (:func:`block_transposed_rows`, at scheduling: a :class:`TransposedMap`) takes a block of output
rows per parallel iteration: ``SQUARES`` squares of ``lanes`` rows (fewer when the phase would have under
``MIN_BLOCKS`` blocks), ``lanes`` being one cache line of the narrowest transposed source. Its stage
(:func:`emit_transposed`) runs per chunk of ``CHUNK`` output columns:

1. compute: columns outside, the block's rows inside, into an L1 stack tile stored column-major (tile
   column = ``block`` contiguous rows): the source is read along its contiguous dim and the tile written
   with unit stride, so both vectorize (the generated values are the same per element as in a plain nest);
2. copy: per ``lanes`` x ``lanes`` square, ``lanes`` vector loads from the tile, an in-register transpose
   (log2(lanes) rounds of two-source shuffles) and ``lanes`` vector stores into the output's rows.

Plain stores (not the non-temporal streaming path of plain map stages: a chunk writes parts of lines). The
copy takes the scalar route when a chunk is not whole squares or a block of rows is short (the tail).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from llvmlite import ir

from neuroncc.codegen.llvm.context import EmitContext, Index
from neuroncc.codegen.llvm.dimflow import operand_dim_maps
from neuroncc.codegen.llvm.kernel_plan import BlockedMap, KernelPlan, MapStage, Phase, RowLoop, TransposedMap
from neuroncc.codegen.llvm.scalars import I64, storage_itemsize, storage_type, store
from neuroncc.codegen.llvm.views import Layout
from neuroncc.hardware.host import CACHE_LINE_BYTES
from neuroncc.ir.graph import Value

#: Rows of a transposed square (vector lanes): one cache line of the source, within these bounds.
MIN_LANES, MAX_LANES = 8, 32
#: Squares per block of output rows: a block reads this many lines of each source row it visits, which
#: amortizes the page walk of the visit (2048 x 2048 f32, one thread: 4.6 ms with 1, 3.2 with 2, 2.3 with 4).
SQUARES = 4
#: ... fewer (down to one) while the phase would have fewer blocks than this (its parallel iterations).
MIN_BLOCKS = 4
#: Output columns per tile (f32: 64 x 64 elements, 16 KiB: stays in L1 between compute and copy).
CHUNK = 64


def transposed_reads(plan: KernelPlan, stage: MapStage) -> list[Layout]:
    """The buffers ``stage`` reads with a non-unit stride along the output's last dim while another output
    dim reads them with unit stride (empty: the stage does not transpose)."""
    rank = len(stage.shape)
    if rank < 2:
        return []
    last = rank - 1
    found: list[Layout] = []
    visited: set = set()
    for value, _ in stage.items:
        pending: list[tuple[Value, tuple[int, ...]]] = [(value, tuple(range(rank)))]
        while pending:
            v, dims = pending.pop()
            if (v, dims) in visited:
                continue
            visited.add((v, dims))
            access = plan.access[v]
            if isinstance(access, Layout):
                strides = {dims[j]: access.strides[j] for j in range(len(dims))
                           if dims[j] >= 0 and access.shape[j] > 1}
                inner = strides.get(last)
                if inner not in (None, 0, 1) and any(s == 1 for d, s in strides.items() if d != last):
                    found.append(access)
                continue
            op = access.op
            pending += list(zip(op.operands, operand_dim_maps(op, access.index, dims)))
    return found


def lanes(sources: list[Layout]) -> int:
    """Rows of a transposed square: a source line's worth of its narrowest transposed read (8 .. 32)."""
    itemsize = min(storage_itemsize(layout.dtype) for layout in sources)
    return max(MIN_LANES, min(MAX_LANES, CACHE_LINE_BYTES // itemsize))


def block_transposed_rows(plan: KernelPlan) -> KernelPlan:
    """Iterate each map-only phase that transposes in blocks of output rows (see the module docstring): all
    dims but the last two in the parallel loop, and the second-to-last in blocks of ``SQUARES * lanes`` rows."""
    return replace(plan, phases=tuple(_transposed(plan, phase) for phase in plan.phases))


def _transposed(plan: KernelPlan, phase: Phase) -> Phase:
    if not isinstance(phase, (RowLoop, BlockedMap)):
        return phase
    stages = phase.stages
    if not stages or not all(isinstance(s, MapStage) for s in stages):
        return phase
    shape = stages[0].shape
    rank = len(shape)
    depth = len(phase.outer) if isinstance(phase, RowLoop) else len(phase.shape)
    if rank < 2 or any(s.shape != shape for s in stages) or depth < rank - 1 or 0 in shape:
        return phase
    sources = [layout for s in stages for layout in transposed_reads(plan, s)]  # type: ignore[arg-type]
    if not sources:
        return phase
    if shape[-2] < 2 or shape[-1] < 2:
        return phase
    square = lanes(sources)
    squares = SQUARES
    while squares > 1 and math.prod(shape[:-2]) * -(-shape[-2] // (square * squares)) < MIN_BLOCKS:
        squares //= 2  # few output rows: smaller blocks keep the threads busy
    return TransposedMap(stages, shape, square * squares, square)  # type: ignore[arg-type]  # map stages only


def emit_transposed(em: EmitContext, loop: TransposedMap, stage: MapStage, ranges: list[tuple[Any, Any]]) -> None:
    """The nest of one stage of the transposed phase ``loop`` (see the module docstring): ``ranges`` ends with
    the block's rows and all columns."""
    (lo, hi), (_, n) = ranges[-2], ranges[-1]
    block, square = loop.block, loop.lanes
    chunk = min(CHUNK, n)
    # the squares are stored as vectors along the output rows: only into rows of unit stride
    rows_contiguous = all(target.strides[-1] == 1 for _, target in stage.items)
    tiles = {}
    for _, target in stage.items:
        pitch = block
        tile = em.alloca(storage_type(target.dtype), chunk * pitch)
        tile.align = CACHE_LINE_BYTES
        tiles[target.arg] = (tile, pitch)

    def slot(target: Layout, r: Any, c: Any) -> Any:
        tile, pitch = tiles[target.arg]
        offset = em.add(em.mul(c, pitch), em.sub(r, lo))
        return em.b.gep(tile, [ir.Constant(I64, 0), em.ir_index(offset)], inbounds=True)

    def columns(prefix: Index) -> None:
        def piece(k: Any) -> None:
            c0 = em.mul(k, chunk)
            c1 = em.add(c0, chunk) if n % chunk == 0 else em.min(em.add(c0, chunk), n)

            def compute(c: Any, r: Any) -> None:
                idx = prefix + [r, c]
                for value, target in stage.items:
                    store(em.b, em.value_at(value, idx), slot(target, r, em.sub(c, c0)), target.dtype)

            em.loop(c0, c1, lambda c: em.loop(lo, hi, lambda r: compute(c, r)))

            def copy(r: Any, c: Any) -> None:
                for _, target in stage.items:
                    element = em.b.load(slot(target, r, em.sub(c, c0)))
                    em.b.store(element, em.address(target, prefix + [r, c]))

            def scalar_copy() -> None:
                em.loop(lo, hi, lambda r: em.loop(c0, c1, lambda c: copy(r, c)))

            def vector_copy() -> None:
                def squares(g: Any) -> None:
                    for rb in range(0, block, square):
                        _copy_transposed(em, stage, prefix, em.add(lo, rb), c0, em.mul(g, square), square, slot)

                em.loop(0, chunk // square, squares)

            if chunk % square or n % chunk or not rows_contiguous:  # not whole squares: element by element
                scalar_copy()
            elif isinstance(em.sub(hi, lo), int):  # a static block height (every block full, or one short block)
                vector_copy() if em.sub(hi, lo) == block else scalar_copy()
            else:  # the last block of rows may be short: vectors for the whole blocks only
                full = em.eq(em.sub(hi, lo), block)
                with em.b.if_else(full) as (then, otherwise):
                    with then, em.fresh_values():
                        vector_copy()
                    with otherwise, em.fresh_values():
                        scalar_copy()

        em.loop(0, -(-n // chunk), piece)

    em.nest(ranges[:-2], columns)


def _copy_transposed(em: EmitContext, stage: MapStage, prefix: Index, lo: Any, c0: Any, cb: Any, block: int,
                     slot: Any) -> None:
    """Copy the tile's ``block`` x ``block`` square of rows [lo, lo + block) and (tile-relative) columns
    [cb, cb + block) to the output: ``block`` vector loads (one per column: the square's rows), an
    in-register transpose, ``block`` vector stores (one per output row). The transpose swaps one bit of the
    row and column numbers per round: log2(block) rounds of two-source shuffles (one ``vpermt2*`` each on
    x86 with AVX-512)."""
    b = em.b
    for _, target in stage.items:
        etype = storage_type(target.dtype)
        itemsize = storage_itemsize(target.dtype)
        vector = ir.VectorType(etype, block)
        rows = []
        for k in range(block):
            pointer = slot(target, lo, em.add(cb, k))
            rows.append(b.load(pointer, typ=vector, align=min(CACHE_LINE_BYTES, block * itemsize)))
        transpose_in_registers(b, rows)
        for r in range(block):
            destination = em.address(target, prefix + [em.add(lo, r), em.add(c0, cb)])
            b.store(rows[r], destination, align=itemsize)


def transpose_in_registers(b: ir.IRBuilder, rows: list[ir.Value]) -> None:
    """Transpose the square of ``rows`` (n vectors of n lanes, n a power of two) in place: log2(n) rounds of
    two-source shuffles, each exchanging one bit of the row and lane numbers."""
    block, half = len(rows), 1
    while half < block:
        low_mask = [j if j & half == 0 else block + j - half for j in range(block)]
        high_mask = [j + half if j & half == 0 else block + j for j in range(block)]
        low = ir.Constant(ir.VectorType(ir.IntType(32), block), low_mask)
        high = ir.Constant(ir.VectorType(ir.IntType(32), block), high_mask)
        for i in range(block):
            if i & half == 0:
                a, c = rows[i], rows[i + half]
                rows[i], rows[i + half] = b.shuffle_vector(a, c, low), b.shuffle_vector(a, c, high)
        half *= 2
