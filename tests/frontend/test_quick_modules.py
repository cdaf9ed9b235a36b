"""torch.compile's graphs start their tier-independent kernels at LLVM's quick tier (quick_first="modules",
executors/cpu/tiers.py) and a graph's calls take the optimized build once it is done: same results, same
outputs and strides, the optimized code run from then on."""

from __future__ import annotations

import torch

from neuroncc.executors.cpu import tiers
from neuroncc.frontend.aten_compiler import graph_compile_options
from neuroncc.frontend.options import BackendOptions




def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.SiLU(), torch.nn.Linear(32, 8), torch.nn.Sigmoid())


def test_a_graph_runs_quick_code_first_then_the_optimized_build(compiled_graphs):
    graphs = compiled_graphs
    model = _model()
    x = torch.randn(64, 16)
    with torch.no_grad():
        expected = model(x)
        run = torch.compile(model, backend="neuron", dynamic=False)
        first = run(x)
    compiled = graphs["inference"]
    quick = compiled.executable
    assert quick.optimized is not None, "sigmoid/SiLU kernels are tier independent: they start quick"
    assert compiled._direct is not None
    tiers.OPTIMIZER.wait()
    with torch.no_grad():
        second = run(x)
    assert compiled.executable is quick.optimized.result() and compiled.executable.optimized is None
    assert compiled._direct.executable is compiled.executable  # the call on data pointers runs the new code too
    torch.testing.assert_close(first, expected)
    assert torch.equal(first, second) and first.stride() == second.stride()


def test_a_training_step_on_quick_code_matches_eager(compiled_graphs):
    graphs = compiled_graphs
    eager, ours = _model(), _model()
    x = torch.randn(64, 16)
    eager(x).square().mean().backward()
    run = torch.compile(ours, backend="neuron", dynamic=False)
    run(x).square().mean().backward()
    assert graphs["forward"].executable.optimized is not None
    for p, q in zip(eager.parameters(), ours.parameters()):
        torch.testing.assert_close(q.grad, p.grad)


def test_the_users_quick_first_and_other_targets_are_left_alone():
    default = BackendOptions.from_user({}, {})
    assert graph_compile_options(default)["quick_first"] == "modules"
    assert graph_compile_options(BackendOptions.from_user({"quick_first": False}, {}))["quick_first"] is False
    assert "quick_first" not in graph_compile_options(BackendOptions.from_user({"target": "interp"}, {}))
