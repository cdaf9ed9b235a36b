"""The work object a ``neuron`` collective returns: gloo's work(s) on the host tensors, then the finishing step
(AVG's division, staged outputs copied back) exactly once, whichever of ``wait()`` or the future sees the
completion first. Failures become :class:`~neuroncc.errors.CollectiveError` naming the operation and rank."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch.futures import Future

from neuroncc.errors import CollectiveError
from neuroncc.codegen.llvm.fork_safety import renew_in_child


def explain(what: str, where: str, error: BaseException, timeout: timedelta | None) -> CollectiveError:
    """A CollectiveError for gloo's ``error``, saying what probably happened."""
    text = " ".join(str(error).split())
    text = re.sub(r"\[[^\]]*\.(cc|cpp|h):\d+\] ", "", text)  # gloo's source location
    text = text.split(" This is typically caused", 1)[0]
    lowered = text.lower()
    if "timed out" in lowered or "timeout" in lowered:
        hint = (f"it did not complete within the group's timeout ({timeout.total_seconds():g} s): a peer is "
                "stuck, died, or never called the same collective") if timeout else "it timed out"
    elif "closed" in lowered or "reset by peer" in lowered or "broken pipe" in lowered or "eof" in lowered:
        hint = "a peer closed its connection (did another rank die or exit?)"
    else:
        hint = "the transport failed"
    return CollectiveError(f"{where}: {what} failed: {hint} ({text})")


class NeuronWork(dist.Work):
    """Completion of one operation made of zero or more gloo works. ``result`` is what the future yields (the
    caller's tensors, not the host views gloo saw)."""

    def __init__(self, works: Sequence[dist.Work], finish: Callable[[], None], result: list[torch.Tensor],
                 what: str, where: str, timeout: timedelta | None):
        super().__init__()
        self._works = list(works)
        self._finish = finish
        self._result = result
        self._what, self._where, self._timeout = what, where, timeout
        self._finished = False
        self._error: CollectiveError | None = None
        self._lock = renew_in_child(threading.Lock())

    def _finish_once(self) -> None:
        with self._lock:
            if not self._finished:
                self._finished = True
                self._finish()

    def wait(self, timeout: timedelta = timedelta(0)) -> bool:
        if self._error is not None:
            raise self._error
        try:
            for work in self._works:
                work.wait(timeout)
        except Exception as exc:  # gloo reports every transport problem as a RuntimeError
            self._error = explain(self._what, self._where, exc, timeout or self._timeout)
            raise self._error from None
        self._finish_once()
        return True

    def is_completed(self) -> bool:
        return all(work.is_completed() for work in self._works)

    def is_success(self) -> bool:
        return self._error is None and all(work.is_success() for work in self._works)

    def exception(self) -> Any:
        return self._error

    def result(self) -> list[torch.Tensor]:
        return self._result

    def get_future(self) -> Future:
        futures = [work.get_future() for work in self._works]

        def done(_: Future) -> list[torch.Tensor]:
            try:
                for future in futures:
                    future.wait()
            except Exception as exc:
                raise explain(self._what, self._where, exc, self._timeout) from None
            self._finish_once()
            return self._result

        if not futures:
            self._finish_once()
            future: Future = Future()
            future.set_result(self._result)
            return future
        return torch.futures.collect_all(futures).then(done)


def completed(result: list[torch.Tensor], what: str, where: str) -> NeuronWork:
    """A work with nothing to wait for (a group of one, a coalescing block's end)."""
    return NeuronWork([], lambda: None, result, what, where, None)
