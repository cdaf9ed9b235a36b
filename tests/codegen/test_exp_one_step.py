"""AVX2's sigmoid, gelu_tanh and tanh scale their e**w by 2**n in one product, sigmoid without its 0 - x
(``CpuTarget.scales_one_plus_exp_in_one_step``, ``mathlib._exp_in_one_step``), and its gelu halves inside its erf
(``CpuTarget.halves_gelu_in_its_erf``): the same bits as before for every input (an exhaustive count over all 2**32
float32 patterns found no difference: docs/performance-history.md, session 26 polya26), fewer instructions; AVX-512's
and SSE's code as before."""

from __future__ import annotations

import platform

import numpy as np
import pytest

from neuroncc.hardware.host import CpuTarget
from neuroncc.testing.choices import choose

from codegen_helpers import math_function_body
from mxcsr_probe import with_flags

AVX2 = CpuTarget("znver3", "+avx,+avx2,+fma,-avx512f")
ZEN4 = CpuTarget("znver4", "+avx,+avx2,+fma,+avx512f,+avx512vl,+avx512bw,+avx512dq")
SSE = CpuTarget("x86-64", "+sse2,+sse4.2,-avx,-avx2,-fma,-avx512f")
DECISIONS = ("scales_one_plus_exp_in_one_step", "halves_gelu_in_its_erf")


def _without(monkeypatch, *names: str) -> None:
    choose(monkeypatch, **dict.fromkeys(names, False))



@pytest.mark.parametrize("decision", DECISIONS)
def test_the_decisions_are_avx2s(decision):
    assert getattr(AVX2, decision)
    assert not getattr(ZEN4, decision) and not getattr(SSE, decision)


def test_avx2s_sigmoid_scales_once_without_negating_and_its_gelu_halves_in_its_erf(monkeypatch):
    names = ("sigmoid", "gelu_tanh", "gelu", "tanh")
    sigmoid, gelu_tanh, gelu, tanh = (math_function_body(name, AVX2) for name in names)
    # one power of two (a shift) and one product scale e**w; sigmoid's argument is x itself
    for body in (sigmoid, gelu_tanh, tanh):
        assert body.count("shl i32") == 1 and "ashr" not in body
    assert "fsub float              0x0" not in sigmoid
    assert "0x3fe0000000000000" in gelu and "0x3ff0000000000000" not in gelu  # (1/2 + erf/2: no 1, no x * 1/2)
    _without(monkeypatch, *DECISIONS)
    sigmoid, gelu_tanh, gelu, tanh = (math_function_body(name, AVX2) for name in names)
    for body in (sigmoid, gelu_tanh, tanh):
        assert body.count("shl i32") == 2 and "ashr" in body
    assert "fsub float              0x0" in sigmoid
    assert "0x3ff0000000000000" in gelu


def test_zen4s_and_sses_math_is_unchanged(monkeypatch):
    # their decisions are off, so their code is the code with both forced off
    for target in (ZEN4, SSE):
        now = [math_function_body(name, target) for name in ("sigmoid", "gelu_tanh", "gelu", "tanh")]
        _without(monkeypatch, *DECISIONS)
        assert [math_function_body(name, target) for name in ("sigmoid", "gelu_tanh", "gelu", "tanh")] == now
        monkeypatch.undo()


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="runs x86 code")
@pytest.mark.parametrize("name", ["sigmoid", "gelu_tanh", "gelu", "tanh"])
def test_avx2s_results_keep_their_bits(name, monkeypatch):
    """Every 4099th float bit pattern, a dense grid over the clamps' range and the specials (NaNs with payloads
    and either sign, infinities, zeros, subnormals) give the bits of before."""
    bits = np.concatenate([
        np.arange(0, 2 ** 32, 4099, dtype=np.uint64).astype(np.uint32),
        np.linspace(-95.0, 95.0, 200001, dtype=np.float32).view(np.uint32),
        np.array([0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x80000000, 0, 0x7FC00001, 0xFFC12345,
                  0x7F800001, 0xFF812345, 0x7FFFFFFF, 0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00800000],
                 dtype=np.uint32)])
    x = bits.view(np.float32)
    _, now = with_flags(name, AVX2, x)
    _without(monkeypatch, *DECISIONS)
    _, before = with_flags(name, AVX2, x)
    assert (now.view(np.uint32) == before.view(np.uint32)).all()


@pytest.mark.parametrize("target", [AVX2, ZEN4], ids=["avx2", "avx512"])
def test_every_one_float_polynomial_builds_from_one_argument(target):
    """``mathlib.POLYNOMIAL`` holds the functions of one float (what an op's lowering evaluates per element, a bf16
    table holds and benchmarks/roofline.py measures by name); a function of an element and a row's scale lives in
    ``SCALED_POLYNOMIAL`` and takes two (roofline.py failed on one placed among the first)."""
    from neuroncc.codegen.llvm.mathlib import POLYNOMIAL, SCALED_POLYNOMIAL

    for name in POLYNOMIAL:
        assert f'@"ncc.math.{name}"(float' in math_function_body(name, target)
    assert not POLYNOMIAL.keys() & SCALED_POLYNOMIAL.keys()
