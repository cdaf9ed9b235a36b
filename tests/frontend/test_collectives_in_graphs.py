"""Graphs that call torch.distributed's functional collectives (what TorchDynamo traces for ``dist`` calls,
DTensor and FSDP2 under torch.compile) compile in pieces split at the collectives, which PyTorch runs between
the compiled pieces, in any fallback mode, without a fallback warning. (One process here, a gloo group of one;
tests/distributed runs them on several processes and the neuron device.)"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc

import neuroncc
from neuroncc.errors import UnsupportedOpError


@pytest.fixture
def group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


def test_a_collective_splits_the_graph_and_runs_between_compiled_pieces(group):
    def step(x, w):
        y = fc.all_reduce(x @ w, "sum", group)
        return torch.relu(y).sum(1) + fc.all_gather_single(y, 0, group).mean()

    torch._dynamo.reset()
    neuroncc.reset_stats()
    x, w = torch.randn(4, 8), torch.randn(8, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning
        out = torch.compile(step, backend="neuron", dynamic=False)(x, w)
    torch.testing.assert_close(out, step(x, w))
    stats = neuroncc.stats()
    assert stats["fallback_partitions"] >= 2 and stats["fallback_ops"] == 0 and neuroncc.get_fallback_ops() == {}


def test_an_unsupported_op_beside_a_collective_still_fails_without_fallback(group):
    def step(x):
        return torch.special.gammainc(fc.all_reduce(x, "sum", group).abs(), x.abs())  # aten.igamma: no lowering

    torch._dynamo.reset()
    with pytest.raises(Exception, match="neuroncc cannot compile .*igamma") as caught:
        torch.compile(step, backend="neuron", dynamic=False)(torch.randn(3, 3))
    assert isinstance(caught.value.__cause__ or caught.value, UnsupportedOpError) or "UnsupportedOpError" in str(
        caught.value)
    assert "_c10d_functional" not in str(caught.value).split("other unsupported ops")[0]
