"""llvmlite's process-wide lock across ``fork``: a child process never starts with it held.

Every call into LLVM's bindings holds llvmlite's one process-wide lock (``llvmlite.binding.ffi.lib._lock``, a
re-entrant lock), and neuroncc calls LLVM on background threads: the optimizer of quick-first builds
(``executors/cpu/tiers.py``), the threads finishing a build's link (``executors/cpu/deferred_code.py``), a
build's LLVM workers (``jit.KernelCompiler``). A forked child has only the thread that forked; if another
thread held the lock at that moment, the child's copy stays held forever and the child's first LLVM call hangs,
often one nobody asked for: the garbage collector finalizing an llvmlite object (``TargetMachine.__del__``) in
the child's first steps. Session 31 found a DataLoader worker (``num_workers=2``, forked from a process whose
optimizer was compiling) hanging so, which hung a whole CI run.

So before a fork the process first runs the registered waits (:func:`before_holding_llvm`: threads whose work
needs LLVM finish first, or the fork would wait for them while holding the lock they need), then takes the lock
itself: the fork waits for the LLVM call in progress (one call, never a whole compile), no thread is inside LLVM
while the process is copied (so LLVM's own state, its mutexes and pass managers, is whole in the child), and
both processes release the lock after. ``subprocess`` does not fork through Python's hooks (nor need them: the
child execs at once), so linking with ``ld`` from a background thread never waits here.

Nothing here imports llvmlite: a process that never loaded LLVM's bindings has nothing to hold.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

#: run before each fork, in the order registered, before the lock is taken
_WAITS: list[Callable[[], None]] = []
#: locks taken before LLVM's own, in the order registered: ones a thread may hold while it waits for LLVM's
_OUTER_LOCKS: list[Any] = []
#: the locks while the hook holds them (between ``before`` and ``after`` of one fork)
_HELD: list[Any] = []


def before_holding_llvm(wait: Callable[[], None]) -> None:
    """Run ``wait()`` before every fork, before LLVM's lock is taken (e.g. join the threads still calling LLVM)."""
    _WAITS.append(wait)


def hold_across_fork(lock: Any) -> None:
    """Hold ``lock`` across every fork too, taken before LLVM's lock (a lock that guards LLVM calls, taken
    before them): no other thread holds it in the child."""
    _OUTER_LOCKS.append(lock)


def llvm_lock() -> Any | None:
    """llvmlite's process-wide lock if its bindings are loaded in this process, else None."""
    ffi = sys.modules.get("llvmlite.binding.ffi")
    return None if ffi is None else ffi.lib._lock._lock


def _before_fork() -> None:
    for wait in _WAITS:
        wait()
    llvm = llvm_lock()
    for lock in [*_OUTER_LOCKS, *([llvm] if llvm is not None else [])]:
        lock.acquire()
        _HELD.append(lock)


def _release() -> None:
    # in the child too: the thread that forked owns the copies (the same thread identity), so it releases them
    while _HELD:
        _HELD.pop().release()


os.register_at_fork(before=_before_fork, after_in_parent=_release, after_in_child=_release)

__all__ = ["before_holding_llvm", "hold_across_fork", "llvm_lock"]
