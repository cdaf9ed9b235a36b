"""The fuzzer's random statements: replayed exactly downstream of the draws, the draws judged by distribution.

Programs with random statements (rand, randn, bernoulli, native_dropout on an input) are part of the fuzzer's
stream; these tests check that the checks can fail: a consumer computed wrongly from the same mask is a
mismatch (the eager replay uses the compiled run's draws), and a skewed generator is a mismatch (its draws
against eager's).
"""

from __future__ import annotations

import pytest
import torch

from neuroncc.testing import fuzz_random
from neuroncc.testing.fuzz import Input, Program, Spec, Stmt, check_program, generate_program
from neuroncc.testing.fuzz_random import RandomStmt


def _program(kind: str, p: float = 0.3) -> Program:
    inputs = (Input("x0", Spec((16, 16), "float32")), Input("x1", Spec((16,), "float32")))
    stmts = (Stmt("v0", "mul", (("a", "r0"), ("b", "x1")), Spec((16, 16), "float32")),
             Stmt("v1", "tanh", (("a", "v0"),), Spec((16, 16), "float32")))
    return Program(inputs, stmts, ("v1",), data_seed=3, randoms=(RandomStmt("r0", kind, "x0", p),))


def test_the_stream_has_random_programs_and_they_pass():
    programs = [generate_program(0, index) for index in range(30)]
    random_programs = [p for p in programs if p.randoms]
    assert len(random_programs) >= 5
    assert {r.kind for p in random_programs for r in p.randoms} >= {"dropout", "rand"}
    for program in random_programs[:4]:
        assert [f.status for f in check_program(program, ("cpu",))] in (["pass"], ["refused"])


@pytest.mark.parametrize("kind", ["rand", "randn", "bernoulli", "dropout"])
def test_each_kind_passes_forward_and_backward(kind):
    (finding,) = check_program(_program(kind), ("cpu",))
    assert finding.status == "pass" and finding.phase == "fwd+bwd", finding.detail


def test_a_consumer_computed_wrongly_from_the_same_mask_is_a_mismatch(monkeypatch):
    def wrong_scale(self, x, p):
        mask = self._next(x)
        return x * mask * (1.01 / (1.0 - p)), mask

    monkeypatch.setattr(fuzz_random.Replay, "dropout", wrong_scale)
    (finding,) = check_program(_program("dropout"), ("cpu",))
    assert finding.status == "mismatch" and "output" in finding.detail


def test_a_skewed_generator_is_a_mismatch(monkeypatch):
    from neuroncc.frontend.lowering import random_ops

    original = random_ops._uniform
    monkeypatch.setattr(random_ops, "_uniform", lambda *args, **kwargs: original(*args, **kwargs) ** 2)
    torch._dynamo.reset()
    (finding,) = check_program(_program("rand"), ("cpu",))
    assert finding.status == "mismatch" and "distribution differs" in finding.detail
