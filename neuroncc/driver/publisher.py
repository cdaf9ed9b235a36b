"""Writing compile-cache entries off the compiling thread: one background writer per process.

A compile's executable is usable from memory at once; writing its artifact (a dozen files, hashed, renamed
into place) took a third of a one-op compile on the eager device. The cache hands that write to this writer
together with the key's lock, which the writer releases when the entry is published, so other processes still
compile a key once (they wait on the lock, then find the entry).

Order and visibility in this process: :meth:`Publisher.wait` blocks until a key's pending write has finished,
and the cache calls it before it reads that key from the disk, so no reader here sees a half-written entry (the
rename makes that true for other processes). The writer is a non-daemon thread that exits when it has nothing
left to do, so the interpreter waits for pending writes at exit. A process killed mid-write leaves only a temp
dir, collected later; its lock dies with it.

After ``fork`` the child forgets the parent's pending writes (the parent's writer publishes them) and closes
its copies of their lock files, so it cannot keep another process waiting on a lock it does not use.
"""

from __future__ import annotations

import collections
import os
import threading
import warnings
from collections.abc import Callable
from typing import Any

from neuroncc.codegen.llvm import fork_safety
from neuroncc.driver.notices import CacheWarning

#: A pending write's identity: (cache root, key).
WriteKey = tuple[Any, str]


class _Pending:
    __slots__ = ("write", "lock_fd", "done")

    def __init__(self, write: Callable[[], None], lock_fd: int):
        self.write, self.lock_fd, self.done = write, lock_fd, threading.Event()


class Publisher:
    """Runs queued cache writes in order on one background thread (see the module docstring)."""

    def __init__(self) -> None:
        self._reset()
        # the child must see a consistent snapshot: the lock is held across fork (taken last: fork_safety.QUEUES)
        fork_safety.hold_across_fork(lambda: self._lock, fork_safety.QUEUES)
        fork_safety.in_child(self._after_fork_in_child)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._queue: collections.deque[tuple[WriteKey, _Pending]] = collections.deque()
        self._pending: dict[WriteKey, _Pending] = {}
        self._thread: threading.Thread | None = None

    def submit(self, key: WriteKey, write: Callable[[], None], lock_fd: int) -> None:
        """Run ``write()`` in the background, then close ``lock_fd`` (the key's flocked lock file, now owned by
        the writer). A write already pending for ``key`` is waited for first."""
        self.wait(key)
        pending = _Pending(write, lock_fd)
        with self._lock:
            self._pending[key] = pending
            self._queue.append((key, pending))
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._drain, name="neuroncc-cache-writer", daemon=False)
            try:
                self._thread.start()
                return
            except RuntimeError:  # no new threads at interpreter shutdown: write here instead
                self._thread = None
        self._drain()

    def wait(self, key: WriteKey) -> None:
        """Return once no write of ``key`` is pending (at once if there is none)."""
        pending = self._pending.get(key)
        if pending is not None:
            pending.done.wait()

    def pending(self, key: WriteKey) -> bool:
        """Whether a write of ``key`` is queued or under way."""
        return key in self._pending

    def flush(self) -> None:
        """Return once every write submitted so far has finished."""
        for pending in list(self._pending.values()):
            pending.done.wait()

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    self._thread = None
                    return
                key, pending = self._queue.popleft()
            try:
                pending.write()
            except BaseException as exc:  # noqa: BLE001 - the entry is lost, never the process
                warnings.warn(f"could not save cache entry {key[1][:16]} ({type(exc).__name__}: {exc})",
                              CacheWarning, stacklevel=1)
            finally:
                with self._lock:  # with the lock: a fork sees the fd either open and pending, or neither
                    os.close(pending.lock_fd)
                    if self._pending.get(key) is pending:
                        del self._pending[key]
                pending.done.set()

    def _after_fork_in_child(self) -> None:
        for pending in self._pending.values():
            try:
                os.close(pending.lock_fd)
            except OSError:
                pass
        self._reset()


#: The process's writer: every cache that publishes in the background queues here.
PUBLISHER = Publisher()
