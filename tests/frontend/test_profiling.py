"""neuroncc's kernels in torch.profiler: named ranges with input shapes, nested under their graph, in Chrome
traces; fallback ops as ranges of their own; nothing recorded while no profiler runs."""

from __future__ import annotations

import json

import torch
import torch.nn as nn

import neuroncc  # noqa: F401
from neuroncc.executors import tracing
from neuroncc.frontend.profiling import TRACER, ensure_installed


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.norm, self.fc2 = nn.Linear(16, 32), nn.LayerNorm(32), nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.norm(self.fc1(x)))).softmax(-1)


def _ancestors(event):
    parent = event.cpu_parent
    while parent is not None:
        yield parent
        parent = parent.cpu_parent


def test_kernels_appear_by_name_with_shapes_under_their_graph(tmp_path):
    model = Block()
    compiled = torch.compile(model, backend="neuron", dynamic=False)
    x = torch.randn(8, 16)
    with torch.no_grad():
        compiled(x)  # compile outside the profile
        with torch.profiler.profile(record_shapes=True) as prof:
            compiled(x)
    events = [e for e in prof.events() if e.name.startswith("neuroncc::")]
    names = {e.name for e in events}
    graphs = [e for e in events if e.name.startswith("neuroncc::graph::")]
    assert len(graphs) == 1 and graphs[0].name.endswith("_inference"), names
    kernels = [e for e in events if not e.name.startswith("neuroncc::graph::")]
    assert any("layer_norm" in e.name for e in kernels), names
    assert any("softmax" in e.name for e in kernels), names
    for kernel in kernels:
        assert graphs[0] in list(_ancestors(kernel)), f"{kernel.name} is not nested under the graph range"
    norm = next(e for e in kernels if "layer_norm" in e.name)
    assert [8, 32] in norm.input_shapes, norm.input_shapes  # the layer norm reads fc1's [8, 32] output
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    document = json.loads(trace.read_text())
    traced = {e["name"]: e for e in document["traceEvents"] if e.get("name", "").startswith("neuroncc::")}
    assert norm.name in traced and traced[norm.name]["ph"] == "X"
    assert [8, 32] in traced[norm.name]["args"]["Input Dims"]


def test_backward_kernels_are_profiled_too():
    compiled = torch.compile(Block(), backend="neuron", dynamic=False)
    x = torch.randn(8, 16)
    compiled(x).sum().backward()
    with torch.profiler.profile() as prof:
        compiled(x).square().sum().backward()
    graphs = {e.name for e in prof.events() if e.name.startswith("neuroncc::graph::")}
    assert any(g.endswith("_forward") for g in graphs) and any(g.endswith("_backward") for g in graphs), graphs


def test_no_profiler_no_ranges_and_tracer_inactive():
    compiled = torch.compile(Block(), backend="neuron", dynamic=False)
    x = torch.randn(8, 16)
    compiled(x)
    assert TRACER in tracing._tracers
    assert tracing.active_tracer() is None  # the launcher then runs its plain step list
    assert not tracing.watching()
    with torch.profiler.profile():
        assert tracing.watching() and tracing.active_tracer() is TRACER
    assert tracing.active_tracer() is None and not tracing.watching()


def test_the_per_call_check_has_no_python_frame_and_follows_every_tracer():
    """``tracing.watching`` is what every executable call asks first: a C-level callable when one tracer (or
    none) is installed, and with two it asks both."""
    import types

    ensure_installed()  # as binding any compiled graph does
    assert not isinstance(tracing.watching, types.FunctionType | types.MethodType)  # no Python frame per call
    recorder = tracing.TimelineRecorder()
    with tracing.installed(recorder):
        assert tracing.watching()  # a recorder is always active: the two-tracer check asks it too
    assert not tracing.watching()
    saved = tracing._tracers
    try:
        for tracer in saved:
            tracing.uninstall(tracer)
        assert tracing.watching is bool and not tracing.watching()
    finally:
        for tracer in reversed(saved):
            tracing.install(tracer)


@torch.library.custom_op("neuroncc_profiling::running_total", mutates_args=())
def running_total(x: torch.Tensor, dim: int) -> torch.Tensor:
    return torch.cumsum(x, dim=dim)


@running_total.register_fake
def _(x, dim):
    return torch.empty_like(x)


def test_fallback_ops_appear_as_fallback_ranges_inside_the_graph():
    def f(x):
        return running_total(x * 2, 1).tanh()

    compiled = torch.compile(f, backend="neuron", dynamic=False, options={"fallback": "cpu"})
    x = torch.randn(3, 4)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled(x)
    with torch.profiler.profile() as prof:
        torch.testing.assert_close(compiled(x), f(x))
    events = {e.name: e for e in prof.events() if e.name.startswith("neuroncc::")}
    fallback = events.get("neuroncc::fallback::neuroncc_profiling.running_total.default")
    assert fallback is not None, sorted(events)
    graph = next(e for name, e in events.items() if name.startswith("neuroncc::graph::") and "part" not in name)
    assert graph in list(_ancestors(fallback))
    assert any("part" in name for name in events)  # the compiled pieces are graphs of their own


def test_nki_sim_kernels_are_profiled():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
    compiled = torch.compile(model, backend="neuron", dynamic=False, options={"target": "nki-sim"})
    x = torch.randn(4, 8)
    with torch.no_grad():
        compiled(x)
        with torch.profiler.profile(record_shapes=True) as prof:
            compiled(x)
    events = [e for e in prof.events() if e.name.startswith("neuroncc::")]
    graph = next(e for e in events if e.name.startswith("neuroncc::graph::"))
    kernels = [e for e in events if e is not graph]
    assert kernels and all(graph in list(_ancestors(k)) for k in kernels), [e.name for e in events]
    assert any(k.input_shapes and [4, 8] in k.input_shapes for k in kernels)


def test_timeline_recorder_records_steps_without_torch_profiler():
    compiled = torch.compile(Block(), backend="neuron", dynamic=False)
    x = torch.randn(8, 16)
    with torch.no_grad():
        compiled(x)
        recorder = tracing.TimelineRecorder()
        with tracing.installed(recorder):
            compiled(x)
        compiled(x)  # after the block: not recorded
    graphs = [s for s in recorder.steps if s.info.kind == "graph"]
    assert len(graphs) == 1
    steps = [s for s in recorder.steps if s.info.kind != "graph"]
    assert steps and all(graphs[0].start_us <= s.start_us for s in steps)
    document = recorder.chrome_trace()
    assert {e["ph"] for e in document["traceEvents"]} == {"M", "X"}
