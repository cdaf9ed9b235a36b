"""Streamed bf16 rows' converted words tested once a row (``CpuTarget.tests_converted_bf16_words_by_row``,
``map_stages.MapStages._words_tested_by_row``): the words untested, their lowest doubled word kept by ``vpminuw``
as the pieces stream, the row written again by the tested loop where a word is +-0; the same bits."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from test_bf16_rounding import SAPPHIRE_RAPIDS, ZEN4, _float32_patterns
from test_bf16_word_test import _scaled_cast_graph
from test_bf16_words import _same_bits_with_it_off
from test_pairs import AVX2, _softmax_bits, layernorm_graph, to_bits
from test_widened_exp_rows import _assembly

from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware import host
from neuroncc.hardware.host import CpuTarget, host_cpu

PROPERTY = "tests_converted_bf16_words_by_row"
COLS = 1024


def test_zen4_tests_streamed_rows_once_and_others_as_before():
    # Zen 4: the write loops of bf16 softmax and LayerNorm (streamed) keep a vpminuw and no test or branch; the
    # tested loop only behind the row's one vptestnmw. Sapphire Rapids (AVX-512 FP16) and Zen 3 untouched.
    assert CpuTarget("znver4", ZEN4).tests_converted_bf16_words_by_row
    assert not CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS).tests_converted_bf16_words_by_row
    assert not CpuTarget("znver3", AVX2).tests_converted_bf16_words_by_row
    for fn in (_softmax_bits(4096, COLS), layernorm_graph(8192, COLS)):
        text, asm = _assembly(fn, CpuTarget("znver4", ZEN4))
        assert ".untested" in text
        blocks = re.split(r"\n\.LBB\d+_\d+:", asm)
        loops = [block.split("\tjne\t")[0] for block in blocks if "vpminuw" in block]  # (to the back edge)
        assert loops and all("vcvtne2ps2bf16" in loop and "vptestnmw" not in loop and "kortest" not in loop
                             and "vmovntdq" in loop for loop in loops)
        assert "vptestnmw" in asm and re.search(r"vfpclassps\s+\$32", asm)  # (the rows written again)
        for other in (CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS), CpuTarget("znver3", AVX2)):
            assert ".untested" not in _assembly(fn, other)[0]


def _rows_with_specials(rng) -> np.ndarray:
    """Rows of normal values, each of the first ones holding one special value at a random column (a subnormal of
    either sign, a zero of either sign, an infinity, a NaN), then every pattern of ``_float32_patterns``, rows
    shuffled: rows that write their words once beside rows written again."""
    normal = rng.standard_normal((1024, COLS)).astype(np.float32) + np.float32(4)
    specials = np.array([0x00000001, 0x80400000, 0x007FFFFF, 0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00001],
                        np.uint32).view(np.float32)
    for row in range(0, 256):
        normal[row, rng.integers(0, COLS)] = specials[row % specials.size]
    x = np.concatenate([normal, _float32_patterns(rng).reshape(-1, COLS)])
    return x[rng.permutation(x.shape[0])]


@pytest.mark.skipif(not host_cpu().tests_converted_bf16_words_by_row, reason="the host does not take it")
def test_rows_holding_zeros_or_denormals_are_written_again_with_the_same_bits(rng, monkeypatch):
    # an output of more than 4 MiB and a host of a 1 MB last-level cache: the rows stream; the products' words
    # against the interpreter's and against the build testing every pair (the property off)
    monkeypatch.setattr(host, "_HOST", [dataclasses.replace(host.host_cpu(), last_level_cache_bytes=1 << 20)])
    x = _rows_with_specials(rng)
    scales = np.array([1.0, -1.0, 2.0 ** -3, 2.0 ** -20, -(2.0 ** -40), 3.5, 2.0 ** 100], np.float32)
    w = np.ones(COLS, np.float32)
    w[rng.integers(0, COLS, 64)] = scales[rng.integers(0, scales.size, 64)]
    fn = _scaled_cast_graph(x.shape[0], COLS)
    _same_bits_with_it_off(monkeypatch, fn, x, to_bits(w), PROPERTY, ".untested")


@pytest.mark.skipif(not host_cpu().tests_converted_bf16_words_by_row, reason="the host does not take it")
def test_softmax_and_layernorm_rows_with_denormal_results_keep_their_bits(rng, monkeypatch):
    # bf16 softmax rows whose smallest results are denormal (x - max near -90) or zero (-inf), and LayerNorm rows
    # scaled into the denormals by a weight of 2^-130 in some columns: the same words as with every pair tested
    monkeypatch.setattr(host, "_HOST", [dataclasses.replace(host.host_cpu(), last_level_cache_bytes=1 << 20)])
    rows = 2048
    x = rng.standard_normal((rows, COLS)).astype(np.float32)
    x[::7, rng.integers(0, COLS)] = -90.0
    x[::11, rng.integers(0, COLS)] = -np.inf
    x[::13, :] -= np.linspace(0, 100, COLS, dtype=np.float32)
    w = np.ones(COLS, np.float32) + rng.random(COLS).astype(np.float32)
    w[rng.integers(0, COLS, 16)] = np.float32(2.0 ** -130)
    cases = [(_softmax_bits(rows, COLS), [to_bits(x)]),
             (layernorm_graph(rows, COLS), [to_bits(x * 3), to_bits(w), to_bits(rng.standard_normal(COLS).astype(
                 np.float32) * np.float32(2.0 ** -128))])]
    for fn, inputs in cases:
        assert ".untested" in "".join(_assembly(fn, host_cpu()))
        (got,) = build_cpu_executable(fuse_whole_function(fn), {"threads": 2})(*inputs)
        with monkeypatch.context() as off:
            off.setattr(CpuTarget, PROPERTY, property(lambda self: False))
            (want,) = build_cpu_executable(fuse_whole_function(fn), {"threads": 2})(*inputs)
        np.testing.assert_array_equal(got, want)
        words = got.view(np.uint16)
        assert (((words & 0x7F80) == 0) & ((words & 0x7F) != 0)).any()  # (denormal words met)
