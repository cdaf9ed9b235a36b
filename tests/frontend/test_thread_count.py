"""A compiled graph runs on torch's thread count at each call: after ``torch.set_num_threads`` its kernels split
across the new count, also when a later compile gets the executable of an earlier one from the caches
(``CpuExecutable.for_threads``; docs/performance-history.md, session 18 threads: a 2-thread LayerNorm ran on
the 1-thread executable of the compile before it, and 1-thread callers got 2-thread kernels)."""

from __future__ import annotations

import pytest
import torch

from neuroncc.testing.team_runs import ran_on, recorded_team_runs


@pytest.fixture
def team_runs(monkeypatch):
    yield from recorded_team_runs(monkeypatch)


def _layer_norm(x, w, b):
    return torch.nn.functional.layer_norm(x, (1024,), w, b)


def _args():
    return torch.randn(2048, 1024), torch.randn(1024), torch.randn(1024)


def test_a_compiled_graph_follows_set_num_threads(team_runs):
    args = _args()
    torch.set_num_threads(2)
    run = torch.compile(_layer_norm, backend="neuron", dynamic=False)
    first = run(*args)
    assert ran_on(team_runs, 2)
    for threads in (1, 2):
        torch.set_num_threads(threads)
        team_runs.clear()
        again = run(*args)
        assert ran_on(team_runs, threads)
        torch.testing.assert_close(again, first, rtol=0, atol=0)


@pytest.mark.parametrize("order", [(1, 2), (2, 1)])
def test_a_later_compile_from_the_caches_runs_on_the_new_count(team_runs, order):
    args = _args()
    for threads in order:
        torch.set_num_threads(threads)
        torch._dynamo.reset()
        team_runs.clear()
        torch.compile(_layer_norm, backend="neuron", dynamic=False)(*args)
        assert ran_on(team_runs, threads), f"compiled at {order[0]} thread(s), called at {threads}"
