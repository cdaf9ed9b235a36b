"""What the training backward must keep, however and whenever neuroncc compiles it.

AOTAutograd compiles the backward graph lazily, at the first loss.backward(). Session 19 (coldbw) built and
measured compiling it with the forward (``force_non_lazy_backward_lowering``; dropped: no whole-call gain,
docs/performance-history.md) and found what an early compile must do itself: allow retain_graph=True (AOTAutograd
refuses it on a backward compiled with donated buffers, a list the lazy compile cleared), refuse a double backward
as before, let a forward run whose backward fails to compile (raising at the backward), and store both graphs in
the graph cache's entry. These tests hold on the lazy compile; the retain_graph one failed on the early compile
until it cleared the list.
"""

from __future__ import annotations

import pytest
import torch

import neuroncc
from neuroncc.frontend import aot_compile


def _model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.GELU(),
                               torch.nn.Linear(32, 4))


def _grads(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters()]


def _eager_and_compiled() -> tuple[torch.nn.Module, torch.nn.Module, torch.nn.Module, torch.Tensor]:
    eager = _model()
    model = _model()
    model.load_state_dict(eager.state_dict())
    return eager, model, torch.compile(model, backend="neuron", dynamic=False), torch.randn(8, 16)


def test_backward_with_retain_graph_twice():
    """AOTAutograd refuses retain_graph=True on a backward compiled with donated buffers (Inductor's); a lazy
    compile at such a first backward clears the list, an early compile must clear it itself."""
    eager, model, compiled, x = _eager_and_compiled()
    loss = compiled(x).pow(2).mean()
    loss.backward(retain_graph=True)
    loss.backward()
    want = eager(x).pow(2).mean()
    want.backward(retain_graph=True)
    want.backward()
    for got, expected in zip(_grads(model), _grads(eager)):
        torch.testing.assert_close(got, expected)


def test_double_backward_is_refused_as_before():
    _, model, compiled, x = _eager_and_compiled()
    loss = compiled(x).pow(2).mean()
    (grad,) = torch.autograd.grad(loss, [next(model.parameters())], create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        grad.sum().backward()


def test_a_backward_that_fails_to_compile_fails_when_called(monkeypatch):
    compile_graph = aot_compile.AtenCompilers._compile

    def failing(self, gm, kind, *args, **kwargs):
        if kind == "backward":
            raise NotImplementedError("no backward here")
        return compile_graph(self, gm, kind, *args, **kwargs)

    monkeypatch.setattr(aot_compile.AtenCompilers, "_compile", failing)
    eager, _, compiled, x = _eager_and_compiled()
    out = compiled(x)  # the forward works
    torch.testing.assert_close(out, eager(x))
    with pytest.raises(NotImplementedError, match="no backward here"):
        out.pow(2).mean().backward()
    assert neuroncc.stats()["graph_cache_stores"] == 0  # no entry without its backward


def test_the_graph_cache_entry_holds_both_graphs():
    eager, model, compiled, x = _eager_and_compiled()
    compiled(x).pow(2).mean().backward()
    assert neuroncc.stats()["graph_cache_stores"] == 1
    # a fresh TorchDynamo compile of the same model hits the entry: both graphs, no AOTAutograd, same gradients
    torch._dynamo.reset()
    neuroncc.reset_stats()
    model.zero_grad(set_to_none=True)
    again = torch.compile(model, backend="neuron", dynamic=False)
    again(x).pow(2).mean().backward()
    stats = neuroncc.stats()
    assert stats["aot_autograd_runs"] == 0 and stats["backward_graphs"] == 0
    eager(x).pow(2).mean().backward()
    for got, want in zip(_grads(model), _grads(eager)):
        torch.testing.assert_close(got, want)
