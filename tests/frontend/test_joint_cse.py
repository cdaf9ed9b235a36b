"""neuroncc's merge of the joint graph's common subexpressions (frontend/joint_cse.py) against AOTAutograd's own
(``fx_graph_cse``, which imports Inductor's pattern matcher): the same graphs, so the min-cut partitioner makes
the same forward and backward graphs, and a cold compile never imports the pattern matcher."""

from __future__ import annotations

import re

import torch
import torch.fx as fx
import torch.nn as nn
from torch._dynamo.backends.common import aot_autograd
from torch._functorch._aot_autograd.utils import make_boxed_func
from torch._functorch.compile_utils import fx_graph_cse
from torch._functorch.partitioners import min_cut_rematerialization_partition

from neuroncc.frontend.joint_cse import merge_common_subexpressions, partition_joint
from neuroncc.frontend.lowering.decompositions import decomposition_table
from frontend.models import CausalSelfAttention, ConvBNReLU, LayerNormNet


class RepeatedWork(nn.Module):
    """Computes the same values twice (sin(x) twice, the same product twice), and uses dropout (random ops,
    never merged): the joint graph has repeats for the pass to merge."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        a = torch.sin(y) * torch.sigmoid(y)
        b = torch.sin(y) * torch.sigmoid(y)
        return torch.nn.functional.dropout(a + b, 0.1) + torch.nn.functional.dropout(a, 0.1)


def _shape(graph: fx.Graph) -> list[tuple[str, str, str, str, str]]:
    """Each node's op, name, target and arguments (by node name): equal shapes are equal graphs."""
    return [(n.op, n.name, str(n.target), str(n.args), str(n.kwargs)) for n in graph.nodes]


def _joint_graphs(model: nn.Module, *inputs: torch.Tensor) -> list[fx.GraphModule]:
    """The joint graphs AOTAutograd hands the partitioner for a training step of ``model`` (with neuroncc's
    decompositions, as the backend traces)."""
    joints: list[fx.GraphModule] = []

    def recording_partition(joint: fx.GraphModule, joint_inputs, **kwargs):
        joints.append(joint)
        return min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)

    backend = aot_autograd(fw_compiler=lambda gm, _: make_boxed_func(gm), bw_compiler=lambda gm, _: make_boxed_func(gm),
                           decompositions=decomposition_table(), partition_fn=recording_partition)
    torch._dynamo.reset()
    torch.compile(model, backend=backend, dynamic=False)(*inputs).sum().backward()
    return joints


def _model_and_inputs(name: str) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    if name == "repeated_work":
        return RepeatedWork(), (torch.randn(4, 16),)
    if name == "attention":
        return CausalSelfAttention(), (torch.randn(2, 8, 16),)
    if name == "layer_norm":
        return LayerNormNet(), (torch.randn(4, 16),)
    return ConvBNReLU(), (torch.randn(2, 3, 8, 8),)


def test_the_merge_makes_aotautograds_graph_of_each_joint_graph():
    merged_something = False
    for name in ("repeated_work", "attention", "layer_norm", "conv_bn_relu"):
        model, inputs = _model_and_inputs(name)
        joints = _joint_graphs(model, *inputs)
        assert joints, name
        for joint in joints:  # the partitioner has merged it already: its recorded module is the merged one
            ours, torch_s = merge_common_subexpressions(joint.graph), fx_graph_cse(joint.graph)
            assert _shape(ours) == _shape(torch_s), name
        model, inputs = _model_and_inputs(name)
        raw = _unmerged_joint(model, *inputs)
        ours, torch_s = merge_common_subexpressions(raw.graph), fx_graph_cse(raw.graph)
        assert _shape(ours) == _shape(torch_s), name
        merged_something |= len(ours.nodes) < len(raw.graph.nodes)
    assert merged_something  # the models hold repeats: the comparison is not of two copies


def _unmerged_joint(model: nn.Module, *inputs: torch.Tensor) -> fx.GraphModule:
    """The joint graph before any merge (AOTAutograd's CSE off), dead code removed as the partitioner does."""
    with torch._functorch.config.patch(cse=False):
        joint = _joint_graphs(model, *inputs)[0]
    joint.graph.eliminate_dead_code()
    return joint


def test_no_merge_across_a_mutation_nor_of_random_ops():
    """Two equal calls with an in-place op between them stay two (the later repeats merge into the second);
    random ops never merge; both passes agree, and ours merges what it may."""
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        a = torch.ops.aten.add.Tensor(x, y)
        b = torch.ops.aten.add.Tensor(x, y)  # merges into a
        torch.ops.aten.add_.Tensor(y, 1)
        c = torch.ops.aten.add.Tensor(x, y)  # after the mutation: its own node
        d = torch.ops.aten.add.Tensor(x, y)  # merges into c
        r1 = torch.ops.aten.rand_like.default(x)
        r2 = torch.ops.aten.rand_like.default(x)
        return a + b + c + d + r1 + r2

    graph = fx.symbolic_trace(f).graph
    ours = merge_common_subexpressions(graph)
    assert _shape(ours) == _shape(fx_graph_cse(graph))
    adds = [n.name for n in ours.nodes if n.target is torch.ops.aten.add.Tensor]
    assert adds == ["add_tensor", "add_tensor_2"]
    assert sum(n.target is torch.ops.aten.rand_like.default for n in ours.nodes) == 2


def test_the_partition_is_aotautograds_with_its_own_merge():
    """AOTAutograd with partition_joint compiles the same forward and backward graphs as with its own
    min-cut partitioner and CSE (but for the dropout seeds' indices, which count up over the process)."""
    for name in ("repeated_work", "attention"):
        graphs: dict[str, list[str]] = {}
        for label, partition in (("torch", min_cut_rematerialization_partition), ("neuroncc", partition_joint)):
            compiled: list[str] = []

            def keep(gm: fx.GraphModule, _inputs, compiled=compiled):
                compiled.append(re.sub(r"philox_seed\.default\(\d+", "philox_seed.default(N", gm.code))
                return make_boxed_func(gm)

            model, inputs = _model_and_inputs(name)
            backend = aot_autograd(fw_compiler=keep, bw_compiler=keep, decompositions=decomposition_table(),
                                   partition_fn=partition)
            torch._dynamo.reset()
            torch.compile(model, backend=backend, dynamic=False)(*inputs).sum().backward()
            graphs[label] = compiled
        assert graphs["neuroncc"] == graphs["torch"] and len(graphs["torch"]) == 2, name
