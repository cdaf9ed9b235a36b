"""A pair of float32 values rounded to bf16 and packed into one 32-bit word, as explicit vector code in 16-bit lanes.

A paired loop (``pairs.py``) writes two bf16 results as one word: each rounded to nearest even in 32-bit lanes
(``scalars.round_to``: bits + 0x7FFF + the kept half's parity, the low half cleared), then the two high halves
packed. The loop vectorizer sees one scalar word per iteration, and on AVX-512 LLVM makes it, per pair of vectors
(32 results), two shifts, two ands and four adds in 32-bit lanes and a ``vpermt2w``: 9 vector instructions.

In 16-bit lanes the same rounding is 5 (AVX-512 BW): the high halves of both vectors in word order (``vpermt2w``)
and their low halves likewise (another), the kept half's parity or'ed into the low half (``vpternlogd``), the
carry as low half > 0x8000 (``vpcmpuw`` into a mask: lo + parity > 0x8000 exactly when lo | parity is), the high half
+ 1 under it (LLVM: ``vpmovm2w`` and ``vpsubw``); 7 with the register copy a ``vpermt2w`` needs. A NaN is
quiet with a zero low half here (the roundings without the NaN case, ``nan_payloads.py``): no carry. Every result
is the 32-bit rounding's bit for bit.

The loop vectorizer cannot make 16-bit lanes out of 32-bit words, so the pair is a call: the scalar function (the
32-bit rounding, for a loop's scalar remainder) carries a vector variant (``vector-function-abi-variant``, 16
pairs), which the vectorizer calls instead, and which is inlined after it (``jit._inline_vector_variants``; kept
until then by ``llvm.compiler.used``). :func:`rounded_word` is the code, :attr:`CpuTarget.rounds_bf16_in_word_lanes`
the decision.

Intel's AVX-512 cores with BF16 (:attr:`CpuTarget.rounds_bf16_pairs_by_conversion`, session 32), and other AVX-512
BF16 CPUs (Zen 4) for casts' roundings only (:attr:`CpuTarget.rounds_bf16_cast_pairs_by_conversion`, session 33: bf16
LayerNorm's and softmax's outputs, not row (a)'s op results), round the pair of vectors by ``vcvtne2ps2bf16`` (both
to nearest even, the words of one vector, then the other's) and put the words in pair order by one ``vpermw``: 2
instructions. The instruction takes denormal inputs as zero, so a ``vfpclassps`` per
vector flags them and a pair of vectors holding one branches to the 16-bit lanes' code (:func:`_converted_variant`);
on Zen 4 one ``vptestnmw`` of the conversion's words finds the pairs holding a zero or a denormal first, and only
those take the ``vfpclassps`` (:attr:`CpuTarget.tests_converted_bf16_pairs_by_their_words`).

AVX2 (no unsigned 16-bit compare into a mask, no two-table word permute) has a form of its own
(:attr:`CpuTarget.rounds_bf16_in_word_lanes_with_blends`, 8 pairs a call): of the two vectors' 32-bit words, the
high halves in word order as ``(odd & 0xFFFF0000) | (even >> 16)`` and the low halves as ``(odd << 16) | (even &
0xFFFF)`` (LLVM: ``vpsrld`` + ``vpblendw`` and ``vpslld`` + ``vpblendw``, the words staying in their lanes), then
the same parity, carry (``vpmaxuw`` + ``vpcmpeqw``: no unsigned word compare) and ``vpsubw``: 9 vector
instructions per 16 results, 2 of them shifts, where the 32-bit rounding takes 10 and 3.

AVX-512 CPUs whose loops reading bf16 tables run 8 lanes a vector iteration (Zen 4:
:attr:`CpuTarget.bf16_table_loop_lanes`) give an AVX-512 pair function such a loop calls a second variant on 8
pairs (:func:`with_narrow_variants`, only there: elsewhere it was dead code, ~140 assembly lines in bf16 softmax's
and LayerNorm's modules; the vectorizer takes the one of its loop's lanes): the conversion's at
256 bits (``vcvtne2ps2bf16`` ymm, ``vfpclassps`` ymm, ``vptestnmw`` ymm), and for op results the 32-bit rounding
(:func:`_rounded_in_32_bits_variant`, measured faster there than the 16-bit lanes at 8 pairs).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable

from llvmlite import ir

from neuroncc.codegen.llvm.pairs import word_of
from neuroncc.codegen.llvm.scalars import F32, I16, I32, bf16_bits, call, round_to, rounding_of
from neuroncc.codegen.llvm.vector_variants import keep_until_vectorized, scalar_with_variants, with_variants
from neuroncc.hardware.host import CpuTarget
from neuroncc.ir.dtypes import DType

#: Pairs per call of the vector variant: 16 words, two 512-bit vectors of float32 in, one out.
VECTOR_PAIRS = 16
#: Pairs per call of an AVX-512 form's narrow variant (256-bit vectors: ``CpuTarget.bf16_table_loop_lanes``).
NARROW_PAIRS = 8
#: Pairs per call of AVX2's vector variant: 8 words, two 256-bit vectors of float32 in, one out.
BLENDED_PAIRS = 8
#: The symbol prefix of the functions defined here (``jit`` inlines the vector variants it finds after O3).
SYMBOL = "ncc.bf16.word"
#: The name suffix of the pair function rounding by AVX-512 BF16's conversion (its vector variant's before ``VARIANT``).
CONVERTED = ".converted"
#: The name suffix of a vector variant.
VARIANT = ".v16"
#: The name suffix of AVX2's vector variant.
BLENDED_VARIANT = ".v8"
#: The name suffix of an AVX-512 form's narrow variant.
NARROW_VARIANT = ".n8"
#: The AVX-512 pair functions without their narrow variant yet: (converts, by_words, the 16 pairs' variant).
_WIDE_FORMS: weakref.WeakKeyDictionary[ir.Function, tuple[bool, bool, ir.Function]] = weakref.WeakKeyDictionary()


def rounded_word(b: ir.IRBuilder, even: ir.Value, odd: ir.Value, target: CpuTarget) -> ir.Value | None:
    """The word of bf16 bits ``even`` (low half) and ``odd`` (high half), both roundings without the NaN case
    (``scalars.rounding_of``), computed by the pair function from their float32 values on ``target``; None where it
    does not apply (the caller packs the bits as they are: ``pairs.word_of``). AVX2's form
    (``CpuTarget.rounds_bf16_in_word_lanes_with_blends``) packs casts' roundings only (bf16 LayerNorm's and softmax's
    outputs): on an op's result (bf16 row (a)'s gelu*sigmoid) it measured 0.6% slower at 1 thread and 0.7% at 2
    (medians, session 25 round25).

    With the NaN case the 16-bit form saves nothing: the case costs a compare, an and and a masked or per vector in
    32-bit lanes before the permutes (13 instructions per pair of vectors, as many as the 32-bit rounding with its
    case), and its constants crowd row (a)'s math loop (bf16 gelu*sigmoid, 2 threads: 2-3% slower in two of three
    A/Bs, session 17)."""
    blends = not target.rounds_bf16_in_word_lanes and target.rounds_bf16_in_word_lanes_with_blends
    if not target.rounds_bf16_in_word_lanes and not blends:
        return None
    rounded = rounding_of(even), rounding_of(odd)
    if rounded[0] is None or rounded[1] is None or rounded[0].nan_case or rounded[1].nan_case:
        return None
    if blends and (rounded[0].op_result or rounded[1].op_result):
        return None  # (AVX2: an op's result, bf16 row (a)'s, measured slower so)
    op_result = rounded[0].op_result or rounded[1].op_result
    converts = not blends and (target.rounds_bf16_pairs_by_conversion
                               or target.rounds_bf16_cast_pairs_by_conversion and not op_result)
    by_words = converts and target.tests_converted_bf16_pairs_by_their_words
    return b.call(_pair_function(b.module, blends, converts, by_words), [rounded[0].value, rounded[1].value])


def with_narrow_variants(blocks: Iterable[ir.Block]) -> None:
    """Give the AVX-512 pair functions ``blocks`` call (a loop of ``CpuTarget.bf16_table_loop_lanes`` lanes: one
    reading bf16 tables) their variant on 8 pairs, once per module: a module without such a loop has none (it
    would be dead code there, kept by ``llvm.compiler.used``). The variant is placed beside the 16 pairs' one, as
    if made with it."""
    for block in blocks:
        for instruction in block.instructions:
            if isinstance(instruction, ir.CallInstr) and instruction.callee in _WIDE_FORMS:
                _add_narrow_variant(instruction.callee)


def _add_narrow_variant(fn: ir.Function) -> None:
    """Make ``fn``'s narrow variant, after its 16 pairs' one in the module, and name both for the vectorizer."""
    converts, by_words, wide = _WIDE_FORMS.pop(fn)
    module, name = fn.module, fn.name + NARROW_VARIANT
    later = list(module.globals)[list(module.globals).index(wide.name) + 1:]
    narrow = _converted_variant(module, name, by_words, NARROW_PAIRS) if converts else \
        _rounded_in_32_bits_variant(module, name, NARROW_PAIRS)
    for key in later:  # (the module's order as before: the narrow variant right after the wide one)
        module.globals.move_to_end(key)
    with_variants(fn, [(VECTOR_PAIRS, wide), (NARROW_PAIRS, narrow)])


def _pair_function(module: ir.Module, blends: bool, converts: bool = False, by_words: bool = False) -> ir.Function:
    """The pair function of ``module`` (one target per module) for its form: its vector variant AVX2's
    (``blends``), AVX-512 BF16's conversion (``converts``, a function of its own name: a module may round casts'
    words so and ops' results in 16-bit lanes, ``CpuTarget.rounds_bf16_cast_pairs_by_conversion``; ``by_words``:
    its denormals found in its words, ``CpuTarget.tests_converted_bf16_pairs_by_their_words``) or AVX-512 BW's;
    its 8 pairs' variant is added by :func:`with_narrow_variants` where a loop asks for it."""
    symbol = SYMBOL + CONVERTED if converts and not blends else SYMBOL
    existing = module.globals.get(symbol)
    if existing is not None:
        return existing
    if blends:
        variants = [(BLENDED_PAIRS, _blended_variant(module, symbol + BLENDED_VARIANT))]
    else:
        wide = _converted_variant(module, symbol + VARIANT, by_words) if converts else \
            _vector_variant(module, symbol + VARIANT)
        variants = [(VECTOR_PAIRS, wide)]
    fn = scalar_with_variants(module, symbol, ir.FunctionType(I32, [F32, F32]), variants)
    if not blends:
        _WIDE_FORMS[fn] = converts, by_words, variants[0][1]
    body = ir.IRBuilder(fn.append_basic_block("entry"))
    even, odd = (bf16_bits(body, round_to(body, arg, DType.bf16, nan_case=False)) for arg in fn.args)
    body.ret(word_of(body, even, odd))
    return fn


def _vector_pair_function(module: ir.Module, symbol: str, pairs: int) -> tuple[ir.Function, ir.IRBuilder]:
    """A vector pair function of ``pairs`` pairs (two float32 vectors -> their words), internal and always inlined,
    kept by ``llvm.compiler.used`` until the vectorizer has used it, and a builder at its entry."""
    fn = ir.Function(module, ir.FunctionType(ir.VectorType(I32, pairs), [ir.VectorType(F32, pairs)] * 2), symbol)
    fn.linkage = "internal"
    fn.attributes.add("alwaysinline")
    fn.attributes.add("nounwind")
    keep_until_vectorized(module, fn)
    return fn, ir.IRBuilder(fn.append_basic_block("entry"))


def _vector_variant(module: ir.Module, symbol: str, pairs: int = VECTOR_PAIRS) -> ir.Function:
    """The pair function on ``pairs`` pairs, kept by ``llvm.compiler.used``
    (``vector_variants.keep_until_vectorized``)."""
    fn, b = _vector_pair_function(module, symbol, pairs)
    b.ret(_word_lane_rounding(b, *fn.args))
    return fn


def _rounded_in_32_bits_variant(module: ir.Module, symbol: str, pairs: int) -> ir.Function:
    """The pair function on ``pairs`` pairs in 32-bit lanes (the narrow variant of the 16-bit lanes' form): each
    vector rounded as ``scalars.round_to`` rounds without the NaN case (the kept half's parity or'ed into the low
    half, + 0x7FFF, the low half cleared: the same bits), the even one's high halves shifted into the odd one's
    low halves: LLVM's code for the scalar pair at 8 lanes (``vpsrld``, ``vpternlogd``, ``vpaddd`` a vector, then
    ``vpsrld`` + ``vpblendw``). In bf16 row (a)'s 8-lane table loop on Zen 4 0.96-0.97 of the time of the 16-bit
    lanes at 8 pairs (``vpermt2w`` ymm, session 37 bfa37: one process, 1 and 2 threads)."""
    fn, b = _vector_pair_function(module, symbol, pairs)
    words = ir.VectorType(I32, pairs)
    rounded = []
    for arg in fn.args:
        bits = b.bitcast(arg, words)
        parity = b.and_(b.lshr(bits, _splat(words, 16)), _splat(words, 1))
        rounded.append(b.and_(b.add(b.or_(bits, parity), _splat(words, 0x7FFF)), _splat(words, 0xFFFF0000 - (1 << 32))))
    b.ret(b.or_(b.lshr(rounded[0], _splat(words, 16)), rounded[1]))
    return fn


def _word_lane_rounding(b: ir.IRBuilder, even_floats: ir.Value, odd_floats: ir.Value) -> ir.Value:
    """The words of two vectors of 16 (or 8) float32 each rounded in 16-bit lanes (AVX-512 BW, with VL for 8: the
    module docstring)."""
    pairs = even_floats.type.count
    words, halves = ir.VectorType(I32, pairs), ir.VectorType(I16, 2 * pairs)
    even, odd = b.bitcast(even_floats, halves), b.bitcast(odd_floats, halves)
    low = b.shuffle_vector(even, odd, ir.Constant(ir.VectorType(I32, 2 * pairs), _interleaved(0, pairs)))
    high = b.shuffle_vector(even, odd, ir.Constant(ir.VectorType(I32, 2 * pairs), _interleaved(1, pairs)))
    parity_in_low = b.or_(low, b.and_(high, _splat(halves, 1)))
    carry = b.icmp_unsigned(">", parity_in_low, _splat(halves, 0x8000 - (1 << 16)))
    return b.bitcast(b.select(carry, b.add(high, _splat(halves, 1)), high), words)


class _BFloat(ir.Type):
    """LLVM's ``bfloat`` (llvmlite has no such type): the element of ``vcvtne2ps2bf16``'s result."""

    def _to_string(self) -> str:
        return "bfloat"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _BFloat)

    def __hash__(self) -> int:
        return hash("bfloat")


#: ``vfpclassps``'s class bit of denormal inputs (either sign).
_DENORMAL_CLASS = 0x20


def _converted_variant(module: ir.Module, symbol: str, by_words: bool = False,
                       pairs: int = VECTOR_PAIRS) -> ir.Function:
    """The pair function on 16 pairs by AVX-512 BF16's ``vcvtne2ps2bf16``
    (:attr:`CpuTarget.rounds_bf16_pairs_by_conversion`): both vectors rounded to nearest even in one instruction,
    their words put in pair order by one ``vpermw``. The instruction treats denormal inputs as zero (Intel SDM: the
    result is a signed zero where torch rounds them), so a ``vfpclassps`` per vector flags them and a pair of vectors
    holding one takes the 16-bit lanes' rounding (:func:`_word_lane_rounding`) instead; every other input rounds as
    it does: normal values to nearest even, zeros and infinities as they are, a NaN to its high half with the quiet
    bit set (here already set, the low half zero). The same bits as the 32-bit rounding for every input.

    ``by_words`` (:attr:`CpuTarget.tests_converted_bf16_pairs_by_their_words`): the conversion first, its 32 words
    tested against 0x7FFF at once (``vptestnmw``: a word is +-0 exactly where its input is zero or denormal, a
    normal float32 rounding to a normal bf16 or infinity), and only a pair holding such a word takes the
    ``vfpclassps`` test (:func:`_words_tested_variant`)."""
    if by_words:
        return _words_tested_variant(module, symbol, pairs)
    fn, b = _vector_pair_function(module, symbol, pairs)
    even, odd = fn.args
    masks = [call(b, f"llvm.x86.avx512.fpclass.ps.{32 * pairs}", [value, ir.Constant(I32, _DENORMAL_CLASS)],
                  ir.VectorType(ir.IntType(1), pairs)) for value in (even, odd)]
    denormal = b.icmp_unsigned("!=", b.bitcast(b.or_(*masks), ir.IntType(pairs)), ir.Constant(ir.IntType(pairs), 0))
    fast, slow = fn.append_basic_block("converted"), fn.append_basic_block("denormal")
    b.cbranch(denormal, slow, fast).set_weights([1, 1 << 20])
    b.position_at_end(slow)
    b.ret(_word_lane_rounding(b, even, odd))
    b.position_at_end(fast)
    # (the high 16 words from the first operand, the low 16 from the second: evens, then odds)
    converted = call(b, f"llvm.x86.avx512bf16.cvtne2ps2bf16.{32 * pairs}", [odd, even],
                     ir.VectorType(_BFloat(), 2 * pairs))
    halves = b.bitcast(converted, ir.VectorType(I16, 2 * pairs))
    order = ir.Constant(ir.VectorType(I32, 2 * pairs),
                        [k + pairs * half for k in range(pairs) for half in (0, 1)])
    b.ret(b.bitcast(b.shuffle_vector(halves, halves, order), ir.VectorType(I32, pairs)))
    return fn


def _words_tested_variant(module: ir.Module, symbol: str, pairs: int = VECTOR_PAIRS) -> ir.Function:
    """:func:`_converted_variant`'s pair function testing the conversion's words: one ``vptestnmw`` of the 32 words
    against 0x7FFF per pair of vectors, a ``vfpclassps`` of each vector only where a word is +-0 (an input zero or
    denormal), the 16-bit lanes' rounding only where one is denormal. The words pass through an empty ``asm``
    (no instruction; the permute takes them from it too, so no register copy): seeing them as the conversion's
    bfloat values, LLVM folds the word test into float compares of the words widened again (``vpmovzxwd`` +
    ``vpslld`` + ``vcmpeqps``, session 34 bfsoft34: 1.13x the time). An opaque 0x7FFF mask instead left an asm
    in the loop (the vector variant is inlined after O3's LICM): a register copy an iteration, or a broadcast from
    a general register where the mask was a scalar."""
    fn, b = _vector_pair_function(module, symbol, pairs)
    even, odd = fn.args
    converted = call(b, f"llvm.x86.avx512bf16.cvtne2ps2bf16.{32 * pairs}", [odd, even],
                     ir.VectorType(_BFloat(), 2 * pairs))
    # (the words through an empty asm, opaque: LLVM then cannot fold their test into float compares of the words
    # widened again; the permute takes them from it too, so no register copy)
    vector = ir.VectorType(I32, pairs)
    opaque = b.call(ir.InlineAsm(ir.FunctionType(vector, [vector]), "", "=v,0", side_effect=False),
                    [b.bitcast(converted, vector)], "words", attrs=("readnone", "nounwind"))
    halves = b.bitcast(opaque, ir.VectorType(I16, 2 * pairs))
    order = ir.Constant(ir.VectorType(I32, 2 * pairs),
                        [k + pairs * half for k in range(pairs) for half in (0, 1)])
    words = b.bitcast(b.shuffle_vector(halves, halves, order), vector)
    zeros = b.icmp_unsigned("==", b.and_(halves, ir.Constant(halves.type, [0x7FFF] * 2 * pairs)),
                            ir.Constant(halves.type, None))
    zero_word = b.icmp_unsigned("!=", b.bitcast(zeros, ir.IntType(2 * pairs)), ir.Constant(ir.IntType(2 * pairs), 0))
    fast, check, slow = (fn.append_basic_block(name) for name in ("converted", "zero_words", "denormal"))
    b.cbranch(zero_word, check, fast).set_weights([1, 1 << 20])
    b.position_at_end(fast)
    b.ret(words)
    b.position_at_end(check)
    masks = [call(b, f"llvm.x86.avx512.fpclass.ps.{32 * pairs}", [value, ir.Constant(I32, _DENORMAL_CLASS)],
                  ir.VectorType(ir.IntType(1), pairs)) for value in (even, odd)]
    denormal = b.icmp_unsigned("!=", b.bitcast(b.or_(*masks), ir.IntType(pairs)), ir.Constant(ir.IntType(pairs), 0))
    b.cbranch(denormal, slow, fast).set_weights([1, 1 << 10])
    b.position_at_end(slow)
    b.ret(_word_lane_rounding(b, even, odd))
    return fn


def _blended_variant(module: ir.Module, symbol: str) -> ir.Function:
    """The pair function on 8 pairs in AVX2's form (the module docstring): each word's halves gathered with
    shifts and masks in 32-bit lanes (blends, no permute), rounded in 16-bit lanes."""
    words, halves = ir.VectorType(I32, BLENDED_PAIRS), ir.VectorType(I16, 2 * BLENDED_PAIRS)
    fn, b = _vector_pair_function(module, symbol, BLENDED_PAIRS)
    even, odd = (b.bitcast(arg, words) for arg in fn.args)
    sixteen = _splat(words, 16)
    high = b.or_(b.and_(odd, _splat(words, 0xFFFF0000 - (1 << 32))), b.lshr(even, sixteen))
    low = b.or_(b.shl(odd, sixteen), b.and_(even, _splat(words, 0xFFFF)))
    high, low = b.bitcast(high, halves), b.bitcast(low, halves)
    parity_in_low = b.or_(low, b.and_(high, _splat(halves, 1)))
    carry = b.icmp_unsigned(">", parity_in_low, _splat(halves, 0x8000 - (1 << 16)))
    b.ret(b.bitcast(b.sub(high, b.sext(carry, halves)), words))
    return fn


def _interleaved(half: int, pairs: int = VECTOR_PAIRS) -> list[int]:
    """Shuffle indices taking ``half`` (0: low, 1: high) of each word of the first vector, then of the second,
    alternately: word k of the result holds pair k's even element's half, then its odd element's."""
    out = []
    for k in range(pairs):
        out += [2 * k + half, 2 * pairs + 2 * k + half]
    return out


def _splat(vector: ir.VectorType, value: int) -> ir.Constant:
    return ir.Constant(vector, [ir.Constant(vector.element, value)] * vector.count)
