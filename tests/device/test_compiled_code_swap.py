"""A torch.compile graph on neuron tensors runs the executable its CompiledGraph runs: the optimized build once the
graph has taken it over its quick code (executors/cpu/tiers.py), as a graph on CPU tensors does. Until session 48
the device's binding, made at the graph's first call, kept the quick code for the rest of the process: on a cold
compile cache the bf16 autocast MLP forward of benchmarks/bench_device_interleave.py took 1.7-2x the time of the same
graph on CPU tensors."""

from __future__ import annotations

import torch

from neuroncc.executors.cpu import tiers


def _model(device: str) -> torch.nn.Module:
    # shapes of this file's own: a graph no other test compiles, so the process's compile cache holds no
    # optimized build of it and its kernels start at the quick tier
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(24, 40), torch.nn.SiLU(), torch.nn.Linear(40, 12),
                               torch.nn.Sigmoid()).to(device)


def test_a_graph_on_neuron_tensors_runs_the_optimized_build_once_taken(compiled_graphs, fresh_dynamo):
    model = _model("neuron")
    x = torch.randn(48, 24).to("neuron")
    with torch.no_grad():
        expected = _model("cpu")(x.cpu())
        run = torch.compile(model, backend="neuron", dynamic=False)
        first = run(x)
    compiled = compiled_graphs["inference"]
    quick = compiled.executable
    assert quick.optimized is not None, "sigmoid/SiLU kernels are tier independent: they start quick"
    quick_binding = compiled._neuron_binding
    tiers.OPTIMIZER.wait()
    with torch.no_grad():
        second = run(x)
    optimized = quick.optimized.result()
    assert compiled.executable is optimized
    assert compiled._neuron_binding is not quick_binding, "the device still calls the quick code"
    assert compiled._neuron_binding.executable is optimized
    torch.testing.assert_close(first.cpu(), expected)
    assert second.device.type == "neuron" and torch.equal(first.cpu(), second.cpu())


def test_a_training_step_on_neuron_tensors_runs_both_optimized_builds(compiled_graphs, fresh_dynamo):
    model = _model("neuron")
    x = torch.randn(48, 24).to("neuron")
    run = torch.compile(model, backend="neuron", dynamic=False)
    run(x).square().mean().backward()
    forward, backward = compiled_graphs["forward"], compiled_graphs["backward"]
    assert forward.executable.optimized is not None
    tiers.OPTIMIZER.wait()
    grads = [p.grad.cpu() for p in model.parameters()]
    model.zero_grad()
    run(x).square().mean().backward()
    for graph in (forward, backward):
        assert graph.executable.optimized is None, "the optimized build is taken"
        assert graph._neuron_binding.executable is graph.executable
    for p, expected in zip(model.parameters(), grads):
        assert torch.equal(p.grad.cpu(), expected)
