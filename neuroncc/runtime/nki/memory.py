"""On-chip memory placement: where each live SBUF / PSUM tile sits, and the capacity limits.

AWS's simulator does not check capacity; we do, because a kernel that only fits in the simulator is a bug
the emitter should hear about early. Placement is also what makes buffer reuse visible to the cost model:
a tile that lands on bytes a dead tile used must wait until that tile's last reader is done, exactly as a
real allocation does. A tile is freed when the kernel drops its last reference to it (CPython frees it
at once), so ``t = nl.ndarray(...)`` inside a loop keeps two buffers alive at the rebinding - the
double-buffering NKI's allocator gives ``affine_range`` loops.

Model: every SBUF tile occupies the same byte range on all 128 partitions (first fit, 64-byte aligned);
PSUM tiles occupy whole 2 KiB banks.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from neuroncc.runtime.nki.errors import NKISimulationError
from neuroncc.runtime.nki.target import Target
from neuroncc.runtime.nki.tensor import Buffer, Storage

SBUF_ALIGNMENT = 64


@dataclass(frozen=True, slots=True)
class Placement:
    """Bytes ``[offset, offset + size)`` of every partition of ``buffer``."""

    buffer: Buffer
    offset: int
    size: int


class FirstFitAllocator:
    """A per-partition byte range allocator: a sorted free list, first fit, coalescing on free."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._free: list[tuple[int, int]] = [(0, capacity)]  # sorted, disjoint (start, end)
        self.live_bytes = 0

    def allocate(self, size: int) -> int | None:
        for i, (start, end) in enumerate(self._free):
            if end - start >= size:
                if end - start == size:
                    del self._free[i]
                else:
                    self._free[i] = (start + size, end)
                self.live_bytes += size
                return start
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


class OnChipMemory:
    """Placement of SBUF and PSUM tiles for one simulation on one target."""

    def __init__(self, target: Target):
        self.target = target
        self._sbuf = FirstFitAllocator(target.sbuf_partition_bytes)
        self._psum = FirstFitAllocator(target.psum_banks)  # counted in banks
        self.peak_sbuf_bytes = 0
        self.peak_psum_banks = 0

    def place(self, storage: Storage) -> Placement:
        if storage.buffer is Buffer.SBUF:
            return self._place_sbuf(storage)
        return self._place_psum(storage)

    def _place_sbuf(self, storage: Storage) -> Placement:
        size = -(-storage.bytes_per_partition // SBUF_ALIGNMENT) * SBUF_ALIGNMENT
        offset = self._sbuf.allocate(size)
        if offset is None:
            capacity = self.target.sbuf_partition_bytes
            raise NKISimulationError(
                f"SBUF capacity exceeded on {self.target.name}: tile '{storage.name}' {storage.shape} "
                f"{storage.dtype.name} needs {size} bytes per partition, but {self._sbuf.live_bytes} of "
                f"{capacity} bytes per partition are live (largest free block {self._sbuf.largest_free})")
        self.peak_sbuf_bytes = max(self.peak_sbuf_bytes, self._sbuf.live_bytes)
        return Placement(Buffer.SBUF, offset, size)

    def _place_psum(self, storage: Storage) -> Placement:
        bank = self.target.psum_bank_bytes
        banks = -(-storage.bytes_per_partition // bank)
        if banks > self.target.psum_banks:
            raise NKISimulationError(
                f"psum tile '{storage.name}' {storage.shape} {storage.dtype.name} needs "
                f"{storage.bytes_per_partition} bytes per partition, exceeding PSUM's "
                f"{self.target.psum_partition_bytes} bytes ({self.target.psum_banks} banks of {bank} bytes)")
        first = self._psum.allocate(banks)
        if first is None:
            raise NKISimulationError(
                f"PSUM capacity exceeded on {self.target.name}: tile '{storage.name}' {storage.shape} "
                f"{storage.dtype.name} needs {banks} bank(s) of {bank} bytes, but {self._psum.live_bytes} of "
                f"{self.target.psum_banks} banks are live")
        self.peak_psum_banks = max(self.peak_psum_banks, self._psum.live_bytes)
        return Placement(Buffer.PSUM, first * bank, banks * bank)

    def release(self, placement: Placement) -> None:
        if placement.buffer is Buffer.SBUF:
            self._sbuf.release(placement.offset, placement.size)
        else:
            bank = self.target.psum_bank_bytes
            self._psum.release(placement.offset // bank, placement.size // bank)

    @property
    def live_sbuf_bytes(self) -> int:
        return self._sbuf.live_bytes

    @property
    def live_psum_banks(self) -> int:
        return self._psum.live_bytes
