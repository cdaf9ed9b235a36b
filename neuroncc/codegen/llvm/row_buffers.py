"""A row loop's stack buffers: row caches (``refine.cache_rows``; the emitter allocates them, :func:`row_slot` says
where an element is), and bf16 inputs that every row reads alike, widened to float32 once, before the row loop.

LayerNorm's weight and bias are one row of bf16 bits that each row reads again (``cast`` to float32 of a 16-bit
parameter of the row's shape, broadcast along the rows). Widened at each use, bf16 LayerNorm [8192, 1024]'s
write loop spent 6 of its 30 vector instructions per 16 elements on AVX2 (Zen 3: all four vector pipes busy,
7.5 cycles) widening its three inputs, 4 of them on the weight and the bias, for every row. Widened once per
thread into a stack buffer before the row loop, they are one contiguous float32 load per half of a pair: the
buffer is a row cache whose producer comes before the loop's stages (the emitter's row caches: ``emit.py``),
kept in pair order (``pairs.py``), so only rows that paired loops read are widened. The values are the same
float32 values the casts compute.
"""

from __future__ import annotations

import math
from typing import Any

from llvmlite import ir

from neuroncc.codegen.llvm.elementwise import ELEMENTWISE
from neuroncc.codegen.llvm.kernel_plan import Computed, KernelPlan, MapStage, RowLoop
from neuroncc.codegen.llvm.pairs import pair_position, pairs_halfwords
from neuroncc.codegen.llvm.scalars import F32, I64, compute_type, storage_itemsize
from neuroncc.codegen.llvm.streams import streams
from neuroncc.codegen.llvm.views import Layout
from neuroncc.hardware.host import ALIAS_PERIOD_BYTES, CACHE_LINE_BYTES
from neuroncc.ir.dtypes import DType
from neuroncc.ir.graph import Value
from neuroncc.ir.opdef import Trait
from neuroncc.ir.types import contiguous_strides

#: The row cache position of a row widened before the row loop (before the first stage, position 0).
BEFORE_THE_ROWS = -1

#: The period modulo which a placed write buffer (:func:`write_buffer_shift`) keeps its distance from the output
#: rows: half an alias period, so that rows of a multiple of it all start at one offset modulo it.
WRITE_BUFFER_PERIOD = ALIAS_PERIOD_BYTES // 2
#: How far past the output row (modulo ``WRITE_BUFFER_PERIOD``) a placed write buffer starts: as far as can be from
#: the 4K-aliasing window on either side (a load 32-480 bytes past a queued store waits for it).
WRITE_BUFFER_DISTANCE = WRITE_BUFFER_PERIOD // 2
#: The shortest row period (bytes, modulo 4 KiB) for which a placed write buffer can stay clear of every row's
#: aliasing window (~330 bytes wide): rows of whole 512 bytes (bf16 rows of 768 columns) and longer.
PARTIAL_PERIOD_MIN = ALIAS_PERIOD_BYTES // 8


def widened_rows(plan: KernelPlan, phase: RowLoop) -> tuple[Value, ...]:
    """The bf16 -> float32 casts of ``phase`` to widen once: of the shape of its rows, one even dim (no row
    dims: the same at every row), in a row loop whose every stage runs its innermost loop over pairs."""
    if not phase.outer or not phase.stages or not all(pairs_halfwords(plan, stage) for stage in phase.stages):
        return ()
    row_shape = phase.stages[0].shape[len(phase.outer):]
    if len(row_shape) != 1 or row_shape[0] % 2:
        return ()
    found: dict[Value, None] = {}
    pending, seen = [root for stage in phase.stages for root, _ in stage.roots], set()
    while pending:
        value = pending.pop()
        access = plan.access.get(value)
        if value in seen or not isinstance(access, Computed):
            continue
        seen.add(value)
        operands = access.op.operands
        # a widening: one bf16 operand, a float32 result, element by element (``cast``; the buffer holds the values
        # the op computes, so any such op is right)
        if access.op.has(Trait.POINTWISE) and len(operands) == 1 and value.type.dtype is DType.f32 \
                and operands[0].type.dtype is DType.bf16 \
                and value.type.shape == row_shape and _of_params(plan, operands[0]):
            found[value] = None
        else:
            pending += operands
    return tuple(found)


def _of_params(plan: KernelPlan, value: Value) -> bool:
    """Whether ``value`` is computed by elementwise ops from the kernel's parameters alone (not from anything the
    kernel writes: it is read before the row loop)."""
    access = plan.access.get(value)
    if isinstance(access, Layout):
        return access.arg < plan.n_params
    return isinstance(access, Computed) and access.op.name in ELEMENTWISE and \
        all(_of_params(plan, operand) for operand in access.op.operands)


def write_buffer_shift(em: Any, phase: RowLoop) -> ir.Value | None:
    """Bytes past an alias period boundary at which the stack buffers a row loop's write pass loads start, so that
    they start ``WRITE_BUFFER_DISTANCE`` past its output rows modulo ``WRITE_BUFFER_PERIOD``
    (``CpuTarget.places_write_buffers_past_the_output``); None to leave them where the frame puts them. Taken where
    the phase caches a variance's deviations (``emit``'s ``_deviations``: bf16 LayerNorm's write pass loads them, or
    takes its variance from its mean pass's squares, ``_dot_variance``: its write pass loads the weight and bias),
    or where its last stage is a delayed write over bf16 words (bf16 softmax's write loop loads the previous row's
    exponentials: ``CpuTarget.places_delayed_word_write_buffers_past_the_output``), and its last stage streams an output whose rows are whole periods: every row then starts at the same offset
    modulo the period, the one the buffers keep their distance from (computed once, from the output's address);
    rows of whole 512 or 1024 bytes too, modulo that period (:func:`_placing`)."""
    last = phase.stages[-1] if phase.stages else None
    if not isinstance(last, MapStage) or not (
            em.target.places_write_buffers_past_the_output and (em._deviations or em._dot_variance)
            or em.target.places_delayed_word_write_buffers_past_the_output and _delayed_word_write(em, phase)):
        return None
    depth = len(phase.outer)
    for _, target in last.items:
        row_bytes = math.prod(target.shape[depth:]) * storage_itemsize(target.dtype)
        placing = _placing(em, row_bytes)
        if placing is not None and streams(em, target, 0):
            period, distance = placing
            address = em.b.ptrtoint(em.address(target, [0] * len(target.shape)), I64)
            past = em.b.add(address, ir.Constant(I64, distance))
            return em.b.and_(past, ir.Constant(I64, period - CACHE_LINE_BYTES))
    return None


def _delayed_word_write(em: Any, phase: RowLoop) -> bool:
    """Whether ``phase``'s last stage is a delayed write (``delayed_writes.py``) over element pairs (bf16 words):
    a write loop of its own that loads the row-cached exponentials while its non-temporal stores queue."""
    return em._delayed == len(phase.stages) - 1 and pairs_halfwords(em.plan, phase.stages[-1])


def _placing(em: Any, row_bytes: int) -> tuple[int, int] | None:
    """(period, distance) of :func:`write_buffer_shift` for output rows of ``row_bytes``: rows of whole
    ``WRITE_BUFFER_PERIOD``s all start at one offset modulo it, kept ``WRITE_BUFFER_DISTANCE`` from; rows of whole
    512 or 1024 bytes (``CpuTarget.places_write_buffers_past_partial_period_rows``) start at every multiple of that
    period modulo 4 KiB in turn, so the buffers keep half a period less 128 bytes from each row modulo it: past the
    aliasing window of one row's stores (~32-300 bytes past them), before the next row's. None: not placed."""
    if row_bytes % WRITE_BUFFER_PERIOD == 0:
        return WRITE_BUFFER_PERIOD, WRITE_BUFFER_DISTANCE
    period = math.gcd(row_bytes, WRITE_BUFFER_PERIOD)
    if period < PARTIAL_PERIOD_MIN or not em.target.places_write_buffers_past_partial_period_rows:
        return None
    return period, period // 2 - 2 * CACHE_LINE_BYTES


def stack_row(em: Any, element: ir.Type, length: int, itemsize: int, shift: ir.Value | None) -> ir.Value:
    """A stack buffer of ``length`` elements (``itemsize`` bytes each) starting on an alias period boundary, or
    ``shift`` bytes past one (:func:`write_buffer_shift`: the buffer one period longer)."""
    if shift is None:
        buffer = em._entry.alloca(ir.ArrayType(element, length))
        buffer.align = ALIAS_PERIOD_BYTES
        return buffer
    buffer = em._entry.alloca(ir.ArrayType(element, length + WRITE_BUFFER_PERIOD // itemsize))
    buffer.align = ALIAS_PERIOD_BYTES
    start = em.b.gep(buffer, [ir.Constant(I64, 0), em.b.udiv(shift, ir.Constant(I64, itemsize))], inbounds=True)
    return em.b.bitcast(start, ir.PointerType(ir.ArrayType(element, length)))


def emit_widened(em: Any, values: tuple[Value, ...], shift: ir.Value | None = None) -> dict[Value, ir.Value]:
    """A float32 stack buffer per value of ``values`` (:func:`widened_rows`), filled here in pair order
    (``shift``: placed past the output rows, :func:`write_buffer_shift`)."""
    buffers = {}
    for value in values:
        (n,) = value.type.shape
        if shift is None:
            buffer = buffers[value] = em._entry.alloca(ir.ArrayType(F32, n))
            buffer.align = CACHE_LINE_BYTES
        else:
            buffer = buffers[value] = stack_row(em, F32, n, 4, shift)

        def pair(k: Any, value: Value = value, buffer: ir.AllocaInstr = buffer, n: int = n) -> None:
            for half in (0, 1):
                i = em.add(em.mul(k, 2), half)
                slot = em.b.gep(buffer, [ir.Constant(I64, 0), em.ir_index(pair_position(em, i, n))], inbounds=True)
                em.b.store(em.value_at(value, [i]), slot)

        em.loop(0, n // 2, pair)
    return buffers


def allocate_rows(em: Any, phase: RowLoop, copies: int = 1, shift: ir.Value | None = None) -> dict[Value, ir.Value]:
    """A stack buffer per row cache of ``phase`` (one row: the dims after its outer dims; ``copies`` rows, used in
    turn by consecutive rows, :func:`copy_stride` apart: a row written one row late, ``delayed_writes.py``, reads
    its cache while the next row's is written). Each starts on an ``ALIAS_PERIOD_BYTES`` boundary: where it lies
    relative to the rows the loop reads and writes then does not depend on where the thread's stack happens to be.
    Its stores and those rows' loads and stores alias in the low 12 bits (4K aliasing) for some placements: softmax
    [4096, 1024] at 1 thread, over ten placements of its input and output, 2-16% slower with the stack's (random)
    placement than with the cache page-aligned (session 13, docs/performance-history.md). ``shift``: each starts
    that many bytes past the boundary instead (:func:`write_buffer_shift`)."""
    buffers = {}
    for value in phase.row_cache:
        row = max(math.prod(value.type.shape[len(phase.outer):]), 1)
        length = row if copies == 1 else copy_stride(row, _itemsize(value)) * (copies - 1) + row
        buffers[value] = stack_row(em, compute_type(value.type.dtype), length, _itemsize(value), shift)
    return buffers


def row_number(em: Any, digits: list[Any], outer: tuple[int, ...]) -> Any:
    """The flat number of the row at the outer ``digits`` in a grid of ``outer`` rows."""
    number: Any = 0
    for i, stride in zip(digits, contiguous_strides(tuple(outer))):
        number = em.add(number, em.mul(i, stride))
    return number


def copy_stride(row: int, itemsize: int) -> int:
    """Elements (of ``itemsize`` bytes) from one copy of a row cache to the next: the row, then padding that puts
    the copies half of ``ALIAS_PERIOD_BYTES`` apart modulo it. Copies a whole number of 4 KiB apart (a row of 1024
    floats) alias: a delayed write loads the previous row's element i right after the next row's element i was
    stored, with the same low 12 bits, and waits for that store (4K aliasing)."""
    page = ALIAS_PERIOD_BYTES // itemsize
    half = page // 2
    return row + (half - row % page) % page


def _itemsize(value: Value) -> int:
    """Bytes of an element of ``value``'s row cache (its compute type)."""
    t = compute_type(value.type.dtype)
    return t.width // 8 if isinstance(t, ir.IntType) else (8 if isinstance(t, ir.DoubleType) else 4)


def row_slot(em: Any, value: Value, idx: list) -> ir.Value:
    """The element of ``value``'s row buffer for ``idx``: its dims after the phase's outer dims (a widened row
    has none), the last in pair order where the row is kept so (``pairs.py``)."""
    depth = 0 if em._row_cache[value] == BEFORE_THE_ROWS else em._row_depth
    shape, row = value.type.shape[depth:], list(idx[depth:])
    row[-1] = pair_position(em, row[-1], shape[-1]) if value in em._pair_rows else row[-1]
    flat: Any = 0
    for i, stride in zip(row, contiguous_strides(shape)):
        flat = em.add(flat, em.mul(i, stride))
    if em._row_copies > 1 and depth:  # consecutive rows in turn (see :func:`allocate_rows`)
        outer = row_number(em, idx[:depth], value.type.shape[:depth])
        copy = em._row_copy_of.get(em.form(outer))  # (a copy known where the code is versioned on it)
        stride = copy_stride(math.prod(shape), _itemsize(value))
        flat = em.add(flat, em.mul(em.rem(outer, em._row_copies) if copy is None else copy, stride))
    return em.b.gep(em._rows[value], [ir.Constant(I64, 0), em.ir_index(flat)], inbounds=True)
