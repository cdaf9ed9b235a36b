"""FX tracing from several Python threads: one process-wide lock, and a ``make_fx`` that leaves no state to others.

torch.fx (torch 2.13) keeps its tracing state per process, not per thread:

* ``torch.fx._symbolic_trace._is_fx_tracing_flag``, set by every ``Tracer.trace``. A ``torch.compile``'d function
  called on another thread while it is set raises "Detected that you are using FX to symbolically trace a
  dynamo-optimized function" (unless a TorchDynamo compile is under way somewhere: it sets
  ``torch.compiler.is_compiling()``, also process-wide, which masks the flag). Two traces that overlap restore
  each other's old value, and the flag can stay set for good: every compiled call of the process fails after.
* ``CURRENT_PATCHER`` and the patches of ``nn.Module.__call__`` / ``__getattr__`` it makes for a trace: two
  overlapping traces fail (``AssertionError: CURRENT_PATCHER is None in finally block``) or leave a stale patch
  behind, and TorchDynamo tracing a module on another thread meanwhile traces the patch itself (its guard on
  the patcher fails: "Guard failed on the same frame it was created").
* ``proxy_tensor._CURRENT_MAKE_FX_TRACER``, which higher-order ops re-enter.

(Upstream PyTorch is moving these into thread-local state, pytorch/pytorch#168999 and #187589.) neuroncc traces
outside TorchDynamo's own compiles in two places: the ``neuron`` device traces an op signature it meets first
(``neuroncc/device/programs.py``), and a graph with symbolic sizes compiles a new shape at call time
(``specializations.py``). So:

* :func:`exclusive` serializes those traces with TorchDynamo's compiles: it holds TorchDynamo's own
  ``compile_lock`` (an RLock TorchDynamo holds around each frame's compile, AOTAutograd's trace included);
* :func:`compiling` is that plus TorchDynamo's compile session (``torch.compiler.is_compiling()``), which a
  call-time compile needs exactly as a TorchDynamo recompile does: AOTAutograd's trace sets the flag above;
* :func:`make_fx_here` is ``make_fx`` whose tracer sets no flag and patches no module (its functions call no
  ``nn.Module``): the device's traces, which can run beside compiled calls on other threads.

Lock order (a thread holding one may take only those below it; none of them waits for another thread's work):

1. TorchDynamo's ``compile_lock`` (:func:`exclusive`; TorchDynamo's compiles).
2. ``ShapeSpecializations._lock`` (one per graph with symbolic sizes).
3. ``neuroncc.device.build_lock.LOCK``: the device's handlers and signature entries (taken alone, without 1,
   by a first call that traces nothing while TorchDynamo is not imported: ``device/build_lock.py``).
4. Leaf locks, held for a dictionary update or one kernel call and taking nothing else: a kernel's scratch
   lock (``device/kernels.py``), an executable's arena lock, the process cache's, the compile cache writer's
   queue, the helpers' and the optimizer tier's (``executors/cpu``).

Calls of kernels already compiled take none of 1-3. The autograd engine's threads never wait for 1: AOTAutograd
traces a backward of fake tensors on the engine thread of their device while the compiling thread holds the
lock and waits for that backward, and a device op met there (a fake tensor's fallback kernel runs on real
device memory) would deadlock; on an engine thread :func:`exclusive` takes the lock only when it is free (the
device's trace is :func:`make_fx_here`'s, which leaves no flag or patch to the thread holding it).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
import torch.fx as fx
from torch.fx.experimental.proxy_tensor import PythonKeyTracer, _MakefxTracer

_DUMMY_THREAD = getattr(threading, "_DummyThread", ())


def _compile_lock() -> Any:
    from torch._dynamo.convert_frame import compile_lock  # imported with the first trace (torch._dynamo is by then)

    return compile_lock


def on_engine_thread() -> bool:
    """Whether this is a thread torch's autograd engine started (no Python thread object), running a backward."""
    return isinstance(threading.current_thread(), _DUMMY_THREAD) and torch._C._current_graph_task_id() != -1


@contextlib.contextmanager
def exclusive() -> Iterator[None]:
    """No TorchDynamo compile and no other neuroncc trace runs meanwhile (see the module docstring, and its
    exception for the autograd engine's threads)."""
    lock = _compile_lock()
    held = lock.acquire(blocking=not on_engine_thread())
    try:
        yield
    finally:
        if held:
            lock.release()


@contextlib.contextmanager
def compiling() -> Iterator[None]:
    """A compile outside TorchDynamo's (a call-time specialization) as TorchDynamo runs its own: under its lock,
    in its compile session."""
    with exclusive(), torch.compiler._compile_session_context():
        yield


class _HereTracer(PythonKeyTracer):
    """make_fx's tracer, less ``Tracer.trace``'s process-wide state: no tracing flag, no patcher (the
    functions traced call aten ops, never an ``nn.Module``, whose calls the patcher would record)."""

    def trace(self, root: Any, concrete_args: Any = None) -> fx.Graph:  # type: ignore[override]
        self.root = torch.nn.Module()
        self.graph = fx.Graph(tracer_cls=type(self))
        self.tensor_attrs = {}
        fn, args = self.create_args_for_root(root, False, concrete_args)
        self.create_node("output", "output", (self.create_arg(fn(*args)),), {})
        self.submodule_paths = None
        return self.graph


class _MakefxHere(_MakefxTracer):
    def _construct_modes_with_fx_tracer(self, fx_tracer: Any) -> None:
        if type(fx_tracer) is PythonKeyTracer:  # the one make_fx just made for this trace
            here = _HereTracer()
            here.record_stack_traces = fx_tracer.record_stack_traces
            self.fx_tracer = fx_tracer = here
        super()._construct_modes_with_fx_tracer(fx_tracer)


def make_fx_here(fn: Callable[..., Any],
                 decomposition_table: Mapping[Any, Callable[..., Any]]) -> Callable[..., fx.GraphModule]:
    """``make_fx(fn, decomposition_table)`` (real tracing mode: the caller's fake tensors) whose trace other
    threads do not see (see the module docstring)."""
    tracer = _MakefxHere(decomposition_table, "real", False, False, False, False, True)

    def traced(*args: Any) -> fx.GraphModule:
        return tracer.trace(fn, *args)

    return traced
