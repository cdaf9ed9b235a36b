"""Without AVX-512, exp clamps its argument from below where its scale's first power of two is exactly +0, sigmoid and
gelu_tanh their exponent where it stays normal (1 + e**w is 1 there anyway): their results for large-magnitude
inputs come from exact products, not from a product that underflows (a microcode assist per vector on Zen 3), and
every result's bits are those of the clamp at -104 (``mathlib.EXP_FLOOR``, ``mathlib.ONE_PLUS_EXP_FLOOR``)."""

from __future__ import annotations

import platform

import numpy as np
import pytest

from neuroncc.codegen.llvm import mathlib
from neuroncc.hardware.host import CpuTarget

from mxcsr_probe import UNDERFLOW, with_flags

pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="reads x86's MXCSR")

AVX2 = CpuTarget("znver3", "+avx,+avx2,+fma,-avx512f")


def _clamps_before(monkeypatch) -> None:
    """The clamps as before session 20 underflow: -104 for all three."""
    for name, value in (("EXP_FLOOR", -104.0), ("ONE_PLUS_EXP_FLOOR", -104.0)):
        monkeypatch.setattr(mathlib, name, value)


def _floats(*values: float) -> np.ndarray:
    return np.array(values * 8, dtype=np.float32)


#: (function, large-magnitude inputs, their exact results' bits as float32)
CASES = [
    ("exp", _floats(-np.inf, -3e38, -1e4, -200.0, -176.0, -175.5), 0.0),
    ("sigmoid", _floats(np.inf, 3e38, 1e4, 200.0, 95.0, 86.0), 1.0),
]


@pytest.mark.parametrize("name, x, result", CASES)
def test_avx2s_large_magnitudes_do_not_underflow(name, x, result, monkeypatch):
    flags, y = with_flags(name, AVX2, x)
    assert not flags & UNDERFLOW
    assert (y.view(np.uint32) == np.float32(result).view(np.uint32)).all()
    # the probe sees the product's underflow with the clamp at -104, giving the same bits
    _clamps_before(monkeypatch)
    flags, y = with_flags(name, AVX2, x)
    assert flags & UNDERFLOW
    assert (y.view(np.uint32) == np.float32(result).view(np.uint32)).all()


def test_avx2s_gelu_tanh_of_large_positive_inputs_is_x_without_underflow(monkeypatch):
    x = _floats(np.inf, 3e38, 1e4, 200.0, 20.0, 11.0)
    flags, y = with_flags("gelu_tanh", AVX2, x)
    assert not flags & UNDERFLOW
    assert (y == x).all()
    _clamps_before(monkeypatch)
    flags, y = with_flags("gelu_tanh", AVX2, x)
    assert flags & UNDERFLOW and (y == x).all()


@pytest.mark.parametrize("name", ["exp", "sigmoid", "gelu_tanh"])
def test_avx2s_clamps_keep_every_results_bits(name, monkeypatch):
    """Every 4099th float bit pattern and the specials give the bits of the clamp at -104 (an exhaustive count over
    all 2**32 found no difference either: docs/performance-history.md, session 20 underflow)."""
    bits = np.concatenate([np.arange(0, 2 ** 32, 4099, dtype=np.uint64).astype(np.uint32),
                           np.array([0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x80000000], dtype=np.uint32)])
    x = bits.view(np.float32)
    _, now = with_flags(name, AVX2, x)
    _clamps_before(monkeypatch)
    _, before = with_flags(name, AVX2, x)
    assert (now.view(np.uint32) == before.view(np.uint32)).all()
