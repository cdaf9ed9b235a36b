"""Who watches an executable run: the step-tracing hook the executors call, and a timeline recorder.

An executable names each step it runs (a fused kernel, an extern call, a host step) with a :class:`StepInfo`.
Once per call it asks :data:`watching` whether anyone may be watching; when no tracer is installed, or none
is active (``torch.profiler`` off), that is one module attribute read and one C-level call per executable call
(~50 ns), and the steps run exactly as before. An active tracer gets the whole call inside ``tracer.step(graph_info)`` and every step
inside ``tracer.step(step_info)``, so steps nest under their graph.

Tracers are installed by the layers that know who is watching: the front end installs one that opens
``torch.profiler`` ranges (``neuroncc/frontend/profiling.py``: it is the layer allowed to import torch), and
``neuroncc run --trace`` installs a :class:`TimelineRecorder` for one call and writes its Chrome trace.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ContextManager, Protocol

from neuroncc.codegen.llvm.fork_safety import renew_in_child

#: The kinds of step a tracer sees: the whole graph, a compiled kernel, an extern (BLAS/ATen) call, a kernel
#: the reference interpreter runs, a host step (view copies, NKI host programs), an op run by eager PyTorch.
STEP_KINDS = ("graph", "kernel", "extern", "interpreted", "host", "fallback")


@dataclass(frozen=True, slots=True)
class StepInfo:
    """One traced step: ``name`` is what profilers show after ``neuroncc::`` (``fused_3_layer_norm``)."""

    name: str
    kind: str  # one of STEP_KINDS
    graph: str  # the function (graph) the step belongs to
    operands: tuple[tuple[tuple[int, ...], tuple[int, ...], str], ...] = ()  # (shape, strides, dtype) per input
    results: tuple[tuple[tuple[int, ...], tuple[int, ...], str], ...] = ()  # ... per result (bytes written)

    @property
    def label(self) -> str:
        """The profiler range name: ``neuroncc::<kernel>``; graphs ``neuroncc::graph::<name>``; ops run by eager
        PyTorch ``neuroncc::fallback::<op>``."""
        if self.kind in ("graph", "fallback"):
            return f"neuroncc::{self.kind}::{self.name}"
        return f"neuroncc::{self.name}"


class Tracer(Protocol):
    """What an executable reports its steps to."""

    def active(self) -> bool:
        """Whether anyone is watching now (called once per executable call: keep it cheap)."""

    def step(self, info: StepInfo) -> ContextManager[Any]:
        """A context manager around one step (or the whole graph call)."""

    # Optionally ``watching``: a zero-argument callable answering as ``active`` does. A C-level one
    # (``functools.partial(getattr, module, flag)``) lets :data:`watching` answer without a Python frame.


_tracers: tuple[Tracer, ...] = ()
_install_lock = renew_in_child(threading.Lock())

#: Whether any installed tracer may be active now: the executables' per-call check, before
#: :func:`active_tracer`. ``bool`` (False) with no tracer installed; with one, that tracer's ``watching`` (or
#: ``active``); a C-level callable in the common cases, so an unwatched call pays one call of ~50 ns.
watching: Callable[[], bool] = bool


def _any_active() -> bool:
    return active_tracer() is not None


def _refresh() -> None:
    global watching
    if not _tracers:
        watching = bool
    elif len(_tracers) == 1:
        watching = getattr(_tracers[0], "watching", None) or _tracers[0].active
    else:
        watching = _any_active


def install(tracer: Tracer) -> None:
    """Add ``tracer`` (once; installing it again does nothing). The first active tracer sees the steps."""
    global _tracers
    with _install_lock:
        if tracer not in _tracers:
            _tracers = (tracer, *_tracers)
            _refresh()


def uninstall(tracer: Tracer) -> None:
    global _tracers
    with _install_lock:
        _tracers = tuple(t for t in _tracers if t is not tracer)
        _refresh()


@contextlib.contextmanager
def installed(tracer: Tracer) -> Iterator[Tracer]:
    """``with installed(recorder): exe(*inputs)``: the tracer sees the calls made inside the block."""
    install(tracer)
    try:
        yield tracer
    finally:
        uninstall(tracer)


def active_tracer() -> Tracer | None:
    """The tracer that should see this call, or None (the common case: run untraced)."""
    for tracer in _tracers:
        if tracer.active():
            return tracer
    return None


def traced_steps(tracer: Tracer, steps: Sequence[Callable[..., Any]],
                 infos: Sequence[StepInfo]) -> list[Callable[..., Any]]:
    """``steps`` (callables of one executable) each wrapped in ``tracer.step(info)``."""
    def wrap(run: Callable[..., Any], info: StepInfo) -> Callable[..., Any]:
        def traced(*args: Any) -> Any:
            with tracer.step(info):
                return run(*args)
        return traced
    return [wrap(run, info) for run, info in zip(steps, infos, strict=True)]


@dataclass(frozen=True, slots=True)
class TimedStep:
    """One recorded step: when it started and how long it took (microseconds from the recorder's start)."""

    info: StepInfo
    start_us: float
    duration_us: float
    thread: int


class TimelineRecorder:
    """A tracer that records the wall-clock time of every step while installed (``neuroncc run --trace``).

    ``chrome_trace()`` turns what it recorded into the Chrome trace-event format (Perfetto and
    chrome://tracing open it): one thread per Python thread that ran steps, graphs enclosing their steps.
    """

    def __init__(self) -> None:
        self.origin = time.perf_counter()
        self.steps: list[TimedStep] = []
        self._lock = renew_in_child(threading.Lock())

    def active(self) -> bool:
        return True

    @contextlib.contextmanager
    def step(self, info: StepInfo) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            end = time.perf_counter()
            with self._lock:
                self.steps.append(TimedStep(info, (start - self.origin) * 1e6, (end - start) * 1e6,
                                            threading.get_ident()))

    def chrome_trace(self, process_name: str = "neuroncc") -> dict[str, Any]:
        pid = os.getpid()
        threads = {thread: number for number, thread in enumerate(dict.fromkeys(s.thread for s in self.steps))}
        events: list[dict[str, Any]] = [{"name": "process_name", "ph": "M", "pid": pid, "args": {"name": process_name}}]
        events += [{"name": "thread_name", "ph": "M", "pid": pid, "tid": number,
                    "args": {"name": "host" if number == 0 else f"host thread {number}"}}
                   for number in threads.values()]
        for step in sorted(self.steps, key=lambda s: (s.start_us, -s.duration_us)):
            args: dict[str, Any] = {"graph": step.info.graph, "kind": step.info.kind}
            if step.info.operands:
                args["Input Dims"] = [list(shape) for shape, _, _ in step.info.operands]
                args["Input type"] = [dtype for _, _, dtype in step.info.operands]
            events.append({"name": step.info.label, "cat": step.info.kind, "ph": "X", "pid": pid,
                           "tid": threads[step.thread], "ts": step.start_us, "dur": step.duration_us, "args": args})
        return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"source": "neuroncc measured CPU timeline"}}


__all__ = ["STEP_KINDS", "StepInfo", "TimedStep", "TimelineRecorder", "Tracer", "active_tracer", "install",
           "installed", "traced_steps", "uninstall", "watching"]
