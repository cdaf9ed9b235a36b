"""The compile cache directory's process-level file facts: waiting for a key's lock file, and telling a temp
directory whose writer is gone (``<prefix>.<pid>.<random>``) from one still being written.

Split from :mod:`neuroncc.driver.cache`, whose ``CompileCache`` is their only user."""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable
from pathlib import Path

from neuroncc.errors import ArtifactError

#: A compile lock waited for this long is said (another process compiles the same graph, or is stuck holding its
#: lock: a user saw a compile that took minutes with nothing printed).
WAIT_NOTICE_SECONDS = 10.0
#: A temp directory this old is stale even if a process with its pid is alive (pids are reused).
STALE_TEMP_SECONDS = 24 * 3600


class LockTimeoutError(ArtifactError):
    """A key's compile lock was not acquired before its deadline."""


def flock_until(fd: int, deadline: float, path: Path, on_slow: Callable[[], None] | None = None) -> None:
    """Take an exclusive ``flock`` on ``fd`` (the lock file ``path``), polling with backoff until ``deadline``
    (``time.monotonic()``); raises LockTimeoutError after it. ``on_slow`` is called once when the wait has
    lasted :data:`WAIT_NOTICE_SECONDS`, so that a wait is never silent."""
    delay = 0.001
    notice_at = time.monotonic() + WAIT_NOTICE_SECONDS
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            now = time.monotonic()
            if now > deadline:
                raise LockTimeoutError(f"timed out waiting for compile lock {path}") from None
            if on_slow is not None and now >= notice_at:
                on_slow()
                on_slow = None
            time.sleep(delay)
            delay = min(delay * 2, 0.05)


def temp_is_stale(path: Path) -> bool:
    """A temp dir is named ``<prefix>.<pid>.<random>``; stale once that process is gone, or when very old."""
    try:
        pid = int(path.name.split(".")[1])
        age = time.time() - path.lstat().st_mtime
    except (IndexError, ValueError, OSError):
        return False
    return (pid != os.getpid() and not _process_alive(pid)) or age > STALE_TEMP_SECONDS


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
