"""The write pass of a compute-bound row loop, one row late, spread through the next row's compute: non-temporal
stores that drain to memory while the core computes.

Softmax's row loop is max, sum of exp(x - max) (its exponentials row-cached) and a write pass (the cached
exponentials divided by the sum). The write pass can only start when its row's sum is known, so on its own it is a
burst of stores at the end of each row: as non-temporal stores it waited for the core's few write-combining buffers
to drain, and as plain stores into lines prefetched for writing (``prefetch.rows_written_by_carried_pass``, the
default otherwise) each output line is read from memory before it is written (read for ownership): the row loop
moves 12 bytes per element where the row's unavoidable traffic is 8, and at 2 threads softmax [4096, 1024] ran at
the machine's bandwidth with those 12 (48 MB in 1.13 ms, 42 GB/s; Zen 3, session 12).

Here the write pass of row r - 1 runs inside row r's compute-bound pass (the carrier, ``prefetch.carrier_stage``),
a group of its elements beside each group of the carrier's (``prefetch.spread_loop``; before the group's
exponentials on AVX2, after them elsewhere: ``CpuTarget.writes_delayed_group_before_the_exponentials``):
``MEMORY_BURST_LINES`` lines of non-temporal stores at a time, which drain while exponentials are computed. The row caches
hold two rows (row r's is written while row r - 1's is read; ``row_buffers.row_slot``), and the last row of a
thread's range is written after its row loop. Where the target says so (AVX2, Zen 4:
``CpuTarget.writes_delayed_elements_in_the_exp_loop``) a float32 write is not a loop beside each group's but part of
the group's exp loop: each vector iteration's 32 exponentials, then the previous row's 32 outputs
(:meth:`DelayedGroups.fused`; a row sum in that loop, AVX-512's, added by ``reductions.LaneSums``, on Zen 4 in
lanes carried through all the row's groups: :meth:`DelayedGroups.around_groups`).
:func:`delayed_write_stage` is the decision, the rest its code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from llvmlite import ir

from neuroncc.codegen.llvm.kernel_plan import MapStage, RowLoop
from neuroncc.codegen.llvm.prefetch import rows_written_by_carried_pass
from neuroncc.codegen.llvm.pairs import pairs_halfwords
from neuroncc.codegen.llvm.reductions import LaneSums, RowSum
from neuroncc.codegen.llvm.row_buffers import row_number
from neuroncc.codegen.llvm.scalars import F32, I32, I64
from neuroncc.codegen.llvm.streams import stream_bytes, streams
from neuroncc.hardware.host import CACHE_LINE_BYTES
from neuroncc.ir.dtypes import DType

#: Whether write passes are delayed where :func:`delayed_write_stage` allows (a switch for one-process A/Bs).
DELAY_WRITES = True


def delayed_write_stage(em: Any, phase: RowLoop, carrier: int | None) -> int | None:
    """The stage of ``phase`` whose rows are written one row late (see the module docstring): the map stage right
    after the ``carrier`` stage, the phase's last, every output of it a row the carrier could prefetch for writing
    (``prefetch.rows_written_by_carried_pass``) and one the emitter writes with non-temporal stores
    (``streams.streams``); None otherwise."""
    if not DELAY_WRITES or carrier is None or carrier + 2 != len(phase.stages):
        return None
    stage = phase.stages[carrier + 1]
    written = rows_written_by_carried_pass(em.plan, phase, carrier)
    if not isinstance(stage, MapStage) or len(written) != len(stage.items) \
            or not all(streams(em, target, 0) for target in written):
        return None
    return carrier + 1


def emit_delayed_group(em: Any, phase: RowLoop, stage_number: int, row: Any, first_row: Any, previous: list[Any],
                       start: Any, stop: Any, length: int) -> None:
    """The elements [start, stop) (``length`` of them, 0: not a static count) of stage ``stage_number``'s row
    ``previous`` (the outer digits of the row before ``row``), unless ``row`` is the first of the thread's range
    (``first_row``)."""
    with em.fresh_values():
        with em.b.if_then(em.b.icmp_signed(">", em.ir_index(row), em.ir_index(first_row))):
            _write(em, phase.stages[stage_number], stage_number, previous, (start, stop), length)


@dataclass(frozen=True)
class DelayedGroups:
    """The delayed write of the row before ``row`` (outer digits ``previous``) in the groups of the carrier's loop
    (``prefetch.spread_loop``): called with a group's range, its elements in a loop of their own
    (:func:`emit_delayed_group`); :meth:`fused` writes them in the group's exp loop."""

    em: Any
    phase: RowLoop
    stage_number: int
    row: Any
    first_row: Any
    current: list[Any]
    previous: list[Any]
    held: list[LaneSums] = field(default_factory=list)  # (the row's lane sums while :meth:`around_groups` runs)

    def __call__(self, start: Any, stop: Any, length: int) -> None:
        emit_delayed_group(self.em, self.phase, self.stage_number, self.row, self.first_row, self.previous, start,
                           stop, length)

    def _fusable(self, length: int) -> bool:
        """Whether :meth:`fused` takes groups of ``length`` elements: float32 outputs and elements (no pairs)."""
        em = self.em
        stage = self.phase.stages[self.stage_number]
        width = em.target.vector_bits // 32 * em.target.polynomial_interleave
        return all(target.dtype is DType.f32 for _, target in stage.items) and length % width == 0 \
            and not pairs_halfwords(em.plan, self.phase.stages[self.stage_number - 1]) \
            and not pairs_halfwords(em.plan, stage)

    def around_groups(self, body: Callable[[Any], None], length: int, groups: Callable[[], None]) -> None:
        """``groups()`` (the loop over the row's groups, each a :meth:`fused` one), with a row sum's lanes
        (``reductions.LaneSums``) carried through all of them and reduced once after the last where the target says
        so (``CpuTarget.carries_the_row_sum_in_lanes_through_the_groups``); otherwise each group reduces its own."""
        em = self.em
        if not (isinstance(body, RowSum) and em.target.carries_the_row_sum_in_lanes_through_the_groups
                and self._fusable(length)):
            groups()
            return
        lanes = em.target.vector_bits // 32
        width = lanes * em.target.polynomial_interleave
        array = em._entry.alloca(ir.ArrayType(F32, width))
        array.align = CACHE_LINE_BYTES
        sums = LaneSums(body, lanes, width // lanes, array)
        sums.start()
        self.held.append(sums)
        try:
            groups()
        finally:
            self.held.pop()
        sums.finish()

    def fused(self, start: Any, stop: Any, length: int, body: Callable[[Any], None],
              elements: Callable[[Any, Any, Callable[[Any], None]], None]) -> bool:
        """The group [start, stop) (``length`` elements) of the carrier's ``body`` run by ``elements``, each block of
        one vector iteration's elements also computing the previous row's outputs into a stack piece that is then
        stored with non-temporal stores (as ``MapStages._map_stage``'s streamed pieces: LLVM keeps the piece in
        registers); the first row of the thread's range writes nothing. False (nothing emitted) where the write's
        outputs or the carrier's loop are not all float32 elements (pairs, bf16 words)."""
        em = self.em
        stage = self.phase.stages[self.stage_number]
        width = em.target.vector_bits // 32 * em.target.polynomial_interleave
        targets = [target for _, target in stage.items]
        if not self._fusable(length):
            return False
        pieces = {}
        for target in targets:
            piece = em._entry.alloca(ir.ArrayType(F32, width))
            piece.align = CACHE_LINE_BYTES
            pieces[target.arg] = piece
        carrier = em._stage_number
        sums = None  # (a row sum in the loop, AVX-512's: its lanes as the group's own vectorized loop adds them)
        whole_row = bool(self.held)  # (lanes carried through the row's groups: :meth:`around_groups`)
        if whole_row:
            sums = self.held[-1]
        elif isinstance(body, RowSum):
            lanes = em.target.vector_bits // 32
            array = em._entry.alloca(ir.ArrayType(F32, width))
            array.align = CACHE_LINE_BYTES
            sums = LaneSums(body, lanes, width // lanes, array)

        def block(j: Any) -> None:
            base = em.add(start, em.mul(j, width))

            def element(i: Any) -> None:
                if sums is None:
                    body(i)
                else:
                    sums.add(em.sub(i, base), i)
                with em.fresh_values():
                    em._stage_number = self.stage_number
                    em._map_body(stage, self.previous + [i], pieces, base)
                    em._stage_number = carrier
                if em.max_ahead is not None:  # (the next row's max: ``next_max.py``)
                    em.max_ahead.add(em.sub(i, base), i)

            elements(base, em.add(base, width), element)
            em._stage_number = self.stage_number
            for target in targets:  # (unrolled: each vector forwarded from the piece's stores to its own vmovntps)
                _stream_piece(em, pieces[target.arg], target, self.previous + [base], width)
            em._stage_number = carrier
            em._streamed = True

        # (each row copy's code of its own: with both row caches at known offsets of their buffer the vectorizer
        # sees the exponentials' stores and the write's loads apart; at unknown ones it left the loop scalar)
        rows = (em.form(row_number(em, self.current, self.phase.outer)),
                em.form(row_number(em, self.previous, self.phase.outer)))
        b = em.b
        with b.if_else(b.icmp_signed(">", em.ir_index(self.row), em.ir_index(self.first_row))) as (then, other):
            with then:
                odd = b.trunc(em.ir_index(self.row), ir.IntType(1))
                with b.if_else(odd) as (on_odd, on_even):
                    for copy, branch in ((1, on_odd), (0, on_even)):
                        with branch:
                            with em.fresh_values():
                                em._row_copy_of = {rows[0]: copy, rows[1]: 1 - copy}
                                if sums is not None and not whole_row:
                                    sums.start()
                                em.loop(0, em.div(em.sub(stop, start), width), block)
                                if sums is not None and not whole_row:
                                    sums.finish()
                                em._row_copy_of = {}
            with other:
                with em.fresh_values():
                    if whole_row:  # (the range's first row: no write, its terms into the row's lanes)
                        em.loop(0, em.div(em.sub(stop, start), width), lambda j: elements(
                            em.add(start, em.mul(j, width)), em.add(start, em.mul(em.add(j, 1), width)),
                            lambda i, j=j: sums.add(em.sub(i, em.add(start, em.mul(j, width))), i)))
                    else:
                        elements(start, stop, body)
        return True


def _stream_piece(em: Any, piece: ir.Value, target: Any, idx: list[Any], count: int) -> None:
    """``count`` float32 elements of ``piece`` stored to ``target`` at ``idx`` with non-temporal vector stores."""
    lanes = stream_bytes(em.target) // 4
    vector = ir.VectorType(F32, lanes)
    destination = em.address(target, idx)
    nontemporal = em.module.add_metadata([ir.Constant(I32, 1)])
    for offset in range(0, count, lanes):
        source = em.b.bitcast(em.b.gep(piece, [ir.Constant(I64, 0), ir.Constant(I64, offset)], inbounds=True),
                              vector.as_pointer())
        store = em.b.gep(destination, [ir.Constant(I64, offset)], source_etype=F32, inbounds=True)
        em.b.store(em.b.load(source, align=stream_bytes(em.target)), store,
                   align=stream_bytes(em.target)).set_metadata("nontemporal", nontemporal)


def emit_last_row(em: Any, phase: RowLoop, stage_number: int, first_row: Any, end: ir.Value) -> None:
    """Stage ``stage_number`` over the whole of the last row of the range [first_row, end), after the row loop."""
    stage = phase.stages[stage_number]
    with em.fresh_values():
        last = em.b.sub(end, ir.Constant(end.type, 1))
        with em.b.if_then(em.b.icmp_signed(">=", last, em.ir_index(first_row))):
            _write(em, stage, stage_number, em.digits(last, phase.outer), (0, stage.shape[-1]), 0)


def _write(em: Any, stage: MapStage, stage_number: int, outer: list[Any], columns: tuple[Any, Any],
           length: int) -> None:
    saved, em._stage_number = em._stage_number, stage_number  # (row caches are read by later stages)
    em._map_stage(stage, [(i, None) for i in outer] + [columns], length)
    em._stage_number = saved
