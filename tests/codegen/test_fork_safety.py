"""A process forked while another thread is inside LLVM (or holds a lock around LLVM's calls) gives its child
free locks: the child's LLVM calls run instead of hanging forever (codegen/llvm/fork_safety.py).

Session 31: a DataLoader worker forked while the quick-first optimizer compiled hung in its first steps (the
garbage collector finalizing an llvmlite object took llvmlite's lock, held by a thread the child does not have),
and with it a whole CI run. Each test forks for real and waits for the child a bounded time.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import llvmlite.binding as llvm

from neuroncc.codegen.llvm import fork_safety, jit

CHILD_SECONDS = 30.0  # a child that has not answered by then is stuck on a lock (it needs milliseconds)


def _fork_while_held(enter_lock, child_work) -> tuple[int | None, str]:
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
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read)
            os.write(write, str(child_work()).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    leave.set()
    holder.join(10)
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


def test_a_child_forked_while_another_thread_is_inside_llvm_calls_llvm():
    jit.host_target()  # llvmlite's bindings loaded, as in any process that compiled
    from llvmlite.binding import ffi

    code, text = _fork_while_held(ffi.lib._lock, llvm.get_process_triple)
    assert code is not None, "the child hung on llvmlite's lock, held by a thread it does not have"
    assert (code, text) == (0, llvm.get_process_triple())


def test_a_child_forked_while_another_thread_holds_the_jit_lock_compiles():
    def compile_in_child() -> int:
        module = jit.compile_ir(["define i32 @seven() {\n  ret i32 7\n}\n"])
        return len(module.objects)

    code, text = _fork_while_held(jit._LOCK, compile_in_child)
    assert code is not None, "the child hung on the jit's lock, held by a thread it does not have"
    assert (code, text) == (0, "1")


def test_the_hook_finds_llvmlites_lock():
    # the hook reads a private attribute of llvmlite: an llvmlite that renames it fails here, not in a hang
    jit.host_target()
    lock = fork_safety.llvm_lock()
    assert lock is not None and lock.acquire(timeout=5)
    lock.release()
