"""Softmax's exp pass as explicit vector code: exp(x - max), its row-cache store and its sum in one loop.

The float sum of a row's exponentials (softmax's ``sum(exp(x - max))``, the exponentials row-cached for the write
pass) is, on CPUs with 16 vector registers, a loop over the row cache of its own after the exp loop
(``stages._Reducer._sums_row_cache_apart``): the loop vectorizer's interleave-4 exp loop with four partial sums
in it spilled them (session 13, session 20 expavx2). Here, where the target says so
(``CpuTarget.sums_exponentials_in_the_exp_loop``), the exp pass is written as vector code instead of scalar code for
the vectorizer: per iteration four vectors of ``LANES`` elements, each loaded, minus the row's max, exp of it
(the math library's non-positive exp on the vector, ``mathlib.VECTOR_BODIES``), stored into the row cache and
added to its own partial sum. The four partial sums are the vectorizer's four (element i into partial
(i / LANES) % 4, lane i % LANES, from the row's start; the same reduction at the end), so the sum is the same bits
as the loop of its own gave; the groups of ``prefetch.spread_loop`` (prefetches before, the delayed write after)
stay around it.

Only for the pattern it matches: a float32 sum over a row loop's last dim of a row-cached exp(x - m) lowered as
the non-positive exp, x a contiguous float32 kernel input at the stage's own index, m constant along the row,
and rows of whole groups (no remainder loop: the sum's order would be the vectorizer's remainder's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from llvmlite import ir

from neuroncc.codegen.llvm.access import broadcast_index
from neuroncc.codegen.llvm.kernel_plan import Computed, ReduceStage
from neuroncc.codegen.llvm.mathlib import math_call
from neuroncc.codegen.llvm import prefetch
from neuroncc.codegen.llvm.reductions import REASSOC
from neuroncc.codegen.llvm.row_buffers import row_slot
from neuroncc.codegen.llvm.scalars import F32, I32
from neuroncc.codegen.llvm.views import Layout
from neuroncc.hardware.host import CACHE_LINE_BYTES
from neuroncc.ir.dtypes import DType
from neuroncc.ir.graph import Value
from neuroncc.ir.signs import at_most_zero

#: Elements per vector (AVX2's 256 bits of float32) and vectors per iteration (the vectorizer's interleave 4:
#: its partial sums, hence its bits).
LANES, VECTORS = 8, 4
VECTOR = ir.VectorType(F32, LANES)
#: One iteration's elements as one IR vector: LLVM splits each of its instructions into ``VECTORS`` adjacent ones,
#: so the four exponentials' chains interleave in program order as the vectorizer's do (written one vector after
#: the other, the core's window held fewer independent chains: 1.16-1.22x the time, session 22).
STEP = LANES * VECTORS
WIDE = ir.VectorType(F32, STEP)
#: Partial sums of ``LANES`` lanes: 4 is the vectorizer's (the same bits as the sum's loop of its own); 2 or 1 add
#: an iteration's vectors down first (other bits; fewer registers).
ACCUMULATORS = 4
#: Vectors of ``LANES`` per iteration (EXPERIMENT: 4 or 8; with 8 each partial sum adds two per iteration).
ITERATION_VECTORS = 4
#: A switch for one-process A/Bs (``bench_math_interleave.py``'s ``v`` specs): False keeps the loop of its own.
EXPLICIT_EXP_SUM = True


@dataclass(frozen=True)
class _Pattern:
    x: Layout
    subtracted: Value


def _pattern(em: Any, stage: ReduceStage, summand: Value) -> _Pattern | None:
    """x and m of a row-cached ``summand`` = exp(x - m) as the non-positive exp (see the module docstring)."""
    plan = em.plan
    exponent = plan.access.get(summand)
    if not (isinstance(exponent, Computed) and exponent.op.name == "exp"):
        return None
    difference_value = exponent.op.operands[0]
    difference = plan.access.get(difference_value)
    if not (isinstance(difference, Computed) and difference.op.name == "sub") \
            or difference_value in em._row_cache or not at_most_zero(plan.region, difference_value):
        return None
    x, subtracted = difference.op.operands
    layout = plan.access.get(x)
    shape = stage.shape
    if not (isinstance(layout, Layout) and layout.dtype is DType.f32 and layout.is_contiguous
            and layout.shape == shape and x.type.shape == shape and subtracted.type.dtype is DType.f32
            and summand.type.dtype is DType.f32 and difference_value.type.shape == shape
            and len(subtracted.type.shape) == len(shape) and subtracted.type.shape[-1] == 1):
        return None
    return _Pattern(layout, subtracted)


def explicit_exp_sum(em: Any, stage: ReduceStage, summand: Value, full: list[Any], innermost: int, lo: Any, hi: Any,
                     ahead: Any, after: Any) -> ir.Value | None:
    """The float32 sum of the row's ``summand`` over [lo, hi) of dim ``innermost`` (the last), computed with the
    summand by the explicit vector loop in ``spread_loop``'s groups (``ahead``, ``after`` its prefetches and
    delayed write), or None (nothing emitted) where the module docstring's pattern does not hold."""
    if not (EXPLICIT_EXP_SUM and em.target.sums_exponentials_in_the_exp_loop and em.writes_row_cache(summand)
            and innermost == len(stage.shape) - 1 and isinstance(lo, int) and isinstance(hi, int) and hi > lo):
        return None
    step = LANES * ITERATION_VECTORS
    wide_type = ir.VectorType(F32, step)
    if ahead or after is not None:
        group = _spread_group(ahead)
        if (hi - lo) % group or group % step:
            return None
    elif (hi - lo) % step:
        return None
    pattern = _pattern(em, stage, summand)
    if pattern is None:
        return None
    b = em.b
    first = list(full)
    first[innermost] = lo
    m = em.value_at(pattern.subtracted, broadcast_index(em, first, stage.shape, pattern.subtracted.type.shape))
    m = b.shuffle_vector(b.insert_element(ir.Constant(wide_type, ir.Undefined), m, ir.Constant(I32, 0)),
                         ir.Constant(wide_type, ir.Undefined), ir.Constant(ir.VectorType(I32, step), [0] * step))
    sums = ACCUMULATORS
    partial = em.alloca(ir.VectorType(F32, LANES * sums))  # (the vectorizer's start: 0.0 in its first lane)
    b.store(ir.Constant(partial.type.pointee, [0.0] + [-0.0] * (LANES * sums - 1)), partial)

    def vectors(start: Any, stop: Any, _body: Callable[[Any], None]) -> None:
        extent = em._static_extent(start, stop)
        assert extent is not None and extent % step == 0, (start, stop)

        def iteration(k: Any) -> None:
            idx = list(full)
            idx[innermost] = em.add(start, em.mul(k, step))
            x = em.b.load(em.b.bitcast(em.address(pattern.x, idx), wide_type.as_pointer()), typ=wide_type, align=4)
            e = math_call(em.b, "exp_nonpositive", em.b.fsub(x, m), target=em.target)
            em.b.store(e, em.b.bitcast(row_slot(em, summand, idx), wide_type.as_pointer()), align=4)
            acc = em.b.load(partial, typ=partial.type.pointee)
            for piece in _pieces(em.b, e, STEP):  # (each partial sum takes its vectors in the row's order)
                acc = em.b.fadd(acc, _folded(em.b, piece, sums), flags=REASSOC)
            em.b.store(acc, partial)

        em.loop(0, extent // step, iteration)

    prefetch.spread_loop(em, lo, hi, lambda i: None, ahead, vectors, after)
    parts = _parts(b, b.load(partial, typ=partial.type.pointee))
    total = parts[0]
    for part in parts[1:]:  # (as the vectorizer reduces its four partial sums)
        total = b.fadd(part, total, flags=REASSOC)
    return b.call(_reduce_intrinsic(b.module), [ir.Constant(F32, -0.0), total], fastmath=REASSOC)


def _pieces(b: ir.IRBuilder, e: ir.Value, size: int) -> list[ir.Value]:
    """``e`` in vectors of ``size`` elements, in order (``e`` itself when it has that many)."""
    if e.type.count == size:
        return [e]
    return [b.shuffle_vector(e, ir.Constant(e.type, ir.Undefined),
                             ir.Constant(ir.VectorType(I32, size), list(range(j * size, (j + 1) * size))))
            for j in range(e.type.count // size)]


def _parts(b: ir.IRBuilder, wide: ir.Value) -> list[ir.Value]:
    """``wide``'s vectors of ``LANES`` elements, in order."""
    count = wide.type.count // LANES
    return [b.shuffle_vector(wide, ir.Constant(wide.type, ir.Undefined),
                             ir.Constant(ir.VectorType(I32, LANES), list(range(j * LANES, (j + 1) * LANES))))
            for j in range(count)]


def _folded(b: ir.IRBuilder, e: ir.Value, sums: int) -> ir.Value:
    """The iteration's ``VECTORS`` vectors of ``e`` added down to ``sums`` (``e`` itself for ``VECTORS``): vector
    j + sums to vector j, as a tree."""
    if sums == VECTORS:
        return e
    parts = _parts(b, e)
    while len(parts) > sums:
        half = len(parts) // 2
        parts = [b.fadd(parts[j], parts[j + half], flags=REASSOC) for j in range(half)]
    if sums == 1:
        return parts[0]
    joined = parts[0]
    for k in range(1, sums):  # (concatenated back: one vector of sums * LANES)
        joined = b.shuffle_vector(joined, parts[k], ir.Constant(ir.VectorType(I32, LANES * (k + 1)),
                                                                 list(range(LANES * (k + 1)))))
    return joined


def _as_wide(b: ir.IRBuilder, element: ir.Value) -> ir.Value:
    """The ``STEP`` float32 from the element ``element`` points at (unaligned: 4-byte alignment)."""
    return b.bitcast(element, WIDE.as_pointer())


def _spread_group(ahead: Any) -> int:
    """The elements of a group of ``prefetch.spread_loop`` for these streams (as it computes them)."""
    return prefetch.group_elements(0, 1 << 30, prefetch.MEMORY_BURST_LINES * CACHE_LINE_BYTES
                          // max((stream.itemsize for stream in ahead), default=4))


def _reduce_intrinsic(module: ir.Module) -> ir.Function:
    name = "llvm.vector.reduce.fadd.v8f32"
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    return ir.Function(module, ir.FunctionType(F32, [F32, VECTOR]), name)
