"""The CPU boundary's call on data pointers (frontend/direct_call.py): taken when no tensor needs converting,
equal to eager, and stepped around per call when a tensor does not have the layout the decision assumed."""

from __future__ import annotations

import pytest
import torch

from frontend import placement_checks
from neuroncc.frontend import direct_call



@pytest.fixture
def direct_calls(monkeypatch):
    """How many calls went through DirectCall on data pointers (returned tensors rather than None)."""
    counts = {"direct": 0, "declined": 0}
    call = direct_call.DirectCall.__call__

    def counting(self, args):
        made = call(self, args)
        counts["direct" if made is not None else "declined"] += 1
        return made

    monkeypatch.setattr(direct_call.DirectCall, "__call__", counting)
    one_output_call = direct_call.DirectCall._one_output_call

    def counting_one_output_call(self, outputs):  # the one-frame form a settled inference graph takes
        call = one_output_call(self, outputs)
        if call is None:
            return None

        def counted(args):
            made = call(args)
            counts["direct" if made is not None else "declined"] += 1
            return made

        return counted

    monkeypatch.setattr(direct_call.DirectCall, "_one_output_call", counting_one_output_call)
    return counts


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))


def test_a_training_step_runs_both_graphs_on_data_pointers_and_matches_eager(compiled_graphs, direct_calls):
    model = _mlp()
    x = torch.randn(4, 16)
    expected = model(x)
    expected.square().mean().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    compiled = torch.compile(model, backend="neuron", dynamic=False)
    for _ in range(2):
        model.zero_grad(set_to_none=True)
        out = compiled(x)
        out.square().mean().backward()
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
        for p, g in zip(model.parameters(), grads):
            torch.testing.assert_close(p.grad, g, rtol=1e-5, atol=1e-5)
    assert compiled_graphs["forward"]._direct is not None and compiled_graphs["backward"]._direct is not None
    assert direct_calls == {"direct": 4, "declined": 0}


def test_in_place_updates_are_written_back(direct_calls):
    def step(p, g):
        p.mul_(0.5).add_(g)
        return p.sum()

    p, g = torch.randn(64), torch.randn(64)
    expected_p, expected_sum = p.clone().mul_(0.5).add_(g), None
    expected_sum = expected_p.sum()
    compiled = torch.compile(step, backend="neuron", dynamic=False)
    total = compiled(p, g)
    torch.testing.assert_close(p, expected_p)
    torch.testing.assert_close(total, expected_sum)
    assert direct_calls["direct"] == 1


def test_bf16_tensors_cross_as_their_bits(compiled_graphs, direct_calls):
    x = torch.randn(8, 32).to(torch.bfloat16)
    fn = torch.compile(lambda t: torch.softmax(t, -1) * 2, backend="neuron", dynamic=False)
    got = fn(x)
    assert got.dtype is torch.bfloat16
    torch.testing.assert_close(got, torch.softmax(x, -1) * 2, rtol=2e-2, atol=2e-2)
    assert direct_calls["direct"] == 1


def test_float64_takes_the_converting_path():
    x = torch.randn(8, 8, dtype=torch.float64)
    with pytest.warns(UserWarning, match="float64"):
        got = torch.compile(lambda t: t.exp() + 1, backend="neuron", dynamic=False)(x)
    assert got.dtype is torch.float64
    torch.testing.assert_close(got, x.exp() + 1, rtol=1e-5, atol=1e-5)


def test_a_call_whose_input_layout_differs_takes_the_numpy_path(compiled_graphs, direct_calls):
    fn = torch.compile(lambda a, b: (a @ b).tanh(), backend="neuron", dynamic=False)
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    fn(a, b)
    graph = next(iter(compiled_graphs.values()))
    assert graph._direct is not None and direct_calls["direct"] == 1
    # the graph called straight with a transposed copy of the same shape (dynamo would recompile for it)
    a_t = a.t().contiguous().t()
    got = graph([a_t, b])
    assert direct_calls["declined"] == 1
    torch.testing.assert_close(got[0], (a @ b).tanh(), rtol=1e-5, atol=1e-5)


def test_later_calls_are_checked_against_the_first_in_cpp_and_in_python_when_they_differ(compiled_graphs,
                                                                                       monkeypatch):
    checked = []
    qualify = direct_call.DirectCall._qualify
    monkeypatch.setattr(direct_call.DirectCall, "_qualify", lambda self, tensors: checked.append(1) or
                        qualify(self, tensors))
    fn = torch.compile(lambda a, b: (a @ b).tanh(), backend="neuron", dynamic=False)
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    for _ in range(3):
        torch.testing.assert_close(fn(a, b), (a @ b).tanh(), rtol=1e-5, atol=1e-5)
    assert len(checked) == 1  # the first call in Python, the next two by TensorGuards
    graph = next(iter(compiled_graphs.values()))
    # another tensor type, or requires_grad, than the first call's: the Python check decides (and takes it)
    got = graph([torch.nn.Parameter(a.clone()), b])
    assert len(checked) == 2
    torch.testing.assert_close(got[0], (a @ b).tanh(), rtol=1e-5, atol=1e-5)
    # a layout the executable does not take: declined by both checks
    assert graph._direct([a.t().contiguous().t(), b]) is None and len(checked) == 3


def test_large_outputs_start_off_their_inputs_modulo_4k(direct_calls):
    """At every 16-byte page offset of the input, the output made on data pointers is not 4K-aliased with
    it (``hardware.host.placement_shift``), is no view (the caller may modify it in place) and is right."""
    from neuroncc.hardware.host import ALIAS_PERIOD_BYTES

    compiled = torch.compile(placement_checks.scaled_plus_one, backend="neuron", dynamic=False)
    placement_checks.check_outputs_off_inputs_modulo_4k(compiled, placement_checks.placement_memory(),
                                                        torch.linspace(-1, 1, placement_checks.COLS))
    assert direct_calls["declined"] == 0 and direct_calls["direct"] == ALIAS_PERIOD_BYTES // 16
