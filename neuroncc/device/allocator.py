"""The device's caching allocator: host memory handed out in blocks, reused by size, counted per device.

Every ``neuron`` storage is a view of one :class:`Block`. The storage object holds its block
(``storage._owner = block``), and PyTorch keeps a storage's Python object alive exactly as long as its
StorageImpl lives (through every tensor, view and ``.data`` copy over it). So a block lives while anything
uses its memory; when the last user goes, the block's ``__del__`` gives the memory back to its device's pool,
which keeps it for the next request of the same size class (up to ``CONFIG.cached_bytes`` per device) or
frees it.

Sizes are rounded up like CUDA's caching allocator (512 bytes below 1 MiB, 64 KiB above), so a training loop
that frees and reallocates the same shapes every step hits the cache. Blocks start 64-byte aligned (the
kernels' vector stores rely on it), large ones a multiple of 256 bytes past a page (4K aliasing and L1 sets:
``_fresh``). The counters follow ``torch.cuda.memory_stats()``' names; "allocated" bytes are block sizes (rounded), "reserved"
bytes are allocated plus cached.
"""

from __future__ import annotations

import itertools
import threading
from collections import defaultdict

import numpy as np

from neuroncc.device.config import CONFIG
from neuroncc.hardware.host import ALIAS_PERIOD_BYTES, aliased_distances, block_alignment
from neuroncc.codegen.llvm.fork_safety import renew_in_child
from neuroncc.device.untraced import untraced

ALIGNMENT = 64
_SMALL_LIMIT = 1 << 20
_SMALL_ROUND = 512
_LARGE_ROUND = 64 << 10


def round_size(nbytes: int) -> int:
    """The block size a request of ``nbytes`` gets."""
    step = _SMALL_ROUND if nbytes < _SMALL_LIMIT else _LARGE_ROUND
    return -(-max(nbytes, 1) // step) * step


class Block:
    """``size`` bytes of host memory at ``address``, owned by ``pool`` (returned to it when this dies)."""

    __slots__ = ("pool", "size", "address", "memory")

    def __init__(self, pool: DevicePool | None, size: int, address: int, memory: np.ndarray):
        self.pool, self.size, self.address, self.memory = pool, size, address, memory

    # a block dies wherever its last tensor does, also in the eager stretches of a compiled function, where
    # TorchDynamo's frame callback would otherwise trace the release as user code
    @untraced
    def __del__(self) -> None:
        pool = self.pool
        if pool is not None:
            try:
                pool.release(self.size, self.memory, self.address)
            except Exception:  # interpreter shutdown: the memory goes with the process
                pass


class DevicePool:
    """The blocks of one device: free lists by size, and the counters ``torch.neuron.memory_stats`` reports.

    The eager path makes and frees a tensor per op, so the hot path keeps the fewest counters (current bytes
    and blocks, their peaks, allocations and cache hits, bytes allocated in all); the counters of frees are
    derived from them (what was allocated and is no longer), with an offset taken when they are reset."""

    __slots__ = ("index", "_lock", "_free", "cached_bytes", "allocated", "allocated_peak", "allocated_total",
                 "active", "active_peak", "allocations", "cache_hits", "reserved", "reserved_peak",
                 "reserved_total", "released_total", "segments", "segments_peak", "_freed_base", "_frees_base")

    def __init__(self, index: int):
        self.index = index
        self._lock = renew_in_child(threading.RLock())  # RLock: a block may die (and come back here) inside an allocation
        self._free: dict[int, list[tuple[np.ndarray, int]]] = defaultdict(list)
        self.cached_bytes = 0
        self.allocated = self.allocated_peak = self.allocated_total = 0
        self.active = self.active_peak = self.allocations = self.cache_hits = 0
        self.reserved = self.reserved_peak = self.reserved_total = self.released_total = 0
        self.segments = self.segments_peak = 0
        self._freed_base = self._frees_base = 0  # allocated bytes / blocks when the accumulated counts restarted

    @property
    def freed_total(self) -> int:
        return self.allocated_total - self.allocated + self._freed_base

    @property
    def frees(self) -> int:
        return self.allocations - self.active + self._frees_base

    def allocate(self, nbytes: int) -> Block:
        size = -(-max(nbytes, 1) // _SMALL_ROUND) * _SMALL_ROUND if nbytes < _SMALL_LIMIT else \
            -(-nbytes // _LARGE_ROUND) * _LARGE_ROUND
        with self._lock:
            free = self._free.get(size)
            if free:
                memory, address = free.pop()
                self.cached_bytes -= size
                self.cache_hits += 1
            else:
                memory, address = self._grow(size)
            allocated = self.allocated = self.allocated + size
            active = self.active = self.active + 1
            self.allocated_total += size
            self.allocations += 1
            if allocated > self.allocated_peak:
                self.allocated_peak = allocated
            if active > self.active_peak:
                self.active_peak = active
        return Block(self, size, address, memory)

    def _grow(self, size: int) -> tuple[np.ndarray, int]:
        """A new segment of ``size`` bytes (the free list had none of that size)."""
        memory, address = _fresh(size)
        self.reserved += size
        self.reserved_total += size
        self.segments += 1
        if self.reserved > self.reserved_peak:
            self.reserved_peak = self.reserved
        if self.segments > self.segments_peak:
            self.segments_peak = self.segments
        return memory, address

    def release(self, size: int, memory: np.ndarray, address: int) -> None:
        with self._lock:
            self.allocated -= size
            self.active -= 1
            if self.cached_bytes + size <= CONFIG.cached_bytes:
                self._free[size].append((memory, address))
                self.cached_bytes += size
            else:
                self._drop(size)

    def _drop(self, size: int) -> None:
        self.reserved -= size
        self.released_total += size
        self.segments -= 1

    def empty_cache(self) -> None:
        """Free every cached (unused) block."""
        with self._lock:
            for size, blocks in self._free.items():
                for _ in blocks:
                    self._drop(size)
            self._free.clear()
            self.cached_bytes = 0

    def reset_peak(self) -> None:
        with self._lock:
            self.allocated_peak, self.reserved_peak = self.allocated, self.reserved
            self.active_peak, self.segments_peak = self.active, self.segments

    def reset_accumulated(self) -> None:
        with self._lock:
            self.allocated_total = self.reserved_total = self.released_total = 0
            self.allocations = self.cache_hits = 0
            self._freed_base, self._frees_base = self.allocated, self.active

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                "active.all.allocated": self.allocations, "active.all.current": self.active,
                "active.all.freed": self.frees, "active.all.peak": self.active_peak,
                "allocated_bytes.all.allocated": self.allocated_total, "allocated_bytes.all.current": self.allocated,
                "allocated_bytes.all.freed": self.freed_total, "allocated_bytes.all.peak": self.allocated_peak,
                "num_alloc_retries": 0, "num_cache_hits": self.cache_hits, "num_ooms": 0,
                "reserved_bytes.all.allocated": self.reserved_total, "reserved_bytes.all.current": self.reserved,
                "reserved_bytes.all.freed": self.released_total, "reserved_bytes.all.peak": self.reserved_peak,
                "segment.all.current": self.segments, "segment.all.peak": self.segments_peak,
            }


def scratch_block(nbytes: int) -> tuple[np.ndarray, int]:
    """Host memory of ``nbytes`` (at least 1) aligned as blocks are, outside every pool (a kernel's scratch
    output, owned by its caller): (the memory to keep alive, its aligned address)."""
    return _fresh(max(nbytes, 1))


#: Large blocks start this many bytes past a page, cycling through the page (below)
_large_offsets = itertools.count()


def _fresh(size: int) -> tuple[np.ndarray, int]:
    """A new block's memory and address. A large block starts ``k`` aliasing windows past a page (the host's
    ``alias_window_bytes``, a divisor of the page: ``aliased_distances``), ``k`` cycling through the page: any
    two blocks start 0 or at least a window apart modulo the page (a kernel's output is not 4K-aliased with its
    inputs), but not all in the same L1 sets. A kernel streaming many page-aligned tensors at once (an optimizer
    step: parameter, gradient and two moments, read and written in place) ran 1.2-2.0x slower than over the same
    tensors spread (docs/performance-history.md, session 30)."""
    alignment = block_alignment(size)  # large blocks: a page, so that a kernel's output is not 4K-aliased with its inputs
    if alignment < ALIAS_PERIOD_BYTES:
        memory = np.empty(size + alignment, dtype=np.uint8)
        address = memory.ctypes.data
        return memory, address + (-address % alignment)
    memory = np.empty(size + 2 * alignment, dtype=np.uint8)
    address = memory.ctypes.data
    offset = next(_large_offsets) * aliased_distances().stop % ALIAS_PERIOD_BYTES
    return memory, address + (-address % alignment) + offset


class Allocator:
    """One :class:`DevicePool` per device index, made on first use."""

    def __init__(self) -> None:
        self._pools: dict[int, DevicePool] = {}
        self._lock = renew_in_child(threading.Lock())
        self.by_index: list[DevicePool] = []  # pools by device index, for the hot path

    def pool(self, index: int) -> DevicePool:
        pool = self._pools.get(index)
        if pool is None:
            with self._lock:
                pool = self._pools.setdefault(index, DevicePool(index))
                while len(self.by_index) <= index:
                    self.by_index.append(self._pools.setdefault(len(self.by_index), DevicePool(len(self.by_index))))
        return pool

    def allocate(self, nbytes: int, index: int) -> Block:
        pools = self.by_index
        return (pools[index] if index < len(pools) else self.pool(index)).allocate(nbytes)

    def pools(self) -> list[DevicePool]:
        return list(self._pools.values())


#: The process's allocator.
ALLOCATOR = Allocator()
