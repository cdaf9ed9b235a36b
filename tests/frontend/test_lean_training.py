"""The lean call of training graphs (neuroncc/frontend/lean_training.py): an autograd.Function of neuroncc's
around the compiled forward and backward where AOTAutograd's training runtime does nothing, with AOTAutograd's
gradients bit for bit (and eager's within tolerance); the cases it refuses keep AOTAutograd's runtime."""

from __future__ import annotations

import types

import pytest
import torch
import torch.nn.functional as F

import neuroncc  # noqa: F401  (registers the backend)
from neuroncc.frontend import lean_training


def _fresh(fn):
    """A copy of ``fn`` with its own code object: its own TorchDynamo cache entries."""
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def _call_model(model, x):
    return model(x)


def _both(fn, warm, monkeypatch):
    """``fn`` compiled twice, AOTAutograd's runtime (lean call switched off) and the lean call's, each warmed by
    ``warm`` (two calls: a compile's backward graph is compiled at its first backward, the lean call chosen then)."""
    compiled = {}
    for lean in (False, True):
        monkeypatch.setattr(lean_training, "ENABLED", lean)
        compiled[lean] = torch.compile(_fresh(fn), backend="neuron", dynamic=False)
        for _ in range(2):
            warm(compiled[lean])
    monkeypatch.setattr(lean_training, "ENABLED", True)
    return compiled


def _node(tensor) -> str:
    return type(tensor.grad_fn).__name__


def _equal(a, b):
    if isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _equal(x, y)
    elif a is None or b is None:
        assert a is None and b is None
    else:
        assert a.dtype == b.dtype and torch.equal(a, b)


def test_model_training_steps_take_the_lean_call_with_aot_autograds_gradients(monkeypatch):
    x = torch.randn(32, 64)
    results = {}
    for lean in (False, True):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 16))
        monkeypatch.setattr(lean_training, "ENABLED", lean)
        call = torch.compile(_fresh(_call_model), backend="neuron", dynamic=False)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        steps = []
        for _ in range(3):
            optimizer.zero_grad(set_to_none=True)
            out = call(model, x)
            out.pow(2).mean().backward()
            steps.append((out.detach(), [p.grad.clone() for p in model.parameters()], _node(out)))
            optimizer.step()
        results[lean] = steps
    assert results[True][-1][2] == "LeanCompiledFunctionBackward"  # the lean call from the second step on
    assert results[False][-1][2] == "CompiledFunctionBackward"
    _equal([s[:2] for s in results[False]], [s[:2] for s in results[True]])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 16))
    model(x).pow(2).mean().backward()
    for param, grad in zip(model.parameters(), results[True][0][1]):
        torch.testing.assert_close(grad, param.grad, rtol=1e-4, atol=1e-5)


def test_cross_entropy_step_through_the_lean_call(monkeypatch):
    logits, target = torch.randn(64, 1000), torch.randint(0, 1000, (64,))

    def step(logits, target):
        logits = logits.detach().requires_grad_()
        loss = F.cross_entropy(logits, target)
        loss.backward()
        return loss.detach(), logits.grad

    compiled = _both(step, lambda fn: fn(logits, target), monkeypatch)
    _equal(compiled[False](logits, target), compiled[True](logits, target))
    expected = step(logits, target)
    got = compiled[True](logits, target)
    torch.testing.assert_close(got[0], expected[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got[1], expected[1], rtol=1e-4, atol=1e-7)


def _outputs(x, w, b):
    y = torch.tanh(x @ w + b)
    return y.sum(), y > 0, (y * 2).detach(), y


def test_non_differentiable_outputs_inputs_without_grad_retain_graph_and_no_grad(monkeypatch):
    x, w, b = torch.randn(8, 16), torch.randn(16, 4, requires_grad=True), torch.randn(4)
    compiled = _both(_outputs, lambda fn: fn(x, w, b)[0].backward(), monkeypatch)
    results = {}
    for lean in (False, True):
        w.grad = None
        out = compiled[lean](x, w, b)
        assert _node(out[0]) == ("LeanCompiledFunctionBackward" if lean else "CompiledFunctionBackward")
        assert out[0].requires_grad and out[3].requires_grad
        assert not out[1].requires_grad and not out[2].requires_grad and out[1].dtype is torch.bool
        (out[0] + out[3].pow(2).sum()).backward(retain_graph=True)
        first = w.grad.clone()
        out[0].backward()  # a second backward through the retained graph
        (only_y,) = torch.autograd.grad(compiled[lean](x, w, b)[3].sum(), w)
        with torch.no_grad():
            no_grad = compiled[lean](x, w, b)
        assert not no_grad[0].requires_grad
        results[lean] = (out, first, w.grad.clone(), only_y, no_grad)
    _equal(results[False], results[True])
    y = torch.tanh(x @ w + b)
    (expected,) = torch.autograd.grad(y.sum(), w)
    torch.testing.assert_close(results[True][3], expected, rtol=1e-5, atol=1e-5)


def _cube(x, w):
    return (x @ w).pow(3).sum()


@pytest.mark.parametrize("donated_buffer", [True, False])
def test_double_backward_is_refused_as_aot_autograd_refuses_it(monkeypatch, donated_buffer):
    with torch._functorch.config.patch(donated_buffer=donated_buffer):
        _double_backward(monkeypatch, donated_buffer)


def _double_backward(monkeypatch, donated_buffer):
    x, w = torch.randn(8, 16), torch.randn(16, 4, requires_grad=True)
    compiled = _both(_cube, lambda fn: fn(x, w).backward(), monkeypatch)
    errors = {}
    for lean in (False, True):
        loss = compiled[lean](x, w)
        assert _node(loss) == ("LeanCompiledFunctionBackward" if lean else "CompiledFunctionBackward")
        with pytest.raises(RuntimeError) as error:
            (grad,) = torch.autograd.grad(loss, w, create_graph=True)
            assert grad.requires_grad
            grad.sum().backward()
        errors[lean] = str(error.value)
    assert errors[True] == errors[False] or errors[False].startswith(errors[True])
    assert ("donated buffers" if donated_buffer else "does not currently support double backward") in errors[True]


def test_input_mutations_and_aliased_outputs_keep_aot_autograds_runtime():
    def mutated(x, w, stats):
        stats.add_(1)
        return (x @ w).sum()

    def aliased(x, w):
        y = x @ w
        return y, y.view(-1)

    x, w = torch.randn(8, 16), torch.randn(16, 4, requires_grad=True)
    stats = torch.zeros(3)
    compiled = torch.compile(mutated, backend="neuron", dynamic=False)
    for _ in range(2):
        loss = compiled(x, w, stats)
        loss.backward()
    assert _node(loss) == "CompiledFunctionBackward" and torch.equal(stats, torch.full((3,), 2.0))
    compiled = torch.compile(aliased, backend="neuron", dynamic=False)
    for _ in range(2):
        y, flat = compiled(x, w)
        flat.sum().backward()
    assert _node(y) == "CompiledFunctionBackward"


def test_the_refusal_names_what_needs_aot_autograds_runtime():
    assert lean_training.lean_training_refusal(object(), object(), None, 1, 1, False, [], False) == "not a cpu graph"


def test_saved_tensors_hooks_keep_aot_autograds_runtime():
    x, w = torch.randn(8, 16), torch.randn(16, 4, requires_grad=True)
    packed = []

    def pack(tensor):
        packed.append(tensor.shape)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        compiled = torch.compile(_cube, backend="neuron", dynamic=False)
        for _ in range(2):
            loss = compiled(x, w)
            loss.backward()
    assert _node(loss) == "CompiledFunctionBackward"
    torch.testing.assert_close(w.grad, 2 * torch.autograd.grad(_cube(x, w), w)[0])
