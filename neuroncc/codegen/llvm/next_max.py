"""Softmax's next row's max taken in this row's exp loop, not in a max pass of its own (Zen 4:
``CpuTarget.takes_the_next_row_max_in_the_exp_loop``).

A float32 softmax row loop is a max pass, the sum of exp(x - max) (the carrier of the next row's prefetches and of
the previous row's delayed write, its exponentials row-cached: ``delayed_writes.py``) and the write. The max pass
only loads and compares, while the exp loop is bound by its FMA pipes (10 FMA-pipe operations per 16 elements on
Zen 4) with its load ports and other pipes idle half the time. Here each vector iteration of row r's fused exp loop
(``DelayedGroups.fused``) also loads the same elements of row r + 1 (of the row loop's thread range; the range's
last row its own) and takes them into the running max and the NaN magnitudes, in vector lanes on the stack (kept in
registers), exactly as the max pass's ``reductions._extreme`` update does (on Zen 4 the max alone, the rows' NaNs
found by their sums: ``CpuTarget.finds_next_row_max_nans_by_the_sum``, ``nan_rows.py``); after the row's exp loop
they are reduced and the max stored where the max pass stores it. The range's first row runs the max pass for
itself and for the row after it; no other row runs it. The max is the same value (max is exact; a NaN row's max is
NaN by its magnitudes as before), so the exponentials, the sum and the output are the same bits. The exp loop's
prefetches go two rows ahead (:data:`ROWS_AHEAD`): the next row's loads then find it in the L2 (one row ahead, as
before, they came right after its prefetches and waited for memory). The input is read while exponentials are
computed instead of in a pass of loads alone: on rows in the L2 the kernel gains little (0.96-0.98 of the time at 1
thread), on rows from memory 0.81-0.89 (Zen 4, session 35; ``CpuTarget.takes_the_next_row_max_in_the_exp_loop``).

bf16 rows (their write a loop of its own, words in pairs) take the next row's widened words in the exp loop's own
vectorized loop (:meth:`MaxAhead.add_element`, ``prefetch.spread_loop``), a max without the magnitudes as their max
pass (``nan_rows.py``: a row whose sum is NaN runs its max pass again with them, and its exp pass where that max
differs).

:func:`next_row_max` is the decision, :class:`MaxAhead` its code (the emitter's ``max_ahead`` while a row's exp loop
is emitted: ``EmitContext.max_ahead``).

May import: the code generator's modules below ``emit``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from llvmlite import ir

from neuroncc.codegen.llvm.kernel_plan import ReduceStage, RowLoop
from neuroncc.codegen.llvm.nan_rows import AMAX_WITHOUT_NAN_FLAG, finds_nans_by_the_sum
from neuroncc.codegen.llvm.reductions import COMBINERS
from neuroncc.codegen.llvm.scalars import F32, I32, call, intrinsic, round_to
from neuroncc.hardware.host import CACHE_LINE_BYTES
from neuroncc.hardware.loop_choices import MEMORY_BURST_LINES
from neuroncc.ir.dtypes import DType

#: Rows ahead that the exp loop prefetches where it takes the next row's max (that row's loads then find it in the
#: L2, prefetched a row before); 1 elsewhere.
ROWS_AHEAD = 2

AMAX = COMBINERS["amax"]


def next_row_max(em: Any, phase: RowLoop) -> ReduceStage | None:
    """The max stage (stage 0) whose next row's max the exp loop takes (see the module docstring), or None: a row
    loop of one outer dim, stage 0 an amax over the row's last dim that fills no row cache, stage 1 (the carrier) a
    float sum over the same row, stage 2 its delayed write (``delayed_writes.py``); float32 rows and outputs with
    the write fused into the exp loop (``CpuTarget.writes_delayed_elements_in_the_exp_loop``), with the max's own NaN
    magnitudes or without them (``CpuTarget.finds_next_row_max_nans_by_the_sum``: ``nan_rows.py``), or 16-bit rows
    (bf16 words widened) whose NaNs the row's sum finds (``nan_rows.py``: a flagless max); rows of two or more whole
    prefetch groups (``prefetch.spread_loop``: 256 float32, 512 bf16); the target's choice."""
    if not em.target.takes_the_next_row_max_in_the_exp_loop:
        return None
    if em._carrier != 1 or em._delayed != 2 or len(phase.outer) != 1 or len(phase.stages) != 3:
        return None
    first, carrier, write = phase.stages
    if not (isinstance(first, ReduceStage) and COMBINERS.get(first.op.name) is AMAX and isinstance(carrier, ReduceStage)
            and first.op.operands[0].type.dtype is DType.f32 and first.reduced == (1,) == carrier.reduced
            and len(first.shape) == 2 and first.shape == carrier.shape):
        return None
    if 0 in em._row_cache.values():  # (a row cache the max pass fills: widened bf16 rows kept for the exp pass)
        return None
    if all(layout.dtype is DType.f32 for layout in em._prefetched) \
            and all(target.dtype is DType.f32 for _, target in write.items):  # (the fused write's: float32)
        group = MEMORY_BURST_LINES * CACHE_LINE_BYTES // 4
        width = em.target.vector_bits // 32 * em.target.polynomial_interleave
        n = first.shape[-1]
        if n % group or n < 2 * group or group % width \
                or not em.target.writes_delayed_elements_in_the_exp_loop:
            return None
        return first
    group = MEMORY_BURST_LINES * CACHE_LINE_BYTES // 2
    if all(layout.dtype.itemsize == 2 for layout in em._prefetched) and finds_nans_by_the_sum(em, phase) \
            and first.shape[-1] % group == 0 and first.shape[-1] >= 2 * group:  # (rows of whole groups, as measured)
        return first  # (bf16 rows: the exp loop's own vectorized loop, a flagless max: ``nan_rows``' sum finds NaNs)
    return None


@dataclass
class MaxAhead:
    """Row ``row``'s exp loop taking the max of the row ``following`` it (``row`` + 1, the range's last row its own;
    outer digits ``following_outer``): lane k of ``values`` and ``magnitudes`` (``width`` of each, on the stack)
    takes the elements k, k + width, ... of that row (:meth:`add`); :meth:`finish` stores their max where
    ``stage`` stores it, unless ``row`` is ``first_row`` (whose exp loop is not fused: the max pass ran for the
    row after it)."""

    em: Any
    stage: ReduceStage
    width: int
    values: ir.Value
    magnitudes: ir.Value
    row: Any
    first_row: Any
    following_outer: list[Any]
    slots: tuple[ir.Value, ir.Value]
    flagless: bool = False
    added: bool = False

    def _vector(self, array: ir.Value, element: ir.Type) -> ir.Value:
        return self.em.b.bitcast(array, ir.VectorType(element, self.width).as_pointer())

    def start(self) -> None:
        b = self.em.b
        init = AMAX.init(DType.f32)
        for array, value, element in ((self.values, init[0], F32), (self.magnitudes, init[1], I32)):
            b.store(ir.Constant(ir.VectorType(element, self.width), [value] * self.width),
                    self._vector(array, element))
        for slot, value in zip(self.slots, init):
            b.store(value, slot)

    def add_element(self, i: Any) -> None:
        """Element ``i`` of the following row into the scalar slots (a loop LLVM vectorizes, which keeps vector
        accumulators and reduces them after the loop)."""
        self._update(self.slots, i)

    def add(self, k: Any, i: Any) -> None:
        """Element ``i`` of the following row into lane ``k``."""
        em = self.em
        at = [ir.Constant(ir.IntType(64), 0), em.ir_index(k)]
        self._update([em.b.gep(array, at, inbounds=True) for array in (self.values, self.magnitudes)], i)

    def _update(self, accumulators: Any, i: Any) -> None:
        """The max's update (its value and NaN magnitude, or its value alone where flagless) of element ``i`` of the
        following row into the two ``accumulators`` (pointers)."""
        em, b = self.em, self.em.b
        self.added = True
        with em.fresh_values():
            x = em.value_at(self.stage.op.operands[0], list(self.following_outer) + [i])
            combiner = AMAX_WITHOUT_NAN_FLAG if self.flagless else AMAX
            for pointer, value in zip(accumulators, combiner.update(b, DType.f32, [b.load(p) for p in accumulators],
                                                                     x, None)):
                b.store(value, pointer)

    def finish(self) -> None:
        em, b = self.em, self.em.b
        assert self.added, "the exp loop did not take the next row's max"
        with b.if_then(b.icmp_signed(">", em.ir_index(self.row), em.ir_index(self.first_row))):
            values = b.load(self._vector(self.values, F32))
            magnitudes = b.load(self._vector(self.magnitudes, I32))
            vector_max = intrinsic(b.module, f"llvm.vector.reduce.fmax.v{self.width}f32", F32, [values.type])
            vector_umax = intrinsic(b.module, f"llvm.vector.reduce.umax.v{self.width}i32", I32, [magnitudes.type])
            scalar_max = intrinsic(b.module, "llvm.maxnum.f32", F32, [F32, F32])
            accs = [b.call(scalar_max, [b.call(vector_max, [values], fastmath=("nnan", "nsz")), b.load(self.slots[0])],
                           fastmath=("nnan", "nsz")),
                    call(b, "llvm.umax.i32", [b.call(vector_umax, [magnitudes]), b.load(self.slots[1])])]
            value = AMAX.finish(b, DType.f32, accs, math.prod(self.stage.shape[d] for d in self.stage.reduced),
                                self.stage.op.attrs)
            value = round_to(b, value, self.stage.op.result.type.dtype)
            index = list(self.following_outer) + ([0] if self.stage.op.attrs["keepdim"] else [])
            em.store(self.stage.target, index, value)


def row_max_ahead(em: Any, stage: ReduceStage, row: Any, first_row: Any, end: Any, flagless: bool) -> MaxAhead:
    """The :class:`MaxAhead` of row ``row`` of the range [first_row, end)."""
    width = em.target.vector_bits // 32 * em.target.polynomial_interleave
    following = em.min(em.add(row, 1), em.sub(end, 1))
    arrays = [em.alloca(element, width) for element in (F32, I32)]
    for array in arrays:
        array.align = CACHE_LINE_BYTES
    return MaxAhead(em, stage, width, *arrays, row, first_row, [following], (em.alloca(F32), em.alloca(I32)), flagless)
