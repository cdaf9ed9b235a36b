"""Helpers for the edge-tensor tests: compile with the neuron backend and compare with eager, including
NaN positions, dtypes, strides (eager's layout), input mutation and which outputs alias which inputs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from neuroncc.errors import UnsupportedOpError
from neuroncc.testing.fuzz_campaign import available_targets

#: The targets whose backends are in this tree (interp always).
TARGETS = available_targets()[0]

#: Targets that may refuse an edge case with UnsupportedOpError instead of computing it (the contract allows a
#: clear refusal; the NKI target refuses what Trainium's engines cannot do, e.g. integer matmuls, empty tensors).
#: On the others every case here must compile and match.
MAY_REFUSE = frozenset({"nki-sim"})


class Refused(Exception):
    """The compiled function was refused with UnsupportedOpError on a target allowed to refuse."""


def _run_compiled(fn: Callable[..., Any], target: str, *args: Any) -> Any:
    try:
        return compile_neuron(fn, target=target)(*args)
    except Exception as error:
        cause: BaseException | None = error
        while cause is not None and not isinstance(cause, UnsupportedOpError):
            cause = getattr(cause, "inner_exception", None) or cause.__cause__
        if cause is not None and target in MAY_REFUSE:
            raise Refused(str(cause)) from error
        raise


def compile_neuron(fn: Callable[..., Any], **options: Any) -> Callable[..., Any]:
    """``torch.compile(fn, backend="neuron", fullgraph=True, dynamic=False)``: nothing may fall back silently."""
    return torch.compile(fn, backend="neuron", fullgraph=True, dynamic=False, options=options or None)


def clone_like_eager(t: torch.Tensor) -> torch.Tensor:
    """A copy with its own storage and the same sizes, strides and storage offset (stride 0 included)."""
    base = t.detach()
    copy = torch.empty(0, dtype=t.dtype).set_(base.untyped_storage().clone(), base.storage_offset(), base.size(),
                                              base.stride())
    return copy.requires_grad_(t.requires_grad)


def _aliases(outputs: Any, inputs: Sequence[torch.Tensor]) -> list[int | None]:
    """For each output tensor, the index of the input whose storage it shares, or None."""
    storages = [t.untyped_storage().data_ptr() for t in inputs]
    result = []
    for out in tree_leaves(outputs):
        if isinstance(out, torch.Tensor):
            pointer = out.untyped_storage().data_ptr()
            result.append(storages.index(pointer) if pointer in storages and out.numel() else None)
    return result


def _layout_matches(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Strides agree on every dim of size > 1 (a dim of size 1 may have any stride; an empty tensor any)."""
    return want.numel() == 0 or all(size == 1 or a == b for size, a, b in zip(want.shape, got.stride(), want.stride()))


def assert_same(fn: Callable[..., Any], *inputs: torch.Tensor, target: str = "interp", strides: bool = True,
                rtol: float = 1e-5, atol: float = 1e-6) -> Any:
    """Compiled and eager agree: values (NaN where eager has NaN), dtypes, shapes, eager's strides, input
    mutation, and aliasing (an output shares an input's storage exactly when eager's does). A target in
    :data:`MAY_REFUSE` may instead refuse with UnsupportedOpError (then this returns None)."""
    eager_inputs = [clone_like_eager(t) for t in inputs]
    compiled_inputs = [clone_like_eager(t) for t in inputs]
    want = fn(*eager_inputs)
    try:
        got = _run_compiled(fn, target, *compiled_inputs)
    except Refused:
        return None
    torch.testing.assert_close(got, want, equal_nan=True, rtol=rtol, atol=atol)
    torch.testing.assert_close(compiled_inputs, eager_inputs, equal_nan=True, rtol=rtol, atol=atol,
                               msg=lambda m: f"inputs after the call differ: {m}")
    assert _aliases(got, compiled_inputs) == _aliases(want, eager_inputs), "outputs alias inputs differently"
    if strides:
        for g, w in zip(tree_leaves(got), tree_leaves(want)):
            if isinstance(w, torch.Tensor):
                assert _layout_matches(g, w), f"strides {g.stride()} != eager's {w.stride()} for shape {tuple(w.shape)}"
    return got


def assert_same_grads(fn: Callable[..., Any], *inputs: torch.Tensor, target: str = "interp", rtol: float = 1e-5,
                      atol: float = 1e-6) -> None:
    """Forward and gradients (of the sum of the float outputs) agree with eager."""
    results = []
    for compiled in (False, True):
        args = [clone_like_eager(t).requires_grad_(t.is_floating_point()) for t in inputs]
        try:
            out = _run_compiled(fn, target, *args) if compiled else fn(*args)
        except Refused:
            return
        loss = sum(o.sum() for o in tree_leaves(out) if isinstance(o, torch.Tensor) and o.requires_grad)
        wrt = [a for a in args if a.requires_grad]
        grads = torch.autograd.grad(loss, wrt, allow_unused=True)
        results.append((tree_leaves(out), list(grads)))
    (got_out, got_grads), (want_out, want_grads) = results[1], results[0]
    torch.testing.assert_close(got_out, want_out, equal_nan=True, rtol=rtol, atol=atol)
    assert [g is None for g in got_grads] == [g is None for g in want_grads]
    torch.testing.assert_close([g for g in got_grads if g is not None], [g for g in want_grads if g is not None],
                               equal_nan=True, rtol=rtol, atol=atol)


def assert_both_raise(fn: Callable[..., Any], *inputs: torch.Tensor, target: str = "interp") -> None:
    """Where eager raises, the compiled function must raise too (never return a value)."""
    import pytest

    with pytest.raises(Exception):
        fn(*[clone_like_eager(t) for t in inputs])
    with pytest.raises(Exception):
        compile_neuron(fn, target=target)(*[clone_like_eager(t) for t in inputs])
