"""The device's caching allocator: host memory handed out in blocks, reused by size, counted per device.

Every ``neuron`` storage is a view of one :class:`Block`. The storage object holds its block
(``storage._owner = block``), and PyTorch keeps a storage's Python object alive exactly as long as its
StorageImpl lives (through every tensor, view and ``.data`` copy over it). So a block lives while anything
uses its memory; when the last user goes, the block's ``__del__`` gives the memory back to its device's pool,
which keeps it for the next request of the same size class (up to ``CONFIG.cached_bytes`` per device) or
frees it.

Sizes are rounded up like CUDA's caching allocator (512 bytes below 1 MiB, 64 KiB above), so a training loop
that frees and reallocates the same shapes every step hits the cache. Blocks start 64-byte aligned (the
kernels' vector stores rely on it). The counters follow ``torch.cuda.memory_stats()``' names; "allocated"
bytes are block sizes (rounded), "reserved" bytes are allocated plus cached.
"""

from __future__ import annotations

import threading
from collections import defaultdict

import numpy as np

from neuroncc.device.config import CONFIG

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

    def __del__(self) -> None:
        pool = self.pool
        if pool is not None:
            try:
                pool.release(self.size, self.memory, self.address)
            except Exception:  # interpreter shutdown: the memory goes with the process
                pass


class DevicePool:
    """The blocks of one device: free lists by size, and the counters ``torch.neuron.memory_stats`` reports."""

    def __init__(self, index: int):
        self.index = index
        self._lock = threading.RLock()  # RLock: a block may die (and come back here) inside an allocation
        self._free: dict[int, list[tuple[np.ndarray, int]]] = defaultdict(list)
        self.cached_bytes = 0
        self.counters: dict[str, int] = defaultdict(int)

    def allocate(self, nbytes: int) -> Block:
        size = round_size(nbytes)
        with self._lock:
            free = self._free.get(size)
            if free:
                memory, address = free.pop()
                self.cached_bytes -= size
                self._count("cache_hits")
            else:
                memory, address = _fresh(size)
                self._count_segment(size, +1)
            self._count_active(size, +1)
        return Block(self, size, address, memory)

    def release(self, size: int, memory: np.ndarray, address: int) -> None:
        with self._lock:
            self._count_active(size, -1)
            if self.cached_bytes + size <= CONFIG.cached_bytes:
                self._free[size].append((memory, address))
                self.cached_bytes += size
            else:
                self._count_segment(size, -1)

    def empty_cache(self) -> None:
        """Free every cached (unused) block."""
        with self._lock:
            for size, blocks in self._free.items():
                for _ in blocks:
                    self._count_segment(size, -1)
            self._free.clear()
            self.cached_bytes = 0

    def reset_peak(self) -> None:
        with self._lock:
            for name in ("allocated_bytes", "reserved_bytes", "active", "segment"):
                self.counters[f"{name}.all.peak"] = self.counters[f"{name}.all.current"]

    def reset_accumulated(self) -> None:
        with self._lock:
            for name in list(self.counters):
                if name.endswith((".allocated", ".freed")) or name == "num_cache_hits":
                    self.counters[name] = 0

    def stats(self) -> dict[str, int]:
        with self._lock:
            return dict(sorted(self.counters.items()))

    def _count(self, name: str) -> None:
        self.counters[f"num_{name}"] += 1

    def _count_active(self, size: int, sign: int) -> None:
        self._move("allocated_bytes", size, sign)
        self._move("active", 1, sign)

    def _count_segment(self, size: int, sign: int) -> None:
        self._move("reserved_bytes", size, sign)
        self._move("segment", 1, sign)

    def _move(self, name: str, amount: int, sign: int) -> None:
        counters = self.counters
        current = counters[f"{name}.all.current"] + sign * amount
        counters[f"{name}.all.current"] = current
        counters[f"{name}.all.{'allocated' if sign > 0 else 'freed'}"] += amount
        if current > counters[f"{name}.all.peak"]:
            counters[f"{name}.all.peak"] = current


def _fresh(size: int) -> tuple[np.ndarray, int]:
    memory = np.empty(size + ALIGNMENT, dtype=np.uint8)
    address = memory.ctypes.data
    return memory, address + (-address % ALIGNMENT)


class Allocator:
    """One :class:`DevicePool` per device index, made on first use."""

    def __init__(self) -> None:
        self._pools: dict[int, DevicePool] = {}
        self._lock = threading.Lock()

    def pool(self, index: int) -> DevicePool:
        pool = self._pools.get(index)
        if pool is None:
            with self._lock:
                pool = self._pools.setdefault(index, DevicePool(index))
        return pool

    def allocate(self, nbytes: int, index: int) -> Block:
        return self.pool(index).allocate(nbytes)

    def pools(self) -> list[DevicePool]:
        return list(self._pools.values())


#: The process's allocator.
ALLOCATOR = Allocator()
