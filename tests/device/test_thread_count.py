"""An eager kernel runs on the calling thread's torch thread count at each call (device/thread_count.py): after
``torch.set_num_threads`` its large phases split across a team of the new count, in forward (the user's thread)
and in backward (the autograd engine's thread, whose own torch count stays the one it started with), on the one
kernel of its signature whatever the count it was built at."""

from __future__ import annotations

import pytest
import torch

import neuroncc
from neuroncc.testing.team_runs import ran_on, recorded_team_runs

# exp over 2M elements (transcendental: 16M work) and its backward's mul (2M): both split on a team of two
SHAPE = (2048, 1024)


@pytest.fixture
def team_runs(monkeypatch):
    yield from recorded_team_runs(monkeypatch)


def _compiled() -> int:
    return neuroncc.stats()["eager_kernels_compiled"] + neuroncc.stats()["eager_kernels_loaded"]


@pytest.mark.parametrize("order", [(2, 1, 2), (1, 2, 1)])
def test_a_forward_kernel_follows_set_num_threads_on_one_cached_kernel(team_runs, order):
    x = torch.randn(SHAPE).to("neuron")
    want = x.cpu().exp()
    torch.set_num_threads(order[0])
    x.exp()  # built (or loaded) at the first count
    compiled = _compiled()
    for threads in order:
        torch.set_num_threads(threads)
        team_runs.clear()
        got = x.exp()
        assert ran_on(team_runs, threads), f"built at {order[0]}, called at {threads}"
        torch.testing.assert_close(got.cpu(), want)
    assert _compiled() == compiled  # one kernel for every count


def test_a_backward_kernel_follows_the_count_set_on_the_calling_thread(team_runs):
    x = torch.randn(SHAPE).to("neuron").requires_grad_()
    grad = torch.randn(SHAPE).to("neuron")
    want = (grad.cpu() * x.detach().cpu().exp())
    for threads in (2, 1, 2, 1):
        torch.set_num_threads(threads)
        team_runs.clear()
        x.grad = None
        x.exp().backward(grad)
        backward = [run for run in team_runs if not run.on_main]
        forward = [run for run in team_runs if run.on_main]
        if threads == 2:  # at 1 no phase goes to a team: nothing recorded on either thread
            assert backward and forward, f"the backward runs on the autograd engine's thread: {team_runs}"
        assert ran_on(forward, threads) and ran_on(backward, threads), f"called at {threads}: {team_runs}"
        torch.testing.assert_close(x.grad.cpu(), want)
