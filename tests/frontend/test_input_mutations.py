"""Input mutations kept in the graph (``keep_inference_input_mutations=True``): ``copy_(input, new)`` at the end
of the aten graph, computed straight into the input's memory where the kernels allow it (the ``donated``
metadata, codegen/llvm/in_place.py), written back after the call where they do not. Each case matches eager.
"""

from __future__ import annotations

import pytest
import torch

import neuroncc
from neuroncc.frontend import aot_compile


@pytest.fixture
def compiled_in_order(monkeypatch):
    """Every CompiledGraph the backend makes, in order (conftest's compiled_in_order keeps the last per kind)."""
    graphs = []
    compile_aten_graph = aot_compile.compile_aten_graph

    def recording(gm, name, options, *args, **kwargs):
        graphs.append(compile_aten_graph(gm, name, options, *args, **kwargs))
        return graphs[-1]

    monkeypatch.setattr(aot_compile, "compile_aten_graph", recording)
    return graphs


def _same_after(fn, make_args, calls: int = 2) -> tuple[list, list]:
    """Run ``fn`` eagerly and compiled on equal fresh arguments ``calls`` times; compare results and arguments."""
    eager_args, our_args = make_args(), make_args()
    compiled = torch.compile(fn, backend="neuron", dynamic=False)
    for _ in range(calls):
        want, got = fn(*eager_args), compiled(*our_args)
        torch.testing.assert_close(got, want)
    for ours, theirs in zip(our_args, eager_args):
        torch.testing.assert_close(ours, theirs)
    return our_args, eager_args


def test_add_in_place_is_computed_in_the_input_and_matches_eager(compiled_in_order):
    def f(x, y):
        x.add_(y)
        return x * 2

    (x, _), _ = _same_after(f, lambda: [torch.ones(64, 32), torch.full((64, 32), 0.5)], calls=3)
    (graph,) = compiled_in_order
    assert graph.graph.mutations and graph.in_place == {index for _, index in graph.graph.mutations}
    # the graph's output is x * 2, and x itself was written where it lives
    torch.testing.assert_close(x, torch.full((64, 32), 2.5))


def test_the_old_value_read_before_the_write_stays_the_old_value(compiled_in_order):
    def f(x):
        before = x * 3
        x.mul_(2)
        return before + 1

    _same_after(f, lambda: [torch.arange(48.0).reshape(6, 8)])


def test_a_mutated_input_read_transposed_is_copied_in_after_the_call(compiled_in_order):
    def f(x):
        x.add_(x.t() * 1.0)
        return x.sum()

    _same_after(f, lambda: [torch.randn(256, 256, generator=torch.Generator().manual_seed(3))])
    (graph,) = compiled_in_order
    assert graph.graph.mutations and not graph.in_place  # the transposed read keeps a separate buffer


def test_a_non_contiguous_input_view_is_updated_in_place(compiled_in_order):
    def f(x, y):
        x.sub_(y)

    base_eager, base_ours = torch.arange(128.0).reshape(16, 8), torch.arange(128.0).reshape(16, 8)
    y = torch.ones(8, 16)
    compiled = torch.compile(f, backend="neuron", dynamic=False)
    f(base_eager.t(), y)
    compiled(base_ours.t(), y)
    torch.testing.assert_close(base_ours, base_eager)


def test_a_slice_of_an_input_updated_in_place(compiled_in_order):
    def f(x, y):
        x[:, :4].mul_(y)
        return x.sum()

    _same_after(f, lambda: [torch.arange(32.0).reshape(4, 8), torch.full((4, 4), 2.0)])


def test_one_tensor_passed_twice_mutated_through_one_argument():
    def f(a, b):
        a.add_(b)
        return a + b

    x_eager, x_ours = torch.ones(32), torch.ones(32)
    want = f(x_eager, x_eager)
    got = torch.compile(f, backend="neuron", dynamic=False)(x_ours, x_ours)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(x_ours, x_eager)


def test_a_bf16_input_updated_in_place():
    def f(x, y):
        x.addcmul_(y, y, value=0.5)

    _same_after(f, lambda: [torch.ones(64, dtype=torch.bfloat16), torch.full((64,), 0.5, dtype=torch.bfloat16)])


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_batchnorm_running_statistics_match_eager(train):
    def make():
        torch.manual_seed(0)
        # (no conv bias: before BatchNorm its gradient is zero up to rounding, which no tolerance compares)
        return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, bias=False), torch.nn.BatchNorm2d(4), torch.nn.ReLU())

    eager, ours = make(), make()
    eager.train(train)
    ours.train(train)
    compiled = torch.compile(ours, backend="neuron", dynamic=False)
    for step in range(3):
        x = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(step))
        want, got = eager(x), compiled(x)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
        if train:
            want.square().sum().backward()
            got.square().sum().backward()
    for (name, a), (_, b) in zip(ours.named_buffers(), eager.named_buffers()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=name)
    if train:
        for (name, a), (_, b) in zip(ours.named_parameters(), eager.named_parameters()):
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5, msg=name)


def test_fallback_mode_writes_mutations_as_plain_fx_not_as_fallback_ops():
    def f(x, y):
        x.add_(y)
        return x.cos()

    x_eager, x_ours = torch.ones(16), torch.ones(16)
    y = torch.full((16,), 0.25)
    want = f(x_eager, y)
    got = torch.compile(f, backend="neuron", options={"fallback": "cpu"})(x_ours, y)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(x_ours, x_eager)
    assert neuroncc.stats()["fallback_ops"] == 0


#: a transformer-ish parameter list for the optimizer step (8 tensors in 4 shapes)
SHAPES = [(32, 32), (32,), (32, 32), (32,), (64, 32), (64,), (32, 64), (32,)]


def _params():
    generator = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s, generator=generator)) for s in SHAPES]
    for p in params:
        p.grad = torch.randn(p.shape, generator=generator)
    return params


def _steps_match_eager(make) -> list[torch.Tensor]:
    """Three steps of the optimizer ``make(params)``, compiled and eager, from equal parameters: the parameters
    and every state eager keeps for them (moments, step counters) agree. Our parameters."""
    eager_params, our_params = _params(), _params()
    eager, ours = make(eager_params), make(our_params)
    step = torch.compile(ours.step, backend="neuron")
    for _ in range(3):
        eager.step()
        step()
    for a, b in zip(our_params, eager_params):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        for key, value in eager.state[b].items():
            torch.testing.assert_close(ours.state[a][key], value, rtol=1e-5, atol=1e-6)
    return our_params


@pytest.mark.parametrize("foreach", [True, False], ids=["foreach", "for_loop"])
def test_the_adamw_step_writes_parameters_and_moments_in_place(foreach, compiled_in_order):
    """The step's graph returns nothing: every parameter and both moments are computed in their own memory
    (3 tensors per parameter, no fresh output for them); only the 0-dim step counters get fresh outputs
    (the kernel reads the counter again after writing it)."""
    our_params = _steps_match_eager(
        lambda params: torch.optim.AdamW(params, lr=0.01, weight_decay=0.1, foreach=foreach))
    (graph,) = [g for g in compiled_in_order if g.graph.mutations]
    n = len(SHAPES)
    assert not graph.outputs  # nothing returned to AOTAutograd: it copies nothing in
    assert len(graph.graph.mutations) == 4 * n  # param, exp_avg, exp_avg_sq, step of each
    assert len(graph.in_place) == 3 * n
    in_place_bytes = sum(graph.graph.function.outputs[i].type.nbytes for i in graph.in_place)
    fresh_bytes = sum(v.type.nbytes for i, v in enumerate(graph.graph.function.outputs) if i not in graph.in_place)
    assert in_place_bytes == 3 * sum(p.numel() * 4 for p in our_params) and fresh_bytes == 4 * n


@pytest.mark.parametrize("name", ["sgd", "adam"])
@pytest.mark.parametrize("foreach", [True, False], ids=["foreach", "for_loop"])
def test_sgd_and_adam_steps_are_in_place_and_match_eager(name, foreach, compiled_in_order):
    def make(params):
        if name == "sgd":
            return torch.optim.SGD(params, lr=0.1, momentum=0.9, foreach=foreach)
        return torch.optim.Adam(params, lr=0.01, foreach=foreach)

    _steps_match_eager(make)
    in_place = sum(len(g.in_place) for g in compiled_in_order)
    assert in_place >= 2 * len(SHAPES)  # each parameter and its momentum / first moment at least


def test_version_counters_of_mutated_inputs_advance_alike_on_a_graph_cache_hit():
    """Autograd sees the in-graph mutation on a hit as on a miss (the runtime wrapper bumps the version)."""
    def f(x, y):
        x.add_(y)

    x, y = torch.zeros(8), torch.ones(8)
    advanced = []
    for _ in range(2):  # a miss, then (after a reset) a hit of the graph cache
        torch._dynamo.reset()
        before = x._version
        torch.compile(f, backend="neuron")(x, y)
        advanced.append(x._version - before)
    assert neuroncc.stats()["graph_cache_hits"] == 1
    assert advanced[0] == advanced[1] >= 1
    torch.testing.assert_close(x, torch.full((8,), 2.0))
