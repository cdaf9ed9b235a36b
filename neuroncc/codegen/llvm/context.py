"""The emission context: what per-op lowerings and stage emitters may ask of the kernel emitter.

The per-op tables (``elementwise.ELEMENTWISE``, ``access.ACCESS``), the reduce and scatter nests
(``stages.py``) and the transposed copy (``transpose.py``) generate code through this interface only; the
kernel emitter (:class:`~neuroncc.codegen.llvm.emit.KernelEmitter`) implements it. Indices are Python ints
(which fold) or i64 IR values; index arithmetic folds while it can (``indexing.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from llvmlite import ir

from neuroncc.codegen.llvm.kernel_plan import KernelPlan
from neuroncc.codegen.llvm.launch_plan import FailedCheck
from neuroncc.codegen.llvm.views import Layout
from neuroncc.hardware.host import CpuTarget
from neuroncc.ir.graph import Op, Value

#: An index into a tensor: one entry per dim, each a Python int or an i64 IR value.
Index = list


@dataclass(frozen=True)
class Ahead:
    """Memory a compute-bound loop prefetches as it goes (``prefetch.spread_loop``): for its element ``i``, the
    element at ``at(i)`` (of ``itemsize`` bytes: the next row's, or the next block's, element ``i``; with
    ``write``, the element a later pass writes: prefetched for writing, ``prefetchw``), with LLVM's ``locality``
    (3: ``prefetcht0``, into L1; 1: ``prefetcht2``, ``CpuTarget.prefetches_the_next_row_into_l2_in_the_exp_pass``)."""

    at: Callable[[Any], ir.Value]
    itemsize: int
    write: bool = False
    locality: int = 3


class EmitContext(Protocol):
    """The kernel emitter as the per-op lowerings and stage emitters see it."""

    #: The builder at the current point of the phase function.
    b: ir.IRBuilder
    #: The phase function's argument pointers, by argument slot.
    ptrs: Sequence[ir.Value]
    #: The CPU the code is for (the math library's choices depend on it).
    target: CpuTarget
    #: The plan being emitted: its region's ops say what each value is computed from (``ir/signs.py`` asks).
    plan: KernelPlan
    #: Whether a float amax emitted now keeps no NaN flag (``nan_rows.max_without_nan_flag``: the row's sum finds NaNs).
    flagless_amax: bool
    #: Whether bf16 words' even halves widen by a multiply here (``widening.py``), not a shift.
    multiplies_widening: bool
    #: Whether LayerNorm's ``n * w + b`` whose sum is only rounded to bf16 is one fused multiply-add here (a row
    #: whose every operand is finite: ``norm_affine.emit_guarded``).
    fuses_affine: bool
    #: The next row's max that the row's exp loop being emitted takes beside its own work (``next_max.MaxAhead``:
    #: its loops add each element of that row), or None.
    max_ahead: Any

    def opaque_factor(self, value: int) -> ir.Value:
        """``value`` as an i32 LLVM cannot fold, made once per phase function (``widening.py``)."""
        ...

    # ---- values and buffers ---------------------------------------------------------------------------

    def value_at(self, value: Value, idx: Index) -> ir.Value:
        """The compute-typed value of ``value`` at ``idx`` (loaded, or generated from its op)."""
        ...

    def address(self, layout: Layout, idx: Index) -> ir.Value:
        """Pointer to the element of ``layout`` at ``idx``."""
        ...

    def load(self, layout: Layout, idx: Index) -> ir.Value:
        """The compute-typed element of ``layout`` at ``idx``."""
        ...

    def store(self, layout: Layout, idx: Index, value: ir.Value) -> ir.Instruction:
        """Store the compute-typed ``value`` into the element of ``layout`` at ``idx``."""
        ...

    def alloca(self, t: ir.Type, count: int = 1) -> ir.AllocaInstr:
        """Stack slot(s) in the function's entry block (promoted to registers by SROA when scalar)."""
        ...

    def memoized(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """What was generated for ``key`` in the current scope or an enclosing one, else ``make()``,
        remembered in the current scope (values shared by several lowerings at one index: a Philox block)."""
        ...

    def bind(self, value: Value, idx: Index, result: ir.Value) -> None:
        """``value`` at ``idx`` is ``result`` in the current scope (generated code reading it gets ``result``)."""
        ...

    def fresh_values(self) -> AbstractContextManager[None]:
        """A scope whose generated values are not reused after it (code on one side of a branch)."""
        ...

    def rounding_needs_nan_case(self, op: Any) -> bool:
        """Whether rounding ``op``'s float32 value to bf16 needs the NaN case (``nan_payloads.needs_nan_case``)."""
        ...

    def writes_row_cache(self, value: Value) -> bool:
        """Whether the current stage stores ``value`` into a row cache as it generates it (``refine.cache_rows``:
        later stages of the row loop read it there)."""
        ...

    def row_cached(self, value: Value, idx: Index) -> ir.Value:
        """``value`` at ``idx`` loaded from the row cache the current stage writes (:meth:`writes_row_cache`)."""
        ...

    def row_cache_filled(self, value: Value) -> None:
        """The current stage has stored all of ``value``'s row into its row cache (a variance's mean pass): its
        next passes load it there (``refine.widened_row_cache``)."""
        ...

    def deviation_computed(self, variance: Op, idx: Index, deviation: ir.Value) -> None:
        """``variance``'s deviation pass computed ``deviation`` (x - mean) at ``idx``: stored into its row cache
        where a later stage reads that ``x - mean`` again (``refine.deviation_row_cache``)."""
        ...

    def variance_squares(self, stage: Any) -> ir.Value | None:
        """The float64 slot into which the mean pass of ``stage`` (a variance over bf16 words whose mean pass runs a
        row early) stores its row's sum of squares, which its variance then reads instead of a deviation pass
        (``CpuTarget.takes_bf16_variance_by_dot_products``, ``dot_sums.dot_variance``); None elsewhere."""
        ...

    def word_copies(self, words: Any) -> Any:
        """The stack rows into which the mean pass that sums ``words`` (a Layout) by dot products copies them for the
        write pass (``word_copies.WordCopies``, ``CpuTarget.copies_bf16_rows_for_the_write_pass``); None elsewhere."""
        ...

    def next_pass(self) -> None:
        """The current stage's second pass over its row starts (a variance's deviations, after its own mean pass):
        the next row's prefetches due before it (``prefetch.row_bursts``)."""
        ...

    def carried_prefetches(self) -> Sequence[Ahead]:
        """What the current stage's compute-bound loop prefetches as it goes (``prefetch.spread_loop``): the next
        row of the row loop's inputs when this stage carries them (``prefetch.carrier_stage``), else nothing."""
        ...

    def carried_writes(self) -> Callable[[Any, Any, int], None] | None:
        """What the current stage's compute-bound loop writes after each of its groups of elements
        (``prefetch.spread_loop``'s ``after``): the previous row's write pass when this stage carries it
        (``delayed_writes.py``), else None."""
        ...

    # ---- index arithmetic -----------------------------------------------------------------------------

    def ir_index(self, i: Any) -> ir.Value:
        """``i`` as an i64 IR value."""
        ...

    def form(self, i: Any) -> Hashable:
        """The affine form of index ``i``: equal for indices known to be equal (a memoization key)."""
        ...

    def add(self, a: Any, c: Any) -> Any: ...

    def sub(self, a: Any, c: Any) -> Any: ...

    def mul(self, a: Any, n: int) -> Any: ...

    def div(self, a: Any, n: int) -> Any: ...

    def rem(self, a: Any, n: int) -> Any: ...

    def min(self, a: Any, c: Any) -> Any: ...

    def block_range(self, index: Any, block: int, n: int) -> tuple[Any, Any]:
        """[lo, hi) of block ``index`` of a dim of ``n`` elements in blocks of ``block``."""
        ...

    def digits(self, flat: Any, counts: tuple[int, ...]) -> list[Any]:
        """The indices of the flat (row-major) position ``flat`` in a grid of ``counts``."""
        ...

    def lt(self, a: Any, c: Any) -> ir.Value: ...

    def ge(self, a: Any, c: Any) -> ir.Value: ...

    def eq(self, a: Any, c: Any) -> ir.Value: ...

    def clamp(self, a: Any, lo: int, hi: int | None) -> Any: ...

    def checked_index(self, raw: ir.Value, size: int) -> ir.Value:
        """A data-dependent index, wrapped if negative; out of range sets the kernel's error flag."""
        ...

    def fail_if(self, condition: ir.Value, check: FailedCheck) -> None:
        """Where ``condition`` holds, set the kernel's error flag to ``check`` (an integer divisor of zero, ...)."""
        ...

    # ---- loops ----------------------------------------------------------------------------------------

    def loop(self, lo: Any, hi: Any, body: Callable[[Any], None]) -> None:
        """for i in [lo, hi): body(i)."""
        ...

    def pair_half(self, i: Any) -> int | None:
        """0 or 1 if ``i`` is the even or odd index of the element pair being emitted (``innermost_loop`` over
        pairs), else None."""
        ...

    def innermost_loop(self, lo: Any, hi: Any, body: Callable[[Any], None], stage: Any,
                       prefix: Index | None = None) -> None:
        """for i in [lo, hi): body(i), the loop over ``stage``'s last dim (over element pairs where the stage
        reads or writes 16-bit data along it: ``pairs.py``; ``prefix``: the outer indices, where known)."""
        ...

    def stage_nest(self, stage: Any, ranges: list[tuple[Any, Any]], body: Callable[[Index], None]) -> None:
        """``nest(ranges, body)`` whose innermost loop is :meth:`innermost_loop` of ``stage`` (over element pairs
        where that applies)."""
        ...

    def nest(self, ranges: list[tuple[Any, Any]], body: Callable[[Index], None], prefix: list | None = None) -> None:
        """Nested loops over ``ranges`` (outermost first; ``(i, None)`` is a fixed index); body gets the index."""
        ...
