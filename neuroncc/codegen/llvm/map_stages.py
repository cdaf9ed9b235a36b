"""Map stages of a kernel's phases, as the kernel emitter makes them: a mixin of
:class:`~neuroncc.codegen.llvm.emit.KernelEmitter` (as :class:`~neuroncc.codegen.llvm.buffer_access.BufferAccess`
is), which supplies the builder and loops (``b``, ``loop``, ``nest``), values (``value_at``), stores, the row
caches and the pair of 16-bit elements being emitted (``_pair``, ``pairs.py``).

A map stage's loop nest writes its outputs element by element; outputs that would not stay in cache are written
in pieces through a stack buffer with non-temporal stores (``streams.py``), and a stage whose last dim is read or
written as 16-bit data loops over element pairs (``pairs.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llvmlite import ir

from neuroncc.codegen.llvm.access import broadcast_index
from neuroncc.codegen.llvm.bf16_tables import packed_word
from neuroncc.codegen.llvm.context import Index
from neuroncc.codegen.llvm.elementwise import ELEMENTWISE, EXACT, evaluated_polynomial, table_function
from neuroncc.codegen.llvm.entries import align_phase_entry_stack
from neuroncc.codegen.llvm.kernel_plan import Computed, MapStage, Stage
from neuroncc.codegen.llvm.one_hot_rows import (emit_correction, emit_split_rows, find_one_hot, knowing,
                                                target_inside)
from neuroncc.codegen.llvm.pairs import Pair, pair_position, pairs_halfwords
from neuroncc.codegen.llvm.prefetch import emit_prefetch_pieces_ahead, streamed_map_inputs
from neuroncc.codegen.llvm.scalars import I32, I64, compute_type, storage_itemsize, storage_type, store
from neuroncc.codegen.llvm.streams import emit_stream_row, stream_bytes, streams
from neuroncc.codegen.llvm.views import Layout
from neuroncc.hardware.host import CACHE_LINE_BYTES
from neuroncc.hardware.loop_choices import MEMORY_BURST_LINES
from neuroncc.ir.dtypes import DType
from neuroncc.ir.graph import Op, Value
from neuroncc.ir.opdef import Trait

#: Outputs that ``streams.streams`` would write with non-temporal stores are written so unless each element of
#: the map stage computes this many transcendental functions: such a stage is compute-bound, and
#: the stack-buffer round trip costs more than the read-for-ownership it saves (gelu(x*w+b)*sigmoid(x) on
#: [4096, 1024], 2 threads: 1.96 ms streamed, 1.76 ms with plain stores).
STREAM_MAX_TRANSCENDENTALS = 2

#: The fewest math library polynomials per element of a map stage that runs its rows in pieces where the target
#: says so (``CpuTarget.function_piece_lines``; gelu(x*w+b)*sigmoid(x)).
PIECES_MIN_POLYNOMIALS = 2

#: The longest row (elements) whose polynomial math a map stage splits into loops of its own
#: (``CpuTarget.splits_polynomial_math_loops``): the buffers of the split values and the inputs the row reads again
#: stay in L1 (32 KiB).
SPLIT_MATH_MAX = 2048


@dataclass
class OperandsAhead:
    """A paired loop's table operands packed a vector iteration ahead (``MapStages._pipelined_pairs``)."""

    buffers: dict[Op, ir.AllocaInstr]  # each table read's packed words of the row, one i32 a pair
    prefix: Index  # the loop's outer indices
    distance: int  # the pairs ahead the loop being emitted packs (0: the prologue's)
    pair: Any  # the pair counter of the iteration being emitted
    packing: bool = False  # the words are being packed (their reads computed, not loaded)


class MapStages:
    """The loop nests of map stages: whole, split by one-hot rows, or streamed in pieces."""

    def _map_stage(self, stage: MapStage, ranges: list[tuple[Any, Any]], block: int) -> None:
        """The nest of a map stage over ``ranges``; ``block``: the length of its last range when it is a block
        of the last dim (0: the whole dim). Where the target reads bf16 tables in narrow loops
        (``CpuTarget.bf16_table_loop_lanes``), a stage evaluating no polynomial but by table does so
        (:attr:`narrow_tables`)."""
        if self.target.bf16_table_loop_lanes:
            self.narrow_tables = True  # (so that the count below takes the stage's table reads as reads)
            self.narrow_tables = not self._stage_polynomials(stage, within_polynomials=True)
        try:
            self._map_stage_nest(stage, ranges, block)
        finally:
            self.narrow_tables = False

    def _map_stage_nest(self, stage: MapStage, ranges: list[tuple[Any, Any]], block: int) -> None:
        streamed = [t for _, t in stage.items if streams(self, t, block)]
        transcendentals = self._transcendentals([v for v, _ in stage.items]) if streamed else 0
        if transcendentals >= STREAM_MAX_TRANSCENDENTALS:
            streamed = []
        one_hot = find_one_hot(self.plan, stage, ranges, self._generated_op,
                               keeps_rows=self._stage_number in self._row_cache.values())
        if (not streamed or not ranges or ranges[-1][1] is None) and one_hot is None:
            # pieces first: where the target runs both, rows of whole pieces take them, other rows the split loops
            lines = self._function_piece_lines(stage, ranges, block)
            if lines:
                self._function_pieces(stage, ranges, lines)
                return
            split = self._split_math(stage, ranges)
            if split:
                self._split_math_loops(stage, ranges, split)
                return
            self.stage_nest(stage, ranges, lambda idx: self._map_body(stage, idx, {}))
            return
        if not streamed:
            emit_split_rows(self, stage, one_hot, ranges, lambda idx: self._map_body(stage, idx, {}))
            return
        lo, hi = ranges[-1]
        length = block or stage.shape[-1]
        # Each piece of a row, one vector of the narrowest streamed output (whole vectors of every output), is
        # computed into a stack buffer with plain stores, then stored to the output with aligned non-temporal
        # vector stores: no read-for-ownership of the output lines. The piece is one vector iteration of the
        # loop vectorizer, so LLVM keeps the buffer in registers and stores each result with `vmovntps` as it is
        # computed. (16 KiB pieces, before, wrote bursts of lines between the compute loops and stalled the core on
        # its write-combining buffers: Zen 3 [8192, 1024] x*w+b 71% -> 90% of the copy roofline, LayerNorm 60% ->
        # 67%, RMSNorm 75% -> 83%, 2 threads; pieces of a line went through the stack in bf16 LayerNorm's loop.)
        # A stage computing a transcendental per element streams pieces of ``MEMORY_BURST_LINES`` lines: its loop
        # is compute-bound, and a one-vector piece left nothing for the math's interleaving (``loop_hints.py``) to
        # interleave (Zen 3, cross-entropy fwd+bwd [512, 32000]: 6% slower at 2 threads, 19% at 1).
        # Float32 outputs in pieces of ``CpuTarget.streamed_map_piece_lines`` lines (AVX2: 2, the stores spread
        # through the math), others of ``MEMORY_BURST_LINES``.
        burst = transcendentals > 0
        itemsizes = [storage_itemsize(t.dtype) for t in streamed]
        # a piece without its row's target from registers (``CpuTarget.register_piece_lines``): through buffers of
        # its own, written and read whole at constant places only
        register_lines = self.target.register_piece_lines if one_hot is not None and burst and set(itemsizes) == {4} \
            else 0
        lines = register_lines or (self.target.streamed_map_piece_lines if set(itemsizes) == {4}
                                   else MEMORY_BURST_LINES)
        piece = min(length, lines * CACHE_LINE_BYTES // max(itemsizes) if burst
                    else stream_bytes(self.target) // min(itemsizes))
        rows = {}
        for target in streamed:
            row = self._entry.alloca(ir.ArrayType(storage_type(target.dtype), piece))
            row.align = CACHE_LINE_BYTES
            rows[target.arg] = row
        # its inputs a few pieces ahead where the target says so (a compute-bound loop: ``prefetch.py``), or, in
        # a row loop's only pass over them (``CpuTarget.one_pass_stream_prefetch_lines``), some lines ahead
        pieces_ahead = self.target.streamed_map_prefetch_pieces * MEMORY_BURST_LINES // lines if burst else 0
        inputs = streamed_map_inputs(self.plan, stage) if pieces_ahead else ()
        if not burst and set(itemsizes) == {4} and self._stage_number == 0:
            pieces_ahead = self.target.one_pass_stream_prefetch_lines * CACHE_LINE_BYTES // (piece * 4)
            inputs = tuple(layout for layout in streamed_map_inputs(self.plan, stage)
                           if layout not in self._prefetched) if pieces_ahead else ()

        def computed(prefix: Index, start: Any, stop: Any, buffers: dict) -> None:
            with knowing(self, one_hot, False):
                self.innermost_loop(start, stop, lambda i: self._map_body(stage, prefix + [i], buffers, start), stage)
            if one_hot is not None and buffers is rows:  # (the correction into the piece's buffer, before it streams)
                emit_correction(self, stage, one_hot, prefix, start, stop,
                                lambda idx: self._map_body(stage, idx, rows, start))
            for target in streamed:
                if buffers is rows:
                    emit_stream_row(self, rows[target.arg], target, prefix + [start], self.sub(stop, start))
                else:
                    emit_stream_row(self, buffers[target.arg], target, prefix + [start], piece, unrolled=True)

        registers = {}
        if register_lines:
            for target in streamed:
                registers[target.arg] = self._entry.alloca(ir.ArrayType(storage_type(target.dtype), piece))
                registers[target.arg].align = CACHE_LINE_BYTES

        def stream(prefix: Index, start: Any, stop: Any, whole: bool = False) -> None:
            if inputs:
                emit_prefetch_pieces_ahead(self, inputs, prefix, start, piece, pieces_ahead)
            if not (registers and whole):
                computed(prefix, start, stop, rows)
                return
            _, inside = target_inside(self, stage, one_hot, prefix, start, stop)
            self._math_interleave = piece * 32 // self.target.vector_bits  # (the piece: one vector iteration)
            with self.b.if_else(inside) as (holding, other):
                with holding, self.fresh_values():
                    computed(prefix, start, stop, rows)
                with other, self.fresh_values():
                    computed(prefix, start, stop, registers)
            self._math_interleave = 0

        def body(prefix: Index) -> None:
            if piece == length:
                stream(prefix, lo, hi)
            else:
                # static bursts where every block's are whole (a bounded one got a remainder loop, a scalar tail
                # and the math's constants loaded again per burst: cross-entropy's gradient 20% slower)
                whole = not burst or (length % piece == 0 and stage.shape[-1] % piece == 0)

                def one_piece(k: Any) -> None:
                    start = self.add(lo, self.mul(k, piece))
                    stream(prefix, start, self.add(start, piece) if whole else self.min(self.add(start, piece), hi),
                           whole)

                # whole vector pieces (rows and blocks are whole lines); a row's last block may end in a shorter burst
                self.loop(0, self.div(self.add(self.sub(hi, lo), piece - 1 if burst else 0), piece), one_piece)
            self._streamed = True

        self.nest(ranges[:-1], body)

    def _function_piece_lines(self, stage: MapStage, ranges: list[tuple[Any, Any]], block: int) -> int:
        """Lines of float32 output per piece of ``stage``'s rows where it evaluates :data:`PIECES_MIN_POLYNOMIALS`
        or more polynomial functions per element (``CpuTarget.function_piece_lines``; gelu(x*w+b)*sigmoid(x)):
        float32 outputs, not over element pairs, one loop over rows (or blocks) of whole pieces; else 0."""
        lines = self.target.function_piece_lines
        if not lines or not ranges or ranges[-1][1] is None or pairs_halfwords(self.plan, stage) or \
                any(storage_itemsize(t.dtype) != 4 for _, t in stage.items):
            return 0
        piece = lines * CACHE_LINE_BYTES // 4
        if (block or stage.shape[-1]) % piece or stage.shape[-1] % piece or \
                self._static_extent(*ranges[-1]) != (block or stage.shape[-1]):
            return 0
        return lines if self._polynomials_per_element(stage) >= PIECES_MIN_POLYNOMIALS else 0

    def _polynomials_per_element(self, stage: MapStage) -> int:
        """How many math library polynomials (not the C library's functions, not bf16 tables) ``stage`` evaluates
        per element: at the stage's own shape (a function of loop-invariant operands leaves the loop), shared
        operands once, loaded and row-cached values free."""
        return len(self._stage_polynomials(stage, within_polynomials=True))

    def _stage_polynomials(self, stage: MapStage, within_polynomials: bool) -> list[Value]:
        """The math library polynomial values ``stage`` evaluates at its own shape, in :meth:`_computed_values`' order.
        ``within_polynomials``: also those among a polynomial's operands (else a polynomial's operands are not
        searched)."""
        def polynomial(value: Value, access: Computed) -> bool:
            return evaluated_polynomial(self, access.op) is not None and value.type.shape == stage.shape

        return [value for value, access in self._computed_values(
            stage, lambda value, access: within_polynomials or not polynomial(value, access))
            if polynomial(value, access)]

    def _computed_values(self, stage: Stage,
                         descend: Callable[[Value, Computed], bool]) -> list[tuple[Value, Computed]]:
        """The computed elementwise values of ``stage``'s loop, depth first in the order its loop generates them (the
        first operand's subtree first, as ``value_at`` does), each once; loaded and row-cached values (not evaluated
        there) are not visited, nor the operands of a value for which ``descend(value, access)`` is false."""
        found: list[tuple[Value, Computed]] = []
        seen: set[Value] = set()
        pending = [value for value, _ in reversed(stage.items)]
        while pending:
            value = pending.pop()
            access = self.plan.access.get(value)
            if value in seen or not isinstance(access, Computed) or access.op.name not in ELEMENTWISE or \
                    self._loads_row_cache(value):
                continue
            seen.add(value)
            found.append((value, access))
            if descend(value, access):
                pending += reversed(access.op.operands)
        return found

    def _function_pieces(self, stage: MapStage, ranges: list[tuple[Any, Any]], lines: int) -> None:
        """``stage``'s nest with each row in pieces of ``lines`` lines of output (:meth:`_function_piece_lines`), each
        piece one vector iteration of its loop (its vectors interleaved: more independent chains of the functions'
        math in flight than :attr:`CpuTarget.polynomial_interleave`'s) after the prefetches of its inputs' lines
        ``CpuTarget.function_prefetch_lines`` ahead. Plain stores; the same operations, the same bits."""
        lo, hi = ranges[-1]
        piece = lines * CACHE_LINE_BYTES // 4
        ahead = self.target.function_prefetch_lines // lines
        inputs = streamed_map_inputs(self.plan, stage) if ahead else ()

        def row(prefix: Index) -> None:
            def one_piece(k: Any) -> None:
                start = self.add(lo, self.mul(k, piece))
                if inputs:
                    emit_prefetch_pieces_ahead(self, inputs, prefix, start, piece, ahead)
                self.innermost_loop(start, self.add(start, piece), lambda i: self._map_body(stage, prefix + [i], {}),
                                    stage)

            self.loop(0, self.div(self.sub(hi, lo), piece), one_piece)

        self._math_interleave = self.target.function_piece_interleave or piece * 32 // self.target.vector_bits
        if self.target.aligns_vector_spill_slots:
            align_phase_entry_stack(self.phase_entry, self.target.vector_bits // 8)
        self.nest(ranges[:-1], row)
        self._math_interleave = 0

    def _split_math(self, stage: MapStage, ranges: list[tuple[Any, Any]]) -> list[Value]:
        """The polynomial math values of ``stage`` that loops of their own compute into L1 buffers before its loop
        (``CpuTarget.splits_polynomial_math_loops``): where its values evaluate two or more polynomials (math library
        functions, not bf16 tables) of which none is an operand of another and none an output of the stage, every one
        but the last in the order the loop generates them (gelu(x*w+b)*sigmoid(x): gelu). Only over one loop (the
        row's last dim, a static extent of at most ``SPLIT_MATH_MAX``), of values at the stage's own index. Over
        element pairs where the target says so (``CpuTarget.bf16_pair_split_interleave``): every one but the first
        instead (bf16 row (a): sigmoid, the stage's loop then computes gelu; gelu's loop first measured slower)."""
        paired = bool(ranges) and ranges[-1][1] is not None and pairs_halfwords(self.plan, stage)
        if not (self.target.bf16_pair_split_interleave if paired else self.target.splits_polynomial_math_loops) or \
                not ranges or any(hi is not None for _, hi in ranges[:-1]) or ranges[-1][1] is None:
            return []
        extent = self._static_extent(*ranges[-1])
        if not extent or extent > SPLIT_MATH_MAX or (paired and extent % 2):
            return []
        found = self._stage_polynomials(stage, within_polynomials=False)
        # (a polynomial that is itself an output would be copied from its buffer to the output: LLVM's memcpy)
        outputs = {value for value, _ in stage.items}
        if len(found) < 2 or outputs.intersection(found):
            return []
        return found[1:] if paired else found[:-1]

    def _split_math_loops(self, stage: MapStage, ranges: list[tuple[Any, Any]], split: list[Value]) -> None:
        """``stage``'s loop with the values ``split`` (:meth:`_split_math`) computed first, each by a loop of its own
        over the same range into a stack buffer, and loaded from it by the stage's loop: the same operations on the
        same values (the same bits), in loops that keep fewer constants and chains in the 16 registers (AVX2). Over
        element pairs (``CpuTarget.bf16_pair_split_interleave``) every loop runs over pairs with that interleave count
        and the buffers are in pair order (the evens, then the odds: ``pairs.pair_position``), so each loop's vector
        of even (or odd) halves is one contiguous store or load."""
        lo, hi = ranges[-1]
        extent = self._static_extent(lo, hi)
        paired = pairs_halfwords(self.plan, stage)
        buffers = {}
        for value in split:
            buffers[value] = self._entry.alloca(ir.ArrayType(compute_type(value.type.dtype), extent))
            buffers[value].align = CACHE_LINE_BYTES

        def slot(value: Value, i: Any) -> ir.Value:
            at = pair_position(self, self.sub(i, lo), extent) if paired else self.sub(i, lo)
            return self.b.gep(buffers[value], [ir.Constant(I64, 0), self.ir_index(at)], inbounds=True)

        self._math_interleave = self.target.bf16_pair_split_interleave if paired else 0
        for value in split:
            self.stage_nest(stage, ranges,
                            lambda idx, value=value: self.b.store(self.value_at(value, idx), slot(value, idx[-1])))

        def body(idx: Index) -> None:
            for value in split:
                self.bind(value, idx, self.b.load(slot(value, idx[-1])))
            self._map_body(stage, idx, {})

        self.stage_nest(stage, ranges, body)
        self._math_interleave = 0

    def _map_body(self, stage: MapStage, idx: Index, rows: dict, lo: Any = 0) -> None:
        for value, target in stage.items:
            result = self.value_at(value, idx)
            if target.arg in rows:
                def slot(i: Any, row: ir.Value = rows[target.arg]) -> ir.Value:
                    return self.b.gep(row, [ir.Constant(I64, 0), self.ir_index(self.sub(i, lo))], inbounds=True)

                pair = self._pair
                half = pair.half(self.form(idx[-1])) if pair is not None and target.dtype is DType.i16 else None
                if half is None:
                    store(self.b, result, slot(idx[-1]), target.dtype)
                else:  # (the row buffer: contiguous, one pair of it per iteration)
                    self._store_half(("row", target.arg), slot(pair.even), result, half)
            else:
                self.store(target, idx, result)

    def packed_operands(self, op: Op, idx: Index) -> tuple[ir.Value, int] | None:
        """(the 32-bit word of the current pair's two bf16 operands of unary ``op``, the even one's bits low and the
        odd one's high, as a loaded pair's word; 0 or 1: which of them ``idx`` is) where the target reads computed
        operands' table indices so (``CpuTarget.packs_computed_bf16_table_operands``), else None."""
        pair = self._pair
        half = self.pair_half(idx[-1]) if pair is not None and self.target.packs_computed_bf16_table_operands else None
        if half is None:
            return None
        operand, shape = op.operands[0], op.results[0].type.shape
        prefix = list(idx[:-1])
        ahead = self._operands_ahead
        if ahead is not None and not ahead.packing and op in ahead.buffers:  # (packed a vector iteration ago)
            slot = self.b.gep(ahead.buffers[op], [ir.Constant(I32, 0), self.ir_index(ahead.pair)], inbounds=True)
            return self.memoized(("packed operands", *self._memo_key(operand, prefix + [pair.even])),
                                 lambda: self.b.load(slot)), half

        def word() -> ir.Value:
            even, odd = (self.value_at(operand, broadcast_index(self, prefix + [i], shape, operand.type.shape))
                         for i in (pair.even, pair.odd))
            return packed_word(self.b, even, odd)

        return self.memoized(("packed operands", *self._memo_key(operand, prefix + [pair.even])), word), half

    def stage_nest(self, stage: Stage, ranges: list[tuple[Any, Any]], body: Callable[[Index], None]) -> None:
        """``nest(ranges, body)`` whose innermost loop is the stage's :meth:`innermost_loop` when that runs over
        element pairs (else the same nest as ever)."""
        if not ranges or ranges[-1][1] is None or not pairs_halfwords(self.plan, stage):
            self.nest(ranges, body)
            return
        lo, hi = ranges[-1]
        self.nest(ranges[:-1], lambda prefix: self.innermost_loop(lo, hi, lambda i: body(prefix + [i]), stage,
                                                                  list(prefix)))

    def innermost_loop(self, lo: Any, hi: Any, body: Callable[[Any], None], stage: Stage,
                       prefix: Index | None = None) -> None:
        """for i in [lo, hi): body(i), the loop over ``stage``'s last dim: over element pairs, body(2k) then
        body(2k + 1) per iteration, when the stage reads or writes 16-bit data along that dim and the extent is
        even (``pairs.py``; the loads and stores of a pair's halves then share 32-bit words). ``prefix``: the
        outer indices (a narrow table loop given them packs its computed table operands a vector ahead where the
        target says so: :meth:`_pipelined_pairs`)."""
        extent = self._static_extent(lo, hi)
        if self._pair is not None or not extent or extent % 2 or not pairs_halfwords(self.plan, stage):
            self.loop(lo, hi, body)
            return

        def pair(k: Any) -> None:
            self._pair = self._pair_at(lo, k)
            ahead = self._operands_ahead
            if ahead is not None:
                ahead.pair = k
                if ahead.distance:
                    self._pack_operands_at(ahead, lo, self.add(k, ahead.distance))
            body(self._pair.even)
            body(self._pair.odd)
            for pointer, value in self._pair.pending.values():  # an even half whose odd half was not stored
                self.b.store(value, pointer)
            self._pair = None

        ops = self._operands_packed_ahead(stage, extent // 2) if prefix is not None else []
        if ops:
            self._pipelined_pairs(lo, extent // 2, pair, ops, prefix)
        else:
            self.loop(0, extent // 2, pair)

    def _pair_at(self, lo: Any, k: Any) -> Pair:
        """The element pair of iteration ``k`` of a paired loop from ``lo``."""
        even = self.add(lo, self.mul(k, 2))
        odd = self.add(even, 1)
        return Pair(even, odd, self.form(even), self.form(odd))

    def _operands_packed_ahead(self, stage: Stage, pairs: int) -> list[Op]:
        """The table reads of ``stage`` whose computed operands a narrow table loop of ``pairs`` iterations packs a
        few vector iterations ahead (``CpuTarget.bf16_table_operand_vectors_ahead``): unary ops read from a table at the
        stage's shape whose operand is computed (not exact: :meth:`packed_operands`' reads), depth first."""
        lanes = self.target.bf16_table_loop_lanes * self.target.bf16_table_operand_vectors_ahead
        if not (self.narrow_tables and self.target.packs_computed_bf16_table_operands and lanes) or \
                pairs <= lanes or not isinstance(stage, MapStage):
            return []
        def packed(value: Value, op: Op) -> bool:
            operand = self.plan.access.get(op.operands[0]) if op.operands else None
            return table_function(self, op) is not None and value.type.shape == stage.shape and \
                isinstance(operand, Computed) and operand.op.name not in EXACT

        return [access.op for value, access in self._computed_values(stage, lambda value, access: True)
                if packed(value, access.op)]

    def _pipelined_pairs(self, lo: Any, pairs: int, pair: Callable[[Any], None], ops: list[Op],
                         prefix: Index) -> None:
        """The paired loop of ``pairs`` iterations from ``lo`` software-pipelined by
        ``CpuTarget.bf16_table_operand_vectors_ahead`` vector iterations (``prefix``: its outer indices): a prologue
        packs the first vectors' words of each table read of ``ops`` into a stack buffer of a row's words, the loop
        packs the words that many vectors on into it beside this vector's reads, which load theirs from it, and the
        last vectors pack and read their own (a loop of whole vector iterations, no scalar code). One vector ahead,
        LLVM's loop load elimination turns each iteration's load of the words the one before stored into a register
        carried between them (the loop's stores, then unread, are removed); two ahead, the words are read back from
        the buffer as 64-bit quads (no moves out to general registers). Either way gelu(x*w+b)'s index chain (x*w+b,
        its roundings, the pack) is off the path of the table reads that wait for it."""
        lanes = self.target.bf16_table_loop_lanes * self.target.bf16_table_operand_vectors_ahead
        buffers = {op: self.alloca(I32, pairs) for op in ops}
        for buffer in buffers.values():
            buffer.align = CACHE_LINE_BYTES
        ahead = OperandsAhead(buffers, prefix, 0, 0)
        self._operands_ahead = ahead
        try:
            self.loop(0, lanes, lambda k: self._pack_operands_at(ahead, lo, k))
            ahead.distance = lanes
            self.loop(0, pairs - lanes, pair)
            self._operands_ahead = None  # (the last vector packs its own words: the loop's stores then dead)
            self.loop(pairs - lanes, pairs, pair)
        finally:
            self._operands_ahead = None

    def _pack_operands_at(self, ahead: OperandsAhead, lo: Any, k: Any) -> None:
        """Store the packed words of ``ahead``'s table operands at pair ``k`` of the loop from ``lo`` to their
        buffers' slot ``k``."""
        current, self._pair = self._pair, self._pair_at(lo, k)
        ahead.packing = True
        try:
            for op, buffer in ahead.buffers.items():
                word, _ = self.packed_operands(op, ahead.prefix + [self._pair.even])
                self.b.store(word, self.b.gep(buffer, [ir.Constant(I32, 0), self.ir_index(k)], inbounds=True))
        finally:
            ahead.packing = False
            self._pair = current

    def _transcendentals(self, values: list[Value]) -> int:
        """How many transcendental functions computing ``values`` at one index evaluates (shared operands
        once; loaded and row-cached values are free)."""
        seen: set[Value] = set()
        pending, count = list(values), 0
        while pending:
            value = pending.pop()
            if value in seen:
                continue
            seen.add(value)
            access = self.plan.access.get(value)
            if access is None or isinstance(access, Layout) or self._loads_row_cache(value):
                continue
            count += access.op.has(Trait.TRANSCENDENTAL)
            pending += access.op.operands
        return count
