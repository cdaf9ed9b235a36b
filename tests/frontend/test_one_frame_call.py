"""The lean call's one-frame form (``DirectCall.outputs_call``, taken by ``CompiledGraph._lean`` once the code is
final): for a one-output inference graph, the same checks, outputs, placement and errors as the call through
``DirectCall.__call__`` and ``launch`` it replaces, and the slow path whenever something is not settled."""

from __future__ import annotations

import pytest
import torch

from frontend import placement_checks
from neuroncc.frontend import direct_call


@pytest.fixture
def full_calls(monkeypatch):
    """How many calls went through ``DirectCall.__call__`` (the call before the one-frame form)."""
    return _counting(monkeypatch, direct_call.DirectCall, "__call__")


def _counting(monkeypatch, cls, name):
    """``{"calls": n}``: how many calls method ``cls.name`` has had since (it still runs)."""
    counts = {"calls": 0}
    method = getattr(cls, name)

    def counting(self, args):
        counts["calls"] += 1
        return method(self, args)

    monkeypatch.setattr(cls, name, counting)
    return counts


def _settled(fn, *args):
    """``fn`` called until its graph runs its final code (the optimized builds taken)."""
    import neuroncc.executors.cpu.tiers as tiers

    fn(*args)
    tiers.OPTIMIZER.wait()
    fn(*args)
    fn(*args)


def test_a_settled_one_output_graph_takes_the_one_frame_call_with_fresh_outputs(compiled_graphs, full_calls):
    f = lambda x, w: torch.nn.functional.rms_norm(x, (x.shape[-1],), w, 1e-6)  # noqa: E731
    x, w = torch.randn(64, 256), torch.randn(256)
    compiled = torch.compile(f, backend="neuron", dynamic=False)
    _settled(compiled, x, w)
    graph = compiled_graphs["inference"]
    assert graph._fast is not None and graph._fast is graph._direct.outputs_call
    before = full_calls["calls"]
    first, second = compiled(x, w), compiled(x, w)
    assert full_calls["calls"] == before  # neither went through DirectCall.__call__
    torch.testing.assert_close(first, f(x, w), rtol=1e-5, atol=1e-5)
    assert torch.equal(first, second) and first.data_ptr() != second.data_ptr()
    assert first._base is None and first.is_contiguous()


def test_a_call_the_checks_decline_still_runs_the_slow_path(compiled_graphs, full_calls):
    fn = torch.compile(lambda a: a.tanh() * 2.0, backend="neuron", dynamic=False)
    a = torch.randn(32, 64)
    _settled(fn, a)
    graph = compiled_graphs["inference"]
    assert graph._fast is not None
    # the graph's lean call straight with a layout the executable does not take: declined (None), not run
    assert graph.lean_call([a.t().contiguous().t()]) is None
    assert graph.lean_call([a.double()]) is None
    # a tensor of another type than the first call's: the Python check decides and takes it
    got = graph.lean_call([torch.nn.Parameter(a.clone(), requires_grad=False)])
    torch.testing.assert_close(got[0], a.tanh() * 2.0)


@pytest.mark.parametrize("distances", [range(1, 256), range(0, 1024)], ids=["zen3", "zen4"])
def test_large_outputs_of_the_one_frame_call_start_off_their_inputs_modulo_4k(compiled_graphs, full_calls,
                                                                             distances, monkeypatch):
    """At every 16-byte page offset of the input the output is not 4K-aliased with it or the weight, is no view
    and is right: the placement of ``_placed``, checked inline, with Zen 3's distances and with a wider window
    (Zen 4's 0 to 1023 of session 34), as ``host.aliased_distances`` gives them, read when the call is made."""
    from neuroncc.hardware import host

    monkeypatch.setattr(host, "aliased_distances", lambda: distances)
    torch._dynamo.reset()
    memory, w = placement_checks.placement_memory(), torch.linspace(-1, 1, placement_checks.COLS)
    compiled = torch.compile(placement_checks.scaled_plus_one, backend="neuron", dynamic=False)
    _settled(compiled, placement_checks.input_at(memory, 0), w)
    assert compiled_graphs["inference"]._fast is not None
    before = full_calls["calls"]
    placement_checks.check_outputs_off_inputs_modulo_4k(compiled, memory, w)
    assert full_calls["calls"] == before


def test_a_thread_count_change_leaves_the_one_frame_call_and_follows(compiled_graphs):
    fn = torch.compile(lambda a: a.exp() + 1.0, backend="neuron", dynamic=False)
    a = torch.randn(128, 128)
    threads = torch.get_num_threads()
    try:
        _settled(fn, a)
        graph = compiled_graphs["inference"]
        assert graph._fast is not None
        other = 1 if threads != 1 else 2
        torch.set_num_threads(other)  # (TorchDynamo's global-state guard recompiles fn: the graph called as is)
        torch.testing.assert_close(graph.lean_call([a])[0], a.exp() + 1.0)
        assert graph._threads == other and graph._fast is not None and graph._fast is graph._direct.outputs_call
    finally:
        torch.set_num_threads(threads)


def test_a_settled_graph_is_entered_in_one_frame_without_the_lean_method(monkeypatch, compiled_graphs):
    """Session 24: the callable TorchDynamo calls (``CompiledGraph.lean_entry``) makes ``_lean``'s settled check
    itself, so a settled call enters no ``CompiledGraph._lean`` frame; an unsettled one (the first calls, a
    thread-count change) still goes through it, and a declined call still runs AOTAutograd's runtime."""
    from neuroncc.frontend import compiled as compiled_module

    lean_calls = _counting(monkeypatch, compiled_module.CompiledGraph, "_lean")
    f = lambda x, w: torch.nn.functional.rms_norm(x, (x.shape[-1],), w, 1e-6)  # noqa: E731
    x, w = torch.randn(64, 256), torch.randn(256)
    compiled = torch.compile(f, backend="neuron", dynamic=False)
    _settled(compiled, x, w)
    assert lean_calls["calls"] >= 1 and compiled_graphs["inference"]._fast is not None
    before = lean_calls["calls"]
    outputs = [compiled(x, w) for _ in range(3)]
    assert lean_calls["calls"] == before  # no _lean frame once settled
    for out in outputs:
        torch.testing.assert_close(out, f(x, w), rtol=1e-5, atol=1e-5)
    assert len({out.data_ptr() for out in outputs}) == 3
    graph = compiled_graphs["inference"]
    threads = torch.get_num_threads()
    try:  # the graph's own thread count changed under it: the entry leaves the settled call for _lean
        graph._threads = -1
        torch.testing.assert_close(compiled(x, w), f(x, w), rtol=1e-5, atol=1e-5)
        assert lean_calls["calls"] == before + 1 and graph._threads == threads
    finally:
        torch.set_num_threads(threads)
