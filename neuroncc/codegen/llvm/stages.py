"""Loop nests of reduce and scatter stages (map stages are plain nests in :mod:`emit`).

A reduction whose last input dim is reduced keeps its accumulators in registers: loops over the kept dims,
then the reduced dims with the innermost contiguous loop vectorized (row sums, softmax, LayerNorm). When the
last dim is kept (column sums, bias gradients), the kept trailing dims are accumulated in a stack array of at
most ``TRAILING_MAX`` elements that the innermost loop updates with unit stride, so that case vectorizes too.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llvmlite import ir

from neuroncc.codegen.llvm.context import EmitContext
from neuroncc.codegen.llvm.dot_sums import dot_summed, dot_variance
from neuroncc.codegen.llvm.kernel_plan import (
    ColumnSum, CombinePartials, PartialReduce, ReduceStage, Stage,
)
from neuroncc.codegen.llvm.online import OnlineMax, online_total
from neuroncc.codegen.llvm.pairs import pairs_halfwords
from neuroncc.codegen.llvm.prefetch import spread_loop
from neuroncc.codegen.llvm.nan_rows import AMAX, AMAX_WITHOUT_NAN_FLAG
from neuroncc.codegen.llvm.reductions import COMBINERS, REASSOC, Combiner, RowSum
from neuroncc.codegen.llvm.scalars import F32, F64, I1, I64, round_to
from neuroncc.codegen.llvm.shifted_moments import one_pass_variance, takes_one_pass
from neuroncc.codegen.llvm.views import Layout
from neuroncc.codegen.llvm.widening import multiplied_widening
from neuroncc.ir.dtypes import DType
from neuroncc.ir.types import contiguous_strides

CHUNK = 4096  # float sums: elements per float32 partial before it is added to the float64 total
TRAILING_MAX = 4096  # kept trailing elements accumulated together
#: A float sum of row-cached terms adds them in a loop of their own (see ``_Reducer._sums_row_cache_apart``) on
#: CPUs with fewer vector registers than this (AVX2's 16); with AVX-512's 32 the sum stays in the exp loop.
SUM_IN_LOOP_MIN_REGISTERS = 32
#: Whether the rule above applies at all (a switch for one-process A/Bs: False keeps every sum in its loop).
SUM_ROW_CACHE_APART = True
#: A float sum over a row of unknown alignment starts its vector loop at a vector boundary of the row
#: (``_Reducer._aligned_start``; a switch for one-process A/Bs).
ALIGN_ROW_SUMS = True
#: A max, min or product over the last dim of bf16 bits runs over element pairs (``_Reducer._reduced_loops``; a
#: switch for one-process A/Bs).
PAIRED_SCALAR_REDUCTIONS = True


@dataclass(frozen=True)
class SharedMean:
    """A row loop's ``mean`` stage that a variance over the same rows shares: the variance's first pass
    computes exactly that mean (same float32 chunks, same float64 total, same division), so it either stores
    it for the mean stage (``stores``: the mean comes later, and is not emitted) or reads what the mean stage
    stored (it came first) instead of passing over the rows once more. LayerNorm's var_mean is a var and a
    mean of one row: three passes over it become two."""

    stage: ReduceStage
    stores: bool


def _registers_path(stage: ReduceStage) -> bool:
    """Whether ``emit_reduce`` keeps the stage's accumulators in registers (its last dim is reduced)."""
    return bool(stage.reduced) and max(stage.reduced) == len(stage.shape) - 1


def shared_means(stages: tuple[Stage, ...]) -> dict[int, SharedMean]:
    """Stage number of each variance -> the mean stage it shares (see :class:`SharedMean`)."""
    shared: dict[int, SharedMean] = {}
    stored: set[int] = set()  # mean stages a variance before them stores
    for number, stage in enumerate(stages):
        if not (isinstance(stage, ReduceStage) and COMBINERS[stage.op.name].two_pass and _registers_path(stage)):
            continue
        operand = stage.op.operands[0]
        if operand.type.dtype is not DType.f32 or math.prod(stage.shape[d] for d in stage.reduced) == 0:
            continue
        for other, mean in enumerate(stages):
            if (isinstance(mean, ReduceStage) and COMBINERS[mean.op.name].is_first_pass
                    and mean.op.operands[0] is operand
                    and mean.reduced == stage.reduced and mean.op.result.type.dtype is DType.f32):
                stores = other > number and other not in stored  # else the mean is there when this var runs
                stored.update({other} if stores else set())
                shared[number] = SharedMean(mean, stores)
                break
    return shared


def passes_over_row(stage: Stage, shared_mean: SharedMean | None, one_pass: bool = False) -> int:
    """How many times a row loop's ``stage`` reads its row: 2 for a variance on the registers path that computes its
    own mean first (none shared, or one it stores for the mean stage) in a pass of its own (not ``one_pass``:
    ``shifted_moments.takes_one_pass``), else 1."""
    own_mean = shared_mean is None or shared_mean.stores
    return 2 if not one_pass and isinstance(stage, ReduceStage) and COMBINERS[stage.op.name].two_pass \
        and _registers_path(stage) and own_mean else 1


def emit_mean_pass(em: EmitContext, stage: ReduceStage, shared_mean: SharedMean, outer: list[Any]) -> None:
    """A variance's first pass alone at the outer index ``outer``: its mean, stored for the mean stage it shares
    (``shared_mean``), which its deviation pass then loads (``SharedMean.stores`` False)."""
    reducer = _Reducer(em, stage, alone=True)  # (no row cache it writes is read after it: ``dot_sums.py``)
    idx: list[Any] = list(outer) + [None] * (len(stage.shape) - len(outer))
    reducer.squares = em.variance_squares(stage)  # (its sum of squares too, where the variance takes it)
    if reducer.squares is not None:
        em.b.store(ir.Constant(F64, math.nan), reducer.squares)  # (none taken: the deviation pass)
    total = reducer._float_total(idx, None)
    mean = em.b.fptrunc(em.b.fdiv(total, ir.Constant(F64, float(max(reducer.count, 1)))), F32)
    em.store(shared_mean.stage.target, reducer._out_index(idx, shared_mean.stage.op), mean)


def emit_reduce(em: EmitContext, stage: ReduceStage, outer: list[Any], columns: tuple[Any, Any] | None = None,
                fixed: dict[int, Any] | None = None, shared_mean: SharedMean | None = None,
                online: OnlineMax | None = None) -> None:
    """Emit one reduce stage for the outer index ``outer`` (or, for a split column reduction, for the last-dim
    columns [lo, hi) given by ``columns``; or with the kept dims in ``fixed`` set by the outer loop).
    ``shared_mean``: a variance's mean stage (from :func:`shared_means`; only on the registers path);
    ``online``: the max stage a sum of exp(x - max) computes online (``online.online_maxima``; the same)."""
    fixed = fixed or {}
    shape, reduced = stage.shape, stage.reduced
    rank, k = len(shape), len(outer)
    kept = [d for d in range(rank) if d not in reduced]
    last = max(reduced) if reduced else -1
    trailing = [d for d in kept if d > last]
    looped = [d for d in kept if k <= d < last and d not in fixed]
    while len(trailing) > 1 and math.prod(shape[d] for d in trailing) > TRAILING_MAX:
        looped.append(trailing.pop(0))
    reducer = _Reducer(em, stage)
    assert shared_mean is None or (columns is None and not trailing), "a shared mean is on the registers path"
    reducer.shared_mean = shared_mean
    assert online is None or (columns is None and not trailing), "an online max is on the registers path"
    reducer.online = online

    def body(values: list[Any]) -> None:
        idx: list[Any] = list(outer) + [None] * (rank - k)
        for d, i in fixed.items():
            idx[d] = i
        for d, i in zip(looped, values):
            idx[d] = i
        if columns is not None:
            reducer._trailing_block(idx, trailing, [columns])
        elif trailing:
            reducer.trailing(idx, trailing)
        else:
            reducer.registers(idx)

    em.nest([(0, shape[d]) for d in looped], body)


class _Reducer:
    def __init__(self, em: EmitContext, stage: ReduceStage, alone: bool = False):
        self.em, self.stage, self.op, self.alone = em, stage, stage.op, alone  # (alone: ``emit_mean_pass``'s)
        self.combiner: Combiner = COMBINERS[self.op.name]
        if em.flagless_amax and self.combiner is AMAX:
            self.combiner = AMAX_WITHOUT_NAN_FLAG
        self.dtype = self.op.operands[0].type.dtype
        self.shape = stage.shape
        self.reduced = list(stage.reduced)
        self.count = math.prod(self.shape[d] for d in self.reduced)
        self.float_sum = self.combiner.float_sum and self.dtype.is_float
        self.bounds: dict[int, tuple[Any, Any]] = {}  # restricted [lo, hi) of some reduced dims
        self.shared_mean: SharedMean | None = None
        self.online: OnlineMax | None = None
        self.squares: ir.Value | None = None  # a mean pass's sum of squares' slot (``dot_sums.dot_variance``)

    # -- helpers ----------------------------------------------------------------------------------------

    def _x(self, idx: list[Any], mean: Any = None) -> ir.Value:
        x = self.em.value_at(self.op.operands[0], idx)
        if mean is not None:
            b = self.em.b
            deviation = b.fsub(x, mean)
            self.em.deviation_computed(self.op, idx, deviation)  # (a later stage's x - mean: loaded, not computed)
            x = b.fmul(deviation, deviation)
        return x

    def _position(self, idx: list[Any]) -> Any:
        position: Any = 0
        sizes = [self.shape[d] for d in self.reduced]
        for d, stride in zip(self.reduced, contiguous_strides(tuple(sizes))):
            position = self.em.add(position, self.em.mul(idx[d], stride))
        return self.em.ir_index(position)

    def _out_index(self, idx: list[Any], op: Any = None) -> list[Any]:
        """Where the result of ``op`` (this stage's by default; the same reduced dims) goes for ``idx``."""
        if (op or self.op).attrs["keepdim"]:
            return [0 if d in self.reduced else idx[d] for d in range(len(self.shape))]
        return [idx[d] for d in range(len(self.shape)) if d not in self.reduced]

    def _store(self, idx: list[Any], accs: list[ir.Value]) -> None:
        b = self.em.b
        value = self.combiner.finish(b, self.dtype, accs, self.count, self.op.attrs)
        value = round_to(b, value, self.op.result.type.dtype)
        self.em.store(self.stage.target, self._out_index(idx), value)

    def _reduced_loops(self, idx: list[Any], body: Any, dims: list[int] | None = None, paired: bool = False) -> None:
        """``body(full index)`` over ``dims`` (the reduced dims by default). ``paired``: when the last of them is
        the stage's last dim, its loop runs over element pairs where ``pairs.py`` says so (a max, min or product
        over bf16 rows reads each word once for its two elements: bf16 softmax's max pass widened with
        ``vpmovzxwd`` and a shift per 16 elements, a shuffle with a memory operand, instead of a shift and an and
        per 32); ``body`` still sees every element in order, even before odd."""
        dims = self.reduced if dims is None else dims

        def inner(values: list[Any]) -> None:
            full = list(idx)
            for d, i in zip(dims, values):
                full[d] = i
            body(full)

        ranges = [self.bounds.get(d, (0, self.shape[d])) for d in dims]
        if paired and PAIRED_SCALAR_REDUCTIONS and dims and dims[-1] == len(self.shape) - 1:
            self.em.stage_nest(self.stage, ranges, inner)
        else:
            self.em.nest(ranges, inner)

    # -- accumulators in registers (last dim reduced) -----------------------------------------------------

    def registers(self, idx: list[Any]) -> None:
        if self.online is not None:
            out_index = self._out_index(idx, self.online.stage.op)
            self._store(idx, [online_total(self.em, self.online, idx, out_index, self._x)])
            return
        mean = None
        shared = self.shared_mean
        if self.combiner.two_pass and shared is not None and not shared.stores:
            mean = self.em.load(shared.stage.target, self._out_index(idx, shared.stage.op))
            squares = self.em.variance_squares(self.stage)
            if squares is not None and self.float_sum:  # (its mean pass summed the squares too)
                self._store(idx, [dot_variance(self, idx, mean, squares)])
                return
        elif self.combiner.two_pass and self.float_sum and takes_one_pass(
                self.em, self.stage, bool(self.em.carried_prefetches()) or self.em.carried_writes() is not None):
            self._store(idx, [one_pass_variance(self, idx, lambda mean: None if shared is None else self.em.store(
                shared.stage.target, self._out_index(idx, shared.stage.op), mean), CHUNK)])
            return
        elif self.combiner.two_pass:
            total = self._float_total(idx, None)
            self.em.row_cache_filled(self.op.operands[0])  # (the deviation pass loads it: ``widened_row_cache``)
            self.em.next_pass()
            mean = self.em.b.fptrunc(self.em.b.fdiv(total, ir.Constant(F64, float(max(self.count, 1)))), F32)
            if shared is not None:
                self.em.store(shared.stage.target, self._out_index(idx, shared.stage.op), mean)
        if self.float_sum:
            accs = [self._float_total(idx, mean)]
        else:
            accs = self._scalar_pass(idx)
        self._store(idx, accs)

    def _scalar_pass(self, idx: list[Any]) -> list[ir.Value]:
        em, b = self.em, self.em.b
        slots = [em.alloca(t) for t in self.combiner.slots(self.dtype)]
        for slot, value in zip(slots, self.combiner.init(self.dtype)):
            b.store(value, slot)

        def update(full: list[Any]) -> None:
            accs = [em.b.load(s) for s in slots]
            new = self.combiner.update(em.b, self.dtype, accs, self._x(full), self._position(full))
            for slot, value in zip(slots, new):
                em.b.store(value, slot)

        self._reduced_loops(idx, update, paired=True)
        return [em.b.load(s) for s in slots]

    def _float_total(self, idx: list[Any], mean: Any) -> ir.Value:
        """Float64 total of float32 chunk partials of x (or (x - mean)^2) over the reduced dims. A loop over element
        pairs (``pairs.py``) adds each pair's two terms, then their sum to the partial: one dependent add per pair
        on the partial's chain, not two (bf16 LayerNorm's mean pass was latency-bound with two: 6 cycles per 32
        elements on Zen 3, llvm-mca; 4 with one)."""
        em = self.em
        total = em.alloca(F64)
        em.b.store(ir.Constant(F64, 0.0), total)
        if not self.reduced:
            em.b.store(em.b.fpext(self._x(idx, mean), F64), total)
            return em.b.load(total)
        innermost, n = self.reduced[-1], self.shape[self.reduced[-1]]

        def chunk(full: list[Any], lo: Any, hi: Any) -> None:
            b = em.b
            partial = em.alloca(F32)
            b.store(ir.Constant(F32, 0.0), partial)

            even: list[ir.Value] = []  # over element pairs: the pair's even term, added with the odd one

            def term(i: Any) -> ir.Value:
                inner = list(full)
                inner[innermost] = i
                return self._x(inner, mean)

            row_sum = RowSum(b, partial, term)

            def add(i: Any) -> None:
                half = em.pair_half(i)
                if half is None:
                    row_sum(i)
                elif half == 0:
                    even.append(term(i))
                else:
                    pair = em.b.fadd(even.pop(), term(i), flags=REASSOC)
                    em.b.store(em.b.fadd(em.b.load(partial), pair, flags=REASSOC), partial)

            def cache(i: Any) -> None:  # (the summand is stored into its row cache as it is generated)
                inner = list(full)
                inner[innermost] = i
                self._x(inner)

            def add_cached(i: Any) -> None:
                inner = list(full)
                inner[innermost] = i
                term = em.row_cached(self.op.operands[0], inner)
                em.b.store(em.b.fadd(em.b.load(partial), term, flags=REASSOC), partial)

            elements = lambda start, stop, body: em.innermost_loop(start, stop, body, self.stage)  # noqa: E731
            if self._sums_row_cache_apart(mean):
                spread_loop(em, lo, hi, cache, em.carried_prefetches(), elements, em.carried_writes())
                elements(lo, hi, add_cached)  # (over pairs where the row is in pair order: whole vectors of it)
            elif not dot_summed(em, self, full, lo, hi, partial, mean, lambda start, stop: elements(start, stop, add),
                                None if mean is not None else self.squares):
                ahead, after = em.carried_prefetches(), em.carried_writes()
                split = self._aligned_start(full, lo, hi) if not ahead and after is None else None
                if split is not None:
                    elements(lo, split, add)
                    lo = split
                # (a row sum's own body where its elements are not pairs: a fused write loop adds them in its order)
                spread_loop(em, lo, hi, add if pairs_halfwords(em.plan, self.stage) else row_sum, ahead, elements,
                            after)
            em.b.store(em.b.fadd(em.b.load(total), em.b.fpext(em.b.load(partial), F64)), total)

        def outer_dims(full: list[Any]) -> None:
            if innermost in self.bounds:
                lo, hi = self.bounds[innermost]
                chunks = em.div(em.add(em.sub(hi, lo), CHUNK - 1), CHUNK)
                em.loop(0, chunks, lambda c: chunk(
                    full, em.add(lo, em.mul(c, CHUNK)), em.min(em.add(em.add(lo, em.mul(c, CHUNK)), CHUNK), hi)))
            elif n <= CHUNK:
                chunk(full, 0, n)
            else:
                em.loop(0, -(-n // CHUNK), lambda c: chunk(
                    full, em.mul(c, CHUNK), em.min(em.add(em.mul(c, CHUNK), CHUNK), n)))

        with multiplied_widening(em, self.combiner.two_pass or self.combiner.is_first_pass):  # (``widening.py``)
            self._reduced_loops(idx, outer_dims, self.reduced[:-1])
        return em.b.load(total)

    def _aligned_start(self, full: list[Any], lo: Any, hi: Any) -> Any:
        """Where the vector loop of a float sum over [lo, hi) of the last dim starts so that its loads are aligned:
        the first element of the row at a vector boundary (at most a vector's lanes after ``lo``; the elements
        before it are added by a loop of their own), or None to start at ``lo``. Only for a sum of (the squared
        deviations of) a float32 kernel input's rows whose start is not known to be aligned: an unaligned vector
        load of 64 bytes (AVX-512) spans two cache lines and costs two loads; a 32-byte one (AVX2) half of the
        time. LayerNorm's mean and variance passes read the row so, from memory once and from L1 again (numpy's
        16-byte aligned buffers: LayerNorm [8192, 1024] 13-17% slower than from aligned ones at 2 threads, Zen 4;
        7-9% faster with this, session 15). Summands computed in the kernel are left alone (RMSNorm's x*x: no
        difference measured; a row cache's are aligned)."""
        em = self.em
        layout = em.plan.access.get(self.op.operands[0])
        lanes = em.target.vector_bits // 32
        if not ALIGN_ROW_SUMS or not isinstance(layout, Layout) or lanes < 8 \
                or not (isinstance(lo, int) and isinstance(hi, int)):
            return None
        aligned = layout.arg in em.plan.aligned_args and (layout.offset * 4) % (lanes * 4) == 0 \
            and (layout.shape[-1] * 4) % (lanes * 4) == 0
        if layout.dtype is not DType.f32 or not layout.is_contiguous or layout.shape != self.shape or aligned \
                or hi - lo < 4 * lanes or pairs_halfwords(em.plan, self.stage):
            return None
        b = em.b
        row = list(full)
        row[self.reduced[-1]] = lo
        address = b.ptrtoint(em.address(layout, row), I64)
        to_boundary = b.and_(b.sub(ir.Constant(I64, 0), address), ir.Constant(I64, lanes * 4 - 1))
        return em.add(lo, b.lshr(to_boundary, ir.Constant(I64, 2)))

    def _sums_row_cache_apart(self, mean: Any) -> bool:
        """Whether the float sum adds its terms in a loop of its own over the row cache they are stored into
        (``SUM_ROW_CACHE_APART``), after the loop that computes them: a sum of transcendental terms (softmax's
        exp(x - max)) is computed by a loop that has its polynomial's constants and four interleaved chains to
        keep in registers, and with AVX2's 16 it spilled its partial sums there (Zen 3, session 13: 100 -> 87
        instructions per 32 elements apart); the second loop reads the row from L1. With 32 registers
        (``SUM_IN_LOOP_MIN_REGISTERS``, AVX-512) the partial sums fit beside the polynomial without a spill, and
        their adds run on the FP add pipes the polynomial's FMAs leave idle: the second loop's loads and adds
        (a 16th of the exp loop's work per element) are work the row loop, compute-bound at 1 thread, need not
        do."""
        return SUM_ROW_CACHE_APART and self.em.target.vector_registers < SUM_IN_LOOP_MIN_REGISTERS \
            and mean is None and self.em.writes_row_cache(self.op.operands[0]) \
            and (self.em.target.sums_paired_row_caches_apart or not pairs_halfwords(self.em.plan, self.stage))

    # -- accumulator arrays (last dim kept) --------------------------------------------------------------

    def trailing(self, idx: list[Any], trailing: list[int]) -> None:
        sizes = [self.shape[d] for d in trailing]
        if math.prod(sizes) <= TRAILING_MAX:
            self._trailing_block(idx, trailing, [(0, n) for n in sizes])
            return
        n = sizes[0]
        em = self.em
        em.loop(0, -(-n // TRAILING_MAX), lambda c: self._trailing_block(
            idx, trailing, [(em.mul(c, TRAILING_MAX), em.min(em.add(em.mul(c, TRAILING_MAX), TRAILING_MAX), n))]))

    def _trailing_block(self, idx: list[Any], trailing: list[int], ranges: list[tuple[Any, Any]]) -> None:
        em = self.em
        block_sizes = [hi - lo if isinstance(hi, int) and isinstance(lo, int) else TRAILING_MAX for lo, hi in ranges]
        strides = contiguous_strides(tuple(block_sizes))
        float_sum = self.float_sum
        slot_types = [F64] if float_sum else self.combiner.slots(self.dtype)
        arrays = [em.alloca(t, TRAILING_MAX) for t in slot_types]

        def slot_ptrs(full: list[Any]) -> list[ir.Value]:
            flat: Any = 0
            for d, (lo, _), stride in zip(trailing, ranges, strides):
                flat = em.add(flat, em.mul(em.sub(full[d], lo), stride))
            return [em.b.gep(a, [ir.Constant(I64, 0), em.ir_index(flat)], inbounds=True) for a in arrays]

        def over_trailing(base: list[Any], body: Any) -> None:
            def inner(values: list[Any]) -> None:
                full = list(base)
                for d, i in zip(trailing, values):
                    full[d] = i
                body(full)

            em.nest(list(ranges), inner)

        init = [ir.Constant(F64, 0.0)] if float_sum else self.combiner.init(self.dtype)

        def reset(full: list[Any]) -> None:
            for ptr, value in zip(slot_ptrs(full), init):
                em.b.store(value, ptr)

        def accumulate(mean_array: Any) -> Any:
            def update(full: list[Any]) -> None:
                ptrs = slot_ptrs(full)
                accs = [em.b.load(p) for p in ptrs]
                mean = None
                if mean_array is not None:
                    mean = em.b.load(em.b.gep(mean_array, [ir.Constant(I64, 0), _flat_ptr_index(full)], inbounds=True))
                x = self._x(full, mean)
                if float_sum:
                    new = [em.b.fadd(accs[0], em.b.fpext(x, F64), flags=REASSOC)]
                else:
                    new = self.combiner.update(em.b, self.dtype, accs, x, self._position(full))
                for p, value in zip(ptrs, new):
                    em.b.store(value, p)

            return lambda full: over_trailing(full, update)

        def _flat_ptr_index(full: list[Any]) -> ir.Value:
            flat: Any = 0
            for d, (lo, _), stride in zip(trailing, ranges, strides):
                flat = em.add(flat, em.mul(em.sub(full[d], lo), stride))
            return em.ir_index(flat)

        over_trailing(idx, reset)
        mean_array = None
        if self.combiner.two_pass:
            self._reduced_loops(idx, accumulate(None))
            mean_array = em.alloca(F32, TRAILING_MAX)

            def to_mean(full: list[Any]) -> None:
                (ptr,) = slot_ptrs(full)
                mean = em.b.fdiv(em.b.load(ptr), ir.Constant(F64, float(max(self.count, 1))))
                em.b.store(em.b.fptrunc(mean, F32),
                           em.b.gep(mean_array, [ir.Constant(I64, 0), _flat_ptr_index(full)], inbounds=True))
                em.b.store(ir.Constant(F64, 0.0), ptr)

            over_trailing(idx, to_mean)
        self._reduced_loops(idx, accumulate(mean_array))
        over_trailing(idx, lambda full: self._store(full, [em.b.load(p) for p in slot_ptrs(full)]))


def _partial_type(reducer: _Reducer) -> ir.Type:
    return F64 if reducer.float_sum else reducer.combiner.slots(reducer.dtype)[0]


def emit_partial(em: EmitContext, loop: PartialReduce, part: Any) -> None:
    """Partial ``part`` of a full reduction: dim 0 restricted to its share, accumulator to partials[part]."""
    stage, parts, slot = loop.stage, loop.parts, loop.slot
    reducer = _Reducer(em, stage)
    rows = stage.shape[0]
    step = -(-rows // parts)
    lo = em.mul(part, step)
    reducer.bounds = {0: (lo, em.min(em.add(lo, step), rows))}
    idx: list[Any] = [None] * len(stage.shape)
    if reducer.float_sum:
        acc = reducer._float_total(idx, None)
    else:
        acc = reducer.combiner.collapse(em.b, reducer.dtype, reducer._scalar_pass(idx))
    em.b.store(acc, em.b.gep(em.ptrs[slot], [em.ir_index(part)], source_etype=_partial_type(reducer)))


def emit_combine(em: EmitContext, loop: CombinePartials) -> None:
    """Merge the partial accumulators of a full reduction and store its result."""
    stage, parts, slot = loop.stage, loop.parts, loop.slot
    reducer = _Reducer(em, stage)
    t = _partial_type(reducer)
    if reducer.float_sum:
        accs = [em.alloca(F64)]
        inits = [ir.Constant(F64, 0.0)]
    else:
        accs = [em.alloca(slot_type) for slot_type in reducer.combiner.slots(reducer.dtype)]
        inits = reducer.combiner.init(reducer.dtype)
    for acc, value in zip(accs, inits):
        em.b.store(value, acc)

    def merge(i: Any) -> None:
        b = em.b
        partial = b.load(b.gep(em.ptrs[slot], [i], source_etype=t), typ=t)
        if reducer.float_sum:
            b.store(b.fadd(b.load(accs[0]), partial), accs[0])
            return
        new = reducer.combiner.update(b, reducer.dtype, [b.load(a) for a in accs], partial, ir.Constant(I64, 0))
        for acc, value in zip(accs, new):
            b.store(value, acc)

    em.loop(0, parts, merge)
    reducer._store([0] * len(stage.shape), [em.b.load(a) for a in accs])


def _column_partials(em: EmitContext, stage: ReduceStage, chunk: Any, slot: int, kept: list[Any]) -> ir.Value:
    """Address of the float64 partial of ``chunk`` for the kept (column) index ``kept``."""
    sizes = stage.shape[len(stage.reduced):]
    flat: Any = em.mul(chunk, math.prod(sizes))
    for i, stride in zip(kept, contiguous_strides(sizes)):
        flat = em.add(flat, em.mul(i, stride))
    return em.b.gep(em.ptrs[slot], [em.ir_index(flat)], source_etype=F64, inbounds=True)


def _over_columns(em: EmitContext, stage: ReduceStage, body: Any) -> None:
    em.nest([(0, n) for n in stage.shape[len(stage.reduced):]], body)


def emit_column_reset(em: EmitContext, column_sum: ColumnSum, chunk: Any) -> None:
    """Zero the column partials of ``chunk`` (a column reduction accumulated by a chunked row phase)."""
    stage, slot = column_sum.stage, column_sum.slot
    _over_columns(em, stage, lambda kept: em.b.store(ir.Constant(F64, 0.0),
                                                     _column_partials(em, stage, chunk, slot, kept)))


def column_partial_update(em: EmitContext, column_sum: ColumnSum, rows: list[Any], chunk: Any
                          ) -> Callable[[list[Any]], None]:
    """The body adding one row (reduced-dim index ``rows``) of a column sum's input to the partials of
    ``chunk`` at the kept (column) index it is given: looped over the columns by :func:`emit_column_partials`."""
    stage, slot = column_sum.stage, column_sum.slot

    def update(kept: list[Any]) -> None:
        b = em.b
        ptr = _column_partials(em, stage, chunk, slot, kept)
        x = em.value_at(stage.op.operands[0], list(rows) + list(kept))
        b.store(b.fadd(b.load(ptr, typ=F64), b.fpext(x, F64)), ptr)

    return update


def emit_column_partials(em: EmitContext, columns: tuple[int, ...], updates: list[Callable[[list[Any]], None]]
                         ) -> None:
    """One loop nest over ``columns`` running every update of the column sums over those columns
    (:func:`column_partial_update`), in order: each partial still takes the rows in the same order, so the sums
    are the same bits as with a loop per sum, and LLVM optimizes one loop instead of one per sum (the
    LayerNorm backward's three: its O3 module's time, on the backward's first call)."""
    def each(kept: list[Any]) -> None:
        for update in updates:
            update(kept)

    em.nest([(0, n) for n in columns], each)


def emit_column_combine(em: EmitContext, column_sum: ColumnSum, chunks: int) -> None:
    """Merge the chunks' column partials into chunk 0's, then finish (mean divides) and store each column."""
    stage, slot = column_sum.stage, column_sum.slot
    reducer = _Reducer(em, stage)
    count = len(stage.reduced)

    def merge(chunk: Any) -> None:
        def add(kept: list[Any]) -> None:
            b = em.b
            total = _column_partials(em, stage, 0, slot, kept)
            partial = b.load(_column_partials(em, stage, chunk, slot, kept), typ=F64)
            b.store(b.fadd(b.load(total, typ=F64), partial), total)

        _over_columns(em, stage, add)

    em.loop(1, chunks, merge)
    _over_columns(em, stage, lambda kept: reducer._store(
        [0] * count + list(kept), [em.b.load(_column_partials(em, stage, 0, slot, kept), typ=F64)]))


__all__ = ["SharedMean", "passes_over_row", "shared_means", "emit_column_combine", "column_partial_update", "emit_column_partials", "emit_column_reset", "emit_combine", "emit_partial", "emit_mean_pass", "emit_reduce", "I1"]
