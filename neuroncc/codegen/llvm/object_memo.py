"""The process's memo of LLVM object code: a module compiled once per process, its object code reused.

A module's object code depends only on its text, its tier and the target machine it is emitted for (the CPU
name, its features, the code generation level, the code form's relocation and code model): what
``jit.reoptimize`` relies on to reuse the objects it does not compile again. Kernels are named by their code
(``kernel_names.py``), so the same kernel in another graph of the process (a model's backward fusing the
pattern its forward did, a recompile for another shape that keeps some kernels, the inference graph of a
trained model, another model with the same layers) has the same module text, and ``jit._compile_module``
returns the bytes LLVM made for it the first time instead of running the O3 pipeline and code generation
again. A module that fails to compile is never remembered (every compile of it raises again).

Bounded: the most recently used objects up to :data:`CAPACITY_BYTES` (a kernel's object is a few KB to a
few hundred; a 4-layer language model's forward and backward together ~2 MB). Thread-safe: the compile
workers and the background optimizer look up and store concurrently (two workers that compile the same new
module at once both compile it; the second store is dropped).
"""

from __future__ import annotations

import collections
import threading

from neuroncc.codegen.llvm.fork_safety import renew_in_child

#: The most object code kept per process (the least recently used goes first); the test suite raises it.
CAPACITY_BYTES = 64 << 20


class ObjectMemo:
    """Object code by key (a module text's digest, its tier and the machine's identity), least recently used
    dropped first beyond ``capacity_bytes`` (0: remembers nothing)."""

    def __init__(self, capacity_bytes: int = CAPACITY_BYTES):
        self.capacity_bytes = capacity_bytes
        self.hits = self.misses = 0
        self._objects: collections.OrderedDict[tuple, bytes] = collections.OrderedDict()
        self._bytes = 0
        self._lock = renew_in_child(threading.Lock())

    def get(self, key: tuple) -> bytes | None:
        with self._lock:
            found = self._objects.get(key)
            if found is None:
                self.misses += 1
                return None
            self.hits += 1
            self._objects.move_to_end(key)
            return found

    def put(self, key: tuple, code: bytes) -> None:
        with self._lock:
            if key in self._objects or len(code) > self.capacity_bytes:
                return
            self._objects[key] = code
            self._bytes += len(code)
            while self._bytes > self.capacity_bytes:
                _, dropped = self._objects.popitem(last=False)
                self._bytes -= len(dropped)

    def resize(self, capacity_bytes: int) -> None:
        """Keep at most ``capacity_bytes`` from now on (the least recently used dropped now if over)."""
        with self._lock:
            self.capacity_bytes = capacity_bytes
            while self._bytes > capacity_bytes:
                _, dropped = self._objects.popitem(last=False)
                self._bytes -= len(dropped)

    def __len__(self) -> int:
        with self._lock:
            return len(self._objects)
