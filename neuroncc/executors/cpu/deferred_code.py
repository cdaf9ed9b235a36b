"""A build's kernel code finished in the background: what torch.compile's graphs return before LLVM is done.

A graph's build emits each kernel module in Python while LLVM workers compile the ones already emitted
(``jit.KernelCompiler``). What is left when the last module is emitted (the workers' tail, ~45-120 ms for the
transformer block's LayerNorm modules at O3, then ``ld`` and ``dlopen``, ~6 ms) used to be waited for before
the build returned. AOTAutograd does ~0.1 s of Python between the forward graph's compile and its first call,
with one of this machine's two cores idle: :func:`finish_in_background` runs the tail on a thread of its own
and returns a future of the loaded code (``jit.LoadedCode`` or None, or the build's typed error), which the
executable waits for at its first call (``CpuExecutable``'s deferred binding, launcher.py).

The thread also loads the process-wide helpers (the OpenMP team entry, the native sequence interpreter:
helpers.py) that the first call would otherwise compile on the calling thread (~10 ms of LLVM).

``fork``: a child process has none of the parent's threads, and LLVM workers that hold llvmlite's process-wide
lock when the parent forks would leave it held in the child forever. So the process waits for every pending
build before it forks (``codegen/llvm/fork_safety.py``'s hook, which then holds LLVM's lock across the fork):
the child starts with the code loaded (or the error recorded), and nothing of LLVM mid-call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from neuroncc.codegen.llvm import fork_safety

#: the threads finishing builds (a thread removes itself when done)
_RUNNING: set[threading.Thread] = set()
_LOCK = threading.Lock()


def finish_in_background(finish: Callable[[], Any], then: Callable[[], None] | None = None) -> Future:
    """Run ``finish()`` (a ``KernelCompiler``'s: join its workers, link, load) on a new thread; returns the
    future of its result or exception. ``then()`` runs after it on the same thread, for work the first call
    would otherwise do (its errors are ignored: that work is redone where it is needed and reports there)."""
    future: Future = Future()
    future.set_running_or_notify_cancel()

    def run() -> None:
        try:
            result = finish()
        except BaseException as exc:  # noqa: BLE001 - raised where the code is wanted (the first call)
            future.set_exception(exc)
        else:
            future.set_result(result)
            if then is not None:
                try:
                    then()
                except Exception:  # noqa: BLE001 - see the docstring
                    pass
        finally:
            with _LOCK:
                _RUNNING.discard(thread)

    # not a daemon: the interpreter waits for it at exit (LLVM must not be torn down under a running compile)
    thread = threading.Thread(target=run, name="neuroncc-link", daemon=False)
    try:
        with _LOCK:  # started under the lock: the fork hook never sees a thread it cannot join
            _RUNNING.add(thread)
            thread.start()
    except RuntimeError:  # no new threads at interpreter shutdown: finished on the calling thread
        with _LOCK:
            _RUNNING.discard(thread)
        run()
    return future


def wait_for_pending() -> None:
    """Return once every build started so far has finished, its ``then`` included (the fork hook; tests)."""
    with _LOCK:
        running = list(_RUNNING)
    for thread in running:
        if thread is not threading.current_thread():
            thread.join()


fork_safety.before_holding_llvm(wait_for_pending)

__all__ = ["finish_in_background", "wait_for_pending"]
