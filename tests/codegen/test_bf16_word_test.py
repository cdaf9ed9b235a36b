"""Converted bf16 pairs' denormals found in the conversion's words
(``CpuTarget.tests_converted_bf16_pairs_by_their_words``, ``codegen/llvm/bf16_words.py``): one ``vptestnmw`` per
pair of vectors instead of two ``vfpclassps``, the same bits."""

from __future__ import annotations

import re

import numpy as np
import pytest
from test_bf16_rounding import SAPPHIRE_RAPIDS, ZEN4, _float32_patterns
from test_bf16_words import _assembly, _same_bits_with_it_off
from test_pairs import AVX2, affine_graph, to_bits

from neuroncc.hardware.host import CpuTarget, host_cpu
from neuroncc.ir import Builder, DType, Function, TensorType
from neuroncc.testing.choices import choose

PROPERTY = "tests_converted_bf16_pairs_by_their_words"


def _scaled_cast_graph(rows: int, cols: int) -> Function:
    """float32 x cast to bf16, times a bf16 weight per column, the product cast to bf16 (a cast's rounding without
    the NaN case: the converted pair function's words)."""
    b = Builder("scaled")
    x = b.param(TensorType((rows, cols), DType.f32), "x")
    w = b.op("cast", b.op("bitcast", b.param(TensorType((cols,), DType.i16), "w"), dtype=DType.bf16), dtype=DType.f32)
    rounded = b.op("cast", b.op("cast", x, dtype=DType.bf16), dtype=DType.f32)
    return b.build([b.op("bitcast", b.op("cast", b.op("mul", rounded, w), dtype=DType.bf16), dtype=DType.i16)])


def test_zen4_tests_the_words_and_others_their_inputs(monkeypatch):
    # Zen 4: the conversion's words tested by one vptestnmw per pair of vectors, its mask loaded outside the loop
    # (no broadcast from a general register in it); vfpclassps only behind that branch. Sapphire Rapids keeps the two
    # vfpclassps before the conversion; Zen 3 has no conversion; Zen 4 with the property off as before.
    assert CpuTarget("znver4", ZEN4).tests_converted_bf16_pairs_by_their_words
    assert not CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS).tests_converted_bf16_pairs_by_their_words
    assert not CpuTarget("znver3", AVX2).tests_converted_bf16_pairs_by_their_words
    fn = affine_graph(64, 1024)
    _, asm = _assembly(fn, CpuTarget("znver4", ZEN4))
    blocks = re.split(r"\n\.LBB\d+_\d+:", asm)
    tested = [block for block in blocks if "vptestnmw" in block]
    assert tested and all("vcvtne2ps2bf16" in block and "vfpclassps" not in block and "vcmpeqps" not in block
                          and not re.search(r"vpbroadcastd\s+%e", block) for block in tested)
    assert re.search(r"vfpclassps\s+\$32", asm)
    _, asm = _assembly(fn, CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS))
    assert "vptestnmw" not in asm and re.search(r"vfpclassps\s+\$32", asm)
    choose(monkeypatch, **{PROPERTY: False})
    _, asm = _assembly(fn, CpuTarget("znver4", ZEN4))
    assert "vptestnmw" not in asm and re.search(r"vfpclassps\s+\$32", asm)


@pytest.mark.skipif(not host_cpu().tests_converted_bf16_pairs_by_their_words, reason="the host does not take it")
@pytest.mark.parametrize("cols", [1024, 2 * 16 * 3 + 2 * 5])  # whole vectors of pairs; and a scalar remainder
def test_the_words_test_rounds_every_pattern_as_the_input_test(rng, monkeypatch, cols):
    # products of every pattern (subnormals of both signs, zeros of both signs, ties, the overflow edge, infinities,
    # NaN payloads, random ones) with weights of 1, -1, powers of two that make subnormals of normal values (with
    # bits below the kept half: their rounding) and 3.5 (ties); vectors of zeros beside them (the padding) and alone
    x = _float32_patterns(rng).reshape(-1)
    if cols % 32:
        x = x[::23]
    x = np.concatenate([x, np.zeros(-x.size % cols, np.float32)]).reshape(-1, cols)
    x[::5, :cols // 2] = -0.0
    scales = np.array([1.0, -1.0, 2.0 ** -3, 2.0 ** -20, -(2.0 ** -40), 3.5, 2.0 ** 100], np.float32)
    w = to_bits(scales[rng.integers(0, scales.size, cols)])
    fn = _scaled_cast_graph(x.shape[0], cols)
    assert "vptestnmw" in _assembly(fn, host_cpu())[1]
    _same_bits_with_it_off(monkeypatch, fn, x, w, PROPERTY, "vptestnmw")
