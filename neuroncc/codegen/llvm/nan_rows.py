"""Softmax's row max without its NaN bookkeeping, the row's NaNs found by its sum instead (AVX2:
``CpuTarget.finds_row_nans_by_the_sum``; bf16 rows on Zen 4: ``CpuTarget.finds_bf16_row_nans_by_the_sum``; float32
rows on Zen 4 whose exp loop takes the next row's max, ``next_max.py``:
``CpuTarget.finds_next_row_max_nans_by_the_sum``).

A float amax keeps, beside its running max, the largest magnitude bits it has seen (``reductions._extreme``): two
integer instructions per vector that say whether the row holds a NaN, whose max is then NaN. In a softmax-like row
loop (a max pass, then the sum of row-cached exp(x - max) carrying the previous row's delayed write) a NaN in the row
makes every exponential it enters NaN, so the row's sum is NaN too. So the max pass runs without the magnitudes
(:data:`AMAX_WITHOUT_NAN_FLAG`), and where the row's sum is NaN (a NaN in the row, or a sum that is NaN for other
reasons: -inf - -inf) the max pass runs once more as it always ran, with the magnitudes, and where that max differs
in bits from the flagless one the exp pass too, without the prefetches and the delayed write the first exp pass
carried: the same max, exponentials and sum, bit for bit. A row without NaN has the same max either way (the same
vmaxps), so the same everything: a wholly -inf row (fully masked attention) runs its exp pass once
(``CpuTarget.reruns_the_exp_pass_only_for_another_max``, session 28; before it both passes ran twice).

May import: the code generator's modules below ``emit``.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from typing import Any

from llvmlite import ir

from neuroncc.codegen.llvm.elementwise import widens_bf16
from neuroncc.codegen.llvm.kernel_plan import Computed, ReduceStage, RowLoop
from neuroncc.codegen.llvm.reductions import COMBINERS

AMAX = COMBINERS["amax"]


def _max_only(b, dtype, accs, x, pos):
    updated = AMAX.update(b, dtype, accs, x, pos)
    return [updated[0], accs[1]] if dtype.is_float else updated


#: amax without the magnitude bits beside its running max (they stay at their start: no NaN seen)
AMAX_WITHOUT_NAN_FLAG = replace(AMAX, update=_max_only)


def finds_nans_by_the_sum(em: Any, phase: RowLoop, next_max: bool = False) -> bool:
    """Whether ``phase`` is a row loop whose float max pass (stage 0) the sum of exponentials (stage 1, the carrier of
    a delayed write) follows, and the target finds its rows' NaNs by that sum (every such row's:
    ``CpuTarget.finds_row_nans_by_the_sum``; a max pass over a bf16 row widened:
    ``CpuTarget.finds_bf16_row_nans_by_the_sum``; ``next_max``, a max the exp loop takes a row ahead
    (``next_max.py``): ``CpuTarget.finds_next_row_max_nans_by_the_sum``)."""
    target = em.target
    every = target.finds_row_nans_by_the_sum or (next_max and target.finds_next_row_max_nans_by_the_sum)
    if not (every or target.finds_bf16_row_nans_by_the_sum) or em._carrier != 1 or em._delayed is None:
        return False
    first, carrier = phase.stages[0], phase.stages[1]
    if not (isinstance(first, ReduceStage) and COMBINERS.get(first.op.name) is AMAX
            and first.op.operands[0].type.dtype.is_float and isinstance(carrier, ReduceStage)
            and COMBINERS[carrier.op.name].float_sum and not COMBINERS[carrier.op.name].two_pass):
        return False
    if every:
        return True
    access = em.plan.access.get(first.op.operands[0])
    return target.finds_bf16_row_nans_by_the_sum and isinstance(access, Computed) and widens_bf16(access.op)


@contextlib.contextmanager
def max_without_nan_flag(em: Any):
    """Reductions emitted inside take amax as :data:`AMAX_WITHOUT_NAN_FLAG`."""
    saved, em.flagless_amax = em.flagless_amax, True
    try:
        yield
    finally:
        em.flagless_amax = saved


def redo_nan_row(em: Any, phase: RowLoop, outer: list[Any], depth: int, emit_stage) -> None:
    """Where the row's sum (stage 1's result) is NaN: stage 0 once more as it is emitted without this module, and
    where its max differs in bits from the flagless one (a NaN in the row the flagless max did not take), stage 1
    once more too, both without the carried prefetches and delayed write (``emit_stage(number)`` emits one).

    A row whose sum is NaN without a NaN in it (all -inf: fully masked attention rows; +inf in it) has the same max
    both ways, so the same exponentials and sum: its exp pass is not run again (session 28: such a row cost ~2.4x a
    plain row with both passes run twice)."""
    carrier, first = phase.stages[1], phase.stages[0]
    index = list(outer[:depth]) + [0] * (len(carrier.shape) - depth)
    max_index = list(outer[:depth]) + [0] * (len(first.shape) - depth)
    total = em.load(carrier.target, index)
    with em.fresh_values(), em.b.if_then(em.b.fcmp_unordered("uno", total, total), likely=False):
        saved = em._ahead, em._after_group
        em._ahead, em._after_group = (), None
        try:
            if not em.target.reruns_the_exp_pass_only_for_another_max:
                for number in (0, 1):
                    em._stage_number, em._filled = number, set()
                    emit_stage(number)
                return
            flagless = _bits(em.b, em.load(first.target, max_index))
            em._stage_number, em._filled = 0, set()
            emit_stage(0)
            flagged = _bits(em.b, em.load(first.target, max_index))
            with em.b.if_then(em.b.icmp_unsigned("!=", flagged, flagless), likely=False):
                em._stage_number, em._filled = 1, set()
                emit_stage(1)
        finally:
            em._ahead, em._after_group = saved


def _bits(b, value):
    """A float's bits as an integer of its width (NaN payloads compared too)."""
    return b.bitcast(value, ir.IntType(64 if isinstance(value.type, ir.DoubleType) else 32))
