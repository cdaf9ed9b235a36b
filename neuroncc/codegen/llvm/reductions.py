"""Reduction combiners: accumulator types, initial values, update and finish, one table entry per op.

Float sums (sum, mean, var) accumulate in float32 inside a vectorized chunk (``reassoc`` lets the vectorizer
keep one partial sum per lane) and add chunk totals in float64, so long reductions stay within float32
tolerances. amax/amin keep a NaN flag beside a ``maxnum``/``minnum`` accumulator (NaN propagates, as in torch,
and the loop vectorizes to plain vmaxps); argmax/argmin
keep (value, index) and let the first NaN win, as numpy and torch do.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llvmlite import ir

from neuroncc.codegen.llvm.scalars import F32, F64, I1, I32, I64, call, compute_type, intrinsic, is_unsigned, type_suffix
from neuroncc.ir.dtypes import DType

REASSOC = ("reassoc", "contract")


@dataclass(frozen=True)
class Combiner:
    slots: Callable[[DType], list[ir.Type]]
    init: Callable[[DType], list[ir.Constant]]
    update: Callable[[ir.IRBuilder, DType, list[ir.Value], ir.Value, ir.Value], list[ir.Value]]
    finish: Callable[[ir.IRBuilder, DType, list[ir.Value], int, Any], ir.Value]
    float_sum: bool = False  # float32 chunk partials + float64 total (for float inputs)
    two_pass: bool = False  # var: a first pass computes the mean
    is_first_pass: bool = False  # mean: its float32 result is exactly a two-pass combiner's first pass
    merges_partials: bool = False  # ``update`` merges another partial accumulator (collapsed): parallel partials
    column_split: bool = True  # the column-split refinement may divide the kept columns among threads
    collapse: Callable[[ir.IRBuilder, DType, list[ir.Value]], ir.Value] = lambda b, dtype, accs: accs[0]
    """One value of slot 0's type standing for all accumulators (a partial result that ``update`` can merge)."""


def _int_limits(dtype: DType) -> tuple[int, int]:
    if is_unsigned(dtype):
        return 0, (1 << (dtype.itemsize * 8)) - 1
    bits = dtype.itemsize * 8
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def _sum_slots(dtype: DType) -> list[ir.Type]:
    return [F64] if dtype.is_float else [compute_type(dtype)]


def _zero(dtype: DType) -> list[ir.Constant]:
    return [ir.Constant(F64, 0.0)] if dtype.is_float else [ir.Constant(compute_type(dtype), 0)]


def _sum_update(b, dtype, accs, x, pos):
    if dtype.is_float:
        return [b.fadd(accs[0], b.fpext(x, F64), flags=REASSOC)]
    return [b.add(accs[0], x)]


def _sum_finish(b, dtype, accs, count, attrs):
    return b.fptrunc(accs[0], F32) if dtype.is_float else accs[0]


def _mean_finish(b, dtype, accs, count, attrs):
    return b.fptrunc(b.fdiv(accs[0], ir.Constant(F64, float(count))), F32)


def _var_finish(b, dtype, accs, count, attrs):
    return b.fptrunc(b.fdiv(accs[0], ir.Constant(F64, float(max(count - attrs["correction"], 0)))), F32)


def _prod_init(dtype):
    return [ir.Constant(F64, 1.0)] if dtype.is_float else [ir.Constant(compute_type(dtype), 1)]


def _prod_update(b, dtype, accs, x, pos):
    if dtype.is_float:
        return [b.fmul(accs[0], b.fpext(x, F64), flags=REASSOC)]
    return [b.mul(accs[0], x)]


def _extreme(which: str) -> tuple[Callable, Callable]:
    """init and update for amax (which='max') / amin ('min')."""

    def init(dtype):
        if dtype.is_float:  # the running max/min and the largest magnitude bits (see ``_extreme_slots``)
            return [ir.Constant(F32, -math.inf if which == "max" else math.inf), ir.Constant(I32, 0)]
        if dtype.is_bool:
            return [ir.Constant(I1, 0 if which == "max" else 1)]
        low, high = _int_limits(dtype)
        value = low if which == "max" else high
        width = compute_type(dtype).width
        return [ir.Constant(compute_type(dtype), value - (1 << width) if value >= 1 << (width - 1) else value)]

    def update(b, dtype, accs, x, pos):
        acc = accs[0]
        if dtype.is_float:
            # maxnum with nnan vectorizes to plain vmaxps (llvm.maximum needs ~6 ops per vector); NaN is
            # tracked on the side, and the poisoned max it may leave is discarded by ``_extreme_finish``.
            fn = intrinsic(b.module, f"llvm.{which}num.f32", F32, [F32, F32])
            magnitude = b.and_(b.bitcast(x, I32), ir.Constant(I32, 0x7FFFFFFF))
            largest = call(b, "llvm.umax.i32", [accs[1], magnitude])
            return [b.call(fn, [acc, x], fastmath=("nnan", "nsz")), largest]
        if dtype.is_bool:
            return [b.or_(acc, x) if which == "max" else b.and_(acc, x)]
        prefix = "u" if is_unsigned(dtype) else "s"
        return [call(b, f"llvm.{prefix}{which}.{type_suffix(acc.type)}", [acc, x])]

    return init, update


def _truthy(b, dtype: DType, x: ir.Value) -> ir.Value:
    if dtype.is_bool:
        return x
    if dtype.is_float:
        return b.fcmp_unordered("!=", x, ir.Constant(F32, 0.0))
    return b.icmp_unsigned("!=", x, ir.Constant(x.type, 0))


def _arg(which: str) -> Combiner:
    init_value, _ = _extreme(which)

    def slots(dtype):
        return [compute_type(dtype), I64]

    def init(dtype):
        return [init_value(dtype)[0], ir.Constant(I64, 0)]

    def update(b, dtype, accs, x, pos):
        best, index = accs
        if dtype.is_float:
            better = b.fcmp_ordered(">" if which == "max" else "<", x, best)
            nan_first = b.and_(b.fcmp_unordered("uno", x, x), b.fcmp_ordered("ord", best, best))
            better = b.or_(better, nan_first)
        else:
            compare = b.icmp_unsigned if is_unsigned(dtype) else b.icmp_signed
            better = compare(">" if which == "max" else "<", x, best)
        return [b.select(better, x, best), b.select(better, pos, index)]

    def finish(b, dtype, accs, count, attrs):
        return accs[1]

    return Combiner(slots, init, update, finish, column_split=False)  # (value, index) pairs stay whole


def _identity_finish(b, dtype, accs, count, attrs):
    return accs[0]


def _extreme_finish(b, dtype, accs, count, attrs):
    return _extreme_collapse(b, dtype, accs)


def _extreme_collapse(b, dtype, accs):
    if dtype.is_float:
        return b.select(b.icmp_unsigned(">", accs[1], _INF_BITS), ir.Constant(F32, math.nan), accs[0])
    return accs[0]


_INF_BITS = ir.Constant(I32, 0x7F800000)


def _extreme_slots(dtype: DType) -> list[ir.Type]:
    """A float amax/amin keeps its running max and the largest magnitude bits seen (``bits & 0x7fffffff`` as an
    unsigned i32): a NaN was seen when they exceed infinity's. Two integer instructions per vector beside the
    vmaxps (and, umax); an i1 "seen NaN" flag vector was narrowed and packed every iteration on AVX2 (four)."""
    return [F32, I32] if dtype.is_float else [compute_type(dtype)]


_MAX_INIT, _MAX_UPDATE = _extreme("max")
_MIN_INIT, _MIN_UPDATE = _extreme("min")

#: Reduction op -> combiner (one entry per op).
COMBINERS: dict[str, Combiner] = {
    "sum": Combiner(_sum_slots, _zero, _sum_update, _sum_finish, float_sum=True, merges_partials=True),
    "mean": Combiner(_sum_slots, _zero, _sum_update, _mean_finish, float_sum=True, merges_partials=True,
                     is_first_pass=True),
    "var": Combiner(_sum_slots, _zero, _sum_update, _var_finish, float_sum=True, two_pass=True),
    "prod": Combiner(_sum_slots, _prod_init, _prod_update, _sum_finish),
    "amax": Combiner(_extreme_slots, _MAX_INIT, _MAX_UPDATE, _extreme_finish, collapse=_extreme_collapse,
                     merges_partials=True),
    "amin": Combiner(_extreme_slots, _MIN_INIT, _MIN_UPDATE, _extreme_finish, collapse=_extreme_collapse,
                     merges_partials=True),
    "any": Combiner(lambda d: [I1], lambda d: [ir.Constant(I1, 0)],
                    lambda b, d, accs, x, pos: [b.or_(accs[0], _truthy(b, d, x))], _identity_finish,
                    merges_partials=True),
    "all": Combiner(lambda d: [I1], lambda d: [ir.Constant(I1, 1)],
                    lambda b, d, accs, x, pos: [b.and_(accs[0], _truthy(b, d, x))], _identity_finish,
                    merges_partials=True),
    "argmax": _arg("max"),
    "argmin": _arg("min"),
}


def _max_without_nan_bits(b, dtype, accs, x, pos):
    """``_MAX_UPDATE``'s max slot alone (the same ``maxnum``: the same vmaxps)."""
    fn = intrinsic(b.module, "llvm.maxnum.f32", F32, [F32, F32])
    return [b.call(fn, [accs[0], x], fastmath=("nnan", "nsz"))]


#: A float32 amax without the NaN bits: a poisoned max where it met a NaN (the online log-sum-exp's block max
#: loops, which find NaN rows by their total: ``online.online_total``).
MAX_WITHOUT_NAN_BITS = Combiner(lambda dtype: [F32], lambda dtype: _MAX_INIT(dtype)[:1], _max_without_nan_bits,
                                _identity_finish)


@dataclass(frozen=True)
class RowSum:
    """The element body of a float sum whose loop adds each element's ``term(i)`` into ``partial`` (a float32 stack
    slot) with ``reassoc``: LLVM's vectorizer keeps a vector of partial sums per interleaved part, the first starting
    from the slot's value in its lane 0 and -0.0 elsewhere, and reduces them after the loop. A loop that takes the
    elements a vector iteration at a time (``delayed_writes.DelayedGroups.fused``) adds them by :class:`LaneSums`."""

    b: ir.IRBuilder
    partial: ir.Value
    term: Callable[[Any], ir.Value]

    def __call__(self, i: Any) -> None:
        self.b.store(self.b.fadd(self.b.load(self.partial), self.term(i), flags=REASSOC), self.partial)


@dataclass(frozen=True)
class LaneSums:
    """A :class:`RowSum`'s loop, vectorized with ``lanes`` float32 per vector and ``parts`` vectors per iteration,
    written out: lane k of ``array`` (``lanes * parts`` float32 on the stack) adds the elements k, k + lanes * parts,
    ... of the loop in order (:meth:`add`, no ``reassoc``: nothing may regroup them), from the slot's value in lane 0
    and -0.0 elsewhere (:meth:`start`); :meth:`finish` combines the parts as the vectorizer does (part 1 + part 0,
    part 2 + that, ...; a lane NaN in both keeps the later part's NaN, as the vectorizer's code does on x86, whichever
    operand order LLVM gives the add), reduces the vector by ``llvm.vector.reduce.fadd`` and stores the sum into the
    slot. The same additions in the same order as :class:`RowSum`'s vectorized loop (the same bits, NaN payloads
    too), where the loop's elements run a vector iteration at a time beside other work: LLVM would otherwise reduce
    each iteration's sum horizontally (another order, and a chain of ~30 cycles per iteration on Zen 4)."""

    row_sum: RowSum
    lanes: int
    parts: int
    array: ir.Value

    def _part(self, part: int) -> ir.Value:
        b = self.row_sum.b
        element = b.gep(self.array, [ir.Constant(I64, 0), ir.Constant(I64, part * self.lanes)], inbounds=True)
        return b.bitcast(element, ir.VectorType(F32, self.lanes).as_pointer())

    def start(self) -> None:
        b, vector = self.row_sum.b, ir.VectorType(F32, self.lanes)
        zeros = ir.Constant(vector, [ir.Constant(F32, -0.0)] * self.lanes)
        first = b.insert_element(zeros, b.load(self.row_sum.partial), ir.Constant(I32, 0))
        for part in range(self.parts):
            b.store(first if part == 0 else zeros, self._part(part))

    def add(self, k: Any, i: Any) -> None:
        """Element ``i`` of the loop, lane ``k`` of the array (its place in the vector iteration)."""
        b = self.row_sum.b
        lane = b.gep(self.array, [ir.Constant(I64, 0), k if isinstance(k, ir.Value) else ir.Constant(I64, k)],
                     inbounds=True)
        b.store(b.fadd(b.load(lane), self.row_sum.term(i)), lane)

    def finish(self) -> None:
        b = self.row_sum.b
        total = b.load(self._part(0))
        for part in range(1, self.parts):
            # (x86 returns the first operand's NaN where both are NaN, and LLVM may swap an fadd's operands: where
            # part p is NaN (quiet: a sum), it is taken as the vectorizer's part p + total gives it)
            later = b.load(self._part(part))
            total = b.select(b.fcmp_unordered("uno", later, later), later, b.fadd(later, total))
        reduce = intrinsic(b.module, f"llvm.vector.reduce.fadd.v{self.lanes}f32", F32, [F32, total.type])
        b.store(b.call(reduce, [ir.Constant(F32, -0.0), total], fastmath=REASSOC), self.row_sum.partial)
