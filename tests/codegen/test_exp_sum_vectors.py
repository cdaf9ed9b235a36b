"""Softmax's exp pass as explicit vector code with its sum in it where the target says so
(``exp_sum_vectors.py``, ``CpuTarget.sums_exponentials_in_the_exp_loop``): the same bits as the vectorizer's exp
loop and the sum's loop of its own, no loop over the row cache for the sum on AVX2, AVX-512's code unchanged."""

from __future__ import annotations

import re

import numpy as np
import pytest
from test_delayed_writes import AVX2, AVX512, ROWS, _Kernel, _softmax, _texts

from neuroncc.codegen.llvm import exp_sum_vectors, jit


def _sum_loop_reads(asm: str) -> int:
    """The vector adds that take their operand from memory (the sum's loop over the row cache)."""
    return len(re.findall(r"vaddps\s+-?\d*\(%r\w+(,%r\w+)?(,\d)?\),\s*%ymm", asm))


def test_avx2_sums_in_the_exp_loop_and_avx512_as_before(monkeypatch):
    fn = _softmax(64, 1024)
    explicit = jit.assembly(_texts(fn, True, monkeypatch, AVX2), AVX2)
    zen4 = jit.assembly(_texts(fn, True, monkeypatch, AVX512), AVX512)
    monkeypatch.setattr(exp_sum_vectors, "EXPLICIT_EXP_SUM", False)
    apart = jit.assembly(_texts(fn, True, monkeypatch, AVX2), AVX2)
    assert _sum_loop_reads(explicit) == 0 and _sum_loop_reads(apart) >= 4
    assert jit.assembly(_texts(fn, True, monkeypatch, AVX512), AVX512) == zen4


@pytest.mark.parametrize("delay", [True, False], ids=["delayed-write", "write-in-place"])
@pytest.mark.parametrize("columns", [1024, 256, 64, 1000], ids=["groups", "one-group", "no-group", "fallback"])
def test_the_explicit_loop_gives_the_bits_of_the_sum_apart(delay, columns, rng, monkeypatch):
    fn = _softmax(ROWS, columns)
    x = (rng.standard_normal((ROWS, columns)) * 4).astype(np.float32)
    x[3, :] = -np.inf  # an all -inf row: NaN
    x[4, :] = np.inf  # an all +inf row: NaN
    x[7, 5] = np.nan
    x[9, :columns // 2] = -1e30  # half the row's exponentials +0
    explicit = _Kernel(_texts(fn, delay, monkeypatch), x).run([(0, 515), (515, ROWS)])
    monkeypatch.setattr(exp_sum_vectors, "EXPLICIT_EXP_SUM", False)
    apart = _Kernel(_texts(fn, delay, monkeypatch), x).run([(0, 515), (515, ROWS)])
    np.testing.assert_array_equal(explicit.view(np.uint32), apart.view(np.uint32))
    e = np.exp(x[10:] - x[10:].max(1, keepdims=True))
    np.testing.assert_allclose(explicit[10:], e / e.sum(1, keepdims=True), rtol=1.3e-6, atol=1e-7)
