"""The forward's facts about its saved activations reach the backward graph (``frontend/saved_facts.py``):
cross-entropy's backward evaluates exp(x - amax - log) with the non-positive exp, and its gradient is eager's."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from neuroncc.ir import parse
from neuroncc.ir.signs import at_most_zero


def _backward_graph(dump: Path):
    (text,) = [p.read_text() for p in dump.glob("*_backward.nir")]
    return parse(text)


def _step(loss_of):
    def step(logits, target):
        logits = logits.detach().requires_grad_()
        loss = loss_of(logits, target)
        loss.backward()
        return loss.detach(), logits.grad
    return step


def test_cross_entropy_backward_knows_its_exp_argument_is_nonpositive(tmp_path):
    torch.manual_seed(0)
    logits, target = torch.randn(16, 300) * 4, torch.randint(0, 300, (16,))
    logits[3, 7] = 80.0  # a large logit: its row's exponentials underflow, its own is 1
    step = _step(F.cross_entropy)
    compiled = torch.compile(step, backend="neuron", options={"dump_dir": str(tmp_path)})
    loss, grad = compiled(logits, target)
    want_loss, want_grad = step(logits, target)
    torch.testing.assert_close(loss, want_loss)
    torch.testing.assert_close(grad, want_grad)
    backward = _backward_graph(tmp_path)
    assert backward.metadata["upper_bounds"] and backward.metadata["nonnegative"]
    (exp,) = [op for op in backward.ops if op.name == "exp"]
    assert at_most_zero(backward, exp.operands[0])


def test_a_backward_without_such_facts_gets_none(tmp_path):
    # exp(x - mean(x)): the forward's saved mean bounds nothing, so the backward's exp stays the general one
    step = _step(lambda x, t: torch.exp(x - x.mean(dim=1, keepdim=True)).sum())
    logits = torch.randn(4, 50)
    compiled = torch.compile(step, backend="neuron", options={"dump_dir": str(tmp_path)})
    torch.testing.assert_close(compiled(logits, None), step(logits, None))
    backward = _backward_graph(tmp_path)
    assert "upper_bounds" not in backward.metadata and "nonnegative" not in backward.metadata
    (exp,) = [op for op in backward.ops if op.name == "exp"]
    assert not at_most_zero(backward, exp.operands[0])
