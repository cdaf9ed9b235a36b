"""bf16 widened by an integer multiply where a loop's add pipes are its bound.

A bf16 value is its 16 bits in the high half of a float32 (``elementwise._bitcast``). In a loop over element pairs
(``pairs.py``) the even element of a 32-bit word widens with ``word << 16`` (``vpslld``) and the odd one with
``word & 0xffff0000`` (``vpandq``). On Zen 4 a 512-bit ``vpslld`` issues to the pipes that run ``vaddps`` (an add and
a shift side by side: two cycles, measured), and the loops of a bf16 LayerNorm's mean and variance are bound by those
pipes: per 64 words 8 adds and 4 shifts in the mean pass, 16 adds (8 subtractions) and 4 shifts in the deviation
pass. ``word * 65536`` (``vpmulld``) is the same 32 bits and issues beside an add (measured: 12 adds and 12
``vpmulld`` in 12 cycles). LLVM turns a multiply by a power of two back into a shift, so the factor is a value
LLVM cannot see through: 65536 passed through an empty inline ``asm`` once in the function's entry block, which the
vectorizer broadcasts once per loop.

:func:`multiplied_widening` is the decision (``CpuTarget.widens_summed_bf16_by_multiplication``, a mean's or a
variance's float sum), :func:`widened_even` the code (the factor made where a word is widened so: float32 sums' code is
unchanged).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from llvmlite import ir

from neuroncc.codegen.llvm.scalars import I32

#: The factor: a word times it is its low half shifted into the high half, mod 2^32.
FACTOR = 1 << 16


@contextlib.contextmanager
def multiplied_widening(em: Any, summed: bool) -> Iterator[None]:
    """While emitting a float sum (``summed``: a mean's or a variance's, whose loops add and subtract), the even
    halves of bf16 words widen by multiplying (``em.multiplies_widening``) where the target says so."""
    if not (summed and em.target.widens_summed_bf16_by_multiplication):
        yield
        return
    saved, em.multiplies_widening = em.multiplies_widening, True
    try:
        yield
    finally:
        em.multiplies_widening = saved


def opaque_constant(entry: ir.IRBuilder, value: int) -> ir.Value:
    """``value`` as an i32 LLVM cannot fold, made at ``entry`` (the function's entry block)."""
    return entry.asm(ir.FunctionType(I32, [I32]), "", "=r,0", [ir.Constant(I32, value)], side_effect=False,
                     name="factor")


def widened_even(ctx: Any, bits: ir.Value) -> ir.Value | None:
    """``bits`` (i16) shifted into the high half of an i32 as ``word * FACTOR`` (the factor made opaque once per
    phase function: ``ctx.opaque_factor``), where ``bits`` is the low half of a 32-bit word (a paired load's even
    element: ``pairs.half_of``) and ``ctx`` multiplies (:func:`multiplied_widening`); None otherwise."""
    if not getattr(ctx, "multiplies_widening", False) or not isinstance(bits, ir.CastInstr) or bits.opname != "trunc":
        return None
    (word,) = bits.operands
    if word.type != I32 or (isinstance(word, ir.Instruction) and word.opname == "lshr"):
        return None
    return ctx.b.mul(word, ctx.opaque_factor(FACTOR))


__all__ = ["FACTOR", "multiplied_widening", "opaque_constant", "widened_even"]
