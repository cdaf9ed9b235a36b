"""Forking while another thread holds a lock, with bounded waits: a regression fails instead of hanging
(tests/codegen/test_fork_safety.py, tests/device/test_fork_safety_device.py)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

CHILD_SECONDS = 30.0  # a child that has not answered by then is stuck on a lock (it needs milliseconds)


def fork_while_held(enter_lock: Any, child_work: Callable[[], Any]) -> tuple[int | None, str]:
    """Fork while another thread is inside ``enter_lock`` (a context manager it holds ~0.3 s); the child runs
    ``child_work()`` and writes what it returns. Returns the child's exit code (None: it hung) and its text."""
    inside, leave = threading.Event(), threading.Event()

    def hold() -> None:
        with enter_lock:
            inside.set()
            leave.wait(0.3)

    holder = threading.Thread(target=hold)
    holder.start()
    assert inside.wait(10)
    try:
        return fork_and_wait(child_work)
    finally:
        leave.set()
        holder.join(10)


def fork_and_wait(child_work: Callable[[], Any]) -> tuple[int | None, str]:
    """Fork; the child runs ``child_work()`` and writes what it returns (exit 0), or its error (exit 1). Returns
    the child's exit code (None: it did not finish within :data:`CHILD_SECONDS`, and was killed) and its text."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read)
            try:
                os.write(write, str(child_work()).encode())
                code = 0
            except BaseException as exc:  # noqa: BLE001 - reported to the parent
                os.write(write, f"{type(exc).__name__}: {exc}".encode())
        finally:
            os._exit(code)
    os.close(write)
    deadline = time.monotonic() + CHILD_SECONDS
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    if done[0] == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(read)
        return None, ""
    with os.fdopen(read, "rb") as source:
        return os.waitstatus_to_exitcode(done[1]), source.read().decode()
