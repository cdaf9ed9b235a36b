"""Innermost loops over 16-bit data two elements at a time, one 32-bit word per pair.

bf16 tensors cross the CPU boundary as their bits (i16 parameters and outputs: ``frontend/importer.py``), and
x86 without AVX-512 BF16 has no conversion between bf16 and float32: a bf16 value is its 16 bits in the high
half of a float32. Loaded one element at a time, LLVM widens 8 elements with ``vpmovzxwd`` (a shuffle with a
memory operand: 1.5 cycles on Zen 3's shuffle pipes, which also run the shifts) and ``vpslld``, and narrows 8
results with ``vpsrld``, ``vpackusdw`` and ``vpermq``: bf16 LayerNorm [8192, 1024] ran its loops at ~2 cycles
an element, twice its memory time. Loaded as 32-bit words, a word holds elements 2k (low half) and 2k+1 (high
half): the float32 of element 2k is the word shifted left by 16, that of element 2k+1 the word with its low
half cleared (``vpblendw``, any pipe), and two rounded results go back as one word (the even one shifted right,
or'ed with the odd one, whose low half rounding cleared). No cross-lane shuffle: 8 lanes of words are 16
elements. (llvm-mca, Zen 3: LayerNorm's write loop 17 -> 10.5 cycles per 16 elements.)

:func:`pairs_halfwords` is the decision (a stage whose innermost loop reads or writes such data along its last
dim runs that loop over pairs: ``KernelEmitter.innermost_loop``), :class:`Pair` the state of one iteration:
the loads of both halves share one word (``KernelEmitter.load``), and the even half's stores wait for the odd
half's to go out as one word (``KernelEmitter.store``). Loads and stores elsewhere, and loops over odd extents,
are as before; every value is exactly the one element-wise code computes.

A row cache (``refine.cache_rows``: softmax's exponentials, stored by one pass and loaded by a later one) that
only paired loops touch is kept in pair order (:func:`pair_ordered_rows`, :func:`pair_position`): the even
elements of the row first, then the odd ones, so that each pass's vector of even (or odd) halves is one
contiguous load or store. In element order, the vectorized loops interleaved the two halves on the way in
(``vunpcklps``/``vunpckhps`` + ``vperm2f128``) and separated them on the way out (``vshufps`` + ``vpermpd``):
bf16 softmax's exp pass and write pass, 8 shuffles per 16 elements on Zen 3's two shuffle pipes.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

from llvmlite import ir

from neuroncc.codegen.llvm.affine import Affine
from neuroncc.codegen.llvm.kernel_plan import Computed, KernelPlan, MapStage, Stage
from neuroncc.codegen.llvm.scalars import I16, I32
from neuroncc.codegen.llvm.views import Layout
from neuroncc.ir.dtypes import DType
from neuroncc.ir.graph import Value

#: The bits in a half of a word.
HALF_BITS = 16
#: A pair's word is only as aligned as its even element (a 16-bit element's 2 bytes), not as a 32-bit word.
WORD_ALIGN = HALF_BITS // 8


def halfwords(layout: Layout) -> bool:
    """Whether ``layout`` holds 16-bit integers contiguous along its last dim (bf16 bits, or int16 data)."""
    return layout.dtype is DType.i16 and bool(layout.shape) and layout.shape[-1] > 1 and layout.strides[-1] == 1


def pairs_halfwords(plan: KernelPlan, stage: Stage) -> bool:
    """Whether ``stage``'s innermost loop runs over element pairs: its last dim is even and it reads (anywhere in
    the values it computes) or writes a 16-bit buffer whose last dim is as long."""
    n = stage.shape[-1] if stage.shape else 0
    if n < 2 or n % 2:
        return False
    layouts = [target for _, target in stage.items] if isinstance(stage, MapStage) else []
    pending, seen = [root for root, _ in stage.roots], set()
    while pending:
        value = pending.pop()
        if value in seen:
            continue
        seen.add(value)
        access = plan.access.get(value)
        if isinstance(access, Layout):
            layouts.append(access)
        elif isinstance(access, Computed):
            pending += access.op.operands
    return any(halfwords(layout) and layout.shape[-1] == n for layout in layouts)


def pair_ordered_rows(plan: KernelPlan, row_cache: Iterable[Value], stages: Iterable[Stage]) -> frozenset[Value]:
    """The row caches kept in pair order: those over an even last dim whose every stage of that shape (its
    producer and its readers among ``stages``, all of the row loop's) runs its innermost loop over pairs."""
    stages = list(stages)
    return frozenset(value for value in row_cache
                     if value.type.shape and value.type.shape[-1] % 2 == 0
                     and all(pairs_halfwords(plan, stage) for stage in stages if stage.shape == value.type.shape))


def pair_position(em: Any, i: Any, n: int) -> Any:
    """Where element ``i`` of a pair-ordered row of ``n`` (even) elements is: the evens, then the odds. In a
    paired loop, ``i`` = 2k or 2k + 1 and this folds to k or n/2 + k (``affine``); anywhere else it is still
    the same place, only computed."""
    return em.add(em.mul(em.rem(i, 2), n // 2), em.div(i, 2))


@dataclass
class Pair:
    """One iteration of a paired loop: the indices of its two elements (``even`` = 2k from the loop's start,
    ``odd`` = even + 1, with their affine forms) and the even half's stores waiting for their odd halves."""

    even: Any
    odd: Any
    even_form: Affine
    odd_form: Affine
    #: key (the buffer and the even element's offset) -> (the even element's pointer, its 16-bit value)
    pending: dict[Hashable, tuple[ir.Value, ir.Value]] = field(default_factory=dict)

    def half(self, form: Affine) -> int | None:
        """0 or 1 if an index of ``form`` is this pair's even or odd one, else None."""
        if form == self.even_form:
            return 0
        return 1 if form == self.odd_form else None


def half_of(b: ir.IRBuilder, word: ir.Value, half: int) -> ir.Value:
    """The 16-bit element in ``half`` (0: low, 1: high) of a little-endian 32-bit ``word``."""
    return b.trunc(b.lshr(word, ir.Constant(I32, HALF_BITS)) if half else word, I16)


def word_of(b: ir.IRBuilder, even: ir.Value, odd: ir.Value) -> ir.Value:
    """The 32-bit word holding 16-bit ``even`` (low half) and ``odd`` (high half)."""
    return b.or_(b.zext(even, I32), b.shl(b.zext(odd, I32), ir.Constant(I32, HALF_BITS)))
