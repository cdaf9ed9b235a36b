"""On-chip memory placement: where each SBUF / PSUM tile lives, and the capacity limits.

Placement runs after a launch, over its whole trace, the way NKI's compiler allocates: a tile is live
from the first instruction that touches it to the last one (not while Python happens to hold a
reference), and live tiles must fit. AWS's simulator does not check capacity; we do, because a kernel
that only fits in the simulator is a bug the emitter should hear about early.

Placement is also what makes buffer reuse visible to the cost model. The placed trace carries each
tile's byte range in its ``Allocate`` event, emitted just before the tile's first use, and a ``Release``
just after its last use; a tile placed on bytes an earlier tile used must wait for that tile's last
access. Allocation is next-fit (it roves through the whole buffer before reusing bytes), which rotates
tiles declared inside a loop through several buffers, as NKI's allocator multi-buffers loop-local tiles: the next iteration's
loads overlap this iteration's compute. A tile allocated once and reused every iteration is a single
buffer, and its load and compute serialise.

Model: an SBUF tile occupies the same byte range on all 128 partitions (64-byte aligned); a PSUM tile
occupies whole 2 KiB banks.

Running out of SBUF or PSUM is not an error in NKI - its compiler spills to HBM - so here it is a
``NKIRuleWarning`` naming the instruction, the tile and the largest live tiles; the tile is placed past the
end of the buffer (a spill area that shares no bytes with anything), and the spill traffic itself is not
costed.
"""

from __future__ import annotations

import bisect
import warnings
from dataclasses import replace

from neuroncc.hardware.neuron import SBUF_ALIGNMENT
from neuroncc.nki import trace as tr
from neuroncc.nki.errors import NKIRuleWarning
from neuroncc.nki.target import Target


class RovingAllocator:
    """Per-partition byte ranges allocated next-fit: the search starts where the last allocation ended.

    The roving start walks through the whole buffer before coming back, so freed bytes are reused in
    roughly the order they were freed (oldest first) - what rotating buffers gives a compiler. Free blocks
    are kept sorted and coalesced.
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._free: list[tuple[int, int]] = [(0, capacity)]  # sorted, disjoint (start, end)
        self._rover = 0
        self.live_bytes = 0

    def allocate(self, size: int) -> int | None:
        first = bisect.bisect_right(self._free, (self._rover, self.capacity + 1)) - 1
        order = list(range(max(first, 0), len(self._free))) + list(range(0, max(first, 0)))
        for i in order:
            start, end = self._free[i]
            at = max(start, self._rover) if start <= self._rover < end and end - self._rover >= size else start
            if end - at < size:
                continue
            pieces = [(start, at)] if at > start else []
            if at + size < end:
                pieces.append((at + size, end))
            self._free[i:i + 1] = pieces
            self._rover = (at + size) % self.capacity
            self.live_bytes += size
            return at
        return None

    def release(self, offset: int, size: int) -> None:
        self.live_bytes -= size
        i = bisect.bisect_left(self._free, (offset, offset))
        start, end = offset, offset + size
        if i < len(self._free) and self._free[i][0] == end:
            end = self._free.pop(i)[1]
        if i > 0 and self._free[i - 1][1] == start:
            start = self._free.pop(i - 1)[0]
            i -= 1
        self._free.insert(i, (start, end))

    @property
    def largest_free(self) -> int:
        return max((end - start for start, end in self._free), default=0)


def footprint(buffer: str, bytes_per_partition: int, target: Target) -> int:
    """Bytes per partition a tile occupies: 64-byte aligned in SBUF, whole banks in PSUM."""
    if buffer == "psum":
        bank = target.psum_bank_bytes
        return -(-bytes_per_partition // bank) * bank
    return -(-bytes_per_partition // SBUF_ALIGNMENT) * SBUF_ALIGNMENT


def place(events: list[tr.Event], target: Target) -> list[tr.Event]:
    """Place every on-chip tile of a trace and return the placed trace (see the module docstring).

    Warns (``NKIRuleWarning``) naming the instruction, the tile and the live tiles when SBUF or PSUM
    overflows. HBM ``Allocate`` events and instructions pass through unchanged.
    """
    allocations: dict[int, tr.Allocate] = {}
    last_use: dict[int, int] = {}
    for event in events:
        if isinstance(event, tr.Allocate) and event.buffer in ("sbuf", "psum"):
            allocations[event.tile] = event
        elif isinstance(event, tr.Instruction):
            for operand in event.operands:
                if operand.tile in allocations:
                    last_use[operand.tile] = event.index

    allocators = {"sbuf": RovingAllocator(target.sbuf_partition_bytes),
                  "psum": RovingAllocator(target.psum_partition_bytes)}
    spills = {name: RovingAllocator(1 << 40) for name in allocators}
    spilled: set[int] = set()
    warned: set[str] = set()
    live: dict[int, tr.Allocate] = {}
    placed: list[tr.Event] = []
    for event in events:
        if isinstance(event, tr.Allocate) and event.tile in allocations:
            continue  # re-emitted, with its place, before its first use
        if isinstance(event, tr.Release):
            continue
        if isinstance(event, tr.Instruction):
            for operand in event.operands:
                tile = operand.tile
                if tile in allocations and tile not in live:
                    allocation = allocations[tile]
                    offset = allocators[allocation.buffer].allocate(allocation.size)
                    if offset is None:
                        if allocation.buffer not in warned:
                            warned.add(allocation.buffer)
                            message = _capacity_message(event, allocation, allocators[allocation.buffer], live, target)
                            warnings.warn(NKIRuleWarning(f"{message} (NKI's compiler would spill; the simulator "
                                                         f"places it in a spill area and does not cost the spill)"),
                                          stacklevel=4)
                        spill = spills[allocation.buffer].allocate(allocation.size)
                        assert spill is not None
                        offset = allocators[allocation.buffer].capacity + spill
                        spilled.add(tile)
                    live[tile] = replace(allocation, offset=offset)
                    placed.append(live[tile])
            placed.append(event)
            for tile in dict.fromkeys(operand.tile for operand in event.operands):
                if last_use.get(tile) == event.index:
                    allocation = live.pop(tile)
                    if tile in spilled:
                        spills[allocation.buffer].release(allocation.offset - allocators[allocation.buffer].capacity,
                                                          allocation.size)
                    else:
                        allocators[allocation.buffer].release(allocation.offset, allocation.size)
                    placed.append(tr.Release(tile))
            continue
        placed.append(event)
    return placed


def _capacity_message(event: tr.Instruction, allocation: tr.Allocate, allocator: RovingAllocator,
                    live: dict[int, tr.Allocate], target: Target) -> str:
    same_buffer = sorted((a for a in live.values() if a.buffer == allocation.buffer), key=lambda a: -a.size)
    biggest = ", ".join(f"'{a.name}' {a.size} B" for a in same_buffer[:4])
    name = "SBUF" if allocation.buffer == "sbuf" else "PSUM"
    return (
        f"{name} capacity exceeded on {target.name} at instruction {event.index} ({event.op}): tile "
        f"'{allocation.name}' {allocation.shape} {allocation.dtype} needs {allocation.size} bytes per partition, "
        f"but {allocator.live_bytes} of {allocator.capacity} bytes per partition are live (largest free block "
        f"{allocator.largest_free}); largest live tiles: {biggest}")
