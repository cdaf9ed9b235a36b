"""One-hot compares along a map stage's rows: the row's loop runs with the compare known false, and the one
element where it is true is computed again after the loop and stored over the first.

Cross-entropy's gradient is ``where(iota == t, -1, 0) * s - exp(x - amax - log) * c`` over each row of classes.
The compare of the class index with the row's target runs on every element: on AVX-512 a counter increment, a
mask, a conversion, a compare, a masked move and a multiply per 16 classes (6 of the loop's ~29 vector
instructions), on AVX2 as many per 8 classes, for one element of each row. Along the last dim the iota takes
each value 0, 1, ..., n - 1 once, so ``iota == t`` holds at exactly one position, ``t``, when ``0 <= t < n``:

    for j in [lo, hi): out[.., j] = f(.., j) with (iota == t) = false
    if lo <= t < hi:   out[.., t] = f(.., t) with (iota == t) = true

Every element is computed by the same ops as before (the one at ``t`` twice, by scalar code the second time), so
the results are the same bits. The loop no longer reads the target nor counts the classes, and what the
compare selected folds to a per-row value (``where(false, -1, 0) * s`` is ``0 * s``) that leaves the loop.

It applies to a map stage (each element written once, from its own index: rewriting one is harmless) whose
expression reads the compare only through elementwise ops at the stage's own last index (so the override is
exact wherever it is read), exactly one such compare (an ``eq`` of an integer iota counting the last dim from 0
by 1 over its whole length, and a value constant along that dim), and whose outputs are not computed over one
of the kernel's parameters (the correction reads its inputs again after the loop has written the outputs) nor
kept as row caches for later stages (their rows would be read before the correction is decided; conservative).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from neuroncc.codegen.llvm.access import broadcast_index
from neuroncc.codegen.llvm.context import Index
from neuroncc.codegen.llvm.elementwise import ELEMENTWISE
from neuroncc.codegen.llvm.kernel_plan import Computed, KernelPlan, MapStage
from neuroncc.codegen.llvm.scalars import I64
from neuroncc.ir.dtypes import DType
from neuroncc.ir.graph import Op, Value

#: Integer dtypes of the iota and its target (every class index of a row below 2**31 is exact in them; they
#: compare as i64 after a sign extension).
_SIGNED = frozenset({DType.i32, DType.i64})


@dataclass(frozen=True)
class OneHot:
    """``compare`` (bool, ``iota == target`` along the stage's last dim) and its ``target`` (constant along it)."""

    compare: Value
    target: Value


def find_one_hot(plan: KernelPlan, stage: MapStage, ranges: list[tuple[Any, Any]],
                 inline: Callable[[Value], Op | None], keeps_rows: bool) -> OneHot | None:
    """The compare to split the rows of map stage ``stage`` at (see the module docstring), else None.

    ``ranges``: the stage's nest (the last must be a loop); ``inline(value)``: the op the emitter generates
    ``value`` from at this stage (None: loaded, from a buffer or an earlier stage's row cache); ``keeps_rows``:
    the stage writes row caches."""
    if keeps_rows or not ranges or ranges[-1][1] is None or not stage.shape or not 2 <= stage.shape[-1] < 2**31 \
            or plan.overwrites & stage.written:
        return None
    n = stage.shape[-1]
    aligned: dict[Value, bool] = {}  # value -> read only at the stage's last index along its last dim
    pending = [(value, True) for value, _ in stage.items]
    seen: set[tuple[Value, bool]] = set()
    while pending:
        value, at_last = pending.pop()
        if (value, at_last) in seen:
            continue
        seen.add((value, at_last))
        aligned[value] = aligned.get(value, True) and at_last
        op = inline(value)
        if op is None:
            continue
        along = at_last and op.name in ELEMENTWISE and value.type.shape[-1:] == (n,)
        for operand in op.operands:
            pending.append((operand, along and operand.type.shape[-1:] == (n,)))
    found = [one_hot for value, only_aligned in aligned.items() if only_aligned
             for one_hot in [_one_hot(plan, value, n)] if one_hot is not None]
    return found[0] if len(found) == 1 else None


def _one_hot(plan: KernelPlan, value: Value, n: int) -> OneHot | None:
    access = plan.access.get(value)
    if not isinstance(access, Computed) or access.op.name != "eq" or value.type.dtype is not DType.bool \
            or value.type.shape[-1:] != (n,):
        return None
    a, c = access.op.operands
    for counter, target in ((a, c), (c, a)):
        if counter.type.dtype in _SIGNED and target.type.dtype == counter.type.dtype \
                and target.type.shape[-1:] in ((), (1,)) and _counts_last_dim(plan, counter, n):
            return OneHot(value, target)
    return None


def _counts_last_dim(plan: KernelPlan, value: Value, n: int) -> bool:
    """Whether ``value`` is 0, 1, ..., n - 1 along its last dim (of length n) and the same along the others: an
    ``iota`` from 0 by 1, reshaped to put 1s before it, or expanded."""
    shape = value.type.shape
    access = plan.access.get(value)
    if not isinstance(access, Computed) or shape[-1:] != (n,):
        return False
    op = access.op
    if op.name == "iota":
        return shape == (n,) and op.attrs["start"] == 0 and op.attrs["step"] == 1 and op.attrs["length"] == n
    if op.name == "reshape":
        return all(size == 1 for size in shape[:-1]) and _counts_last_dim(plan, op.operands[0], n)
    if op.name == "expand":
        return _counts_last_dim(plan, op.operands[0], n)
    return False


def emit_correction(em: Any, stage: MapStage, one_hot: OneHot, prefix: Index, lo: Any, hi: Any,
                    body: Callable[[Index], None]) -> None:
    """After the loop over [lo, hi) of the row at ``prefix`` ran with the compare false: ``body`` at the row's
    target, with the compare true, when the target lies in [lo, hi). ``em``: the kernel emitter."""
    target, inside = target_inside(em, stage, one_hot, prefix, lo, hi)
    with em.b.if_then(inside), em.fresh_values(), knowing(em, one_hot, True):
        body([*prefix, target])


def target_inside(em: Any, stage: MapStage, one_hot: OneHot, prefix: Index, lo: Any, hi: Any) -> tuple:
    """(the target column of the row at ``prefix``, whether it lies in [lo, hi)) as IR values."""
    compare, b = one_hot.compare, em.b
    at = broadcast_index(em, [*prefix, lo], stage.shape, compare.type.shape)
    target = em.value_at(one_hot.target, broadcast_index(em, at, compare.type.shape, one_hot.target.type.shape))
    if target.type != I64:
        target = b.sext(target, I64)
    return target, b.and_(b.icmp_signed(">=", target, em.ir_index(lo)), b.icmp_signed("<", target, em.ir_index(hi)))


def emit_split_rows(em: Any, stage: MapStage, one_hot: OneHot, ranges: list[tuple[Any, Any]],
                    body: Callable[[Index], None]) -> None:
    """The nest of map stage ``stage`` over ``ranges`` (``body(idx)``: its element at ``idx``), each row's loop
    with the compare false, then its correction. ``em``: the kernel emitter."""
    def row(prefix: Index) -> None:
        with knowing(em, one_hot, False):
            em.stage_nest(stage, [(i, None) for i in prefix] + [ranges[-1]], body)
        emit_correction(em, stage, one_hot, prefix, *ranges[-1], body)

    em.nest(ranges[:-1], row)


@contextmanager
def knowing(em: Any, one_hot: OneHot | None, value: bool) -> Iterator[None]:
    """Code emitted inside reads ``value`` for the compare of ``one_hot`` (None: nothing known) at every index."""
    before = dict(em.known)
    if one_hot is not None:
        em.known[one_hot.compare] = value
    try:
        yield
    finally:
        em.known = before
