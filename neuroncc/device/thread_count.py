"""The thread count an eager kernel runs on: the calling thread's torch count, decided per call.

A kernel's executable splits its large phases across an OpenMP team of its thread count
(``CpuExecutable.for_threads`` gives the same code, arena and lock on another count). Like CPU eager, the
device follows ``torch.set_num_threads`` of the thread that calls:

* On a user's thread: ``torch.get_num_threads()`` there (libgomp keeps the count per thread; torch's setter
  sets the calling thread's).
* On the autograd engine's thread for the device (a thread torch starts at the first backward through neuron
  tensors, where it runs their backward): torch's count there is the one of that moment and never changes, while
  CPU eager runs a backward on the thread that called ``backward()``, at that thread's count. So there kernels run
  at the count last seen on a user's thread (by a kernel that splits, the only ones that ask: the forward's,
  as a rule).

Only kernels with a phase that would split at some count ask (``CpuExecutable.follows_threads``): small ones
run inline at every count and pay nothing. A kernel keeps one runner per count it has run at, so switching
between forward (user's thread) and backward (engine's thread) or between counts rebinds nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import torch

from neuroncc.executors.cpu.address_call import AddressCall

#: the count last seen on a user's thread (what the engine's thread runs at)
_user_threads = [torch.get_num_threads()]
_DUMMY = getattr(threading, "_DummyThread", ())


class _Thread(threading.local):
    #: whether this thread is an autograd engine thread: None until its first kernel call decides
    engine: bool | None = None


_THIS = _Thread()


def _is_engine_thread() -> bool:
    """A thread torch's autograd engine started (not Python: a dummy thread object) running a backward."""
    return isinstance(threading.current_thread(), _DUMMY) and torch._C._current_graph_task_id() != -1


def kernel_threads(get_num_threads: Any = torch.get_num_threads) -> int:
    """The thread count for a kernel called on this thread (see the module docstring)."""
    engine = _THIS.engine
    if engine is None:
        engine = _THIS.engine = _is_engine_thread()
    if engine:
        return _user_threads[0]
    threads = _user_threads[0] = get_num_threads()
    return threads


def following_runner(executable: Any, runner: Any) -> Any:
    """``run(inputs, outputs)`` (an :class:`AddressCall` runner) on the calling thread's count: ``runner`` is
    ``executable``'s own at its count; another count's is made on first use and kept."""
    runs = {executable.threads: runner}

    def run(inputs: Sequence[int], outputs: Sequence[int]) -> None:
        threads = kernel_threads()
        chosen = runs.get(threads)
        if chosen is None:
            chosen = runs.setdefault(threads, AddressCall(executable.for_threads(threads)).runner())
        chosen(inputs, outputs)

    return run
