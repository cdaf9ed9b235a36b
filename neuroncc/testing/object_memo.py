"""The test suite's memo of LLVM object code: a module compiled once per test process, its object code reused.

The tests compile the same kernels again and again: a model family's layer kernels in its training, inference
and dynamic-shape tests, the device's op kernels in every test that adds two tensors, each test in a compile
cache of its own (``tests/conftest.py``) so that no test sees another's artifacts. LLVM's O3 pipeline and
object emission (``jit._compile_module``) were a third of the model zoo's CPU time; in a run of the zoo's
training tests, the device tests and two frontend files (two pytest-xdist workers), 23% of that LLVM time (66 s
of 282 s) compiled a module its process had already compiled.

A module's object code depends only on its text, its tier and the target machine it is emitted for (the CPU
name, its features, the code generation level and the code form's relocation model and code model): what
``jit.reoptimize`` relies on to reuse the objects it does not compile again. So :func:`install` wraps
``jit.target_machine`` to remember each machine's identity and ``jit._compile_module`` to return the object
code of a (text, tier, machine identity) compiled before: the bytes LLVM made for exactly that input, as a
compile would make them again. Everything else of a build still runs (planning, IR generation, linking,
loading), so a test still checks the code generated for it. A module that fails to compile is never
remembered (every compile of it raises again); a test that replaces ``jit._compile_module`` itself (to slow
it down, break it or count its calls) replaces the memo with it for its duration.

Kept: the most recently used objects up to :data:`CAPACITY_BYTES` per process.
"""

from __future__ import annotations

import collections
import hashlib
import threading
import weakref
from typing import Any

from neuroncc.codegen.llvm import jit

#: The most object code kept per process (the least recently used goes first).
CAPACITY_BYTES = 256 << 20


class ObjectMemo:
    """Object code by (sha256 of the module text, tier, machine identity); thread-safe (compile workers)."""

    def __init__(self, capacity_bytes: int = CAPACITY_BYTES):
        self.capacity_bytes = capacity_bytes
        self.hits = self.misses = 0
        self._objects: collections.OrderedDict[tuple, bytes] = collections.OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

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
            if key in self._objects:
                return
            self._objects[key] = code
            self._bytes += len(code)
            while self._bytes > self.capacity_bytes and self._objects:
                _, dropped = self._objects.popitem(last=False)
                self._bytes -= len(dropped)


#: The memo :func:`install` put in place (None before).
MEMO: ObjectMemo | None = None
#: ``jit._compile_module`` as it was before :func:`install` (what a memo miss calls).
ORIGINAL_COMPILE: Any = None


def install(capacity_bytes: int = CAPACITY_BYTES) -> ObjectMemo:
    """Wrap ``jit.target_machine`` and ``jit._compile_module`` with the memo (once per process)."""
    global MEMO, ORIGINAL_COMPILE
    if MEMO is not None:
        return MEMO
    memo = ObjectMemo(capacity_bytes)
    identities: weakref.WeakKeyDictionary[Any, tuple] = weakref.WeakKeyDictionary()
    make_machine, compile_module = jit.target_machine, jit._compile_module

    def target_machine(target=None, tier=jit.Tier.OPTIMIZED, form=jit.CodeForm.OBJECTS):
        target = target or jit.host_target()
        machine = make_machine(target, tier, form)
        identities[machine] = (target.name, target.machine_features, tier, form)
        return machine

    def remembered_compile(text: str, context: Any, tm: Any, tier: Any) -> bytes:
        identity = identities.get(tm)
        if identity is None:  # a machine made some other way: compile as ever
            return compile_module(text, context, tm, tier)
        key = (hashlib.sha256(text.encode()).digest(), tier, identity)
        code = memo.get(key)
        if code is None:
            code = compile_module(text, context, tm, tier)
            memo.put(key, code)
        return code

    jit.target_machine, jit._compile_module = target_machine, remembered_compile
    MEMO, ORIGINAL_COMPILE = memo, compile_module
    return memo
