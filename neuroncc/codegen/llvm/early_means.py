"""A variance's mean pass run a row early (``CpuTarget.means_a_row_early``): the row loop's first stage is a
variance over a widened bf16 row whose mean pass stores its mean; each row's iteration runs that pass over the next
row, after this row's deviation pass, so the deviation pass never waits on the mean's reduction. What the row loop's
emitter (``emit.KernelEmitter``) asks: whether the phase takes it (:func:`mean_a_row_early`), the next row's mean
pass (:func:`emit_next_mean`) and how far ahead its rows are prefetched (:func:`prefetch_rows_ahead`).
"""

from __future__ import annotations

from typing import Any

from neuroncc.codegen.llvm.elementwise import widens_bf16
from neuroncc.codegen.llvm.kernel_plan import Computed, ReduceStage, RowLoop
from neuroncc.codegen.llvm.stages import SharedMean, emit_mean_pass, shared_means

#: How many rows ahead a row loop whose variance's mean pass runs a row early prefetches: the row whose mean the next
#: row's iteration computes (1 row ahead: 3-5% slower than without the early means, Zen 3; 3 rows ahead: within the
#: noise of 2).
EARLY_MEAN_PREFETCH_ROWS = 2
#: The same where the variance takes its sum of squares from that mean pass (``dot_sums.takes_dot_variance``): its
#: row's passes take less time, so the rows prefetched 2 ahead had not arrived (session 40 bfln40: 3 ahead 0.91-0.97
#: of 2's time at 1 thread).
DOT_VARIANCE_PREFETCH_ROWS = 3
#: The same where its mean pass also copies the row's words for the write pass (``word_copies.py``): its write pass
#: no longer reads the input row, and 2 rows ahead measured 0.91-1.00 of 3's time (session 41 bfln41, 1 thread).
WORD_COPY_PREFETCH_ROWS = 2


def mean_a_row_early(em: Any, phase: RowLoop, by_dots: bool = False) -> tuple[int, SharedMean] | None:
    """The variance whose mean pass runs a row early, and the mean stage it stores for: the phase's first stage, the
    one variance that stores its mean, over a widened bf16 row (``by_dots``: the variance takes its squares from that
    pass, ``dot_sums.takes_dot_variance``)."""
    if not em.target.means_a_row_early or em._delayed is not None or em._carrier is not None:
        return None
    storing = [(number, shared) for number, shared in shared_means(phase.stages).items() if shared.stores]
    if len(storing) != 1 or storing[0][0] != 0:
        return None
    variance = phase.stages[0]
    if variance.op not in em._deviations and not by_dots:  # (the write pass would subtract the mean slot, by
        return None  # then the next row's: only cached deviations or the row's own slot, ``takes_dot_variance``)
    if len(variance.shape) - len(variance.reduced) != len(phase.outer):  # (its mean pass loops over rows only:
        return None  # not a row loop over blocks of them, as where a token's row is also selected: BERT's CLS)
    operand = em.plan.access.get(storing[0][1].stage.op.operands[0])
    return storing[0] if isinstance(operand, Computed) and widens_bf16(operand.op) else None


def emit_next_mean(em: Any, phase: RowLoop, row: Any) -> None:
    """The early variance's mean pass over ``row`` (flat), stored for its deviation pass, if ``row`` is in the
    thread's range."""
    assert em._early_mean is not None
    number, shared = em._early_mean
    stage = phase.stages[number]
    assert isinstance(stage, ReduceStage)
    with em.fresh_values(), em.b.if_then(em.b.icmp_signed("<", em.ir_index(row), em._range[1])):
        saved, em._stage_number = em._stage_number, number
        emit_mean_pass(em, stage, shared, em.digits(row, phase.outer))
        em._stage_number = saved


def prefetch_rows_ahead(em: Any) -> int:
    """Rows ahead of this one whose lines the row loop's bursts prefetch."""
    if em._early_mean is None:
        return 1
    if em._squares is None:
        return EARLY_MEAN_PREFETCH_ROWS
    return DOT_VARIANCE_PREFETCH_ROWS if em._word_copies is None else WORD_COPY_PREFETCH_ROWS
