"""Transposing map phases: blocked loop order so that a transpose runs at memory speed.

A map stage is a loop nest whose innermost loop runs over the output's last dim. When its values read a
buffer with a non-unit stride along that dim while another output dim reads it with unit stride (``x.T``,
``x.transpose(-1, -2)``, possibly under elementwise ops or a broadcast), every element of an output row
comes from a different source line: a 2048 x 2048 f32 transpose gathered 13 ms of lines for 32 MB of
traffic that ~1.2 ms moves. Such a phase instead takes ``rows_per_block`` output rows per parallel
iteration and, inside it, iterates the output's columns outside and the block's rows inside: the source is
then read along its contiguous dim (a block's worth of one line per column) and the block's output lines
(one per row) stay in L1 until they are full. Plain stores: non-temporal ones would write partial lines.

:func:`block_transposed_rows` marks the phase (scheduling); :func:`emit_transposed` is the emitter's nest.
"""

from __future__ import annotations

from typing import Any

from neuroncc.codegen.llvm.dimflow import operand_dim_maps
from neuroncc.codegen.llvm.schedule import KernelPlan, MapStage, Phase
from neuroncc.codegen.llvm.scalars import storage_itemsize
from neuroncc.codegen.llvm.views import Layout
from neuroncc.ir.graph import Value

#: Output rows per block: one 64-byte source line's worth of elements, within these bounds (a block's rows
#: are the inner loop; its output lines must all stay in L1 while its columns are walked).
MIN_ROWS, MAX_ROWS = 8, 32
LINE_BYTES = 64
#: Columns per tile (the tile: a block's rows x this many, padded; a few KiB).
CHUNK = 256


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


def rows_per_block(sources: list[Layout]) -> int:
    """Output rows per block: a source line's worth of its narrowest transposed read (8 .. 32 rows)."""
    itemsize = min(storage_itemsize(layout.dtype) for layout in sources)
    return max(MIN_ROWS, min(MAX_ROWS, LINE_BYTES // itemsize))


def block_transposed_rows(plan: KernelPlan, phase: Phase) -> None:
    """Iterate a map-only phase that transposes in blocks of output rows (see the module docstring): all dims
    but the last two in the parallel loop, and the second-to-last in blocks of ``rows_per_block``."""
    stages = phase.stages
    if not stages or not all(isinstance(s, MapStage) for s in stages) or phase.row_cache or phase.split \
            or phase.kept or phase.partials or phase.combine:
        return
    shape = stages[0].shape
    rank = len(shape)
    if rank < 2 or any(s.shape != shape for s in stages) or phase.outer < rank - 1 or 0 in shape:
        return
    sources = [layout for s in stages for layout in transposed_reads(plan, s)]
    if not sources:
        return
    block = rows_per_block(sources)
    if shape[-2] < 2 or shape[-1] < 2:
        return
    phase.outer, phase.outer_shape, phase.block = rank - 1, shape[:-1], block
    phase.transposed = True


def emit_transposed(em: Any, stage: MapStage, ranges: list[tuple[Any, Any]]) -> None:
    """The nest of a transposed phase's stage: ``ranges`` ends with the block's rows and all columns.

    Per chunk of ``CHUNK`` columns, the block is computed columns outside, rows inside (the source is read
    along its contiguous dim) into an L1 stack tile whose rows are padded by a line (the output's rows are
    often a power-of-two bytes apart: written directly, a block's lines would all fall in one cache set),
    then the tile's rows are copied to the output with unit-stride (vectorized) loads and stores."""
    from llvmlite import ir

    from neuroncc.codegen.llvm.scalars import I64, storage_type, store

    (lo, hi), (_, n) = ranges[-2], ranges[-1]
    block = em.phase.block
    chunk = min(CHUNK, n)
    tiles = {}
    for _, target in stage.items:
        pitch = block
        tile = em._entry.alloca(ir.ArrayType(storage_type(target.dtype), chunk * pitch))
        tile.align = 64
        tiles[target.arg] = (tile, pitch)

    def slot(target: Layout, r: Any, c: Any) -> Any:
        tile, pitch = tiles[target.arg]
        offset = em.add(em.mul(c, pitch), em.sub(r, lo))
        return em.b.gep(tile, [ir.Constant(I64, 0), em.ir_index(offset)], inbounds=True)

    def columns(prefix: list) -> None:
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

            em.loop(lo, hi, lambda r: em.loop(c0, c1, lambda c: copy(r, c)))

        em.loop(0, -(-n // chunk), piece)

    em.nest(ranges[:-2], columns)
