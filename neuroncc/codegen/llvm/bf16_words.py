"""A pair of float32 values rounded to bf16 and packed into one 32-bit word, as explicit vector code in 16-bit lanes.

A paired loop (``pairs.py``) writes two bf16 results as one word: each rounded to nearest even in 32-bit lanes
(``scalars.round_to``: bits + 0x7FFF + the kept half's parity, the low half cleared), then the two high halves
packed. The loop vectorizer sees one scalar word per iteration, and on AVX-512 LLVM makes it, per pair of vectors
(32 results), two shifts, two ands and four adds in 32-bit lanes and a ``vpermt2w``: 9 vector instructions.

In 16-bit lanes the same rounding is 5 (AVX-512 BW): the high halves of both vectors in word order (``vpermt2w``)
and their low halves likewise (another), the kept half's parity or'ed into the low half (``vpternlogd``), the carry
as low half > 0x8000 (``vpcmpuw`` into a mask: lo + parity > 0x8000 exactly when lo | parity is), the high half
+ 1 under it (a masked ``vpaddw``). A NaN (with the NaN case) takes its own high half with the quiet bit set and
a zero low half (a compare and a masked ``vpternlogd`` per vector, in 32-bit lanes before the shuffles), which
then carries nothing. Every result is the 32-bit rounding's bit for bit.

The loop vectorizer cannot make 16-bit lanes out of 32-bit words, so the pair is a call: the scalar function (the
32-bit rounding, for a loop's scalar remainder) carries a vector variant (``vector-function-abi-variant``, 16
pairs), which the vectorizer calls instead, and which is inlined after it (``jit.inline_vector_variants``; kept
until then by ``llvm.compiler.used``). :func:`rounded_word` is the code, :attr:`CpuTarget.rounds_bf16_in_word_lanes`
the decision; AVX2 (no unsigned 16-bit compare into a mask, no two-table word permute) keeps the 32-bit code.
"""

from __future__ import annotations

from llvmlite import ir

from neuroncc.codegen.llvm.pairs import word_of
from neuroncc.codegen.llvm.scalars import F32, I16, I32, bf16_bits, round_to, rounding_of
from neuroncc.errors import CodegenError
from neuroncc.hardware.host import CpuTarget
from neuroncc.ir.dtypes import DType

#: Pairs per call of the vector variant: 16 words, two 512-bit vectors of float32 in, one out.
VECTOR_PAIRS = 16
#: The symbol prefix of the functions defined here (``jit`` inlines the vector variants it finds after O3).
SYMBOL = "ncc.bf16.word"
#: The name suffix of a vector variant.
VARIANT = ".v16"


def rounded_word(b: ir.IRBuilder, even: ir.Value, odd: ir.Value, target: CpuTarget) -> ir.Value | None:
    """The word of bf16 bits ``even`` (low half) and ``odd`` (high half), both roundings (``scalars.rounding_of``),
    computed by the pair function from their float32 values on ``target``; None where it does not apply (the
    caller packs the bits as they are: ``pairs.word_of``)."""
    if not target.rounds_bf16_in_word_lanes:
        return None
    rounded = rounding_of(even), rounding_of(odd)
    if rounded[0] is None or rounded[1] is None:
        return None
    (even_value, even_nan), (odd_value, odd_nan) = rounded
    return b.call(_pair_function(b.module, even_nan or odd_nan), [even_value, odd_value])


def _pair_function(module: ir.Module, nan_case: bool) -> ir.Function:
    symbol = f"{SYMBOL}{'.nan' if nan_case else ''}"
    existing = module.globals.get(symbol)
    if existing is not None:
        return existing
    variant = _vector_variants(module)[nan_case]
    fn = ir.Function(module, ir.FunctionType(I32, [F32, F32]), symbol)
    fn.linkage = "internal"
    # not inlined before the vectorizer has replaced its calls (a call it vectorizes must not touch memory)
    for attribute in ("noinline", "nounwind", "willreturn", "memory(none)",
                      f'"vector-function-abi-variant"="_ZGV_LLVM_N{VECTOR_PAIRS}vv_{symbol}({variant.name})"'):
        set.add(fn.attributes, attribute)  # raw: llvmlite's attribute set knows neither memory(none) nor strings
    body = ir.IRBuilder(fn.append_basic_block("entry"))
    even, odd = (bf16_bits(body, round_to(body, arg, DType.bf16, nan_case)) for arg in fn.args)
    body.ret(word_of(body, even, odd))
    return fn


def _vector_variants(module: ir.Module) -> dict[bool, ir.Function]:
    """The two vector variants (without and with the NaN case), defined together at first use and kept by one
    ``llvm.compiler.used`` (nothing calls a vector variant before the vectorizer does)."""
    existing = module.globals.get(f"{SYMBOL}{VARIANT}")
    if existing is not None:
        return {False: existing, True: module.globals[f"{SYMBOL}.nan{VARIANT}"]}
    variants = {nan_case: _vector_variant(module, f"{SYMBOL}{'.nan' if nan_case else ''}{VARIANT}", nan_case)
                for nan_case in (False, True)}
    if "llvm.compiler.used" in module.globals:
        raise CodegenError("a kernel module lists llvm.compiler.used twice")
    array = ir.ArrayType(ir.PointerType(), len(variants))
    used = ir.GlobalVariable(module, array, "llvm.compiler.used")
    used.linkage = "appending"
    used.section = "llvm.metadata"
    used.initializer = ir.Constant(array, list(variants.values()))
    return variants


def _vector_variant(module: ir.Module, symbol: str, nan_case: bool) -> ir.Function:
    floats, words = ir.VectorType(F32, VECTOR_PAIRS), ir.VectorType(I32, VECTOR_PAIRS)
    halves = ir.VectorType(I16, 2 * VECTOR_PAIRS)
    fn = ir.Function(module, ir.FunctionType(words, [floats, floats]), symbol)
    fn.linkage = "internal"
    fn.attributes.add("alwaysinline")
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    sources = []
    for arg in fn.args:
        bits = b.bitcast(arg, words)
        if nan_case:  # the NaN's own high half, quieted, and a zero low half: no carry below
            quiet = b.and_(b.or_(bits, _splat(words, 0x00400000)), _splat(words, 0xFFFF0000 - (1 << 32)))
            bits = b.select(b.fcmp_unordered("uno", arg, arg), quiet, bits)
        sources.append(b.bitcast(bits, halves))
    low = b.shuffle_vector(*sources, ir.Constant(ir.VectorType(I32, 2 * VECTOR_PAIRS), _interleaved(0)))
    high = b.shuffle_vector(*sources, ir.Constant(ir.VectorType(I32, 2 * VECTOR_PAIRS), _interleaved(1)))
    parity_in_low = b.or_(low, b.and_(high, _splat(halves, 1)))
    carry = b.icmp_unsigned(">", parity_in_low, _splat(halves, 0x8000 - (1 << 16)))
    rounded = b.select(carry, b.add(high, _splat(halves, 1)), high)
    b.ret(b.bitcast(rounded, words))
    return fn


def _interleaved(half: int) -> list[int]:
    """Shuffle indices taking ``half`` (0: low, 1: high) of each word of the first vector, then of the second,
    alternately: word k of the result holds pair k's even element's half, then its odd element's."""
    out = []
    for k in range(VECTOR_PAIRS):
        out += [2 * k + half, 2 * VECTOR_PAIRS + 2 * k + half]
    return out


def _splat(vector: ir.VectorType, value: int) -> ir.Constant:
    return ir.Constant(vector, [ir.Constant(vector.element, value)] * vector.count)
