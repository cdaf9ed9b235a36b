"""A row's float sum of bf16 words by AVX-512 BF16's ``vdpbf16ps``.

A float sum over a row of bf16 values (a sum's, a mean's, a variance's mean pass: bf16 LayerNorm's) widens each
word's two halves and adds them (``stages._Reducer._float_total``, pair order): per 32 elements one load, a
``vpmulld`` and a ``vpandq`` (the halves, ``widening.py``) and two ``vaddps``, bound by the add pipes.
``vdpbf16ps acc, words, ones`` multiplies each word's two bf16 halves by 1 (exact) and adds both into the word's
float32 lane: one instruction per 32 elements, on the FMA pipes (Zen 4: one a cycle, 6 cycles' latency, so 8
accumulators). Its semantics (Intel SDM; measured the same on Zen 4): the odd half's product is added first, then the
even half's, each rounded to nearest even, MXCSR not consulted; denormal inputs (the words and the accumulator) are
taken as zero and denormal results flushed to zero. So a vector holding a word whose exponent field is below 8 (a
zero, a denormal or a normal below 2^-119) sends the whole sum to the pair loop (a flag per vector, one
``vptestmw`` into a mask register carried through the loop): if every word is above, each word is a multiple of
2^-126, so is every partial sum (each rounded sum of multiples of a power of two is one), and a nonzero one is at
least 2^-126, normal: nothing is flushed, no input is taken as zero, and the sum is the words' sum in another order
(each of its roundings as a float add's). Infinities and NaNs go through (a NaN product's payload, quieted: a row
with one NaN payload sums to it as the pair loop does; of two different ones the later product's wins, where the pair
loop keeps its accumulator's). Only a static range of at least one block (rows of 256 to 4096 words: a longer row's
chunks, ``stages.CHUNK``, have dynamic bounds) and a pass that fills no row cache read after it.

:func:`dot_summed` is the decision and the code (``CpuTarget.sums_bf16_rows_by_dot_products``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from llvmlite import ir

from neuroncc.codegen.llvm.bf16_words import _BFloat
from neuroncc.codegen.llvm.elementwise import reinterprets_words_as_bf16, widens_bf16
from neuroncc.codegen.llvm.kernel_plan import Computed, ReduceStage
from neuroncc.codegen.llvm.pairs import WORD_ALIGN, halfwords, pairs_halfwords
from neuroncc.codegen.llvm.reductions import REASSOC
from neuroncc.codegen.llvm.scalars import F32, F64, I16, I64, call
from neuroncc.codegen.llvm.views import Layout
from neuroncc.codegen.llvm.word_copies import copy_row

#: bf16 words a vector (a ``vdpbf16ps`` of 512 bits), and accumulators: the instruction's latency (6 cycles on Zen 4)
#: at one a cycle
WORDS, VECTORS = 32, 8
#: Mask registers carrying the words' flags through the loop (each vector's ``vptestmw`` masked by its chain's flags:
#: two a chain an iteration; eight chains took more than the 7 mask registers a write mask can be, and spilled)
CHAINS = 4
#: Words a loop iteration sums; a row of fewer sums in the pair loop alone, a remainder after them in it too.
BLOCK = WORDS * VECTORS
#: A word's exponent field's five high bits: zero where the exponent field is below 8 (zeros and denormals too).
EXPONENT_HIGH = 0x7C00
#: bf16 1.0.
ONE = 0x3F80

#: The longest row :func:`takes_dot_variance` takes: one float32 partial (``stages.CHUNK``'s; a longer row's chunks
#: have dynamic bounds).
MAX_WORDS = 4096
#: A row whose n mean^2 exceeds this times its sum of squared deviations takes its deviation pass
#: (:func:`dot_variance`).
FALLBACK_RATIO = 0.25
#: A row whose sum of squared deviations is below this takes its deviation pass (:func:`dot_variance`).
SMALLEST_SQUARES = 2.0 ** -80

_FLOATS, _HALVES = ir.VectorType(F32, WORDS // 2), ir.VectorType(I16, WORDS)
_DOUBLES = ir.VectorType(F64, WORDS // 2)
_FLAGS = ir.VectorType(ir.IntType(1), WORDS)


def summed_words(em: Any, reducer: Any, mean: Any) -> Layout | None:
    """The i16 buffer whose bf16 words the float sum of ``reducer`` (no ``mean`` subtracted: a sum's, a mean's, a
    variance's mean pass) widens and adds, where its target sums them by dot products; None where the sum keeps its
    pair loop."""
    if mean is not None or not em.target.sums_bf16_rows_by_dot_products \
            or not reducer.float_sum \
            or reducer.reduced != [len(reducer.shape) - 1] or not pairs_halfwords(em.plan, reducer.stage) \
            or em.carried_prefetches() or em.carried_writes() is not None:
        return None
    widened = em.plan.access.get(reducer.op.operands[0])
    if not (isinstance(widened, Computed) and widens_bf16(widened.op)):
        return None
    if not reducer.alone and any(em.writes_row_cache(value) for value in (reducer.op.operands[0],
                                                                           widened.op.operands[0])):
        return None  # (the pass stores the row it widens for its next passes: ``refine.widened_row_cache``; a mean
        # pass alone, ``stages.emit_mean_pass``, marks no row cache filled: its deviation pass widens the words again)
    words = em.plan.access.get(widened.op.operands[0])
    if isinstance(words, Computed) and reinterprets_words_as_bf16(words.op):
        words = em.plan.access.get(words.op.operands[0])
    if not isinstance(words, Layout) or not halfwords(words) or words.shape[-1] != reducer.shape[-1]:
        return None
    return words


def dot_summed(em: Any, reducer: Any, full: list[Any], lo: Any, hi: Any, partial: ir.Value, mean: Any,
               pair_loop: Callable[[Any, Any], None], squares: ir.Value | None = None) -> bool:
    """Add the sum of ``reducer``'s terms over [lo, hi) of its last dim at ``full`` into ``partial`` (float32) by
    ``vdpbf16ps`` (see the module docstring), the words past the last whole block and every word of a sum whose
    words are not all at least 2^-119 or zero by ``pair_loop(start, stop)`` (today's loop); False (nothing emitted)
    where the sum is not one of bf16 words over a static range of at least one block. ``squares`` (a float64 slot,
    :func:`dot_variance`'s): the same loop also sums the words' squares, ``vdpbf16ps acc, words, words``, stored
    there where the range is whole blocks and the sum took the dot products, else NaN."""
    words = summed_words(em, reducer, mean)
    if words is None or not (isinstance(lo, int) and isinstance(hi, int)) or (hi - lo) // BLOCK == 0:
        return False
    blocks = (hi - lo) // BLOCK
    squared = squares is not None and lo + blocks * BLOCK == hi
    b = em.b
    start = list(full)
    start[reducer.reduced[-1]] = lo
    base = em.address(words, start)
    # (the row's words stored for its write pass too: ``word_copies.py``)
    copies = em.word_copies(words) if squared else None
    copy = None if copies is None else copy_row(em, copies, em._offset(words, start))
    ones = b.bitcast(ir.Constant(_HALVES, [ONE] * WORDS), ir.VectorType(_BFloat(), WORDS))
    high = ir.Constant(_HALVES, [EXPONENT_HIGH] * WORDS)
    entry = b.block
    body, done = b.append_basic_block("dot_sum"), b.append_basic_block("dot_summed")
    b.branch(body)
    b.position_at_end(body)
    block = b.phi(I64, "block")
    accs = [b.phi(_FLOATS, f"dot{k}") for k in range(VECTORS)]
    square_accs = [b.phi(_FLOATS, f"square{k}") for k in range(VECTORS)] if squared else []
    flags = [b.phi(_FLAGS, f"normal{k}") for k in range(CHAINS)]
    new_accs, new_squares, new_flags = [], [], list(flags)
    for k, acc in enumerate(accs):
        offset = b.add(b.mul(block, ir.Constant(I64, BLOCK)), ir.Constant(I64, k * WORDS))
        vector = b.load(b.gep(base, [offset], source_etype=I16, inbounds=True), typ=_HALVES, align=WORD_ALIGN)
        if copy is not None:
            b.store(vector, b.bitcast(b.gep(copy, [offset], source_etype=I16, inbounds=True), _HALVES.as_pointer()),
                    align=WORD_ALIGN)
        bf16 = b.bitcast(vector, ir.VectorType(_BFloat(), WORDS))
        new_accs.append(call(b, "llvm.x86.avx512bf16.dpbf16ps.512", [acc, bf16, ones], _FLOATS))
        if squared:
            new_squares.append(call(b, "llvm.x86.avx512bf16.dpbf16ps.512", [square_accs[k], bf16, bf16], _FLOATS))
        new_flags[k % CHAINS] = b.and_(new_flags[k % CHAINS],
                                       b.icmp_unsigned("!=", b.and_(vector, high), ir.Constant(_HALVES, None)))
    following = b.add(block, ir.Constant(I64, 1))
    b.cbranch(b.icmp_unsigned("<", following, ir.Constant(I64, blocks)), body, done)
    block.add_incoming(ir.Constant(I64, 0), entry)
    block.add_incoming(following, body)
    for phi, new in [*zip(accs, new_accs), *zip(square_accs, new_squares)]:
        phi.add_incoming(ir.Constant(_FLOATS, None), entry)
        phi.add_incoming(new, body)
    for phi, new in zip(flags, new_flags):
        phi.add_incoming(ir.Constant(_FLAGS, [1] * WORDS), entry)
        phi.add_incoming(new, body)
    b.position_at_end(done)
    total = _tree(b, new_accs)
    while len(new_flags) > 1:
        new_flags = [b.and_(x, y) for x, y in zip(new_flags[::2], new_flags[1::2])]
    total = _lanes(b, total)
    normal = b.icmp_unsigned("==", b.bitcast(new_flags[0], ir.IntType(WORDS)), ir.Constant(ir.IntType(WORDS), -1))
    if squares is not None:  # (NaN: the variance takes its deviation pass)
        # (the lanes added in float64: S2's one float32 rounding fewer, so the variance as close to float64's as the
        # deviation pass's; ``dot_variance``)
        b.store(_lanes(b, _tree(b, [b.fpext(v, _DOUBLES) for v in new_squares])) if squared
                else ir.Constant(F64, math.nan), squares)
    with b.if_else(normal, likely=True) as (summed, other):
        with summed, em.fresh_values():
            b.store(b.fadd(b.load(partial), total, flags=REASSOC), partial)
            if lo + blocks * BLOCK < hi:
                pair_loop(lo + blocks * BLOCK, hi)
        with other, em.fresh_values():
            if squares is not None:
                b.store(ir.Constant(F64, math.nan), squares)
            pair_loop(lo, hi)
    return True


def _tree(b: ir.IRBuilder, accs: list[ir.Value]) -> ir.Value:
    """The accumulators added as a tree: 0 + 1, 2 + 3, ...; then their sums so."""
    while len(accs) > 1:
        accs = [b.fadd(x, y, flags=REASSOC) for x, y in zip(accs[::2], accs[1::2])]
    return accs[0]


def _lanes(b: ir.IRBuilder, total: ir.Value) -> ir.Value:
    """The float sum of a vector's lanes, its halves added: 16 -> 8 -> 4 -> 2 -> 1."""
    lanes = WORDS // 2
    while lanes > 1:
        lanes //= 2
        low = b.shuffle_vector(total, total, ir.Constant(ir.VectorType(ir.IntType(32), lanes), list(range(lanes))))
        upper = b.shuffle_vector(total, total, ir.Constant(ir.VectorType(ir.IntType(32), lanes),
                                                           list(range(lanes, 2 * lanes))))
        total = b.fadd(low, upper, flags=REASSOC)
    return b.extract_element(total, ir.Constant(ir.IntType(32), 0))


def takes_dot_variance(em: Any, phase: Any, means: dict[int, Any]) -> bool:
    """Whether the row loop ``phase``'s first stage, a variance over a static row of whole blocks of bf16 words (at
    most ``MAX_WORDS``) whose mean pass runs a row early (``CpuTarget.means_a_row_early``), takes its sum of
    squared deviations from the squares its mean pass sums (:func:`dot_variance`,
    ``CpuTarget.takes_bf16_variance_by_dot_products``): then no deviation pass fills its widened row or deviation
    caches, and its write pass widens x and subtracts the mean itself, from the row's own slot of the mean stage's
    buffer (the next row's mean is stored in the next slot). ``means``: ``stages.shared_means`` of its stages."""
    if not (em.target.takes_bf16_variance_by_dot_products and em.target.means_a_row_early) \
            or em._delayed is not None or em._carrier is not None:
        return False
    storing = [(number, shared) for number, shared in means.items() if shared.stores]
    if len(storing) != 1 or storing[0][0] != 0:
        return False
    variance, target = phase.stages[0], storing[0][1].stage.target
    n, k = variance.shape[-1], len(phase.outer)
    return isinstance(variance, ReduceStage) and variance.reduced == (len(variance.shape) - 1,) \
        and n % BLOCK == 0 and BLOCK <= n <= MAX_WORDS and len(variance.shape) - 1 == k \
        and math.prod(target.shape) == math.prod(variance.shape[:k])


def dot_variance(reducer: Any, idx: list[Any], mean: ir.Value, squares: ir.Value) -> ir.Value:
    """The float64 sum of squared deviations of ``reducer``'s row at ``idx`` (a variance whose float32 ``mean`` its
    mean pass stored) from the sum of the row's squares its mean pass took by dot products (``squares``:
    :func:`dot_summed`'s, NaN where it took none): S2 - n mean^2, no deviation pass
    (``CpuTarget.takes_bf16_variance_by_dot_products``). Each square of a bf16 word is exact in float32, S2 a float
    sum of them (each add rounded as a float add's); its rounding error is S2's times 1 + n mean^2 / M2 (the
    cancellation), so a row whose n mean^2 exceeds ``FALLBACK_RATIO`` times M2, whose M2 is below
    ``SMALLEST_SQUARES`` (the instruction flushes a square below 2^-126: at most 4096 of them, 2^-114 in all) or not
    finite (an infinite or NaN word, a square past float32's range) takes the deviation pass from the stored mean:
    today's bits there."""
    em = reducer.em
    b = em.b
    m = b.fpext(mean, F64)
    centered = b.fmul(b.fmul(m, m), ir.Constant(F64, float(max(reducer.count, 1))))  # n mean^2
    m2 = b.fsub(b.load(squares), centered)
    kept = b.and_(b.fcmp_ordered("<=", centered, b.fmul(m2, ir.Constant(F64, FALLBACK_RATIO))),
                  b.and_(b.fcmp_ordered(">=", m2, ir.Constant(F64, SMALLEST_SQUARES)),
                         b.fcmp_ordered("<", m2, ir.Constant(F64, math.inf))))
    result = em.alloca(F64)
    b.store(m2, result)
    with em.fresh_values(), b.if_then(b.not_(kept), likely=False):
        em.b.store(reducer._float_total(idx, mean), result)
    return em.b.load(result)


__all__ = ["BLOCK", "FALLBACK_RATIO", "SMALLEST_SQUARES", "dot_summed", "dot_variance", "summed_words",
           "takes_dot_variance"]
