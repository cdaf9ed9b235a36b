"""Software prefetch of the next row in row loops that pass over each row more than once.

A row loop runs its stages one after the other on a row while it is in L1 (softmax: max, sum of exp, write;
LayerNorm: mean and variance, write). Only the first pass reads the row from memory; while the later passes
compute, no load misses, so the hardware prefetchers (which follow demand misses) do not fetch the next row
and the memory system idles, and during the first pass of the next row the cores wait for it. Prefetching
the next row while this one is computed overlaps the two. (A one-pass loop streams without help, except one
computing a transcendental per element into non-temporal pieces: :func:`emit_prefetch_pieces_ahead`; rows longer
than ``ROW_MAX_BYTES`` would evict the row being worked on from L1 and are left to the hardware.)

Where the prefetches go depends on the passes:

- cheap passes (no transcendental function per element: LayerNorm, RMSNorm): every line of the next row, in
  bursts at the start of the row's passes (:func:`row_bursts`, :func:`emit_prefetch_next_row`; bf16 LayerNorm
  [8192, 1024]: 13% faster at 1 thread than without, all at the row's start); on Zen 4 a float32 row's sum and
  write (RMSNorm) none at all, the core's prefetchers and the page touches fetch its rows
  (:func:`leaves_sum_rows_to_the_core`: 0.76-0.83 of the time at 1 thread, session 42);
- a compute-bound pass (a transcendental per element: softmax's sum of exp): spread through that pass's loop,
  ``MEMORY_BURST_LINES`` lines before each group of its elements (:func:`spread_loop`), so that the row arrives
  while exp is computed (on Zen 4 a float32 row into the L2 only, ``prefetcht2``:
  ``CpuTarget.prefetches_the_next_row_into_l2_in_the_exp_pass``; two rows ahead where the exp loop also takes the
  next row's max: ``next_max.py``). All of a row's prefetches at once (at the row's
  start, or at the start of the exp pass) wait for the core's miss buffers with the pass's own loads queued behind
  them: softmax [4096, 1024] was 4-5% slower with them than with none, and spread it is 13% faster at 2 threads and
  24% at 1 (Zen 3, session 9). The pass that carries them is :func:`carrier_stage`: a float sum over the row (the
  row caches the exponentials there, as softmax does). The online log-sum-exp prefetches its next block in its
  blocks' loops the same way (``online.py``; in chunks of constant length, :func:`chunk_loop`, where the target says
  so): for rows of up to a block, that is the next row.

The write pass after such a carrier (softmax's division by the sum) is a burst of stores at the end of each row,
with nothing left to compute: as non-temporal stores it waited for the core's few write-combining buffers to
drain to memory (the time per row was about the sum of its exponentials' and its memory's, issue #19). So the
carrier also prefetches, for writing (``prefetchw``), the lines of the current row that the write pass stores
(:func:`rows_written_by_carried_pass`): their reads for ownership overlap the exponentials like the next row's
loads do, and the write pass stores plainly into lines it owns in L1, from where they are written back to memory
as they are evicted, while the later rows compute (softmax [4096, 1024] float32, Zen 3: 7-13% faster at 1 thread
and 20-24% at 2 than with non-temporal stores; prefetchw before non-temporal stores: 14-53% slower;
docs/performance-history.md, session 11).

On Zen 4 a row loop also prefetches one line of each 4 KiB page of its inputs' rows 8 rows ahead and of its streamed
outputs' rows 2 rows ahead (:func:`emit_touch_pages_ahead`): in a KVM guest on 4 KiB pages each row is a TLB miss
each way, a nested page walk, and taken early it no longer holds the row's prefetches and stores (session 40); a
cheap one (LayerNorm, RMSNorm) also those of rows too long to prefetch, up to 32 KiB (:func:`rows_to_touch`,
``CpuTarget.touches_wide_row_pages_up_to_bytes``: rows of 8192 float32, session 42).

:func:`rows_to_prefetch`, :func:`carrier_stage` and :func:`rows_written_by_carried_pass` are the decision (which
inputs and outputs of a phase, which stage's loop carries them, from its plan), :func:`emit_prefetch_next_row`,
:func:`spread_loop`, :func:`next_row` and :func:`this_row` its code.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from llvmlite import ir

from neuroncc.codegen.llvm.context import Ahead, EmitContext, Index
from neuroncc.codegen.llvm.elementwise import ELEMENTWISE
from neuroncc.codegen.llvm.kernel_plan import Computed, KernelPlan, MapStage, ReduceStage, RowLoop, Stage
from neuroncc.codegen.llvm.reductions import COMBINERS
from neuroncc.codegen.llvm.scalars import I32, I64, I8, PTR, VOID, storage_itemsize, storage_type
from neuroncc.codegen.llvm.streams import streams
from neuroncc.codegen.llvm.views import Layout
from neuroncc.hardware.host import CACHE_LINE_BYTES
from neuroncc.hardware.loop_choices import MEMORY_BURST_LINES
from neuroncc.ir.dtypes import DType
from neuroncc.ir.graph import Value
from neuroncc.ir.opdef import Trait

#: The pages whose translations :func:`emit_touch_pages_ahead` fetches ahead.
SMALL_PAGE_BYTES = 4096
#: Rows of at most this many bytes (per input) are prefetched: with the row in use, half of L1.
ROW_MAX_BYTES = 1 << 14


def rows_to_prefetch(plan: KernelPlan, phase: RowLoop, row_max_bytes: int = ROW_MAX_BYTES) -> tuple[Layout, ...]:
    """The kernel inputs whose next row ``phase`` prefetches: read at the phase's own index through elementwise
    ops by its first stage, contiguous (the next row follows this one), with rows of at most ``row_max_bytes``;
    none unless the phase has several stages (passes over the row). A phase with a transcendental per element
    prefetches only through a :func:`carrier_stage`, and only rows of one dim as long as the carrier's."""
    depth = len(phase.outer)
    if depth == 0 or len(phase.stages) < 2:
        return ()
    carrier = None
    if _transcendental_per_element(plan, phase):
        carrier = carrier_stage(plan, phase)
        if carrier is None:
            return ()
    first = phase.stages[0]
    found: dict[int, Layout] = {}
    for root, _ in first.roots:
        for layout in _read_in_place(plan, root, first.shape, set()):
            row_bytes = math.prod(layout.shape[depth:]) * storage_itemsize(layout.dtype)
            if layout.arg < plan.n_params and layout.is_contiguous and layout.shape[:depth] == phase.outer \
                    and 0 < row_bytes <= row_max_bytes and (carrier is None or layout.shape[depth:] ==
                                                            phase.stages[carrier].shape[depth:]):
                found.setdefault(layout.arg, layout)
    return tuple(found.values())


def carrier_stage(plan: KernelPlan, phase: RowLoop) -> int | None:
    """The stage of a compute-bound row loop whose loop carries the next row's prefetches (see the module
    docstring): its first stage with a transcendental per element, when that is a float sum over the phase's
    rows, one dim (the loop ``stages._Reducer`` runs through :func:`spread_loop`); None otherwise."""
    depth = len(phase.outer)
    for number, stage in enumerate(phase.stages):
        if not _computes_transcendental(plan, stage):
            continue
        if isinstance(stage, ReduceStage) and COMBINERS[stage.op.name].float_sum \
                and stage.op.operands[0].type.dtype.is_float and stage.reduced == (depth,) == (len(stage.shape) - 1,):
            return number
        return None
    return None


def rows_written_by_carried_pass(plan: KernelPlan, phase: RowLoop, carrier: int | None) -> tuple[Layout, ...]:
    """The outputs whose current row the ``carrier`` stage's loop prefetches for writing (see the module
    docstring): those of the map stage right after the carrier, over the carrier's rows, contiguous with rows of at
    most ``ROW_MAX_BYTES``. The emitter stores them plainly (not streamed past the caches)."""
    if carrier is None or carrier + 1 >= len(phase.stages):
        return ()
    stage, depth = phase.stages[carrier + 1], len(phase.outer)
    if not isinstance(stage, MapStage) or stage.shape != phase.stages[carrier].shape:
        return ()
    return tuple(target for _, target in stage.items
                 if target.is_contiguous and target.shape == stage.shape
                 and 0 < math.prod(target.shape[depth:]) * storage_itemsize(target.dtype) <= ROW_MAX_BYTES)


def _transcendental_per_element(plan: KernelPlan, phase: RowLoop) -> bool:
    """Whether a stage of ``phase`` computes a transcendental function at each of its elements."""
    return any(_computes_transcendental(plan, stage) for stage in phase.stages)


def _computes_transcendental(plan: KernelPlan, stage: Stage) -> bool:
    """Whether ``stage`` computes a transcendental function at each of its elements."""
    pending, seen = [root for root, _ in stage.roots], set()
    while pending:
        value = pending.pop()
        access = plan.access.get(value)
        if value in seen or value.type.shape != stage.shape or not isinstance(access, Computed):
            continue
        seen.add(value)
        if access.op.has(Trait.TRANSCENDENTAL):
            return True
        pending += access.op.operands
    return False


def _read_in_place(plan: KernelPlan, value: Value, shape: tuple[int, ...], seen: set[Value]) -> list[Layout]:
    """The buffers ``value`` reads at its own index (through elementwise ops of the same shape)."""
    if value in seen or value.type.shape != shape:
        return []
    seen.add(value)
    access = plan.access.get(value)
    if isinstance(access, Layout):
        return [access]
    if not isinstance(access, Computed) or access.op.name not in ELEMENTWISE:
        return []
    return [layout for operand in access.op.operands for layout in _read_in_place(plan, operand, shape, seen)]


def row_bursts(lines: int, passes: int) -> list[range]:
    """The lines of the next row (``lines`` of them) that each of a cheap row loop's ``passes`` prefetches before
    it starts: bursts of at least ``MEMORY_BURST_LINES`` lines, as even as that allows, the first passes first.
    All of a row's lines at once are more than the core's miss buffers track (bf16 LayerNorm [8192, 1024]: 32 lines
    at the row's start, against 16 there and 16 before its write pass, 6% slower; Zen 3, session 10)."""
    per = max(MEMORY_BURST_LINES, -(-lines // max(passes, 1)))
    return [range(min(k * per, lines), min((k + 1) * per, lines)) for k in range(passes)]


def row_lines(layout: Layout, depth: int) -> int:
    """Cache lines of one row of ``layout`` (its dims from ``depth`` on)."""
    return -(-math.prod(layout.shape[depth:]) * storage_itemsize(layout.dtype) // CACHE_LINE_BYTES)


def emit_prefetch_next_row(em: EmitContext, layout: Layout, outer: Index, part: int = 0, passes: int = 1,
                           rows_ahead: int = 1, first_lines: int = 0) -> None:
    """Prefetch (for reading, into all cache levels) the cache lines of the row after ``layout``'s row at the
    outer index ``outer`` that pass ``part`` of ``passes`` over the row fetches (:func:`row_bursts`; all of them
    for one pass), of the row's first ``first_lines`` only where that is set (``CpuTarget.one_pass_row_prefetch
    _lines``). Prefetches do not fault, so the row after the buffer's last is harmless. A loop on purpose: bf16
    LayerNorm's bursts of 16 as straight-line prefetches took 1.29-1.34x the kernel's time on Zen 4 with its rows from
    memory (session 42 bfrow42)."""
    b = em.b
    depth = len(outer)
    row = math.prod(layout.shape[depth:])
    lines = row_bursts(row_lines(layout, depth), passes)[part]
    if first_lines:
        lines = range(min(lines.start, first_lines), min(lines.stop, first_lines))
    if not lines:
        return
    start: Any = em.address(layout, list(outer) + [0] * (len(layout.shape) - depth))
    following = b.gep(start, [ir.Constant(I64, row * rows_ahead)], source_etype=storage_type(layout.dtype),
                      inbounds=False)
    prefetch = _prefetch_intrinsic(b.module)

    def line(j: Any) -> None:
        address = em.b.gep(following, [em.ir_index(em.mul(j, CACHE_LINE_BYTES))], source_etype=I8)
        em.b.call(prefetch, [address, ir.Constant(I32, 0), ir.Constant(I32, 3), ir.Constant(I32, 1)])

    em.loop(lines.start, lines.stop, line)


def leaves_sum_rows_to_the_core(em: EmitContext, phase: RowLoop, stages: Sequence[Stage]) -> bool:
    """Whether a cheap row loop whose passes (``stages``) are a float32 row's float sum (not a variance) and then
    its write (RMSNorm: the mean of x*x, then x * rsqrt(...) * w) sends no bursts of the next row's lines: the
    core's prefetchers fetch the rows, with the page touches ahead (``CpuTarget.leaves_sum_rows_to_the_core
    _prefetchers``)."""
    if not (em.target.leaves_sum_rows_to_the_core_prefetchers and len(stages) == 2 and len(phase.outer) > 0):
        return False
    first, write = stages
    return isinstance(first, ReduceStage) and isinstance(write, MapStage) \
        and COMBINERS[first.op.name].float_sum and not COMBINERS[first.op.name].two_pass \
        and first.op.operands[0].type.dtype is DType.f32 and first.reduced == (len(first.shape) - 1,) \
        and all(layout.dtype is DType.f32 for layout in rows_to_prefetch(em.plan, phase))


def touches_one_pass(em: EmitContext, phase: RowLoop) -> bool:
    """Whether a row loop of one pass takes :func:`emit_touch_pages_ahead`'s touches of its map stage's rows: a
    streamed output (a memory-bound stage), no transcendental per element (compute-bound: row (a)'s gelu measured
    even)."""
    stage = phase.stages[0]
    return len(phase.stages) == 1 and isinstance(stage, MapStage) and len(phase.outer) > 0 \
        and not _computes_transcendental(em.plan, stage) and any(streams(em, target, 0) for _, target in stage.items)


def touched_row_max_bytes(em: EmitContext, phase: RowLoop) -> int:
    """The longest rows (bytes) whose pages a row loop of several passes touches ahead: ``ROW_MAX_BYTES``, the
    rows it prefetches, or in a cheap one (no transcendental per element: LayerNorm, RMSNorm) longer rows up to
    ``CpuTarget.touches_wide_row_pages_up_to_bytes`` too, whose lines it leaves to the core's prefetchers."""
    wide = em.target.touches_wide_row_pages_up_to_bytes
    return ROW_MAX_BYTES if wide <= ROW_MAX_BYTES or _transcendental_per_element(em.plan, phase) else wide


def rows_to_touch(em: EmitContext, phase: RowLoop) -> tuple[Layout, ...]:
    """The inputs whose rows' pages :func:`emit_touch_pages_ahead` touches in ``phase``: :func:`rows_to_prefetch`'s
    with rows of up to :func:`touched_row_max_bytes`."""
    return rows_to_prefetch(em.plan, phase, touched_row_max_bytes(em, phase))


def emit_touch_pages_ahead(em: EmitContext, phase: RowLoop, outer: Index, inputs: Sequence[Layout],
                           row_max_bytes: int = ROW_MAX_BYTES) -> None:
    """One prefetch (non-temporal hint) of each 4 KiB page of the row ``CpuTarget.touches_input_pages_rows_ahead``
    rows after the row at ``outer`` of each of ``inputs`` (the rows the loop prefetches), and of the row
    ``CpuTarget.touches_streamed_output_rows_ahead`` rows after it of the phase's streamed (non-temporal) outputs:
    the page's translation is then in the TLB before the row's own prefetches and stores reach it (a row a 4 KiB
    page: a page walk a row each way). A line read ahead per page; rows of at most ``row_max_bytes``. Prefetches do
    not fault, so rows past a buffer's end are harmless."""
    depth = len(outer)
    inputs_ahead, outputs_ahead = em.target.touches_input_pages_rows_ahead, em.target.touches_streamed_output_rows_ahead
    outputs = {target.arg: target for stage in phase.stages if isinstance(stage, MapStage) and outputs_ahead
               for _, target in stage.items if streams(em, target, 0) and target.shape[:depth] == phase.outer}
    touched = [(layout, inputs_ahead) for layout in inputs if inputs_ahead] + \
        [(layout, outputs_ahead) for layout in outputs.values()]
    touched = [(layout, rows_ahead) for layout, rows_ahead in touched if depth and  # (rows, not whole buffers)
               math.prod(layout.shape[depth:]) * storage_itemsize(layout.dtype) <= row_max_bytes]
    if touched:
        prefetch = _prefetch_intrinsic(em.b.module)
        for layout, rows_ahead in touched:
            row_bytes = math.prod(layout.shape[depth:]) * storage_itemsize(layout.dtype)
            start: Any = em.address(layout, list(outer) + [0] * (len(layout.shape) - depth))
            ahead = em.b.gep(start, [ir.Constant(I64, row_bytes * rows_ahead)], source_etype=I8, inbounds=False)
            for page in range(0, row_bytes, SMALL_PAGE_BYTES):
                address = em.b.gep(ahead, [ir.Constant(I64, page)], source_etype=I8, inbounds=False)
                em.b.call(prefetch, [address, ir.Constant(I32, 0), ir.Constant(I32, 0), ir.Constant(I32, 1)])


def spread_loop(em: EmitContext, lo: Any, hi: Any, body: Callable[[Any], None], ahead: Sequence[Ahead],
                inner: Callable[[Any, Any, Callable[[Any], None]], None] | None = None,
                after: Callable[[Any, Any, int], None] | None = None) -> None:
    """for i in [lo, hi): body(i), in groups of elements each preceded by the prefetches of the lines of its
    elements in every stream of ``ahead`` (``MEMORY_BURST_LINES`` lines of the widest); a plain loop without
    streams. A reduction over the loop keeps a vector accumulator per group (one horizontal add per group).
    ``inner(lo, hi, body)`` emits the element loop (default ``em.loop``; the loop over a stage's element pairs:
    ``EmitContext.innermost_loop``), over a group of constant length where the groups divide the range.
    ``after(start, stop, length)`` is emitted after each group's loop (``length``: the group's, 0 when not
    constant), or before it, after the prefetches, where the target says so
    (``CpuTarget.writes_delayed_group_before_the_exponentials``): the delayed write of the previous row's
    elements (``delayed_writes.py``). Where the target says so and the groups are whole (two or more),
    ``after.fused(start, stop, length, body, inner)`` emits a group's elements and its write in one loop instead
    (``delayed_writes.DelayedGroups``; it returns False where it does not apply; a row sum in the loop comes as a
    ``reductions.RowSum`` body, whose lanes the fused loop adds in the group loop's own order, or where the target says
    so in lanes through all the groups: ``after.around_groups(body, group, groups)`` emits the loop over them)."""
    loop = inner if inner is not None else em.loop
    if not ahead and after is None:
        loop(lo, hi, body)
        return
    group = MEMORY_BURST_LINES * CACHE_LINE_BYTES // max((stream.itemsize for stream in ahead), default=4)
    whole = isinstance(lo, int) and isinstance(hi, int) and (hi - lo) % group == 0
    prefetch = _prefetch_intrinsic(em.b.module)
    covered = group_elements(lo, hi, group)

    write_first = after is not None and em.target.writes_delayed_group_before_the_exponentials
    # (rows of one group, 256 float32, were 0.98-1.05 with the write in the exp loop: left as they are)
    fused = getattr(after, "fused", None) if whole and hi - lo >= 2 * group \
        and em.target.writes_delayed_elements_in_the_exp_loop else None

    def one_group(g: Any) -> None:
        start = em.add(lo, em.mul(g, group))
        _prefetch_lines(em, prefetch, ahead, start, covered)
        stop = em.add(start, group) if whole else em.min(em.add(start, group), hi)
        if fused is not None and fused(start, stop, group, body, loop):
            return
        if write_first:
            after(start, stop, group if whole else 0)
        ahead_max = em.max_ahead  # (the next row's max beside: ``next_max.py``)
        if ahead_max is not None:
            loop(start, stop, lambda i: (body(i), ahead_max.add_element(i)))
        else:
            loop(start, stop, body)
        if after is not None and not write_first:
            after(start, stop, group if whole else 0)

    def groups() -> None:
        em.loop(0, em.div(em.add(em.sub(hi, lo), group - 1), group), one_group)

    if fused is not None and hasattr(after, "around_groups"):  # (a row sum's lanes through all the groups)
        after.around_groups(body, group, groups)
    else:
        groups()


def streamed_map_inputs(plan: KernelPlan, stage: MapStage) -> tuple[Layout, ...]:
    """The kernel inputs a streamed map stage (``map_stages.py``'s ``_map_stage``: its output written past the caches in
    pieces through a stack buffer) reads element for element along its rows: contiguous along the last dim, of
    the stage's shape (cross-entropy's logits in its gradient; not its per-row max and log-sum)."""
    params = len(plan.region.params)
    found = []
    for value, _ in stage.items:
        for layout in _read_in_place(plan, value, stage.shape, set()):
            if layout.arg < params and layout.strides[-1] == 1 and layout not in found:
                found.append(layout)
    return tuple(found)


def emit_prefetch_pieces_ahead(em: EmitContext, inputs: Sequence[Layout], prefix: Index, start: Any, piece: int,
                               pieces: int) -> None:
    """Prefetch (into L1) the lines of the ``piece`` elements ``pieces`` pieces after ``start`` in each of
    ``inputs`` at ``prefix`` (``CpuTarget.streamed_map_prefetch_pieces``): a burst before each piece of a streamed
    map stage that computes a transcendental per element."""
    def ahead(layout: Layout) -> Ahead:
        def at(i: Any) -> ir.Value:
            element = em.address(layout, list(prefix) + [i])
            return em.b.gep(element, [ir.Constant(I64, pieces * piece)], source_etype=storage_type(layout.dtype),
                            inbounds=False)
        return Ahead(at, storage_itemsize(layout.dtype))

    _prefetch_lines(em, _prefetch_intrinsic(em.b.module), [ahead(layout) for layout in inputs], start, piece)


def chunk_elements(ahead: Sequence[Ahead], lines: int) -> int:
    """Elements of a chunk of :func:`chunk_loop`: ``lines`` lines of the widest stream of ``ahead``."""
    return lines * CACHE_LINE_BYTES // max((stream.itemsize for stream in ahead), default=4)


def chunk_loop(em: EmitContext, lo: Any, hi: Any, body: Callable[[Any], None], ahead: Sequence[Ahead],
               lines: int, whole_chunk: Callable[[Any, Callable], None] | None = None, piece_lines: int = 0) -> None:
    """for i in [lo, hi): body(i), as :func:`spread_loop` with groups (chunks) of ``lines`` lines' elements of
    the widest stream of ``ahead``, each a loop of constant length: the vectorizer runs it whole (no remainder
    loop, the loop's constants kept in registers across chunks). The elements after the last whole chunk run in
    a loop of their own, without prefetches (``CpuTarget.online_exp_chunk_lines``). ``whole_chunk(start,
    elements)``, when given, emits a whole chunk's work from ``start`` instead of the loop of ``body``: its loop
    over the chunk's elements by ``elements(start, element_body)``, which prefetches them.

    The prefetches of a chunk's lines go in a burst before its loop, or where ``piece_lines`` is set
    (``CpuTarget.online_exp_prefetch_piece_lines``), spread through it: the loop runs over pieces of that many
    lines, each after the prefetches of its own lines (a piece of one vector iteration: LLVM keeps one loop, the
    prefetches in its body)."""
    chunk = chunk_elements(ahead, lines)
    prefetch = _prefetch_intrinsic(em.b.module)
    whole = em.div(em.sub(hi, lo), chunk)
    piece = chunk_elements(ahead, piece_lines) if piece_lines else chunk

    def in_pieces(start: Any, element_body: Callable[[Any], None]) -> None:
        def one_piece(k: Any) -> None:
            first = em.add(start, em.mul(k, piece))
            _prefetch_lines(em, prefetch, ahead, first, piece)
            em.loop(first, em.add(first, piece), element_body)

        em.loop(0, chunk // piece, one_piece)

    def after_burst(start: Any, element_body: Callable[[Any], None]) -> None:
        em.loop(start, em.add(start, chunk), element_body)

    def one_chunk(g: Any) -> None:
        start = em.add(lo, em.mul(g, chunk))
        if not piece_lines:
            _prefetch_lines(em, prefetch, ahead, start, chunk)
        elements = in_pieces if piece_lines else after_burst
        if whole_chunk is None:
            elements(start, body)
        else:
            whole_chunk(start, elements)

    em.loop(0, whole, one_chunk)
    em.loop(em.add(lo, em.mul(whole, chunk)), hi, body)


def _prefetch_lines(em: EmitContext, prefetch: ir.Function, ahead: Sequence[Ahead], start: Any,
                    elements: int) -> None:
    """Prefetch (for reading or writing, into the cache level, as each stream says) the lines of ``elements``
    elements from ``start`` in every stream of ``ahead``."""
    for stream in ahead:
        first = stream.at(start)
        for line in range(-(-elements * stream.itemsize // CACHE_LINE_BYTES)):
            address = em.b.gep(first, [ir.Constant(I64, line * CACHE_LINE_BYTES)], source_etype=I8)
            em.b.call(prefetch, [address, ir.Constant(I32, int(stream.write)), ir.Constant(I32, stream.locality),
                                 ir.Constant(I32, 1)])


def group_elements(lo: Any, hi: Any, group: int) -> int:
    """The elements a group of :func:`spread_loop` prefetches the lines of: ``group``, or a shorter constant range
    whole. A short row (the attention softmax's rows of 16 float32: one line) prefetched ``group`` elements'
    ``MEMORY_BURST_LINES`` lines per stream and row, the same lines again on each of the next 15 rows: 32 of the
    ~200 instructions a row took in its one-row-at-a-time loop (issue #18's classifier)."""
    if isinstance(lo, int) and isinstance(hi, int) and 0 < hi - lo < group:
        return hi - lo
    return group


def next_row(em: EmitContext, layout: Layout, outer: Index, locality: int = 3, rows: int = 1) -> Ahead:
    """The stream of ``layout``'s row ``rows`` rows after the one at the outer index ``outer`` (rows of one dim,
    contiguous; prefetched with ``locality``: see ``Ahead``)."""
    row = math.prod(layout.shape[len(outer):]) * rows

    def at(i: Any) -> ir.Value:
        element = em.address(layout, list(outer) + [i])
        return em.b.gep(element, [ir.Constant(I64, row)], source_etype=storage_type(layout.dtype), inbounds=False)

    return Ahead(at, storage_itemsize(layout.dtype), locality=locality)


def this_row(em: EmitContext, layout: Layout, outer: Index) -> Ahead:
    """The stream of ``layout``'s row at the outer index ``outer``, to be written (rows of one dim, contiguous)."""
    return Ahead(lambda i: em.address(layout, list(outer) + [i]), storage_itemsize(layout.dtype), write=True)


def _prefetch_intrinsic(module: ir.Module) -> ir.Function:
    name = "llvm.prefetch.p0"
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    return ir.Function(module, ir.FunctionType(VOID, [PTR, I32, I32, I32]), name)
