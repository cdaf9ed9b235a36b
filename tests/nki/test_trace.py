"""The instruction trace, on-chip placement and the scheduler's building blocks."""

from __future__ import annotations

import dataclasses

import pytest

import neuroncc.nki as nki
import neuroncc.nki.isa as nisa
import neuroncc.nki.language as nl
from neuroncc.nki import trace as tr
from neuroncc.nki.memory import RovingAllocator, place
from neuroncc.nki.scheduler import _Timeline, schedule
from neuroncc.nki.target import TARGETS


@nki.jit
def _scale(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    tile = nl.load(x)
    unused = nl.ndarray((128, 4), dtype=nl.float32)  # never touched: never placed
    doubled = nl.multiply(tile, 2.0)
    nl.store(out, doubled)
    return out


def test_placed_trace_format():
    events = nki.trace_kernel(_scale, nki.TensorSpec.of((128, 256), nl.float32))
    assert tr.format_trace(events).splitlines() == [
        "alloc   t0 hbm arg0 [128, 256] float32",
        "alloc   t1 shared_hbm shared_hbm1 [128, 256] float32",
        "alloc   t2 sbuf sbuf2 [128, 256] float32 @ bytes [0, 1024)",
        "    0 dma    dma_copy(src=t0[0:128, 0:256], dst=t2[0:128, 0:256])",
        "alloc   t4 sbuf sbuf4 [128, 256] float32 @ bytes [1024, 2048)",
        "    1 vector tensor_scalar(data=t2[0:128, 0:256], dst=t4[0:128, 0:256]) op0=multiply operand0=2.0",
        "release t2",
        "    2 dma    dma_copy(src=t4[0:128, 0:256], dst=t1[0:128, 0:256])",
        "release t4",
    ]


def test_trace_events_are_plain_immutable_data():
    events = nki.trace_kernel(_scale, nki.TensorSpec.of((128, 256), nl.float32))
    dma = tr.instructions(events)[0]
    assert dma.engine is tr.Engine.DMA and dma.operand("src").buffer == "hbm"
    assert dma.operand("dst").contiguous_bytes == 1024 and dma.operand("src").contiguous_bytes == 128 * 1024
    with pytest.raises(dataclasses.FrozenInstanceError):
        dma.op = "other"  # type: ignore[misc]
    for event in events:
        for field in dataclasses.fields(event):
            assert type(getattr(event, field.name)).__module__ in ("builtins", tr.__name__)


def test_psum_accumulation_is_recorded_as_read_write():
    def kernel():
        acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
        a, b = nl.ndarray((128, 128), dtype=nl.bfloat16), nl.ndarray((128, 512), dtype=nl.bfloat16)
        nisa.nc_matmul(acc, a, b)
        nisa.nc_matmul(acc, a, b, accumulate=False)

    first, second = tr.instructions(nki.trace_kernel(nki.jit(kernel)))
    assert first.operand("dst").access == "rw" and second.operand("dst").access == "w"


def test_tiles_with_disjoint_live_ranges_rotate_through_memory():
    def kernel():
        for _ in range(3):
            nisa.memset(dst=nl.ndarray((128, 1024), dtype=nl.float32), value=0.0)

    events = nki.trace_kernel(nki.jit(kernel), target="trn1")
    offsets = [e.offset for e in events if isinstance(e, tr.Allocate)]
    assert offsets == [0, 4096, 8192]  # next-fit: freed bytes are reused last


def test_placement_moves_allocations_to_first_use():
    raw = [
        tr.Allocate(0, "sbuf", "a", (128, 16), "float32", 0, 64),
        tr.Allocate(1, "sbuf", "b", (128, 16), "float32", 0, 64),
        tr.Instruction(0, "memset", tr.Engine.VECTOR, (_operand(1, "w"),)),
        tr.Instruction(1, "memset", tr.Engine.VECTOR, (_operand(0, "w"),)),
    ]
    placed = place(raw, TARGETS["trn2"])
    assert [type(e).__name__ for e in placed] == ["Allocate", "Instruction", "Release", "Allocate", "Instruction",
                                                  "Release"]
    assert [e.tile for e in placed if isinstance(e, tr.Allocate)] == [1, 0]


def _operand(tile, access):
    return tr.Operand("dst", tile, "sbuf", access, (128, 16), "float32", 4, ((0, 128), (0, 16)), (128, 16), 0)


def test_roving_allocator_wraps_and_coalesces():
    allocator = RovingAllocator(100)
    a, b, c = allocator.allocate(40), allocator.allocate(40), allocator.allocate(30)
    assert (a, b, c) == (0, 40, None)
    allocator.release(a, 40)
    assert allocator.allocate(30) == 0  # wraps to the start: 80..100 is too small
    allocator.release(0, 30)
    allocator.release(b, 40)
    assert allocator.largest_free == 100 and allocator.live_bytes == 0


def test_timeline_backfills_gaps_whole_or_split():
    engine = _Timeline()
    assert engine.reserve(0, 10, splittable=False) == (0, 10)
    assert engine.reserve(30, 10, splittable=False) == (30, 40)
    assert engine.reserve(5, 15, splittable=False) == (10, 25)   # fits the gap 10..30
    assert engine.reserve(0, 10, splittable=False) == (40, 50)   # the gap 25..30 is too short
    pipe = _Timeline()
    pipe.reserve(0, 10, splittable=True)
    pipe.reserve(20, 10, splittable=True)
    assert pipe.reserve(0, 15, splittable=True) == (10, 35)      # 10..20 then 30..35


def test_schedule_tracks_peak_on_chip_usage():
    events = nki.trace_kernel(_scale, nki.TensorSpec.of((128, 256), nl.float32))
    timeline = schedule(events, TARGETS["trn2"])
    assert timeline.peak_sbuf_bytes == 2048 and timeline.peak_psum_bytes == 0
    assert [t.index for t in timeline.timings] == [0, 1, 2]
    assert all(t.finish_ns > t.start_ns for t in timeline.timings)
