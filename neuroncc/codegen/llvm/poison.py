"""The checking build's poison (``NEURONCC_POISON_SCRATCH``, ``hardware/scratch_poison.py``): scratch buffers filled
with a NaN pattern before each use, so that a read of one no pass wrote fails on every run.

A kernel's stack buffers (row caches, deviation caches, widened rows, delayed-write pieces, lane sums, the next row's
max lanes, map stages' buffers, transposed tiles) are read back by a later pass or a later loop. One read before any
store reads whatever the stack held: the one-pass variance's write stage loaded x - mean from a deviation row cache
only a deviation pass stores (session 37), garbage that differed from run to run and that only the zoo's bf16
training caught. In the checking build:

- every buffer in a phase function's entry block (every ``alloca``: arrays and scalar slots, of float or of 16-, 32-
  and 64-bit integer elements) is filled when the phase function starts, once per call (:func:`poison_entry`): a
  buffer read and never written reads NaN;
- each row cache of a row loop is filled again for each row, right before the stage that stores it runs for that
  row, the row's own copy where consecutive rows use copies in turn (:func:`poison_row`): a stage that reads a row
  cache its producer did not store for this row (a stale previous row, or another pass's) reads NaN, not the
  previous row's values, which a fill once per call would leave there.

The patterns are NaNs of every float width in the buffer's element type (float32 words ``0x7FBADBAD``, bf16 and
float16 words ``0x7FBA`` / ``0x7DBA``, float64 ``0x7FFBADBA7FFBADBA``), and the same bits in integer buffers (a
float's bits kept as integers: the next row's max magnitudes, bf16 words): arithmetic keeps a NaN's payload, so a
poisoned output shows where it came from. The fill is a call of one internal function per module, a loop of 32-bit
stores. The normal build emits none of it: its IR is unchanged (``tests/codegen/test_poison_scratch.py``).
"""

from __future__ import annotations

import math
from typing import Any

from llvmlite import ir

from neuroncc.codegen.llvm.row_buffers import row_slot
from neuroncc.codegen.llvm.scalars import I32, I64, VOID
from neuroncc.hardware.scratch_poison import poisons_scratch

#: The fill function's name in each module that poisons.
FILL = "ncc.poison.words"

#: 32-bit words filling a buffer of each element kind: NaNs of its width (two bf16 / float16 NaNs per word).
WORD_F32 = 0x7FBADBAD
WORD_BF16 = 0x7FBA7FBA
WORD_F16 = 0x7DBA7DBA
WORD_F64 = 0x7FFBADBA  # (the double 0x7FFBADBA7FFBADBA: exponent all ones, a NaN)


def poisons(em: Any) -> bool:
    """Whether ``em`` (a kernel emitter) emits the checking build: its target says so, or the process does (tests
    that build for an explicit ``CpuTarget`` under ``NEURONCC_POISON_SCRATCH``)."""
    return bool(getattr(em.target, "poisons_scratch", False)) or poisons_scratch()


def _element(t: ir.Type) -> tuple[ir.Type, int]:
    """The scalar element type of ``t`` (arrays and vectors of it) and how many of them ``t`` holds."""
    count = 1
    while isinstance(t, (ir.ArrayType, ir.VectorType)):
        count *= t.count
        t = t.element
    return t, count


def pattern(element: ir.Type) -> int | None:
    """The 32-bit word filling a buffer of ``element``s, or None for one left alone (flags: i1, i8)."""
    if isinstance(element, ir.FloatType):
        return WORD_F32
    if isinstance(element, ir.DoubleType):
        return WORD_F64
    if isinstance(element, ir.HalfType):
        return WORD_F16
    if isinstance(element, ir.IntType) and element.width == 16:
        return WORD_BF16  # (bf16 words: the codegen's 16-bit floats are kept as i16)
    if isinstance(element, ir.IntType) and element.width in (32, 64):
        return WORD_F32
    return None


def _bytes(element: ir.Type) -> int:
    if isinstance(element, ir.IntType):
        return element.width // 8
    return {ir.FloatType: 4, ir.DoubleType: 8, ir.HalfType: 2}[type(element)]


def _fill_function(module: ir.Module) -> ir.Function:
    """``void @ncc.poison.words(ptr p, i64 n, i32 word)``: p[0..n) = word (32-bit words), made once per module."""
    try:
        return module.get_global(FILL)
    except KeyError:
        pass
    fn = ir.Function(module, ir.FunctionType(VOID, [ir.PointerType(I32), I64, I32]), FILL)
    fn.linkage = "internal"
    pointer, n, word = fn.args
    entry, body, done = (fn.append_basic_block(name) for name in ("entry", "body", "done"))
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_unsigned("==", n, ir.Constant(I64, 0)), done, body)
    b.position_at_end(body)
    i = b.phi(I64)
    i.add_incoming(ir.Constant(I64, 0), entry)
    b.store(word, b.gep(pointer, [i], inbounds=True))
    following = b.add(i, ir.Constant(I64, 1))
    i.add_incoming(following, body)
    b.cbranch(b.icmp_unsigned("==", following, n), done, body)
    b.position_at_end(done)
    b.ret_void()
    return fn


def fill(b: ir.IRBuilder, pointer: ir.Value, element: ir.Type, count: Any) -> None:
    """Store the poison pattern of ``element`` over ``count`` (an int or an i64 value) elements at ``pointer``,
    emitted at ``b``'s position. Buffers of elements without a pattern, and whole buffers under 4 bytes, are
    left alone."""
    word = pattern(element)
    size = _bytes(element) if word is not None else 0
    if word is None or (isinstance(count, int) and count * size < 4):
        return
    words = ir.Constant(I64, count * size // 4) if isinstance(count, int) else \
        b.udiv(b.mul(count, ir.Constant(I64, size)), ir.Constant(I64, 4))
    start = b.bitcast(pointer, ir.PointerType(I32))
    b.call(_fill_function(b.module), [start, words, ir.Constant(I32, word)])


def poison_entry(entry: ir.IRBuilder) -> None:
    """Fill every buffer ``alloca``'d in the phase function's entry block (``entry``, positioned at its end): once
    a call, before the function's first instruction after them."""
    for instruction in list(entry.block.instructions):
        if isinstance(instruction, ir.AllocaInstr):
            element, count = _element(instruction.allocated_type)
            if instruction.operands:  # (an ``alloca t, n``: only a constant count is filled)
                (n,) = instruction.operands
                if not isinstance(n, ir.Constant):
                    continue
                count *= int(n.constant)
            fill(entry, instruction, element, count)


def poison_row(em: Any, stage_number: int, outer: list[Any], depth: int) -> None:
    """Fill the row caches stage ``stage_number`` of a row loop stores (``em._row_cache``; not the rows widened before
    the loop), the copy of the row at ``outer``: before that stage runs for the row."""
    for value, producer in em._row_cache.items():
        if producer != stage_number or value not in em._rows:
            continue
        shape = value.type.shape
        row = max(math.prod(shape[depth:]), 1)
        first = row_slot(em, value, list(outer[:depth]) + [0] * (len(shape) - depth))
        fill(em.b, first, first.type.pointee, row)  # (a typed pointer to the row's first element)
