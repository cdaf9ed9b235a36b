"""Software prefetch of the next row in row loops that pass over each row more than once, cheaply.

A row loop runs its stages one after the other on a row while it is in L1 (softmax: max, sum of exp, write;
LayerNorm: mean and variance, write). Only the first pass reads the row from memory; while the later passes
compute, no load misses, so the hardware prefetchers (which follow demand misses) do not fetch the next row
and the memory system idles, and during the first pass of the next row the cores wait for it. Prefetching
every line of the next row at the start of a row overlaps the two: the next row arrives while this one is
computed. (A one-pass loop streams without help; rows longer than ``ROW_MAX_BYTES`` would evict the row being
worked on from L1 and are left to the hardware.) Only where the passes are cheap: a loop computing a
transcendental function per element is compute-bound, and there the prefetches only took load slots (softmax
[4096, 1024]: 4-5% slower with them at 1 and 2 threads; bf16 LayerNorm [8192, 1024]: 13% faster at 1 thread,
within noise at 2, where both cores' own misses keep memory busy; session 7 in docs/performance.md).

:func:`rows_to_prefetch` is the decision (which inputs of a phase, from its plan), :func:`emit_prefetch_next_row`
its code.
"""

from __future__ import annotations

import math
from typing import Any

from llvmlite import ir

from neuroncc.codegen.llvm.context import EmitContext, Index
from neuroncc.codegen.llvm.elementwise import ELEMENTWISE
from neuroncc.codegen.llvm.kernel_plan import Computed, KernelPlan, RowLoop
from neuroncc.codegen.llvm.scalars import I32, I64, I8, PTR, VOID, storage_itemsize, storage_type
from neuroncc.codegen.llvm.views import Layout
from neuroncc.hardware.host import CACHE_LINE_BYTES
from neuroncc.ir.graph import Value
from neuroncc.ir.opdef import Trait

#: Rows of at most this many bytes (per input) are prefetched: with the row in use, half of L1.
ROW_MAX_BYTES = 1 << 14


def rows_to_prefetch(plan: KernelPlan, phase: RowLoop) -> tuple[Layout, ...]:
    """The kernel inputs whose next row ``phase`` prefetches: read at the phase's own index through elementwise
    ops by its first stage, contiguous (the next row follows this one), with rows of at most ``ROW_MAX_BYTES``;
    none unless the phase has several stages (passes over the row)."""
    depth = len(phase.outer)
    if depth == 0 or len(phase.stages) < 2 or _transcendental_per_element(plan, phase):
        return ()
    first = phase.stages[0]
    found: dict[int, Layout] = {}
    for root, _ in first.roots:
        for layout in _read_in_place(plan, root, first.shape, set()):
            row_bytes = math.prod(layout.shape[depth:]) * storage_itemsize(layout.dtype)
            if layout.arg < plan.n_params and layout.is_contiguous and layout.shape[:depth] == phase.outer \
                    and 0 < row_bytes <= ROW_MAX_BYTES:
                found.setdefault(layout.arg, layout)
    return tuple(found.values())


def _transcendental_per_element(plan: KernelPlan, phase: RowLoop) -> bool:
    """Whether a stage of ``phase`` computes a transcendental function at each of its elements."""
    for stage in phase.stages:
        pending, seen = [root for root, _ in stage.roots], set()
        while pending:
            value = pending.pop()
            access = plan.access.get(value)
            if value in seen or value.type.shape != stage.shape or not isinstance(access, Computed):
                continue
            seen.add(value)
            if access.op.has(Trait.TRANSCENDENTAL):
                return True
            pending += access.op.operands
    return False


def _read_in_place(plan: KernelPlan, value: Value, shape: tuple[int, ...], seen: set[Value]) -> list[Layout]:
    """The buffers ``value`` reads at its own index (through elementwise ops of the same shape)."""
    if value in seen or value.type.shape != shape:
        return []
    seen.add(value)
    access = plan.access.get(value)
    if isinstance(access, Layout):
        return [access]
    if not isinstance(access, Computed) or access.op.name not in ELEMENTWISE:
        return []
    return [layout for operand in access.op.operands for layout in _read_in_place(plan, operand, shape, seen)]


def emit_prefetch_next_row(em: EmitContext, layout: Layout, outer: Index) -> None:
    """Prefetch (for reading, into all cache levels) every cache line of the row after ``layout``'s row at the
    outer index ``outer``. Prefetches do not fault, so the row after the buffer's last is harmless."""
    b = em.b
    depth = len(outer)
    row = math.prod(layout.shape[depth:])
    start: Any = em.address(layout, list(outer) + [0] * (len(layout.shape) - depth))
    following = b.gep(start, [ir.Constant(I64, row)], source_etype=storage_type(layout.dtype), inbounds=False)
    lines = -(-row * storage_itemsize(layout.dtype) // CACHE_LINE_BYTES)
    prefetch = _prefetch_intrinsic(b.module)

    def line(j: Any) -> None:
        address = em.b.gep(following, [em.ir_index(em.mul(j, CACHE_LINE_BYTES))], source_etype=I8)
        em.b.call(prefetch, [address, ir.Constant(I32, 0), ir.Constant(I32, 3), ir.Constant(I32, 1)])

    em.loop(0, lines, line)


def _prefetch_intrinsic(module: ir.Module) -> ir.Function:
    name = "llvm.prefetch.p0"
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    return ir.Function(module, ir.FunctionType(VOID, [PTR, I32, I32, I32]), name)
