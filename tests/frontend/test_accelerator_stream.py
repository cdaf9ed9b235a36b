"""TorchDynamo traces with the ``neuron`` device as PyTorch's accelerator as it does with none
(neuroncc/frontend/accelerator_stream.py): a compiled frame's bytecode no longer fetches and stores the
accelerator's current stream before every call of its graph, and code that asks for the current stream inside a
compiled frame still gives eager's results."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from neuroncc.frontend import backend  # noqa: F401  (installs the change, as the backend's entry point does)
from neuroncc.frontend.accelerator_stream import neuron_is_the_accelerator, untrack_current_stream

_STREAM_NAMES = {"store_user_object_weakrefs", "get_current_stream"}


def _names_before_the_graph(fn) -> set[str]:
    """The global and attribute names the compiled frame's bytecode uses (TorchDynamo's cache entry for it)."""
    entries = torch._dynamo.eval_frame._debug_get_cache_entry_list(fn.__code__)
    assert len(entries) == 1
    return set(entries[0].code.co_names)


def test_neuron_is_pytorchs_accelerator_here():
    # the premise: without it the change has nothing to do and the test below proves nothing
    assert torch.accelerator.is_available() and neuron_is_the_accelerator()


def test_a_compiled_frame_does_not_fetch_the_current_stream_per_call():
    def rmsnorm(x, w):
        return F.rms_norm(x, (x.shape[-1],), w, 1e-6)

    x, w = torch.randn(16, 64), torch.randn(64)
    compiled = torch.compile(rmsnorm, backend="neuron", dynamic=False)
    torch.testing.assert_close(compiled(x, w), rmsnorm(x, w), rtol=1e-5, atol=1e-5)
    names = _names_before_the_graph(rmsnorm)
    assert any(name.startswith("__compiled_fn") for name in names)  # the graph is called from this bytecode
    assert not names & _STREAM_NAMES


def test_dynamos_own_behaviour_is_what_the_change_removes():
    """With Dynamo's stream state as it was, the same frame fetches and stores the stream (so the test above
    fails without the change)."""
    from torch._dynamo.variables import streams

    def rmsnorm(x, w):
        return F.rms_norm(x, (x.shape[-1],), w, 1e-6)

    ours = streams.SymbolicStreamState.__init__
    streams.SymbolicStreamState.__init__ = ours.__wrapped__
    try:
        torch._dynamo.reset()
        compiled = torch.compile(rmsnorm, backend="neuron", dynamic=False)
        x, w = torch.randn(16, 64), torch.randn(64)
        torch.testing.assert_close(compiled(x, w), rmsnorm(x, w), rtol=1e-5, atol=1e-5)
        assert _names_before_the_graph(rmsnorm) & _STREAM_NAMES
    finally:
        streams.SymbolicStreamState.__init__ = ours
        torch._dynamo.reset()
    untrack_current_stream()  # idempotent: still installed once
    assert streams.SymbolicStreamState.__init__ is ours


def test_code_that_asks_for_the_current_stream_inside_a_compiled_frame_gives_eagers_result():
    def uses_the_stream(x):
        y = x * 2
        stream = torch.accelerator.current_stream()
        return y + 1, stream.device.type

    x = torch.randn(8, 8)
    compiled = torch.compile(uses_the_stream, backend="neuron", dynamic=False)
    got, device_type = compiled(x)
    expected, expected_type = uses_the_stream(x)
    torch.testing.assert_close(got, expected)
    assert device_type == expected_type == "neuron"
    with torch.neuron.stream(torch.neuron.Stream()):
        got, _ = compiled(x)
    torch.testing.assert_close(got, expected)
