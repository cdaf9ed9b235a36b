"""Copy elision on a finished trace: a value-returning call's result written straight where it is assigned.

NKI 0.1 kernels (and ``nl.*`` math in every version) compute into fresh tiles and assign them:
``exp_row[:, cols] = nisa.activation(op=nl.exp, data=x)``, ``qk[i] = nisa.nc_matmul(q, k)``,
``psum += nisa.nc_matmul(a, b)``. NKI's compiler makes the producing instruction write the assigned tensor;
it emits no copy. The simulator executes the copy (the values are the same either way) and this pass then
removes it from the trace the cost model reads:

- ``W`` writes a transient tile ``T`` (all of it), then a ``tensor_copy`` / ``dma_copy`` ``C`` reads all of
  ``T`` into ``D``, and nothing else touches ``T``: ``W`` writes ``D`` instead and ``C`` goes;
- ``W`` is a matmul into transient PSUM ``T`` and ``C`` is the accumulate-add of ``psum += T`` into ``D``:
  ``W`` accumulates into ``D`` (access ``rw``) and ``C`` goes.

Only when ``W``'s engine can write ``D`` where it is (TensorE into PSUM, DMA into SBUF or HBM, GpSimdE never
PSUM), with the same partitions and elements per partition (and the same dtype for TensorE), and no
instruction between ``W`` and ``C`` touches ``D``'s tile. ``T``'s allocation then has no uses and memory
placement drops it.
"""

from __future__ import annotations

from dataclasses import replace

from neuroncc.nki import trace as tr
from neuroncc.nki.trace import Engine


def _whole(operand: tr.Operand, shape: tuple[int, ...]) -> bool:
    return operand.layout == shape and all(lo == 0 and hi == n for (lo, hi), n in zip(operand.region, shape))


def _can_write(writer: tr.Instruction, target: tr.Operand, temp: tr.Operand) -> bool:
    if target.partitions != temp.partitions or target.free_size != temp.free_size:
        return False
    if writer.engine is Engine.TENSOR:
        return target.buffer == "psum" and target.dtype == temp.dtype
    if writer.engine is Engine.DMA:
        return target.buffer in ("sbuf", "hbm", "shared_hbm")
    if writer.engine is Engine.GPSIMD:
        return target.buffer == "sbuf"
    return target.buffer in ("sbuf", "psum")


def forward_results(events: list[tr.Event]) -> list[tr.Event]:
    """The trace with assignment copies of transient results folded into their producers (see module doc)."""
    shapes = {e.tile: e.shape for e in events if isinstance(e, tr.Allocate) and e.transient}
    if not shapes:
        return events
    uses: dict[int, list[int]] = {}
    touches: dict[int, list[int]] = {}  # tile -> positions of every instruction touching it
    for position, event in enumerate(events):
        if isinstance(event, tr.Instruction):
            for operand in event.operands:
                touches.setdefault(operand.tile, []).append(position)
                if operand.tile in shapes:
                    uses.setdefault(operand.tile, []).append(position)
    result: list[tr.Event | None] = list(events)
    for tile, positions in uses.items():
        if len(positions) != 2:
            continue
        first, second = positions
        writer, consumer = events[first], events[second]
        assert isinstance(writer, tr.Instruction) and isinstance(consumer, tr.Instruction)
        written = [o for o in writer.operands if o.tile == tile]
        # A matmul's default accumulation records `rw`; on a fresh tile (W is its first use) that is a write.
        if len(written) != 1 or not written[0].writes or not _whole(written[0], shapes[tile]):
            continue
        plan = _consumer_plan(consumer, tile, shapes[tile])
        if plan is None:
            continue
        target, access = plan
        if access == "rw" and writer.op not in ("nc_matmul", "nc_matmul_mx"):
            continue
        if not _can_write(writer, target, written[0]):
            continue
        between = [p for p in touches.get(target.tile, []) if first < p < second]
        if between:
            continue
        moved = replace(target, role=written[0].role, access=access)
        result[first] = replace(writer, operands=tuple(moved if o.tile == tile else o for o in writer.operands))
        result[second] = None
    return [e for e in result if e is not None]


def _consumer_plan(consumer: tr.Instruction, tile: int, shape: tuple[int, ...]) -> tuple[tr.Operand, str] | None:
    """The operand ``consumer`` writes the transient ``tile`` into, and the access the producer then needs."""
    if consumer.op in ("tensor_copy", "dma_copy") and not consumer.param("broadcast"):
        if consumer.param("dst_rmw_op"):
            return None
        source, target = consumer.operand("src"), consumer.operand("dst")
        if source.tile == tile and target.tile != tile and _whole(source, shape):
            return target, "w"
        return None
    if consumer.op == "tensor_tensor" and consumer.param("accumulate"):
        data1, data2, target = consumer.operand("data1"), consumer.operand("data2"), consumer.operand("dst")
        if data2.tile == tile and data1.tile == target.tile and _whole(data2, shape):
            return target, "rw"
    return None
