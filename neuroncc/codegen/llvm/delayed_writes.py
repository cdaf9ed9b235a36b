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
thread's range is written after its row loop. :func:`delayed_write_stage` is the decision, the rest its code.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir

from neuroncc.codegen.llvm.kernel_plan import MapStage, RowLoop
from neuroncc.codegen.llvm.prefetch import rows_written_by_carried_pass
from neuroncc.codegen.llvm.streams import streams

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


def emit_last_row(em: Any, phase: RowLoop, stage_number: int, first_row: Any, end: ir.Value) -> None:
    """Stage ``stage_number`` over the whole of the last row of the range [first_row, end), after the row loop."""
    stage = phase.stages[stage_number]
    with em.fresh_values():
        last = em.b.sub(end, ir.Constant(end.type, 1))
        with em.b.if_then(em.b.icmp_signed(">=", last, em.ir_index(first_row))):
            _write(em, stage, stage_number, em._digits(last, phase.outer), (0, stage.shape[-1]), 0)


def _write(em: Any, stage: MapStage, stage_number: int, outer: list[Any], columns: tuple[Any, Any],
           length: int) -> None:
    saved, em._stage_number = em._stage_number, stage_number  # (row caches are read by later stages)
    em._map_stage(stage, [(i, None) for i in outer] + [columns], length)
    em._stage_number = saved
