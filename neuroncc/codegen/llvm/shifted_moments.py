"""A float32 variance's mean and sum of squared deviations in one pass over its row (shifted sums).

A variance on the registers path that computes its own mean (``stages.SharedMean``: LayerNorm's var_mean) reads its
row twice: a mean pass (one add per vector), then a deviation pass (x - mean, its square, the add: two adds and a
multiply per vector) once the mean's horizontal sum and division are done. :func:`one_pass_variance` reads it once:
per element x of the row (float32 partials per ``stages.CHUNK``, float64 totals, as the two passes)

    S0 += x                      the mean's sum, the same adds in the same lanes as the mean pass (its bits)
    d   = x - c
    S1 += d
    S2  = fma(d, d, S2)

with c the mean of the row's first ``SHIFT_ELEMENTS`` elements: three adds and an FMA per vector, as many adds as the
two passes' (one, then a subtraction and an add) but one loop over the row, and no wait for the mean's horizontal
sum and division between two loops. (x - c by an FMA, x * 1 - c with the 1 made opaque, would move a third of the
adds to the FMA pipes: measured no faster on Zen 4, where the loop is not what bounds the row.) Then, in float64,
M2 = S2 - S1 * S1 / n: the sum of squared deviations from the row's mean c + S1 / n. Its rounding error is S2's
times 1 + (mean - c)^2 / variance (the cancellation); the shift keeps that small for rows whose mean is large
against their spread (where the sum of x^2 less n mean^2 would lose every bit), and the variance is taken about
the mean in float64, not about its float32 rounding as the two passes take it (rows whose mean is 10^4 to 10^5
times their spread: the two passes' variance off by 4e-6 to 7e-4 of itself, this one's within float32's
tolerance). Where (mean - c)^2 > ``FALLBACK_RATIO`` * variance (an outlier among the row's first elements: with c
the mean of 16, rare for rows of independent values), or the sums are not finite, the row runs the deviation pass
(``stages._Reducer._float_total``) from the stored mean: the two passes' bits there. The mean stored for the mean
stage is S0's, the two passes' bits everywhere.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir

from neuroncc.codegen.llvm.kernel_plan import ReduceStage
from neuroncc.codegen.llvm.pairs import pairs_halfwords
from neuroncc.codegen.llvm.reductions import COMBINERS, REASSOC
from neuroncc.codegen.llvm.scalars import F32, F64
from neuroncc.ir.dtypes import DType

#: The shift c is the mean of the row's first this many elements (fewer in shorter rows).
SHIFT_ELEMENTS = 16
#: A row whose (mean - c)^2 exceeds this times its variance takes the deviation pass again (see the docstring).
FALLBACK_RATIO = 1.0


def takes_one_pass(em: Any, stage: Any, carried: bool) -> bool:
    """Whether a variance ``stage`` that computes its own mean reads its row once (``CpuTarget.takes_the_variance_in
    _one_pass``): a float32 operand on the registers path, not over element pairs, and not the stage carrying the
    row's prefetches or delayed writes (``carried``)."""
    if not isinstance(stage, ReduceStage):
        return False
    operand = stage.op.operands[0]
    return (em.target.takes_the_variance_in_one_pass and COMBINERS[stage.op.name].two_pass and not carried
            and operand.type.dtype is DType.f32 and bool(stage.reduced)
            and max(stage.reduced) == len(stage.shape) - 1 and not pairs_halfwords(em.plan, stage))


def one_pass_variance(reducer: Any, idx: list[Any], store_mean: Any, step: int) -> ir.Value:
    """The float64 sum of squared deviations of ``reducer``'s row at ``idx`` (``stages._Reducer``; its finish divides
    it; ``step``: elements per float32 partial, ``stages.CHUNK``), after ``store_mean(mean)`` stored the row's float32
    mean (S0's) where its mean stage reads it."""
    em = reducer.em
    b = em.b
    totals = [em.alloca(F64) for _ in range(3)]
    for total in totals:
        b.store(ir.Constant(F64, 0.0), total)
    innermost, n = reducer.reduced[-1], reducer.shape[reducer.reduced[-1]]
    first = list(idx)
    for d in reducer.reduced:
        first[d] = 0
    k = max(1, min(n, SHIFT_ELEMENTS))
    head = []
    for i in range(k):
        first[innermost] = i
        head.append(reducer._x(list(first)))
    while len(head) > 1:  # (pairwise: a chain of 4 adds for 16, not 15, before the loop's deviations can start)
        head = [b.fadd(head[j], head[j + 1]) if j + 1 < len(head) else head[j] for j in range(0, len(head), 2)]
    shift = head[0]
    shift = b.fmul(shift, ir.Constant(F32, 1.0 / k)) if k > 1 else shift

    def chunk(full: list[Any], lo: Any, hi: Any) -> None:
        partials = [em.alloca(F32) for _ in range(3)]
        for partial in partials:
            em.b.store(ir.Constant(F32, 0.0), partial)

        def add(i: Any) -> None:
            bb = em.b
            inner = list(full)
            inner[innermost] = i
            x = reducer._x(inner)
            deviation = bb.fsub(x, shift)
            s0, s1, s2 = (bb.load(p) for p in partials)
            bb.store(bb.fadd(s0, x, flags=REASSOC), partials[0])
            bb.store(bb.fadd(s1, deviation, flags=REASSOC), partials[1])
            bb.store(bb.fadd(s2, bb.fmul(deviation, deviation, flags=REASSOC), flags=REASSOC), partials[2])

        elements = lambda start, stop, body: em.innermost_loop(start, stop, body, reducer.stage)  # noqa: E731
        split = reducer._aligned_start(full, lo, hi)  # (the mean pass's split: S0 adds as it does)
        if split is not None:
            elements(lo, split, add)
            lo = split
        elements(lo, hi, add)
        for total, partial in zip(totals, partials):
            em.b.store(em.b.fadd(em.b.load(total), em.b.fpext(em.b.load(partial), F64)), total)

    def outer_dims(full: list[Any]) -> None:
        if n <= step:
            chunk(full, 0, n)
        else:
            em.loop(0, -(-n // step), lambda c: chunk(full, em.mul(c, step), em.min(em.add(em.mul(c, step), step), n)))

    reducer._reduced_loops(idx, outer_dims, reducer.reduced[:-1])
    em.row_cache_filled(reducer.op.operands[0])  # (a fallback pass loads what the pass stored)
    em.next_pass()  # (a burst counted for a second pass, if any: ``stages.passes_over_row``)
    b = em.b
    s0, s1, s2 = (b.load(total) for total in totals)
    count = ir.Constant(F64, float(max(reducer.count, 1)))
    mean = b.fptrunc(b.fdiv(s0, count), F32)
    store_mean(mean)
    squares = b.fdiv(b.fmul(s1, s1), count)  # n (mean - c)^2
    m2 = b.fsub(s2, squares)
    result = em.alloca(F64)
    b.store(m2, result)
    # (not finite, or too much cancelled: ``ugt`` is true for NaN; a negative m2 falls back too)
    again = b.fcmp_unordered(">", squares, b.fmul(m2, ir.Constant(F64, FALLBACK_RATIO)))
    with em.fresh_values(), b.if_then(again, likely=False):
        em.b.store(reducer._float_total(idx, mean), result)
    return em.b.load(result)


__all__ = ["FALLBACK_RATIO", "SHIFT_ELEMENTS", "one_pass_variance", "takes_one_pass"]
