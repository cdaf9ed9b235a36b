"""The kernel plan as data: the stages that write buffers, the loop shape of each phase, and the plan.

A *stage* writes a buffer (:class:`MapStage`, :class:`ReduceStage`, :class:`ScatterStage`); a *phase* is one
parallel loop (the launcher splits its outer iterations across threads) that runs stages, with a barrier
after it. How a phase iterates is its *loop shape*: one frozen dataclass per shape, each with exactly the
fields that shape needs, so that a plan cannot describe two shapes at once. ``Phase`` is their union:

    RowLoop         the leading dims its stages share in parallel; per outer index each stage in turn
    BlockedMap      map stages over one shape: every dim in parallel, the last in blocks (1-d elementwise)
    TransposedMap   map stages that transpose: blocks of output rows through an L1 tile (``transpose.py``)
    SplitColumns    a lone reduction keeping only its last dim: blocks of columns in parallel
    KeptDims        a lone reduction keeping middle dims (batch-norm statistics): those dims in parallel
    PartialReduce   a lone full reduction: partial results over ranges of dim 0 in parallel ...
    CombinePartials ... and the serial phase merging them
    ChunkedRows     a row loop over chunks of rows whose column sums accumulate per-chunk partials ...
    CombineColumns  ... and the serial phase merging those
    ScatterLoop     a scatter's serial data-dependent writes

Every shape answers the launcher's questions the same way: ``trip_counts`` (its parallel loop as a grid,
flattened into ``n_outer`` iterations), ``work`` (elements touched per iteration, for the threading decision)
and ``serial`` (must run on one thread). The scheduler (``schedule.py``) makes row loops and scatter loops;
refinements (``refine.py``, ``transpose.py``) turn them into the other shapes, each returning a new plan.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from neuroncc.codegen.llvm.views import Layout
from neuroncc.ir.graph import Function, Op, Value
from neuroncc.ir.opdef import Trait

# ---- stages -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Computed:
    """A value generated inline from its op's operands (result ``index`` of ``op``)."""

    op: Op
    index: int = 0


@dataclass(frozen=True)
class MapStage:
    """Writes computed values over their (common) shape: each item is (value to compute, where to write it)."""

    shape: tuple[int, ...]
    items: tuple[tuple[Value, Layout], ...]

    kind = "map"

    @property
    def max_outer(self) -> int:
        return max(len(self.shape) - 1, 0)

    @property
    def roots(self) -> tuple[tuple[Value, int], ...]:
        return tuple((v, len(self.shape)) for v, _ in self.items)

    @property
    def written(self) -> frozenset[int]:
        return frozenset(target.arg for _, target in self.items)


@dataclass(frozen=True)
class ReduceStage:
    """Loops over a reduction's input (its expression generated inline) and writes the reduced result."""

    op: Op
    target: Layout

    kind = "reduce"

    @property
    def shape(self) -> tuple[int, ...]:
        return self.op.operands[0].type.shape

    @property
    def reduced(self) -> tuple[int, ...]:
        return self.op.opdef.reduced_dims(self.op.attrs, len(self.shape))

    @property
    def kept_size(self) -> int:
        """Elements of the result: the product of the kept dims."""
        return math.prod(self.shape[d] for d in range(len(self.shape)) if d not in self.reduced)

    @property
    def max_outer(self) -> int:
        leading = 0
        while leading < len(self.shape) and leading not in self.reduced:
            leading += 1
        return min(leading, max(len(self.shape) - 1, 0))

    @property
    def roots(self) -> tuple[tuple[Value, int], ...]:
        return ((self.op.operands[0], len(self.shape)),)

    @property
    def written(self) -> frozenset[int]:
        return frozenset((self.target.arg,))


@dataclass(frozen=True)
class ScatterStage:
    """Writes (or accumulates into) data-dependent positions of its buffer (scatter, index_put), serially."""

    op: Op
    target: Layout
    shape: tuple[int, ...]  # the points written (access.SCATTERS[op].domain)

    kind = "scatter"
    max_outer = 0

    @property
    def roots(self) -> tuple[tuple[Value, int], ...]:
        return ()

    @property
    def written(self) -> frozenset[int]:
        return frozenset((self.target.arg,))


Stage = MapStage | ReduceStage | ScatterStage


def written_by(stages: Iterable[Stage]) -> set[int]:
    """The argument slots ``stages`` write."""
    return {arg for stage in stages for arg in stage.written}


def _row_work(stages: tuple[Stage, ...], depth: int) -> int:
    """Elements each stage touches per outer index of a loop over its first ``depth`` dims, summed."""
    return sum(max(math.prod(s.shape) // max(math.prod(s.shape[:depth]), 1), 1) for s in stages)


# ---- loop shapes ---------------------------------------------------------------------------------------


class _Loop:
    """What every loop shape answers (see the module docstring)."""

    serial = False

    @property
    def trip_counts(self) -> tuple[int, ...]:
        raise NotImplementedError

    @property
    def n_outer(self) -> int:
        return math.prod(self.trip_counts)


@dataclass(frozen=True)
class RowLoop(_Loop):
    """The parallel loop runs over ``outer``, the sizes of the leading dims its stages share (none: one
    iteration); for each outer index every stage runs its inner loops in turn (softmax: max, sum-exp, write,
    on one row while it is in cache). ``row_cache``: value -> position of the stage that stores its row into a
    stack buffer while reducing; later stages load it instead of recomputing it (``refine.cache_rows``)."""

    stages: tuple[Stage, ...]
    outer: tuple[int, ...]
    row_cache: Mapping[Value, int] = field(default_factory=dict)

    @property
    def trip_counts(self) -> tuple[int, ...]:
        return self.outer

    @property
    def work(self) -> int:
        return _row_work(self.stages, len(self.outer))


@dataclass(frozen=True)
class BlockedMap(_Loop):
    """Map stages over one ``shape``: every dim in the parallel loop, the last in blocks of ``block``
    elements (so that a 1-d elementwise kernel parallelizes)."""

    stages: tuple[MapStage, ...]
    shape: tuple[int, ...]
    block: int

    @property
    def trip_counts(self) -> tuple[int, ...]:
        return (*self.shape[:-1], -(-self.shape[-1] // self.block))

    @property
    def work(self) -> int:
        # elements per row (the last dim) // the row's length * a block: ``block`` per stage (with every dim in
        # the outer loop, the per-index count was 1 per stage and this product 0: such kernels ran on one thread)
        return _row_work(self.stages, len(self.shape) - 1) // max(self.shape[-1], 1) * self.block


@dataclass(frozen=True)
class TransposedMap(_Loop):
    """Map stages over one ``shape`` that transpose (``transpose.py``): all dims but the last two in the
    parallel loop, and the second-to-last in blocks of ``block`` output rows, squares of ``lanes`` rows."""

    stages: tuple[MapStage, ...]
    shape: tuple[int, ...]
    block: int
    lanes: int

    @property
    def trip_counts(self) -> tuple[int, ...]:
        return (*self.shape[:-2], -(-self.shape[-2] // self.block))

    @property
    def work(self) -> int:
        return _row_work(self.stages, len(self.shape) - 1) * self.block


@dataclass(frozen=True)
class SplitColumns(_Loop):
    """A lone reduction over leading dims that keeps only the last (a bias gradient): each parallel
    iteration reduces ``width`` of its columns."""

    stage: ReduceStage
    width: int

    @property
    def stages(self) -> tuple[Stage, ...]:
        return (self.stage,)

    @property
    def trip_counts(self) -> tuple[int, ...]:
        return (-(-self.stage.shape[-1] // self.width),)

    @property
    def work(self) -> int:
        return _row_work(self.stages, 0) // max(self.stage.shape[-1], 1) * self.width


@dataclass(frozen=True)
class KeptDims(_Loop):
    """A lone reduction that keeps middle dims and reduces the last (batch-norm statistics): the parallel
    loop runs over its kept dims ``kept``."""

    stage: ReduceStage
    kept: tuple[int, ...]

    @property
    def stages(self) -> tuple[Stage, ...]:
        return (self.stage,)

    @property
    def trip_counts(self) -> tuple[int, ...]:
        return (math.prod(self.stage.shape[d] for d in self.kept),)

    @property
    def work(self) -> int:
        return _row_work(self.stages, 0) // self.n_outer


@dataclass(frozen=True)
class PartialReduce(_Loop):
    """A lone reduction over all dims (a loss, a norm) as ``parts`` partial results over ranges of dim 0,
    in parallel, each stored into the scratch slot ``slot``; the next phase combines them."""

    stage: ReduceStage
    parts: int
    slot: int

    @property
    def stages(self) -> tuple[Stage, ...]:
        return (self.stage,)

    @property
    def trip_counts(self) -> tuple[int, ...]:
        return (self.parts,)

    @property
    def work(self) -> int:
        return _row_work(self.stages, 0) // self.parts


class _OneSerialStage(_Loop):
    """A phase that runs its one stage ``stage`` once, serially (no parallel loop)."""

    stage: Stage
    serial = True

    @property
    def stages(self) -> tuple[Stage, ...]:
        return (self.stage,)

    @property
    def trip_counts(self) -> tuple[int, ...]:
        return ()

    @property
    def work(self) -> int:
        return _row_work(self.stages, 0)


@dataclass(frozen=True)
class CombinePartials(_OneSerialStage):
    """Merges the ``parts`` partial results of a :class:`PartialReduce` (scratch slot ``slot``) and stores
    the reduction's result."""

    stage: ReduceStage
    parts: int
    slot: int


@dataclass(frozen=True)
class ColumnSum:
    """A column sum (or mean) accumulated by a chunked row loop into float64 partials [chunks, columns] in
    the scratch slot ``slot``."""

    stage: ReduceStage
    slot: int


@dataclass(frozen=True)
class ChunkedRows(_Loop):
    """The row loop ``rows`` with its parallel loop over ``chunks`` chunks of contiguous rows: each row runs
    the row loop's stages, then adds its inputs of the column sums ``sums`` into its chunk's partials
    (``refine.accumulate_column_partials``); a :class:`CombineColumns` phase follows."""

    rows: RowLoop
    sums: tuple[ColumnSum, ...]
    chunks: int

    @property
    def stages(self) -> tuple[Stage, ...]:
        return (*self.rows.stages, *(s.stage for s in self.sums))

    @property
    def trip_counts(self) -> tuple[int, ...]:
        return (self.chunks,)

    @property
    def work(self) -> int:
        rows = math.prod(self.rows.outer)
        per_row = sum(max(math.prod(s.shape[len(self.rows.outer):]), 1) for s in self.rows.stages)
        per_row += sum(max(math.prod(s.stage.shape) // rows, 1) for s in self.sums)
        return per_row * -(-rows // self.chunks)


@dataclass(frozen=True)
class CombineColumns(_Loop):
    """Merges the ``chunks`` chunk partials of each column sum of a :class:`ChunkedRows` phase and stores
    each sum (a mean divides)."""

    sums: tuple[ColumnSum, ...]
    chunks: int

    serial = True

    @property
    def stages(self) -> tuple[Stage, ...]:
        return tuple(s.stage for s in self.sums)

    @property
    def trip_counts(self) -> tuple[int, ...]:
        return ()

    @property
    def work(self) -> int:
        return sum(self.chunks * max(s.stage.kept_size, 1) for s in self.sums)


@dataclass(frozen=True)
class ScatterLoop(_OneSerialStage):
    """A scatter stage: one serial iteration (its positions are data-dependent)."""

    stage: ScatterStage


Phase = (RowLoop | BlockedMap | TransposedMap | SplitColumns | KeptDims | PartialReduce | CombinePartials
         | ChunkedRows | CombineColumns | ScatterLoop)


# ---- the plan ------------------------------------------------------------------------------------------


class ExtraKind(enum.StrEnum):
    """What an argument slot after the params and outputs holds."""

    SCRATCH = "scratch"  # a scratch buffer of the kernel (in the launcher's arena)
    CONSTANT = "constant"  # a constant of the region (its data)


@dataclass(frozen=True)
class ExtraArg:
    """An argument slot after params and outputs: a scratch buffer or a region constant."""

    kind: ExtraKind
    nbytes: int = 0
    op_index: int = -1  # for constants: index of the constant op in the region


@dataclass(frozen=True)
class ExternCall:
    """The region's leading matmul/convolution, run through ATen before the generated epilogue."""

    op_index: int
    operands: tuple[Layout, ...]
    results: tuple[Layout, ...]


@dataclass(frozen=True)
class KernelPlan:
    """Everything the emitter needs to generate one kernel region's phase functions.

    Argument slots: the region's parameters, its outputs, then ``extra`` (scratch buffers and constants),
    then the error flag. ``access`` says for every value of the region where it is read from: a layout over
    an argument slot, or computed inline from its op."""

    region: Function
    access: Mapping[Value, Layout | Computed]
    phases: tuple[Phase, ...]
    n_params: int
    n_outputs: int
    extra: tuple[ExtraArg, ...] = ()
    extern: ExternCall | None = None
    may_fail: bool = False  # reads data-dependent indices that may be out of range, or divides integers
    written: frozenset[int] = frozenset()  # argument slots written inside the kernel (stages, the extern)
    row_blocked: bool = False  # the extern matmul can run block of rows by block, each followed by the phases
    aligned_args: frozenset[int] = frozenset()  # argument slots whose buffers start 64-byte aligned
    #: output slots the launch computes over one of the parameters' buffers (``in_place.writes_in_place``)
    overwrites: frozenset[int] = frozenset()
    vector_width: int = 0  # the kernel's tile decision: at most this many float32 lanes per vector (0: no cap)

    @property
    def error_slot(self) -> int:
        return self.n_params + self.n_outputs + len(self.extra)

    @property
    def n_args(self) -> int:
        return self.error_slot + 1

    def with_scratch(self, nbytes: int) -> tuple[KernelPlan, int]:
        """This plan with one more scratch buffer of ``nbytes``, and its argument slot."""
        return replace(self, extra=(*self.extra, ExtraArg(ExtraKind.SCRATCH, nbytes=nbytes))), self.error_slot

    def computes_transcendental(self, value: Value, seen: set[Value] | None = None) -> bool:
        """Whether computing ``value`` inline calls a transcendental function (exp, erf, log, tanh, ...): not
        counting values in ``seen``, which it extends. An explicit stack: unrolled recurrences (Hermite
        polynomials) run hundreds of ops deep, past Python's recursion limit."""
        seen = set() if seen is None else seen
        pending = [value]
        while pending:
            v = pending.pop()
            access = self.access.get(v)
            if v in seen or not isinstance(access, Computed):
                continue
            seen.add(v)
            if access.op.has(Trait.TRANSCENDENTAL):
                return True
            pending += access.op.operands
        return False
