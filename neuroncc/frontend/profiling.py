"""neuroncc in ``torch.profiler``: every graph, kernel launch, extern call and fallback op as a named range.

    with torch.profiler.profile(record_shapes=True) as prof:
        compiled(x)
    prof.key_averages(group_by_input_shape=True)   # neuroncc::fused_3_layer_norm, neuroncc::mm_4, ...
    prof.export_chrome_trace("trace.json")         # Perfetto: kernels nested under neuroncc::graph::g0_1_forward

The executors report their steps to a :class:`~neuroncc.executors.tracing.Tracer` (they may not import
torch); :class:`TorchProfilerTracer` is the one the front end installs. It is active only while a profiler
runs (``torch.autograd.profiler._is_profiler_enabled``, the flag Inductor's kernel launches check too), so
with no profiler a call costs one flag read. Ranges are ``_RecordFunctionFast`` (what Inductor uses for its
kernels); their inputs are meta tensors of the step's operand shapes, strides and dtypes, built once per step,
which ``record_shapes=True`` turns into the event's input shapes. Ops that run on eager PyTorch in fallback mode
get a ``neuroncc::fallback::<op>`` range around their ATen call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch.autograd import profiler as autograd_profiler

from neuroncc.executors import tracing
from neuroncc.executors.tracing import StepInfo
from neuroncc.ir.dtypes import DType

_TORCH_DTYPES = {DType.f32.value: torch.float32, DType.bf16.value: torch.bfloat16, DType.f16.value: torch.float16,
                 DType.i64.value: torch.int64, DType.i32.value: torch.int32, DType.i16.value: torch.int16,
                 DType.i8.value: torch.int8, DType.u8.value: torch.uint8, DType.bool.value: torch.bool}


@functools.lru_cache(maxsize=4096)
def _meta_inputs(info: StepInfo) -> tuple[torch.Tensor, ...]:
    """Meta tensors with the step's operand shapes, strides and dtypes (what record_shapes records)."""
    tensors = []
    for shape, strides, dtype in info.operands:
        torch_dtype = _TORCH_DTYPES.get(dtype, torch.float32)
        if strides and len(strides) == len(shape):
            tensors.append(torch.empty_strided(shape, strides, dtype=torch_dtype, device="meta"))
        else:
            tensors.append(torch.empty(shape, dtype=torch_dtype, device="meta"))
    return tuple(tensors)


class TorchProfilerTracer:
    """Opens a ``torch.profiler`` range per traced step while a profiler is running."""

    def __init__(self) -> None:
        # torch.autograd.profiler's own flag, which every profiler start/stop sets: read by a C-level call
        self.watching = functools.partial(getattr, autograd_profiler, "_is_profiler_enabled")

    def active(self) -> bool:
        return autograd_profiler._is_profiler_enabled

    def step(self, info: StepInfo) -> Any:
        return torch._C._profiler._RecordFunctionFast(info.label, _meta_inputs(info),
                                                      {"neuroncc_kind": info.kind, "neuroncc_graph": info.graph})


TRACER = TorchProfilerTracer()


def ensure_installed() -> None:
    """Install :data:`TRACER` (idempotent); the front end calls it when it binds a compiled graph."""
    tracing.install(TRACER)


def graph_range(forward: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``forward`` (a graph run partly on eager PyTorch) inside a ``neuroncc::graph::<name>`` range (of the
    active tracer: torch.profiler's, or a timeline recorder)."""
    info = StepInfo(name, "graph", name)

    @functools.wraps(forward)
    def run(*args: Any, **kwargs: Any) -> Any:
        tracer = tracing.active_tracer()
        if tracer is None:
            return forward(*args, **kwargs)
        with tracer.step(info):
            return forward(*args, **kwargs)
    return run


class FallbackCounter:
    """Calls of ops run on eager PyTorch (fallback), by op name: ``neuroncc.evaluate`` reports them."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    def reset(self) -> None:
        self.calls.clear()


FALLBACK_CALLS = FallbackCounter()


def fallback_call(op: Callable[..., Any], name: str, graph: str) -> Callable[..., Any]:
    """``op`` (an ATen op a partitioned graph runs eagerly) counted per call, and inside a
    ``neuroncc::fallback::<name>`` range while a tracer is active (torch.profiler, a timeline recorder). A
    plain function, so FX code can call it."""
    info = StepInfo(name, "fallback", graph)
    calls = FALLBACK_CALLS.calls

    def run(*args: Any, **kwargs: Any) -> Any:
        calls[name] = calls.get(name, 0) + 1
        tracer = tracing.active_tracer()
        if tracer is None:
            return op(*args, **kwargs)
        with tracer.step(info):
            return op(*args, **kwargs)

    run.__name__ = run.__qualname__ = "fallback_" + "".join(c if c.isalnum() else "_" for c in name)
    run.__wrapped__ = op  # type: ignore[attr-defined]
    return run


__all__ = ["FALLBACK_CALLS", "TRACER", "TorchProfilerTracer", "ensure_installed", "fallback_call", "graph_range"]
