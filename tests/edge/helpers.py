"""Helpers for the edge-tensor tests: compile with the neuron backend, compare with eager exactly as eager."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def compile_neuron(fn: Callable[..., Any], **options: Any) -> Callable[..., Any]:
    """``torch.compile(fn, backend="neuron", fullgraph=True, dynamic=False)``: nothing may fall back silently."""
    return torch.compile(fn, backend="neuron", fullgraph=True, dynamic=False, options=options or None)


def clone_like_eager(t: torch.Tensor) -> torch.Tensor:
    """A copy with its own storage and the same sizes, strides and storage offset (stride 0 included)."""
    copy = torch.empty(0, dtype=t.dtype).set_(t.untyped_storage().clone(), t.storage_offset(), t.size(), t.stride())
    return copy.requires_grad_(t.requires_grad)


def run_both(fn: Callable[..., Any], *inputs: torch.Tensor, **options: Any) -> tuple[Any, Any, list, list]:
    """(compiled result, eager result, compiled's inputs after the call, eager's) on separate input copies."""
    eager_inputs = [clone_like_eager(t) for t in inputs]
    compiled_inputs = [clone_like_eager(t) for t in inputs]
    want = fn(*eager_inputs)
    got = compile_neuron(fn, **options)(*compiled_inputs)
    return got, want, compiled_inputs, eager_inputs


def assert_same(fn: Callable[..., Any], *inputs: torch.Tensor, **options: Any) -> Any:
    """Compiled and eager agree on results (NaN where eager has NaN, dtypes and shapes) and on input mutation."""
    got, want, got_inputs, want_inputs = run_both(fn, *inputs, **options)
    torch.testing.assert_close(got, want, equal_nan=True, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got_inputs, want_inputs, equal_nan=True, rtol=1e-5, atol=1e-6)
    return got
