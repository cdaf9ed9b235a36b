"""``neuroncc.evaluate``: fallbacks with counts and source lines, numerics against eager float32/float64,
compile time by stage, steady state, recompiles over shapes; the verdict follows the tolerance."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
import torch.nn as nn

import neuroncc


@torch.library.custom_op("neuroncc_evaluate::running_total", mutates_args=())
def running_total(x: torch.Tensor, dim: int) -> torch.Tensor:
    return torch.cumsum(x, dim=dim)


@running_total.register_fake
def _(x, dim):
    return torch.empty_like(x)


def _backward(ctx, grad):
    return running_total(grad.flip(-1), -1).flip(-1), None


running_total.register_autograd(_backward)


class WithFallback(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(6, 8), nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(running_total(torch.tanh(self.fc1(x)), -1))  # FALLBACK LINE


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.norm, self.fc2 = nn.Linear(16, 32), nn.LayerNorm(32), nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.norm(self.fc1(x)))).softmax(-1)


def _line_of(marker: str) -> int:
    with open(__file__) as source:
        return next(number for number, line in enumerate(source, 1) if marker in line and "def _line_of" not in line)


def test_fallback_ops_are_reported_with_counts_and_source_lines():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = neuroncc.evaluate(WithFallback(), torch.randn(5, 6), train=True, repeat=3)
    (fallback,) = report.fallbacks
    assert fallback.op == "neuroncc_evaluate.running_total.default"
    assert fallback.nodes == 2  # one node in the forward graph, one in the backward
    # counted per call: the first (forward-only) step, then forward and backward of the second step, the
    # timeline call, 3 warm-up and 3 timed steps
    assert fallback.calls == 1 + 2 * (1 + 1 + 3 + 3)
    assert f"{__file__}:{_line_of('# FALLBACK LINE')}" in fallback.sites
    kinds = {d.kind for d in report.differences}
    assert kinds == {"output", "gradient", "parameter"}
    assert {d.name for d in report.differences if d.kind == "gradient"} == {"fc1.weight", "fc1.bias", "fc2.weight",
                                                                             "fc2.bias"}
    assert report.passed
    text = report.text()
    assert "neuroncc_evaluate.running_total.default: 2 node(s)" in text and "fallbacks" in text
    # the measured call shows the fallback op between the compiled pieces, forward and backward
    ran = [(k.kind, k.name) for k in report.kernels]
    assert ran.count(("fallback", "neuroncc_evaluate.running_total.default")) == 2
    assert sum(kind == "graph" for kind, _ in ran) >= 4  # the two partitioned graphs and their compiled parts


def test_numerics_compile_split_steady_state_and_shapes():
    report = neuroncc.evaluate(Block(), torch.randn(8, 16), shapes=[[(4, 16)], [(8, 16)]], repeat=5)
    assert report.passed and not report.fallbacks
    (output,) = report.differences
    assert output.kind == "output" and output.shape == (8, 4)
    assert output.abs64 is not None and output.eager_abs64 is not None and output.tolerance_used <= 1
    compile_time = report.compile
    assert compile_time.graphs and all(g.cache == "miss" for g in compile_time.graphs)
    assert compile_time.passes > 0 and compile_time.codegen > 0 and compile_time.tracing > 0
    assert compile_time.first_call >= compile_time.passes + compile_time.codegen
    assert [t.name for t in report.steady_state] == ["neuroncc", "eager"]
    assert all(len(t.samples) == 5 and t.median > 0 for t in report.steady_state)
    new_shape, same_shape = report.shapes
    assert new_shape.new_graphs == 1 and "shape [8, 16] -> [4, 16]" in new_shape.reasons[0]
    assert same_shape.new_graphs == 0 and same_shape.error is None
    assert any("layer_norm" in k.name for k in report.kernels)
    document = json.loads(report.to_json())
    assert document["passed"] is True and document["compile"]["graphs"][0]["cache"] == "miss"


def test_verdict_fails_outside_the_tolerance():
    report = neuroncc.evaluate(Block(), torch.randn(8, 16), repeat=1, rtol=0.0, atol=1e-30)
    (output,) = report.differences
    assert output.abs32 > 0  # fused code rounds differently from eager somewhere in 32 outputs
    assert not report.passed and "FAIL" in report.text()


def test_bad_arguments_are_input_errors():
    with pytest.raises(neuroncc.InputError, match="at least one tensor"):
        neuroncc.evaluate(Block(), 3)
    with pytest.raises(neuroncc.InputError, match="repeat"):
        neuroncc.evaluate(Block(), torch.randn(8, 16), repeat=0)
    with pytest.raises(neuroncc.InputError, match="non-negative"):
        neuroncc.evaluate(Block(), torch.randn(8, 16), atol=-1.0)


class Stateful(nn.Module):
    """A training-mode BatchNorm (running statistics and a counter) and an input accumulated in place."""

    def __init__(self):
        super().__init__()
        self.fc, self.norm = nn.Linear(4, 4), nn.BatchNorm1d(4)

    def forward(self, x, total):
        h = self.norm(self.fc(x))
        total.add_(h.detach().sum(0))  # a running total (no graph through the calls)
        return h.relu()


@pytest.mark.parametrize("train", [False, True])
def test_the_state_a_call_updates_is_compared_by_name(train):
    x, total = torch.randn(8, 4), torch.zeros(4)
    report = neuroncc.evaluate(Stateful().train(), (x, total), train=train, repeat=1, input_names=["x"])
    found = [(d.kind, d.name) for d in report.differences if d.kind not in ("gradient", "parameter")]
    assert found == [("output", "output 0"), ("buffer", "norm.running_mean"), ("buffer", "norm.running_var"),
                     ("buffer", "norm.num_batches_tracked"), ("input", "arg 1")]  # x is read, not updated
    assert report.passed, report.text()
    mean = next(d for d in report.differences if d.name == "norm.running_mean")
    assert mean.abs64 is not None and mean.shape == (4,)
    assert "buffer    norm.running_mean" in report.text()


def test_a_given_up_shared_library_form_is_a_notice(monkeypatch):
    from neuroncc.codegen.llvm import native_library

    monkeypatch.setattr(native_library, "_BROKEN", [])
    assert neuroncc.evaluate(Block(), torch.randn(8, 16), repeat=1).notices == []
    monkeypatch.setattr(native_library, "_BROKEN", ["linking 3 kernel object(s) into a library failed: the reason"])
    report = neuroncc.evaluate(Block(), torch.randn(8, 16), repeat=1)
    assert len(report.notices) == 1 and "the reason" in report.notices[0] and "MCJIT" in report.notices[0]
    assert "  notice       shared-library kernels given up" in report.text()
    assert json.loads(report.to_json())["notices"] == report.notices
