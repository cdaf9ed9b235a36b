"""The max and the sum of exp(x - max) of a row in one pass over it, a block at a time (log-sum-exp).

Cross-entropy's forward and log_softmax reduce each row twice: its max, then the sum of exp(x - max). The first
pass reads the row from memory and computes almost nothing; the second computes an exponential per element
from cache; one waits for the other. For rows longer than L1 (a 32000-class row is 128 KB) the second pass
also reads the row again from L2. Here the sum's pass computes the max itself, block by block: the max of a
block of ``CpuTarget.online_block_elements`` elements (read from memory, or from L2 where the exponential loops
prefetch further ahead into it), then the block's exponentials against the running max while the block is in L1;
when the running max grows, the total so far is scaled by exp(old - new) (once per block,
not per element). The total is then exactly as accurate as the two-pass one (the scaled partial totals carry
one more rounding each), the max is the same value (max is exact in any order), and the max stage itself is
not emitted: the sum stores its result (like :class:`stages.SharedMean`).

Softmax keeps two passes: its write pass reads exp(x - max) again, which the sum pass row-caches, and cached
values computed against a running max would be wrong (rescaling them changes their bits; computing exp again in
the write pass doubles the polynomial, which is at its FMA-pipe bound: softmax [4096, 1024] took 1.2-1.5x as
long so, Zen 4, session 17, ``bench_softmax_parts.py --online``). What a one-pass online max+sum could save is the
max pass: with none at all the kernel took 0.80-1.06 of its time at 2 threads and 0.79-1.22 at 1 in five runs,
before the per-group running max and the rescaled cached exponentials such a pass would add. The exact form of
that saving did not pay either: the max of row r + 1 taken inside row r's exp pass, a group after each of its
groups (bit for bit the same output, the prefetches 1 or 2 rows ahead), ran 5-13% slower than the max pass of
its own at 1 and 2 threads (session 17). Taken in the same loop as the exponentials, a vector of the next row beside
each vector of this row's, it does pay on Zen 4 (``next_max.py``, session 35).

On Zen 4 the online log-sum-exp does the same with its blocks (:func:`_fused_chunks`,
``CpuTarget.takes_the_next_block_max_in_the_exp_loop``, session 36): each block's exponential loop also loads the
next block and takes its max in vector lanes, so only a row's first block runs a max loop, and the block's sums
stay in vector lanes until the block's end (cross-entropy's forward 0.90-0.94 of its time at 1 thread).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from llvmlite import ir

from neuroncc.codegen.llvm.context import Ahead, EmitContext
from neuroncc.codegen.llvm.kernel_plan import Computed, KernelPlan, ReduceStage, RowLoop
from neuroncc.codegen.llvm.mathlib import math_call
from neuroncc.codegen.llvm.prefetch import chunk_elements, chunk_loop, spread_loop
from neuroncc.codegen.llvm.reductions import COMBINERS, MAX_WITHOUT_NAN_BITS, REASSOC, LaneSums, RowSum
from neuroncc.codegen.llvm.scalars import F32, F64, I1, I64, intrinsic, storage_itemsize, storage_type
from neuroncc.codegen.llvm.views import Layout
from neuroncc.hardware.host import CACHE_LINE_BYTES
from neuroncc.ir.dtypes import DType

#: A whole chunk's exponentials stored into a chunk buffer and summed in a loop of their own where the target
#: says so (``CpuTarget.sums_online_exponentials_apart``; a switch for one-process A/Bs).
SUM_CHUNK_APART = True


@dataclass(frozen=True)
class OnlineMax:
    """The max stage ``stage`` of a row loop whose result the sum of exp(x - max) computes (and stores).
    ``source``: where x is read from, when its rows are contiguous (each block's exponentials then prefetch the
    next block, see :func:`online_total`)."""

    stage: ReduceStage
    source: Layout | None = None


def online_maxima(plan: KernelPlan, phase: RowLoop) -> dict[int, OnlineMax]:
    """Stage number of each float32 ``sum(exp(x - amax(x)))`` over a row loop's rows (the last dims, the amax
    stage earlier in the phase, keepdim, the exp not row-cached) -> that amax stage."""
    found: dict[int, OnlineMax] = {}
    depth = len(phase.outer)
    maxima = {stage.op.results[0]: stage for stage in phase.stages
              if isinstance(stage, ReduceStage) and stage.op.name == "amax"}
    for number, stage in enumerate(phase.stages):
        if not (isinstance(stage, ReduceStage) and stage.op.name == "sum" and depth
                and stage.reduced == (depth,) == (len(stage.shape) - 1,)
                and stage.op.operands[0].type.dtype is DType.f32 and math.prod(stage.shape[depth:]) > 0):
            continue
        exp_value = stage.op.operands[0]
        if exp_value in phase.row_cache:
            continue
        exponent = plan.access.get(exp_value)
        if not (isinstance(exponent, Computed) and exponent.op.name == "exp"):
            continue
        difference = plan.access.get(exponent.op.operands[0])
        if not (isinstance(difference, Computed) and difference.op.name == "sub"):
            continue
        x, subtracted = difference.op.operands
        if isinstance(plan.access.get(x), Computed):
            # x computed in the kernel (a fused randn, logits scaled in place): the online path gave NaN rows
            # (fuzz seed 0 program 61: randn -> log_softmax; CLIP's loss), not yet understood; it keeps to
            # rows read from memory (tests/codegen/test_reductions.py has both)
            continue
        amax = maxima.get(subtracted)
        if amax is not None and amax.op.operands[0] is x and amax.reduced == stage.reduced \
                and amax.op.attrs["keepdim"] and x.type.shape == stage.shape \
                and phase.stages.index(amax) == number - 1:  # nothing between them reads the max
            source = plan.access.get(x)
            found[number] = OnlineMax(amax, source if isinstance(source, Layout) and source.strides[-1] == 1 else None)
    return found


def online_total(em: EmitContext, online: OnlineMax, idx: list[Any], out_index: list[Any],
                 summand: Any) -> ir.Value:
    """The float64 total of ``summand(full index)`` (the sum stage's input, exp(x - max)) over the last dim of
    the row at ``idx``, with the max computed online (see the module docstring) and stored into the max stage's
    target at ``out_index``. Returns the total.

    Where the target says so (``CpuTarget.online_block_max_without_nan_bits``) each block's max loop first runs
    without the combiner's NaN bits (``reductions._extreme_slots``: two integer instructions per vector beside
    its vmaxps); the row is then taken again with them when its total came out NaN (a NaN or +inf in the row,
    or every element -inf) or a block's exponentials were counted as 0 (a running max of -inf: a NaN there would
    not reach the total). Any other row has no NaN, so both ways compute the same values in the same order:
    the same bits in every case."""
    if _fuses_block_maxima(em, online):
        return _fused_row_total(em, online, idx, out_index, summand)
    if not em.target.online_block_max_without_nan_bits:
        return _row_total(em, online, idx, out_index, summand, None)[0]
    b = em.b
    careful, result = em.alloca(I1), em.alloca(F64)
    b.store(ir.Constant(I1, 0), careful)
    attempt, done = b.append_basic_block("online_row"), b.append_basic_block("online_row_done")
    b.branch(attempt)
    b.position_at_end(attempt)
    with em.fresh_values():
        taken_carefully = b.load(careful)
        total, uncounted = _row_total(em, online, idx, out_index, summand, taken_carefully)
        b = em.b
        b.store(total, result)
        again = b.and_(b.not_(taken_carefully), b.or_(b.fcmp_unordered("uno", total, total), uncounted))
        b.store(again, careful)
        b.cbranch(again, attempt, done)
    b.position_at_end(done)
    return b.load(result)


def _fuses_block_maxima(em: EmitContext, online: OnlineMax) -> bool:
    """Whether the row's blocks take the next block's max in their exponential loops (:func:`_fused_chunks`)."""
    return bool(em.target.takes_the_next_block_max_in_the_exp_loop and online.source is not None
                and em.target.online_block_max_without_nan_bits
                and em.target.online_exp_chunk_lines and not em.target.sums_online_exponentials_apart
                and online.stage.shape[-1] > em.target.online_block_elements)


def _fused_row_total(em: EmitContext, online: OnlineMax, idx: list[Any], out_index: list[Any],
                     summand: Any) -> ir.Value:
    """:func:`online_total` with each block's max taken in the previous block's exponential loop
    (:func:`_fused_chunks`), without the NaN bits; the row taken again as before, with the combiner's NaN bits and
    max loops of their own, where its total came out NaN or a block was counted as 0 (the same bits in every
    case: see :func:`online_total`)."""
    b = em.b
    result = em.alloca(F64)
    with em.fresh_values():
        total, uncounted = _row_total(em, online, idx, out_index, summand, False, fused=True)
        b = em.b
        b.store(total, result)
        again = b.or_(b.fcmp_unordered("uno", total, total), uncounted)
    with b.if_then(again):
        with em.fresh_values():
            em.b.store(_row_total(em, online, idx, out_index, summand, None)[0], result)
    return em.b.load(result)


def _row_total(em: EmitContext, online: OnlineMax, idx: list[Any], out_index: list[Any], summand: Any,
               careful: ir.Value | bool | None, fused: bool = False) -> tuple[ir.Value, ir.Value]:
    """:func:`online_total`'s row: its total, and whether a block's exponentials were counted as 0.
    ``careful``: None, the combiner's block max loops (NaN seen); False, the loops without the NaN bits; else an
    i1, true: those loops, false: the loops without the NaN bits. ``fused``: each block's max taken in the
    previous block's exponential loop (:func:`_fused_chunks`; ``careful`` False)."""
    b = em.b
    stage = online.stage
    x_value, max_value = stage.op.operands[0], stage.op.results[0]
    n = stage.shape[-1]
    total, running, uncounted = em.alloca(F64), em.alloca(F32), em.alloca(I1)
    b.store(ir.Constant(F64, 0.0), total)
    b.store(ir.Constant(F32, -math.inf), running)
    b.store(ir.Constant(I1, 0), uncounted)
    minus_inf = ir.Constant(F32, -math.inf)
    # The block's max loop reads it from memory, its exponentials from L1: while they are computed, the next
    # block (for the last block of a row, the next row's first) is prefetched, so that the next max loop finds
    # it in L1 instead of waiting for memory with the core idle (cross-entropy [512, 32000]: 10% faster)
    # (``CpuTarget.online_prefetch_blocks_ahead`` blocks ahead)
    ahead = () if online.source is None else _next_blocks(em, online.source, idx, near=not fused)

    block_elements = em.target.online_block_elements
    blocks = -(-n // block_elements)
    # the next block's max taken a block early (``CpuTarget.online_block_max_ahead``): held here until its block
    max_ahead = em.target.online_block_max_ahead if blocks > 1 and not fused else 0
    held = em.alloca(F32) if max_ahead or fused else None
    if max_ahead or fused:
        em.b.store(_block_max(em, x_value, idx, 0, min(block_elements, n), careful), held)

    def next_max(k: Any, lo: Any) -> None:
        """The max of block k + 1 (from ``lo + block_elements``) into ``held``, if the row has one."""
        with em.b.if_then(em.lt(em.add(k, 1), blocks)):
            with em.fresh_values():
                start = em.add(lo, block_elements)
                stop = em.min(em.add(start, block_elements), n)
                em.b.store(_block_max(em, x_value, idx, start, stop, careful), held)

    def block(k: Any, lo: Any, hi: Any) -> None:
        with em.fresh_values():
            if max_ahead or fused:
                block_max = em.b.load(held)
                if max_ahead == 1:
                    next_max(k, lo)
            else:
                block_max = _block_max(em, x_value, idx, lo, hi, careful)
            b = em.b
            old = b.load(running)
            either_nan = b.fcmp_unordered("uno", old, block_max)
            new = b.select(either_nan, ir.Constant(F32, math.nan),
                           b.select(b.fcmp_ordered(">", block_max, old), block_max, old))
            b.store(new, running)
            # the total so far was taken against the old max: scale it (old < new only when the max grew)
            grew = b.fcmp_ordered("<", old, new)
            factor = b.select(grew, b.fpext(math_call(b, "exp", b.fsub(old, new), target=em.target), F64),
                              ir.Constant(F64, 1.0))
            b.store(b.fmul(b.load(total), factor), total)
            em.bind(max_value, out_index, new)  # the summand's max is the running one
            partial = em.alloca(F32)
            b.store(ir.Constant(F32, 0.0), partial)

            def add(i: Any) -> None:
                em.b.store(em.b.fadd(em.b.load(partial), summand(idx[:-1] + [i]), flags=REASSOC), partial)

            # in chunks of constant length where the target says so (``CpuTarget.online_exp_chunk_lines``)
            chunk_lines = em.target.online_exp_chunk_lines
            if fused:
                _fused_chunks(em, x_value, idx, summand, partial, add, ahead, chunk_lines, (k, lo, hi, n), held)
            elif chunk_lines and ahead:
                whole_chunk = _cached_then_summed(em, summand, idx, partial, chunk_elements(ahead, chunk_lines)) \
                    if SUM_CHUNK_APART and em.target.sums_online_exponentials_apart else None
                # (a sum in the exp loop would be reduced per piece: other bits; spread where it is apart)
                spread = em.target.online_exp_prefetch_piece_lines if whole_chunk else 0
                if max_ahead == 2:  # between the block's first chunk and the rest (the same chunks, in order)
                    middle = em.min(em.add(lo, chunk_elements(ahead, chunk_lines)), hi)
                    chunk_loop(em, lo, middle, add, ahead, chunk_lines, whole_chunk, spread)
                    next_max(k, lo)
                    chunk_loop(em, middle, hi, add, ahead, chunk_lines, whole_chunk, spread)
                else:
                    chunk_loop(em, lo, hi, add, ahead, chunk_lines, whole_chunk, spread)
            else:
                spread_loop(em, lo, hi, add, ahead)
                if max_ahead == 2:
                    next_max(k, lo)
            b = em.b
            # while every element so far is -inf, exp(x - max) is NaN; the two-pass sum counts them as 0 against
            # a finite max and is NaN when the max stays -inf (fixed below)
            all_minus_inf = b.fcmp_ordered("==", new, minus_inf)
            value = b.select(all_minus_inf, ir.Constant(F32, 0.0), b.load(partial))
            b.store(b.fadd(b.load(total), b.fpext(value, F64)), total)
            if careful is not None:
                b.store(b.or_(b.load(uncounted), all_minus_inf), uncounted)

    em.loop(0, blocks, lambda k: block(k, em.mul(k, block_elements),
                                       em.min(em.add(em.mul(k, block_elements), block_elements), n)))
    b = em.b
    final = b.load(running)
    em.store(stage.target, out_index, final)
    return b.select(b.fcmp_ordered("==", final, minus_inf), ir.Constant(F64, math.nan), b.load(total)), \
        b.load(uncounted)


def _block_max(em: EmitContext, x_value: Any, idx: list[Any], lo: Any, hi: Any, careful: ir.Value | None) -> ir.Value:
    """The max of the row's x over [lo, hi): the amax combiner's (NaN when one was seen) where ``careful`` is None
    or true, else without its NaN bits (frozen: any value when the block holds a NaN; see :func:`online_total`)."""
    def loop(combiner: Any) -> ir.Value:
        with em.fresh_values():
            slots = [em.alloca(t) for t in combiner.slots(DType.f32)]
            for slot, value in zip(slots, combiner.init(DType.f32)):
                em.b.store(value, slot)

            def update(i: Any) -> None:
                accs = [em.b.load(s) for s in slots]
                x = em.value_at(x_value, idx[:-1] + [i])
                for slot, value in zip(slots, combiner.update(em.b, DType.f32, accs, x, None)):
                    em.b.store(value, slot)

            em.loop(lo, hi, update)
            return combiner.collapse(em.b, DType.f32, [em.b.load(s) for s in slots])

    if careful is None:
        return loop(COMBINERS["amax"])
    found = em.alloca(F32)
    if careful is False:
        em.b.store(loop(MAX_WITHOUT_NAN_BITS), found)
        return _frozen(em.b, em.b.load(found))
    with em.b.if_else(careful) as (with_nan_bits, without):
        with with_nan_bits:
            em.b.store(loop(COMBINERS["amax"]), found)
        with without:
            em.b.store(loop(MAX_WITHOUT_NAN_BITS), found)
    # frozen after the branches meet: a freeze of the loop's own result went into its recurrence, which lost its
    # nnan there and was vectorized with NaN checks and an early exit
    return _frozen(em.b, em.b.load(found))


def _fused_chunks(em: EmitContext, x_value: Any, idx: list[Any], summand: Any, partial: ir.Value, add: Any,
                  ahead: tuple[Ahead, ...], lines: int, block: tuple[Any, Any, Any, int], held: ir.Value) -> None:
    """Block k's ([lo, hi) of the row's n elements) exponentials and their sum into ``partial``, with the next
    block's max (``CpuTarget.takes_the_next_block_max_in_the_exp_loop``), into ``held``.

    The block's whole chunks of ``lines`` lines (``prefetch.chunk_loop``: the same chunks and prefetches) run as
    loops of vector iterations (``vector_bits / 32 * polynomial_interleave`` elements each: one iteration of
    LLVM's vectorized loop), every element's exponential added into its lane of the block's sums
    (``reductions.LaneSums``, from ``partial``; reduced once after the block's whole chunks, not once per chunk:
    each chunk's horizontal sum started the next chunk's sums, a chain the exponentials waited behind), and in
    each chunk whose elements one block on are in block k + 1, those elements into their lanes of a running max
    without the NaN bits (in registers: each vector a load and a vmaxps beside the exponentials, off the FMA pipes
    that bound the loop). The block's elements after its last whole chunk are added by ``add`` (the summand's
    vectorized loop); the next block's elements no chunk took (past the last whole chunk of either block) go
    through a max loop of their own; the next block's max, frozen as :func:`_block_max`'s, into ``held``."""
    k, lo, hi, n = block
    block_elements = em.target.online_block_elements
    chunk = chunk_elements(ahead, lines)
    lanes = em.target.vector_bits // 32
    width = lanes * em.target.polynomial_interleave
    next_hi = em.min(em.add(hi, block_elements), n)  # (hi itself past the row's last block: no next block)
    taken = em.mul(em.min(em.div(em.sub(hi, lo), chunk), em.div(em.sub(next_hi, hi), chunk)), chunk)
    whole_end = em.add(lo, em.mul(em.div(em.sub(hi, lo), chunk), chunk))
    b = em.b
    maxima = em.alloca(F32, width)
    maxima.align = CACHE_LINE_BYTES
    maxima_vector = b.bitcast(maxima, ir.VectorType(F32, width).as_pointer())
    b.store(ir.Constant(ir.VectorType(F32, width), [-math.inf] * width), maxima_vector)
    array = em.alloca(F32, width)
    array.align = CACHE_LINE_BYTES
    sums = LaneSums(RowSum(b, partial, lambda i: summand(idx[:-1] + [i])), lanes, width // lanes, array)
    maxnum = intrinsic(b.module, "llvm.maxnum.f32", F32, [F32, F32])

    def whole_chunk(start: Any, with_max: bool) -> None:
        def vector(j: Any) -> None:
            base = em.add(start, em.mul(j, width))

            def element(i: Any) -> None:
                sums.add(em.ir_index(em.sub(i, base)), i)
                if with_max:
                    with em.fresh_values():
                        lane = em.b.gep(maxima, [ir.Constant(I64, 0), em.ir_index(em.sub(i, base))], inbounds=True)
                        x = em.value_at(x_value, idx[:-1] + [em.add(i, block_elements)])
                        em.b.store(em.b.call(maxnum, [em.b.load(lane), x], fastmath=("nnan", "nsz")), lane)

            em.loop(base, em.add(base, width), element)

        em.loop(0, chunk // width, vector)

    sums.start()
    middle = em.add(lo, taken)
    chunk_loop(em, lo, middle, add, ahead, lines, lambda start, elements: whole_chunk(start, True))
    chunk_loop(em, middle, whole_end, add, ahead, lines, lambda start, elements: whole_chunk(start, False))
    sums.finish()
    em.loop(whole_end, hi, add)
    b = em.b
    reduce = intrinsic(b.module, f"llvm.vector.reduce.fmax.v{width}f32", F32, [ir.VectorType(F32, width)])
    lanes_max = b.call(reduce, [b.load(maxima_vector)], fastmath=("nnan", "nsz"))
    rest = _block_max(em, x_value, idx, em.add(hi, taken), next_hi, False)
    em.b.store(_frozen(em.b, em.b.call(maxnum, [lanes_max, rest], fastmath=("nnan", "nsz"))), held)


def _frozen(b: ir.IRBuilder, value: ir.Value) -> ir.Value:
    """``freeze value``: a fixed value where ``value`` is poison (a ``maxnum nnan`` that met a NaN), so that what
    follows from it is defined (llvmlite's builder has no ``freeze``)."""
    instruction = ir.Instruction(b.block, value.type, "freeze", [value])
    b._insert(instruction)
    return instruction


def _cached_then_summed(em: EmitContext, summand: Any, idx: list[Any], partial: ir.Value, chunk: int) -> Any:
    """A whole chunk's work from ``start``: its ``chunk`` exponentials into a buffer on the stack (2 KiB with
    AVX2's chunks: in L1), then their sum into ``partial`` in a loop of its own over the buffer
    (``CpuTarget.sums_online_exponentials_apart``). LLVM vectorizes the sum's loop as it did the exp loop, 8
    lanes and 4 partial sums, so its additions are the same in the same order: the same bits
    (``tests/codegen/test_reductions.py`` compares them)."""
    buffer = em.alloca(F32, chunk)
    buffer.align = CACHE_LINE_BYTES  # (whole vectors per line: no store splits a line)

    def whole_chunk(start: Any, elements: Any) -> None:
        def store(i: Any) -> None:
            slot = em.b.gep(buffer, [ir.Constant(I64, 0), em.ir_index(em.sub(i, start))], inbounds=True)
            em.b.store(summand(idx[:-1] + [i]), slot)

        def add(j: Any) -> None:
            slot = em.b.gep(buffer, [ir.Constant(I64, 0), em.ir_index(j)], inbounds=True)
            em.b.store(em.b.fadd(em.b.load(partial), em.b.load(slot), flags=REASSOC), partial)

        elements(start, store)
        em.loop(0, chunk, add)

    return whole_chunk


def _next_blocks(em: EmitContext, source: Layout, idx: list[Any], near: bool = True) -> tuple[Ahead, ...]:
    """The streams of the elements ahead of each element of the row of ``source`` at ``idx`` that its exponential
    loops prefetch: ``CpuTarget.online_prefetch_blocks_ahead`` blocks on, into L1 (past a row's end: the next
    rows', contiguous; past the tensor's end a prefetch does not fault), unless not ``near`` (the exp loops that
    load the next block themselves: :func:`_fused_chunks`); and where the target says so
    (``CpuTarget.online_l2_prefetch_blocks_ahead``) that many blocks on, into L2 (``prefetcht2``)."""
    def stream(blocks: int, locality: int) -> Ahead:
        distance = em.target.online_block_elements * blocks

        def at(i: Any) -> ir.Value:
            element = em.address(source, idx[:-1] + [i])
            return em.b.gep(element, [ir.Constant(I64, distance)], source_etype=storage_type(source.dtype),
                            inbounds=False)

        return Ahead(at, storage_itemsize(source.dtype), locality=locality)

    near, far = em.target.online_prefetch_blocks_ahead if near else 0, em.target.online_l2_prefetch_blocks_ahead
    return tuple(stream(blocks, locality) for blocks, locality in ((far, 1), (near, 3)) if blocks)
