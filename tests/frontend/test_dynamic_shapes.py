"""Symbolic sizes from TorchDynamo compile one static specialization per input shape (frontend/specializations.py)."""

from __future__ import annotations

import copy
import logging
import warnings

import pytest
import torch
import torch.nn as nn
from torch._dynamo.exc import BackendCompilerFailed

import neuroncc
from frontend import models
from neuroncc.frontend.diagnostics import Float64Warning

TOL = {"rtol": 1e-5, "atol": 1e-5}
LENGTHS = (3, 5, 8, 6)


def _block() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Embedding(32, 16), models.CausalSelfAttention(sdpa=True, block=8), nn.Linear(16, 32))


def _tokens(length: int) -> torch.Tensor:
    return torch.randint(0, 32, (2, length), generator=torch.Generator().manual_seed(length))


def test_default_dynamic_inference_matches_eager_at_every_length():
    model = _block().eval()
    compiled = torch.compile(model, backend="neuron")  # dynamic=None: the second length goes symbolic
    with torch.no_grad():
        for length in LENGTHS:
            torch.testing.assert_close(compiled(_tokens(length)), model(_tokens(length)), **TOL)
        compiled(_tokens(5))  # a shape seen before: no compile
    counts = neuroncc.stats()
    # the first length is a static graph; the other 3 are specializations of the symbolic one
    assert counts["dynamo_graphs"] == 2
    assert counts["shape_specializations"] == 3
    assert counts["inference_graphs"] == 4


def test_default_dynamic_training_matches_eager_at_every_length():
    eager = _block()
    ours = copy.deepcopy(eager)
    compiled = torch.compile(ours, backend="neuron")
    eager_opt = torch.optim.SGD(eager.parameters(), lr=0.1)
    our_opt = torch.optim.SGD(ours.parameters(), lr=0.1)
    for length in LENGTHS:
        for model, opt in ((eager, eager_opt), (compiled, our_opt)):
            opt.zero_grad()
            model(_tokens(length)).logsumexp(-1).mean().backward()
        for (name, p_eager), p_ours in zip(eager.named_parameters(), ours.parameters()):
            torch.testing.assert_close(p_ours.grad, p_eager.grad, **TOL, msg=lambda m, n=name: f"{n}: {m}")
        eager_opt.step()
        our_opt.step()
    counts = neuroncc.stats()
    assert counts["shape_specializations"] == 3
    assert counts["forward_graphs"] == counts["backward_graphs"] == 4  # every specialization's backward is static


def test_mark_dynamic_specializes_from_the_first_call():
    model = nn.Linear(4, 3)
    compiled = torch.compile(model, backend="neuron")
    for rows in (2, 7, 2):
        x = torch.randn(rows, 4)
        torch._dynamo.mark_dynamic(x, 0)
        torch.testing.assert_close(compiled(x), model(x), **TOL)
    assert neuroncc.stats()["dynamo_graphs"] == 1
    assert neuroncc.stats()["shape_specializations"] == 2


def test_dynamic_true_with_an_int_argument():
    def f(x, n):
        return x[:, :n].sin() * n

    compiled = torch.compile(f, backend="neuron", dynamic=True)
    for cols, n in ((6, 2), (6, 3), (9, 4)):
        x = torch.randn(3, cols)
        torch.testing.assert_close(compiled(x, n), f(x, n), **TOL)
    assert neuroncc.stats()["shape_specializations"] == 3


def test_recompile_log_names_input_dimension_and_sizes(caplog):
    compiled = torch.compile(lambda x: x.cos() + 1, backend="neuron")
    with caplog.at_level(logging.INFO, logger="neuroncc.frontend"):
        for rows in (3, 5, 7, 9):
            compiled(torch.randn(rows, 4))
    lines = [r for r in caplog.records if "recompiling" in r.getMessage()]
    assert len(lines) == 2  # 5 is the symbolic graph's first specialization; 7 and 9 recompile it
    assert "input 'x' dimension 0: 5 -> 7" in lines[0].getMessage()
    assert lines[0].levelno == logging.INFO and "pad_to_bucket" not in lines[0].getMessage()
    assert "input 'x' dimension 0: 7 -> 9" in lines[1].getMessage()
    assert lines[1].levelno == logging.WARNING and "neuroncc.pad_to_bucket" in lines[1].getMessage()


def test_too_many_shapes_run_eagerly_with_one_warning_that_suggests_buckets():
    # as TorchDynamo past its recompile_limit: a server's ninth sequence length is slower, never an error
    def f(x):
        return x.sin() * 2

    compiled = torch.compile(f, backend="neuron", dynamic=True, options={"max_specializations": 2})
    for rows in (2, 4, 2):
        compiled(torch.randn(rows, 3))
    with pytest.warns(neuroncc.SpecializationLimitWarning) as record:
        for rows in (6, 7, 6, 4):
            x = torch.randn(rows, 3)
            torch.testing.assert_close(compiled(x), f(x), **TOL)
    assert len(record) == 1
    message = str(record[0].message)
    assert "'x' [6, 3]" in message and "max_specializations" in message and "pad_to_bucket" in message
    assert "'x' [2, 3]; 'x' [4, 3]" in message and "eager" in message
    assert neuroncc.stats()["shape_specializations"] == 2


def test_too_many_shapes_is_a_typed_error_with_fail_on_recompile_limit_hit(monkeypatch):
    monkeypatch.setattr(torch._dynamo.config, "fail_on_recompile_limit_hit", True)
    compiled = torch.compile(lambda x: x * 2, backend="neuron", dynamic=True, options={"max_specializations": 2})
    compiled(torch.randn(2, 3))
    compiled(torch.randn(4, 3))
    compiled(torch.randn(2, 3))  # cached
    with pytest.raises(neuroncc.SpecializationLimitError) as info:
        compiled(torch.randn(6, 3))
    message = str(info.value)
    assert "'x' [6, 3]" in message and "max_specializations" in message and "pad_to_bucket" in message
    assert "'x' [2, 3]; 'x' [4, 3]" in message


def test_max_specializations_must_be_positive():
    compiled = torch.compile(lambda x: x * 2, backend="neuron", options={"max_specializations": 0})
    with pytest.raises(BackendCompilerFailed) as info:
        compiled(torch.randn(2))
    assert isinstance(info.value.inner_exception, neuroncc.InputError)


def test_dynamic_false_keeps_one_dynamo_graph_per_shape():
    compiled = torch.compile(lambda x: x.cos() + 1, backend="neuron", dynamic=False)
    for rows in (3, 5, 7):
        compiled(torch.randn(rows, 4))
    counts = neuroncc.stats()
    assert counts["dynamo_graphs"] == 3 and counts["shape_specializations"] == 0


def test_fallback_mode_specializes_too():
    compiled = torch.compile(lambda x: torch.cumsum(x, 1).sin(), backend="neuron", dynamic=True,
                             options={"fallback": "cpu"})
    for cols in (3, 6):
        x = torch.randn(2, cols)
        torch.testing.assert_close(compiled(x), torch.cumsum(x, 1).sin(), **TOL)


def test_dynamic_true_layer_norm_specializes_its_unspecialized_eps():
    # dynamic=True passes a module's float attribute (LayerNorm's eps) as a 0-d float64 tensor read with
    # .item(): it is specialized like a size, not refused as a data-dependent read, and no float64 warning
    model = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16)).eval()
    compiled = torch.compile(model, backend="neuron", dynamic=True)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", Float64Warning)
        for rows in (2, 5, 2):
            x = torch.randn(rows, 3, 8)
            torch.testing.assert_close(compiled(x), model(x), **TOL)
    assert neuroncc.stats()["shape_specializations"] == 2


def test_float_argument_that_changes_compiles_one_specialization_per_value(caplog):
    # dynamic=None: the second value of a float argument makes TorchDynamo pass it unspecialized
    def f(x, scale: float):
        return (x * scale).softmax(-1) + scale

    compiled = torch.compile(f, backend="neuron")
    x = torch.randn(4, 8)
    with caplog.at_level(logging.INFO, logger="neuroncc.frontend"):
        for scale in (0.5, 0.7, 0.9, 0.7, -0.0, 0.0):
            torch.testing.assert_close(compiled(x, scale), f(x, scale), **TOL)
    assert neuroncc.stats()["shape_specializations"] == 4  # 0.7, 0.9, -0.0, 0.0 (0.5: the static graph)
    lines = [r.getMessage() for r in caplog.records if "recompiling" in r.getMessage()]
    assert "new Python float value" in lines[0] and "'scale': 0.7 -> 0.9" in lines[0]
    assert "as a tensor" in lines[-1] and "pad_to_bucket" not in lines[-1]


def test_a_new_shape_is_a_recompile_for_torch_compile_stances():
    def f(x):
        return x.cos() + 1

    compiled = torch.compile(f, backend="neuron", dynamic=True)
    compiled(torch.randn(2, 3))
    try:
        torch.compiler.set_stance("fail_on_recompile")
        torch.testing.assert_close(compiled(torch.ones(2, 3)), f(torch.ones(2, 3)), **TOL)  # compiled before
        with pytest.raises(torch._dynamo.exc.RecompileError, match=r"'x' \[5, 3\]\) while torch.compile's stance is 'fail_on_recompile'"):
            compiled(torch.randn(5, 3))
        torch.compiler.set_stance("eager_on_recompile")
        x = torch.randn(5, 3)
        torch.testing.assert_close(compiled(x), f(x), **TOL)
        assert neuroncc.stats()["shape_specializations"] == 1  # run eagerly, not compiled
    finally:
        torch.compiler.set_stance("default")
    torch.testing.assert_close(compiled(x), f(x), **TOL)
    assert neuroncc.stats()["shape_specializations"] == 2
