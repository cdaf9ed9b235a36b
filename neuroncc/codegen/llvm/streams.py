"""Non-temporal stores of map-stage outputs: which outputs are written past the caches (:func:`streams`), and
the copy of a stack buffer's piece to one (:func:`emit_stream_row`; the map stage's nest is ``emit.py``'s)."""

from __future__ import annotations

import math
from typing import Any

from llvmlite import ir

from neuroncc.codegen.llvm.context import Index
from neuroncc.codegen.llvm.scalars import I32, I64, storage_itemsize, storage_type
from neuroncc.codegen.llvm.views import Layout
from neuroncc.hardware.host import CACHE_LINE_BYTES, CpuTarget

#: Map-stage outputs at least this large are written with non-temporal stores ...
STREAM_MIN_BYTES = 1 << 22
#: ... a piece of at most this many bytes of the narrowest output at a time, one vector (see ``_map_stage``).
STREAM_PIECE_BYTES = CACHE_LINE_BYTES


def streams(em: Any, target: Layout, block: int) -> bool:
    """Large, aligned, contiguous outputs are written with non-temporal stores when the kernel's data does
    not fit in the last-level cache (``CpuTarget.streams_outputs``): no read-for-ownership traffic, and
    they would not stay in cache anyway (``block``: as in ``MapStages._map_stage``). Not the rows a
    compute-bound pass prefetched for writing (``prefetch.rows_written_by_carried_pass``): those are owned in L1;
    nor an output written over a parameter (``KernelPlan.overwrites``): the stage has just read each line it
    writes, and a non-temporal store to a cached line evicts it (ReLU's backward in place: 10% slower)."""
    itemsize = storage_itemsize(target.dtype)
    return (target not in em._owned and target.arg not in em.plan.overwrites
            and em.target.streams_outputs(_footprint_bytes(em))
            and target.arg in em.plan.aligned_args and target.is_contiguous and target.offset == 0
            and math.prod(target.shape) * itemsize >= STREAM_MIN_BYTES and bool(target.shape)
            and (target.shape[-1] * itemsize) % CACHE_LINE_BYTES == 0
            and (block * itemsize) % CACHE_LINE_BYTES == 0)


def _footprint_bytes(em: Any) -> int:
    """Bytes of the kernel region's parameters and results: the data one call touches."""
    values = [*em.plan.region.params, *em.plan.region.outputs]
    return sum(math.prod(v.type.shape) * storage_itemsize(v.type.dtype) for v in values)


def stream_bytes(cpu: CpuTarget) -> int:
    """Bytes of one non-temporal store: a vector (half a line with AVX2: the write-combining buffer joins
    the two halves, stored one after the other), at most a cache line."""
    return min(STREAM_PIECE_BYTES, cpu.vector_bits // 8)


def emit_stream_row(em: Any, row: ir.Value, target: Layout, idx: Index, count: Any, unrolled: bool = False) -> None:
    """Copy ``count`` elements (whole vectors) from ``row`` to ``target`` at ``idx``, a vector per store;
    ``unrolled``: ``count`` is an int and the stores follow one another, no loop (the buffer is then read at
    constant places only, which lets LLVM keep it in registers)."""
    piece = stream_bytes(em.target)
    lanes = piece // storage_itemsize(target.dtype)
    vector = ir.VectorType(storage_type(target.dtype), lanes)
    destination = em.address(target, idx)
    nontemporal = em.module.add_metadata([ir.Constant(I32, 1)])

    def copy(j: ir.Value) -> None:
        offset = em.mul(j, lanes)
        src = em.b.gep(row, [ir.Constant(I64, 0), em.ir_index(offset)], inbounds=True)
        dst = em.b.gep(destination, [em.ir_index(offset)], source_etype=storage_type(target.dtype), inbounds=True)
        value = em.b.load(src, typ=vector, align=piece)
        em.b.store(value, dst, align=piece).set_metadata("nontemporal", nontemporal)

    if unrolled:
        for j in range(count // lanes):
            copy(j)
        return
    em.loop(0, em.div(count, lanes), copy)
