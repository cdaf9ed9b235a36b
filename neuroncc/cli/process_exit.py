"""How a ``neuroncc`` command's process ends: what later processes read is finished, then the process leaves
without Python's teardown.

A command's work is done long before its interpreter is: tearing down torch, TorchDynamo and their modules,
collecting what is left and running its finalizers took 0.6-1.5 s of every command (~2 s after ``neuroncc demo``
printed "done"), paid again by every command a script or a loop runs. :func:`exit_process` does the part of
CPython's ending (``Py_FinalizeEx``) that anything outside this process can see, in the interpreter's order, and
then calls ``os._exit``:

1. ``threading._shutdown()``, as the interpreter does first: the threading module's exit hooks (the optimizer
   drops its quiet period, ``tiers.py``; thread pools stop), then every non-daemon thread is joined. Before it,
   :func:`finish_background_work` waits by name for neuroncc's own background writers (deferred link threads,
   optimized builds, the device's signature index, then the compile cache's writer, which publishes their
   entries), so that an entry is complete on the disk when the command returns even if one of them ever became
   a daemon thread. Remote cache (Redis) writes are not in the background: a compile with a remote tier stores
   before it returns.
2. ``atexit._run_exitfuncs()``: among them ``weakref.finalize``'s (a ``tempfile.TemporaryDirectory`` not cleaned
   up is removed there), ``logging.shutdown`` (file handlers flushed), multiprocessing's (children joined), the
   device's signature index and the link directory's removal (``native_library.py``). Then the cache writer is
   waited for again, for entries an exit handler queued.
3. ``sys.stdout`` and ``sys.stderr`` flushed, then C's stdio (``fflush(NULL)``, which ``exit()`` would do). A
   closed pipe (``neuroncc ... | head`` whose reader has gone) is no error here, as in ``cli.main``: the
   command's exit code, and nothing printed (Python's own ending printed ``Exception ignored ...
   BrokenPipeError`` and exited 120 when the output was still buffered). Another failure to flush (a full
   disk) is reported as Python reports it, and exits 120 as Python does.

Skipped: module teardown, the collection of what is still alive (``__del__`` methods), C++ static destructors
and C ``atexit`` handlers. None of neuroncc's commands leaves work there: every file they write is closed where
it is written (``with`` blocks, ``Path.write_text``, raw file descriptors), their temporary directories are
context managers or removed by ``atexit`` handlers, ``--jobs`` joins its worker processes, and OpenMP's and
LLVM's threads hold nothing a later process reads. tests/cli/test_cli_exit.py checks each in a real process
(and fails when any step above is left out).

Only the whole program exits this way (the console script, ``python -m neuroncc.cli``): ``cli.main`` called in
a process returns. Not under a profiler or tracer either (``python -m cProfile -m neuroncc.cli`` writes its
report after the program returns), nor with ``NEURONCC_DISABLE_FAST_EXIT=1``: then ``sys.exit``.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import sys
import threading
from collections.abc import Mapping
from typing import NoReturn

#: ``NEURONCC_DISABLE_FAST_EXIT=1``: end the command's process through Python's whole teardown (``sys.exit``).
DISABLE_VARIABLE = "NEURONCC_DISABLE_FAST_EXIT"
#: What Python's own ending exits with when it cannot flush stdout or stderr.
EXIT_FLUSH_FAILED = 120


def exit_status(code: object) -> int:
    """The process's exit status for a ``SystemExit`` code, as the interpreter computes it (None: 0; not an
    int: printed on stderr, 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def fast_exit_allowed(environ: Mapping[str, str]) -> bool:
    """Whether this process may skip Python's teardown (see the module docstring)."""
    if environ.get(DISABLE_VARIABLE, "0") not in ("", "0"):
        return False
    if threading.current_thread() is not threading.main_thread() or not hasattr(threading, "_shutdown"):
        return False
    return not _profiled_or_traced()


def _profiled_or_traced() -> bool:
    """A profiler or tracer (cProfile, trace, pdb) that does its work after the program returns."""
    if sys.getprofile() is not None or sys.gettrace() is not None:
        return True
    monitoring = getattr(sys, "monitoring", None)  # Python 3.12+: cProfile and the debuggers register here
    return monitoring is not None and any(monitoring.get_tool(tool) is not None
                                          for tool in (monitoring.PROFILER_ID, monitoring.DEBUGGER_ID))


def finish_background_work() -> None:
    """Wait for neuroncc's background work that writes what later processes read: the deferred link threads
    (``deferred_code.py``), the optimized builds (``tiers.py``), the device's signature index (its pending records,
    ``signature_index.py``) and the compile cache's writer (``publisher.py``), which publishes the entries the
    others hand it. A module not imported has nothing pending."""
    deferred_code = sys.modules.get("neuroncc.executors.cpu.deferred_code")
    if deferred_code is not None:
        deferred_code.wait_for_pending()
    tiers = sys.modules.get("neuroncc.executors.cpu.tiers")
    if tiers is not None:
        tiers.OPTIMIZER.wait()
    signature_index = sys.modules.get("neuroncc.device.signature_index")
    if signature_index is not None:
        signature_index.flush_all()
    publisher = sys.modules.get("neuroncc.driver.publisher")
    if publisher is not None:
        publisher.PUBLISHER.flush()


def flush_standard_streams(code: int) -> int:
    """Flush ``sys.stdout`` and ``sys.stderr``; the exit code to use (see the module docstring, step 3)."""
    for stream in (sys.stdout, sys.stderr):
        problem = _flush(stream)
        if problem is not None:
            code = EXIT_FLUSH_FAILED
            if stream is sys.stdout:  # (Python reports only stdout's failure)
                _report_unflushed(stream, problem)
    return code


def _flush(stream) -> Exception | None:
    """Flush ``stream`` (a closed pipe: see :func:`_drop_output`); what failed otherwise."""
    if stream is None or getattr(stream, "closed", True):
        return None
    try:
        stream.flush()
    except BrokenPipeError:
        _drop_output(stream)
    except (OSError, ValueError) as exc:
        return exc
    return None


def _drop_output(stream) -> None:
    """The reader of ``stream`` has gone: point its file descriptor at /dev/null, so that the buffered rest (and
    a later flush, by the interpreter's own ending) goes nowhere instead of failing again."""
    try:
        fd = stream.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
    except (OSError, ValueError):
        return
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)
    try:
        stream.flush()
    except (OSError, ValueError):
        pass


def _report_unflushed(stream, exc: BaseException) -> None:
    try:
        sys.stderr.write(f"Exception ignored in: {stream!r}\n{type(exc).__name__}: {exc}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _flush_c_stdio() -> None:
    """``fflush(NULL)``: what C code printed with stdio and ``exit()`` would flush (``os._exit`` does not)."""
    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):
        pass


def exit_process(code: int, environ: Mapping[str, str] = os.environ) -> NoReturn:
    """End the command's process with ``code`` (see the module docstring)."""
    if not fast_exit_allowed(environ):
        for stream in (sys.stdout, sys.stderr):  # a closed pipe only: Python's own ending reports other failures
            _flush(stream)
        sys.exit(code)
    finish_background_work()
    threading._shutdown()  # type: ignore[attr-defined]  (the interpreter's first step at exit)
    atexit._run_exitfuncs()
    finish_background_work()
    code = flush_standard_streams(code)
    _flush_c_stdio()
    os._exit(code)

