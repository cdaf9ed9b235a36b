"""neuroncc's one ``fork`` hook: a child process never starts with a lock held by a thread it does not have.

A forked child has only the thread that forked. A lock another thread held at that moment stays held in the
child forever, and the child's first use of it hangs, often one nobody asked for: the garbage collector
finalizing an llvmlite object (``TargetMachine.__del__``) takes llvmlite's lock in the child's first steps.
Session 31 found a DataLoader worker (``num_workers=2``, forked from a process whose optimizer was compiling)
hanging so, which hung a whole CI run. Each lock a background thread (neuroncc's own, the autograd engine's, a
user's thread running compiled code or ``neuron`` tensors) can hold is handled here, in one of two ways:

* **held across the fork** (:func:`hold_across_fork`): the hook takes it before the fork, so the fork waits for
  the holder to leave, and both processes release it after. For locks that guard work which must be whole in
  the child and that are held for a while (a compile, an LLVM call). Taken in rank order, which is the lock
  order every thread follows (``frontend/tracing.py``), so the hook never holds one a holder of another waits
  for:

  ============== =====================================================================================
  rank           lock
  ============== =====================================================================================
  DYNAMO_COMPILE TorchDynamo's ``compile_lock`` once TorchDynamo is loaded (``frontend/tracing.py``; the
                 device's builds take it first): a fork waits for a TorchDynamo compile in progress
  DEVICE_BUILD   the ``neuron`` device's build lock (``device/build_lock.py``): its handler tables and
                 signature entries are whole in the child; a fork waits for a kernel build in progress
  JIT            the jit's lock around LLVM's initialization (``jit.py``)
  LLVM           llvmlite's process-wide lock, when its bindings are loaded: the fork waits for one LLVM call
                 (never a whole compile), and no thread is inside LLVM while the process is copied, so its own
                 state (mutexes, pass managers) is whole in the child
  QUEUES         the background queues' locks (the compile cache's writer, ``driver/publisher.py``; the
                 optimizer tier, ``executors/cpu/tiers.py``): held for a few bytecodes; the child sees a
                 queue's entries and their files consistent, and resets it (``in_child``)
  ============== =====================================================================================

* **renewed in the child** (:func:`renew_in_child`: ``_at_fork_reinit``, as the standard library renews its
  logging locks): leaf locks held for a dictionary update, a counter, or one kernel call, which take no other
  lock and have nothing left half-done that matters to the child (the allocator's pools, the device's signature
  index, a kernel entry's scratch memory, an executable's arena, the CPU thread pool's region lock). Renewing
  them needs no order, so they cannot deadlock a fork.

Imports are the one lock of Python's own that bites here: a module another thread is importing has its import
lock held and its half-run body in ``sys.modules``, so a child forked meanwhile hangs at its first import of that
module (session 32 found a DataLoader worker so, importing the device's fallback module beside a thread that
was importing it). So the hook first waits until no other thread is importing (bounded:
:data:`IMPORT_WAIT_SECONDS`), and after taking the locks takes the interpreter's import lock at such a moment and
holds it to the fork, so that no import starts in between (the fork takes that lock itself next).

Locks no hook can reach are the last: a C library's or a C++ library's own (glibc's exit-function list, which
``__cxa_atexit`` takes for each C++ static's destructor at its first use; a static being initialized; an ATen or
LLVM mutex held for a moment). A fork copies such a lock held if a thread was inside at that moment, and glibc
renews malloc's and the loader's locks in the child, not these (session 33: a DataLoader worker hung at its first
``__cxa_atexit``, in ``torch.set_num_threads``, on the lock the parent's busy thread held registering an ATen
static's destructor). So the hook's last step waits (bounded: :data:`QUIET_WAIT_SECONDS`) until no other thread
is running: each is blocked in the kernel (on the GIL, which the forking thread holds to the fork, on a lock, on
I/O), none inside such a section (:func:`_wait_until_other_threads_stop`).

Before any lock is taken the registered waits run (:func:`before_holding_llvm`: threads whose work needs LLVM
finish first, or the fork would wait for them while holding the lock they need), and after the locks are
released the child's callbacks run (:func:`in_child`: the thread pool forgets its workers, which the child does
not have). ``subprocess`` does not fork through Python's hooks (nor need them: the child execs at once), so
linking with ``ld`` from a background thread never waits here.

Nothing here imports llvmlite or torch: a process that never loaded them has nothing of theirs to hold.
"""

from __future__ import annotations

import _imp
import ctypes
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

DYNAMO_COMPILE, DEVICE_BUILD, JIT, LLVM, QUEUES = 10, 30, 40, 50, 60

#: run before each fork, in the order registered, before any lock is taken
_WAITS: list[Callable[[], None]] = []
#: (rank, registration number, the lock or a function giving the current one or None) held across each fork
_HOLDS: list[tuple[int, int, Any]] = []
#: leaf locks given a fresh state in the child (weakly held: a lock dies with its executable or entry)
_RENEWED: weakref.WeakSet[Any] = weakref.WeakSet()
#: run in the child after the locks are released and renewed, in the order registered
_CHILD: list[Callable[[], None]] = []
#: the locks while the hook holds them (between ``before`` and ``after`` of one fork)
_HELD: list[Any] = []


def before_holding_llvm(wait: Callable[[], None]) -> None:
    """Run ``wait()`` before every fork, before any lock is taken (e.g. join the threads still calling LLVM)."""
    _WAITS.append(wait)


def hold_across_fork(lock: Any, rank: int = JIT) -> None:
    """Hold ``lock`` across every fork, taken in ``rank`` order (the module docstring's table; registration order
    within a rank). ``lock`` may be a function returning the lock to hold now, or None (nothing to hold)."""
    _HOLDS.append((rank, len(_HOLDS), lock))
    _HOLDS.sort(key=lambda hold: hold[:2])


def renew_in_child(lock: Any) -> Any:
    """Give ``lock`` (a ``threading.Lock`` or ``RLock``) a fresh, unheld state in every forked child; returns it."""
    _RENEWED.add(lock)
    return lock


def in_child(callback: Callable[[], None]) -> None:
    """Run ``callback()`` in every forked child, after the locks are released and renewed."""
    _CHILD.append(callback)


def llvm_lock() -> Any | None:
    """llvmlite's process-wide lock if its bindings are loaded in this process, else None."""
    ffi = sys.modules.get("llvmlite.binding.ffi")
    return None if ffi is None else ffi.lib._lock._lock


def dynamo_compile_lock() -> Any | None:
    """TorchDynamo's ``compile_lock`` if TorchDynamo is loaded in this process, else None."""
    convert_frame = sys.modules.get("torch._dynamo.convert_frame")
    return None if convert_frame is None else convert_frame.compile_lock


def _locks_to_hold() -> list[Any]:
    found = []
    for _, _, lock in _HOLDS:
        current = lock() if callable(lock) and not hasattr(lock, "acquire") else lock
        if current is not None:
            found.append(current)
    return found


#: Seconds a fork waits for other threads' imports to finish (an import waiting for a lock the hook holds would
#: otherwise stop the fork for good; after this the fork goes ahead, and only that module is unusable in the child)
IMPORT_WAIT_SECONDS = 30.0


def _imports_in_progress() -> list[str]:
    """Modules another thread is importing now (it holds their import lock: importlib's ``_ModuleLock``, which
    a forked child would inherit held, hanging the child's first import of the module, whose half-run body is in
    ``sys.modules`` meanwhile). Read under the import lock, as importlib changes the table."""
    bootstrap = sys.modules["importlib._bootstrap"]
    me = threading.get_ident()
    busy = []
    for name, reference in list(getattr(bootstrap, "_module_locks", {}).items()):
        lock = reference()
        if lock is not None and getattr(lock, "owner", None) not in (None, me):
            busy.append(name)
    return busy


def _hold_import_lock_once_no_import_runs(seconds: float) -> None:
    """Take the interpreter's import lock at a moment no other thread is importing a module (waiting up to
    ``seconds``): no import starts between this and the fork, which takes the same lock (reentrant) next."""
    deadline = time.monotonic() + seconds
    while True:
        _imp.acquire_lock()
        if not _imports_in_progress() or time.monotonic() > deadline:
            return
        _imp.release_lock()
        time.sleep(0.001)


#: Seconds a fork waits for the process's other threads to stop running (:func:`_wait_until_other_threads_stop`);
#: after this the fork goes ahead (a thread computing without a pause for that long)
QUIET_WAIT_SECONDS = 1.0
#: What the last fork's wait saw: seconds waited, and whether every other thread had stopped (tests, diagnosis)
LAST_QUIET_WAIT: dict[str, float | bool] = {}


class _ThreadStates:
    """Each thread's scheduler state from ``/proc/self/task/N/stat``, read through libc with the GIL held
    (``ctypes.PyDLL``: Python's own file reads would let other threads take the GIL, and so start running native
    code, between the reads and the fork)."""

    def __init__(self) -> None:
        libc = ctypes.PyDLL(None)
        self.open, self.read, self.close, self.sleep = libc.open, libc.read, libc.close, libc.usleep
        self.open.argtypes, self.open.restype = [ctypes.c_char_p, ctypes.c_int], ctypes.c_int
        self.read.argtypes, self.read.restype = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t], ctypes.c_ssize_t
        self.close.argtypes, self.sleep.argtypes = [ctypes.c_int], [ctypes.c_uint]
        self.buffer = ctypes.create_string_buffer(1024)

    def _fields(self, path: bytes) -> list[bytes]:
        """The fields of a ``stat`` file after the command name ("pid (name) S ...": the name may hold anything)."""
        fd = self.open(path, os.O_RDONLY)
        if fd < 0:
            return []  # (a thread that ended)
        size = self.read(fd, self.buffer, len(self.buffer) - 1)
        self.close(fd)
        text = self.buffer.raw[:max(size, 0)]
        return text[text.rfind(b")") + 2:].split()

    def threads(self) -> int:
        """How many threads the process has now."""
        fields = self._fields(b"/proc/self/stat")
        return int(fields[17]) if len(fields) > 17 else -1

    def running(self, tids: list[int]) -> list[int]:
        """The threads of ``tids`` running or runnable now (state ``R``: not blocked in the kernel)."""
        return [tid for tid in tids if self._fields(b"/proc/self/task/%d/stat" % tid)[:1] == [b"R"]]


_STATES: list[_ThreadStates] = []
#: The switch interval while a fork waits, and how many of the process's own intervals the wait lasts at least:
#: a thread waiting for the GIL asks the holder to let it go after an interval (which would let it run on, into
#: native code, between the last look and the fork); with the long one, the asks still coming are from waits begun
#: before, all made (and served, in the loop) within the settling time
_WAIT_SWITCH_INTERVAL, _SETTLE_INTERVALS = 1000.0, 2.0
_SWITCH_INTERVAL: list[float] = []


def _wait_until_other_threads_stop(seconds: float) -> None:
    """Wait (up to ``seconds``, holding the GIL) until no other thread of the process is running: each is blocked
    in the kernel (on the GIL this thread holds, on a lock the hook holds, on I/O), not inside native code.

    A lock the C library or a C++ library takes for a moment is in no hook's reach, and a fork copies it held if
    a thread was inside at that moment: the child's first use of it waits forever. Session 33 found one so: a
    DataLoader worker waited in ``torch.set_num_threads`` -> ``caffe2::pthreadpool()`` (its first function-local
    static with a destructor: ``__cxa_atexit``) on glibc's ``__exit_funcs_lock``, which the parent's busy thread
    held at the fork, registering the destructor of a static ATen creates at an operator's first call (with the
    GIL released). glibc's fork renews malloc's and the loader's locks, not that one. A thread inside such a
    section is running (``R``); one waiting for the GIL, a lock or I/O holds none of them, and cannot start one
    before the fork: it needs the GIL to go on, which this thread holds to the fork."""
    if not os.path.isdir("/proc/self/task"):
        return  # no per-thread states to read (not Linux): the fork goes ahead as before
    if not _STATES:
        _STATES.append(_ThreadStates())
    states, me = _STATES[0], threading.get_native_id()
    if states.threads() == 1:
        return  # this thread alone
    start, interval = time.monotonic(), sys.getswitchinterval()
    if not _SWITCH_INTERVAL:
        _SWITCH_INTERVAL.append(interval)  # restored after the fork, in both processes (_release)
        sys.setswitchinterval(_WAIT_SWITCH_INTERVAL)
    others, listed = [], 0
    while True:
        count = states.threads()
        if count != listed:  # listed again only when threads came or went (listing lets the GIL go)
            others, listed = [int(name) for name in os.listdir("/proc/self/task") if int(name) != me], count
        quiet = not states.running(others)
        waited = time.monotonic() - start
        if (quiet and waited > interval * _SETTLE_INTERVALS) or waited > seconds:
            LAST_QUIET_WAIT.update(seconds=waited, quiet=quiet)
            return
        states.sleep(50)  # (the GIL kept: a thread that needs it stops at it)


#: Times the hook takes its locks again when a module with a lock to hold was loaded while it took them
TAKE_ATTEMPTS = 3


def _before_fork() -> None:
    for attempt in range(TAKE_ATTEMPTS):
        _hold_import_lock_once_no_import_runs(IMPORT_WAIT_SECONDS)
        _imp.release_lock()  # the waits and the locks below may need other threads' imports to finish
        for wait in _WAITS:
            wait()
        for lock in _locks_to_hold():
            lock.acquire()
            _HELD.append(lock)
        _hold_import_lock_once_no_import_runs(IMPORT_WAIT_SECONDS / 10)
        _HELD.append(_IMPORT_LOCK)
        if all(any(lock is held for held in _HELD) for lock in _locks_to_hold()) or attempt == TAKE_ATTEMPTS - 1:
            # (after the last attempt: the fork goes ahead holding what it took, never with nothing)
            _wait_until_other_threads_stop(QUIET_WAIT_SECONDS)
            return
        # another thread loaded a module with a lock to hold meanwhile (TorchDynamo's, at a thread's first device
        # build) and may hold it now: let go, and take them all again in their order
        _release()


class _ImportLock:
    """The interpreter's import lock as :data:`_HELD` releases it (in the child too: CPython makes the child's
    held once by the thread that forked, ``_PyImport_ReInitLock``)."""

    @staticmethod
    def release() -> None:
        try:
            _imp.release_lock()
        except RuntimeError:  # an interpreter whose child starts with the lock free: nothing to release
            pass


_IMPORT_LOCK = _ImportLock()


def _release() -> None:
    # in the child too: the thread that forked owns the copies (the same thread identity), so it releases them
    while _HELD:
        _HELD.pop().release()
    if _SWITCH_INTERVAL:
        sys.setswitchinterval(_SWITCH_INTERVAL.pop())


def _after_in_child() -> None:
    _release()
    for lock in list(_RENEWED):
        lock._at_fork_reinit()
    for callback in _CHILD:
        callback()


hold_across_fork(dynamo_compile_lock, DYNAMO_COMPILE)
hold_across_fork(llvm_lock, LLVM)
os.register_at_fork(before=_before_fork, after_in_parent=_release, after_in_child=_after_in_child)

__all__ = ["DEVICE_BUILD", "DYNAMO_COMPILE", "JIT", "LLVM", "QUEUES", "before_holding_llvm", "hold_across_fork",
           "dynamo_compile_lock", "in_child", "llvm_lock", "renew_in_child"]
