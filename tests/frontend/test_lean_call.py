"""The lean call of inference graphs (neuroncc/frontend/lean_call.py): AOTAutograd's runtime wrappers are left
out where they do nothing, on a compile and on a graph cache hit alike; a graph whose wrappers do something
(an input mutated, an output aliasing an input, a training graph) keeps them, and a call whose tensors do not
cross as they are runs them too, with eager's results every time."""

from __future__ import annotations

import torch

import neuroncc
from neuroncc.frontend import backend as backend_module


def _compiled(fn, returned: list):
    """``fn`` compiled by the neuron backend, keeping what the backend returns to TorchDynamo."""
    def recording(gm, example_inputs):
        returned.append(backend_module.neuron_backend(gm, example_inputs))
        return returned[-1]

    return torch.compile(fn, backend=recording, dynamic=False)


def _is_lean(fn) -> bool:
    return hasattr(fn, "slow")


def _mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).eval()


def test_an_inference_graph_takes_the_lean_call_with_fresh_outputs_equal_to_eager():
    model, x = _mlp(), torch.randn(8, 16)
    returned: list = []
    compiled = _compiled(model, returned)
    with torch.no_grad():
        first, second = compiled(x), compiled(x)
        expected = model(x)
    assert len(returned) == 1 and _is_lean(returned[0])
    torch.testing.assert_close(first, expected, rtol=1e-5, atol=1e-5)
    assert torch.equal(first, second) and first.data_ptr() != second.data_ptr()  # each call its own output
    assert not first.requires_grad and first.grad_fn is None
    assert first.stride() == expected.stride() and first.dtype is expected.dtype


def test_grad_mode_on_with_no_input_requiring_grad_is_inference_too():
    returned: list = []
    compiled = _compiled(lambda a, b: (a @ b).tanh() * 2, returned)
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    out = compiled(a, b)
    assert _is_lean(returned[0]) and not out.requires_grad
    torch.testing.assert_close(out, (a @ b).tanh() * 2)


def test_a_training_graph_does_not_take_the_inference_lean_call():
    model, x = _mlp(), torch.randn(8, 16)
    returned: list = []
    out = _compiled(model, returned)(x)
    assert out.requires_grad and out.grad_fn is not None  # (training graphs: lean_training.py, its own test)
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_input_mutations_and_aliased_outputs_keep_aot_autograd():
    def mutate(x, y):
        x.add_(1)
        return x * y

    def alias(x):
        return x.t(), x * 2

    x, y = torch.randn(4, 4), torch.randn(4, 4)
    for fn, args in ((mutate, (x.clone(), y)), (alias, (x.clone(),))):
        returned: list = []
        with torch.no_grad():
            expected_args = [a.clone() for a in args]
            expected = fn(*expected_args)
            got = _compiled(fn, returned)(*args)
        assert not _is_lean(returned[0]), fn.__name__
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(list(args), expected_args)  # the mutation written back
    assert got[0]._base is args[0] or got[0].untyped_storage().data_ptr() == args[0].untyped_storage().data_ptr()


def test_a_call_whose_tensors_do_not_cross_as_they_are_runs_aot_autograd():
    model = _mlp()
    returned, seen = [], []

    def recording(gm, example_inputs):
        returned.append(backend_module.neuron_backend(gm, example_inputs))
        return lambda *args: (seen.append(args), returned[-1](*args))[1]

    with torch.no_grad():
        torch.compile(model, backend=recording, dynamic=False)(torch.randn(8, 16))
        assert _is_lean(returned[0])
        transposed = torch.randn(16, 8).t()  # the input's shape in another layout: the direct call declines it
        args = [transposed if tuple(a.shape) == (8, 16) else a for a in seen[0]]
        (result,) = returned[0](*args)  # TorchDynamo would recompile for the strides; the callable still copes
        torch.testing.assert_close(result, model(transposed), rtol=1e-5, atol=1e-5)


def test_a_graph_cache_hit_takes_the_lean_call():
    model, x = _mlp(), torch.randn(8, 16)
    with torch.no_grad():
        expected = _compiled(model, [])(x)
        torch._dynamo.reset()
        returned: list = []
        got = _compiled(model, returned)(x)
    assert neuroncc.stats()["graph_cache_hits"] == 1
    assert _is_lean(returned[0])
    assert torch.equal(got, expected)
