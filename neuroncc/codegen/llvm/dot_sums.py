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

from collections.abc import Callable
from typing import Any

from llvmlite import ir

from neuroncc.codegen.llvm.bf16_words import _BFloat
from neuroncc.codegen.llvm.elementwise import reinterprets_words_as_bf16, widens_bf16
from neuroncc.codegen.llvm.kernel_plan import Computed
from neuroncc.codegen.llvm.pairs import WORD_ALIGN, halfwords, pairs_halfwords
from neuroncc.codegen.llvm.reductions import REASSOC
from neuroncc.codegen.llvm.scalars import F32, I16, I64, call
from neuroncc.codegen.llvm.views import Layout

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

_FLOATS, _HALVES = ir.VectorType(F32, WORDS // 2), ir.VectorType(I16, WORDS)
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
               pair_loop: Callable[[Any, Any], None]) -> bool:
    """Add the sum of ``reducer``'s terms over [lo, hi) of its last dim at ``full`` into ``partial`` (float32) by
    ``vdpbf16ps`` (see the module docstring), the words past the last whole block and every word of a sum whose
    words are not all at least 2^-119 or zero by ``pair_loop(start, stop)`` (today's loop); False (nothing emitted)
    where the sum is not one of bf16 words over a static range of at least one block."""
    words = summed_words(em, reducer, mean)
    if words is None or not (isinstance(lo, int) and isinstance(hi, int)) or (hi - lo) // BLOCK == 0:
        return False
    blocks = (hi - lo) // BLOCK
    b = em.b
    start = list(full)
    start[reducer.reduced[-1]] = lo
    base = em.address(words, start)
    ones = b.bitcast(ir.Constant(_HALVES, [ONE] * WORDS), ir.VectorType(_BFloat(), WORDS))
    high = ir.Constant(_HALVES, [EXPONENT_HIGH] * WORDS)
    entry = b.block
    body, done = b.append_basic_block("dot_sum"), b.append_basic_block("dot_summed")
    b.branch(body)
    b.position_at_end(body)
    block = b.phi(I64, "block")
    accs = [b.phi(_FLOATS, f"dot{k}") for k in range(VECTORS)]
    flags = [b.phi(_FLAGS, f"normal{k}") for k in range(CHAINS)]
    new_accs, new_flags = [], list(flags)
    for k, acc in enumerate(accs):
        offset = b.add(b.mul(block, ir.Constant(I64, BLOCK)), ir.Constant(I64, k * WORDS))
        vector = b.load(b.gep(base, [offset], source_etype=I16, inbounds=True), typ=_HALVES, align=WORD_ALIGN)
        new_accs.append(call(b, "llvm.x86.avx512bf16.dpbf16ps.512",
                             [acc, b.bitcast(vector, ir.VectorType(_BFloat(), WORDS)), ones], _FLOATS))
        new_flags[k % CHAINS] = b.and_(new_flags[k % CHAINS],
                                       b.icmp_unsigned("!=", b.and_(vector, high), ir.Constant(_HALVES, None)))
    following = b.add(block, ir.Constant(I64, 1))
    b.cbranch(b.icmp_unsigned("<", following, ir.Constant(I64, blocks)), body, done)
    block.add_incoming(ir.Constant(I64, 0), entry)
    block.add_incoming(following, body)
    for phi, new in zip(accs, new_accs):
        phi.add_incoming(ir.Constant(_FLOATS, None), entry)
        phi.add_incoming(new, body)
    for phi, new in zip(flags, new_flags):
        phi.add_incoming(ir.Constant(_FLAGS, [1] * WORDS), entry)
        phi.add_incoming(new, body)
    b.position_at_end(done)
    while len(new_accs) > 1:  # (a tree: 0 + 1, 2 + 3, ...; then their sums so)
        new_accs = [b.fadd(x, y, flags=REASSOC) for x, y in zip(new_accs[::2], new_accs[1::2])]
    while len(new_flags) > 1:
        new_flags = [b.and_(x, y) for x, y in zip(new_flags[::2], new_flags[1::2])]
    total, lanes = new_accs[0], WORDS // 2
    while lanes > 1:  # (the lanes' halves added: 16 -> 8 -> 4 -> 2 -> 1)
        lanes //= 2
        low = b.shuffle_vector(total, total, ir.Constant(ir.VectorType(ir.IntType(32), lanes), list(range(lanes))))
        upper = b.shuffle_vector(total, total, ir.Constant(ir.VectorType(ir.IntType(32), lanes),
                                                           list(range(lanes, 2 * lanes))))
        total = b.fadd(low, upper, flags=REASSOC)
    total = b.extract_element(total, ir.Constant(ir.IntType(32), 0))
    normal = b.icmp_unsigned("==", b.bitcast(new_flags[0], ir.IntType(WORDS)), ir.Constant(ir.IntType(WORDS), -1))
    with b.if_else(normal, likely=True) as (summed, other):
        with summed, em.fresh_values():
            b.store(b.fadd(b.load(partial), total, flags=REASSOC), partial)
            if lo + blocks * BLOCK < hi:
                pair_loop(lo + blocks * BLOCK, hi)
        with other, em.fresh_values():
            pair_loop(lo, hi)
    return True


__all__ = ["BLOCK", "dot_summed", "summed_words"]
