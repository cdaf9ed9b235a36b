"""What a process keeps of the compile cache beside the directories: the counters of its cache events and the
executables it has already loaded (the memory tier, looked up before the local directory)."""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass, field
from pathlib import Path

from neuroncc.executors.executable import Executable
from neuroncc.codegen.llvm.fork_safety import renew_in_child


@dataclass
class CacheStats:
    """Counters of cache events. Observability only: nothing reads them to decide anything.

    ``hits`` + ``misses`` = cached lookups; ``hits`` counts every tier, ``memory_hits`` and ``remote_hits`` the
    hits found in memory and on the remote server; ``compiles`` = compiles run on a miss; ``bad_entries`` =
    damaged or foreign-version local entries met, ``remote_bad_entries`` refused remote values (each also warned
    about); ``remote_stores`` = artifacts sent to the remote server; ``uncached`` = compiles that bypassed the
    cache (no artifact support for the target, options without a JSON form, an unusable cache directory).
    """

    hits: int = 0
    misses: int = 0
    compiles: int = 0
    bad_entries: int = 0
    publish_failures: int = 0
    uncached: int = 0
    load_seconds: float = 0.0
    memory_hits: int = 0
    remote_hits: int = 0
    remote_bad_entries: int = 0
    remote_stores: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, counter: str, amount: float = 1) -> None:
        with self._lock:
            setattr(self, counter, getattr(self, counter) + amount)

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            return {name: getattr(self, name) for name in _COUNTERS}

    def reset(self) -> None:
        with self._lock:
            for name in _COUNTERS:
                setattr(self, name, type(getattr(self, name))())


_COUNTERS = ("hits", "misses", "compiles", "bad_entries", "publish_failures", "uncached", "load_seconds",
             "memory_hits", "remote_hits", "remote_bad_entries", "remote_stores")

#: Process-wide counters that caches report into unless given their own (the front end's ``neuroncc.stats()``
#: reads these).
CACHE_STATS = CacheStats()


class MemoryTier:
    """Executables already loaded in this process, by cache directory and key (the most recently used
    ``capacity``; each directory is its own namespace, so pointing ``$NEURONCC_CACHE_DIR`` elsewhere starts
    afresh).

    An executable is safe to share: it serializes its own calls. Memory is trusted (whatever is here was
    verified when it was loaded or compiled by this process).
    """

    def __init__(self, capacity: int = 512):
        self.capacity = capacity
        self._executables: collections.OrderedDict[tuple[Path, str], Executable] = collections.OrderedDict()
        self._lock = renew_in_child(threading.Lock())

    def get(self, key: tuple[Path, str]) -> Executable | None:
        with self._lock:
            executable = self._executables.get(key)
            if executable is not None:
                self._executables.move_to_end(key)
            return executable

    def put(self, key: tuple[Path, str], executable: Executable) -> None:
        with self._lock:
            self._executables[key] = executable
            self._executables.move_to_end(key)
            while len(self._executables) > self.capacity:
                self._executables.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._executables.clear()


#: The memory tier of the caches that ``driver.compile_graph`` opens from the environment.
PROCESS_MEMORY = MemoryTier()
