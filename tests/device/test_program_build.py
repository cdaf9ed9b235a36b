"""The eager device's program for a new signature (device/programs.py): what its build does and does not do."""

import math

import pytest
import torch
import torch.fx as fx

from neuroncc.device import op_forms, programs
from neuroncc.device.signature import describe
from neuroncc.frontend.importer import LOWERINGS, import_graph
from neuroncc.ir import print_function

aten = torch.ops.aten


def _build(op, args, kwargs=None):
    kwargs = kwargs or {}
    _, tensors, floats = describe(args, kwargs)
    return programs.build_program(op_forms.form_of(op), args, kwargs, tensors, floats)


def test_a_directly_built_program_generates_no_python_code_and_imports_as_its_graph_module(monkeypatch):
    """The importer reads a direct one-op graph's nodes: an fx.GraphModule around it generated and compiled the
    graph's Python code, which nothing ran (0.5 ms of a 2.2 ms program build, session 27). The program is the one
    the GraphModule gave (the same IR, so the same cache key and bits)."""
    x, y = torch.randn(3, 5, device="neuron"), torch.randn(3, 5, device="neuron")
    recompiled = []
    recompile = fx.GraphModule.recompile
    monkeypatch.setattr(fx.GraphModule, "recompile", lambda self: recompiled.append(self) or recompile(self))
    graphs = []
    direct_graph = programs._direct_graph
    monkeypatch.setattr(programs, "_direct_graph", lambda *a, **k: graphs.append(direct_graph(*a, **k)) or graphs[-1])
    for op, args, kwargs in ((aten.add.Tensor, (x, y), {}), (aten.mul.Tensor, (x, 0.5), {}),  # floats: built twice
                             (aten.add_.Tensor, (x, y), {"alpha": 2.0}), (aten.mm.default, (x, y.t()), {})):
        _build(op, args, kwargs)
    assert len(graphs) >= 4 and not recompiled
    for graph in graphs:
        module = fx.GraphModule(torch.nn.Module(), graph.graph)
        assert print_function(import_graph(graph, "eager").function, canonical=True) == \
            print_function(import_graph(module, "eager").function, canonical=True)


@pytest.mark.parametrize("op", [aten.isneginf.default, aten.isposinf.default])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64, torch.bool])
def test_signed_infinity_is_built_directly_as_the_program_its_reference_traced(op, dtype, monkeypatch):
    """isneginf/isposinf have a lowering (text generation checks its scores every decoding step, each a new
    sequence length): no make_fx trace of PyTorch's reference, the same IR it gave, eager's results."""
    values = torch.tensor([[-math.inf, math.inf, 0.0, math.nan, -1.5], [2.0, -0.0, 3.0, -math.inf, 1.0]])
    x_cpu = values.to(dtype) if dtype.is_floating_point else torch.tensor([[3, 0, -2], [1, 1, 0]]).to(dtype)
    x = x_cpu.to("neuron")
    with monkeypatch.context() as patch:
        patch.delitem(LOWERINGS, op)
        traced = print_function(_build(op, (x,)).function, canonical=True)

    def no_trace(*args, **kwargs):
        raise AssertionError("traced")

    monkeypatch.setattr(programs, "_traced_graph", no_trace)
    assert print_function(_build(op, (x,)).function, canonical=True) == traced
    assert torch.equal(op(x).cpu(), op(x_cpu))
