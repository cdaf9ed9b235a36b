"""A row's bf16 words copied by its early mean pass into a stack row placed past the output rows, for its write pass
(``CpuTarget.copies_bf16_rows_for_the_write_pass``: bf16 LayerNorm's variance from its mean pass's squares on Zen 4,
``dot_sums.takes_dot_variance``).

That write pass reads x's words a second time, from the input row, while its own non-temporal stores of the output
row queue for write-combining buffers. A load is checked against the queued stores by its low 12 bits (4K aliasing:
a load 32 to ~300 bytes past a queued store waits for it), so wherever the input rows start a little past the output
rows modulo 4 KiB every load of the write loop waited (torch's heap tensors of one size are often 128 bytes apart).
The mean pass loads every word of the row once already (``dot_sums.dot_summed``); it stores each vector too into one
of two stack rows (the mean pass runs a row ahead of the write pass: row r's copy is the one of r's parity), placed
as the weight and bias are (``row_buffers.write_buffer_shift``), and the write pass loads the words from there.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from llvmlite import ir

from neuroncc.codegen.llvm.elementwise import reinterprets_words_as_bf16, widens_bf16
from neuroncc.codegen.llvm.kernel_plan import Computed, RowLoop
from neuroncc.codegen.llvm.row_buffers import stack_row
from neuroncc.codegen.llvm.scalars import I16, I64
from neuroncc.codegen.llvm.views import Layout


class WordCopies(NamedTuple):
    """The two stack rows of ``words``' copies (``rows``: a [2 x row] i16 array) and the stage that reads them."""

    words: Layout
    rows: ir.Value
    reader: int


def copied_words(em: Any, phase: RowLoop, shift: ir.Value | None) -> WordCopies | None:
    """The copies of the row loop's variance's words, allocated here (None: not taken): where the target copies them,
    the phase's variance takes its squares from its early mean pass (``em._squares``), its write buffers are placed
    (``shift``) and its words are a contiguous buffer of the rows' shape, read by the last stage."""
    if not em.target.copies_bf16_rows_for_the_write_pass or em._squares is None or shift is None:
        return None
    words = row_words(em, phase.stages[0].op.operands[0])
    n = phase.stages[0].shape[-1]
    if words is None or not words.is_contiguous or words.shape[-1] != n:
        return None
    return WordCopies(words, stack_row(em, I16, 2 * n, 2, shift), len(phase.stages) - 1)


def row_words(em: Any, value: Any) -> Layout | None:
    """The i16 buffer whose words ``value`` widens to float32 (through a reinterpretation as bf16), else None."""
    widened = em.plan.access.get(value)
    if not (isinstance(widened, Computed) and widens_bf16(widened.op)):
        return None
    words = em.plan.access.get(widened.op.operands[0])
    if isinstance(words, Computed) and reinterprets_words_as_bf16(words.op):
        words = em.plan.access.get(words.op.operands[0])
    return words if isinstance(words, Layout) else None


def copy_row(em: Any, copies: WordCopies, row_start: Any) -> ir.Value:
    """Pointer (i16*) to the first word of the copy of the row whose first element is at ``row_start`` (an element
    offset into the words' buffer): the copy of the row's parity, so the early mean pass of row r + 1 never writes
    the row the write pass of row r reads."""
    b = em.b
    n = copies.words.shape[-1]
    row = b.udiv(em.ir_index(row_start), ir.Constant(I64, n))
    parity = b.and_(row, ir.Constant(I64, 1))
    return b.gep(copies.rows, [ir.Constant(I64, 0), b.mul(parity, ir.Constant(I64, n))], inbounds=True)


__all__ = ["WordCopies", "copied_words", "copy_row", "row_words"]
