"""bf16 softmax's sum of its row-cached exponentials in a loop of its own on AVX2
(``CpuTarget.sums_paired_row_caches_apart``, ``stages._Reducer._sums_row_cache_apart``): the paired exp loop, four
words and eight chains of exp in 16 registers, no longer keeps four partial sums beside them; the sum reads the
row cache (in pair order) in a paired loop after it. AVX-512's code does not change."""

from __future__ import annotations

import re

import numpy as np
from codegen_helpers import assert_matches, special_floats
from test_bf16_rounding import ZEN4
from test_bf16_words import _assembly
from test_pairs import AVX2, _softmax_bits, from_bits, to_bits

from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import CpuTarget
from neuroncc.ir import DType, interpret
from neuroncc.testing.choices import choose


def _summed_from_memory(asm: str) -> int:
    """The vector adds that take their operand from memory (the sum's loop over the row cache)."""
    return len(re.findall(r"vaddps\s+-?\d*\(%r\w+(,%r\w+)?(,\d)?\),\s*%ymm", asm))


def test_avx2_sums_the_paired_exponentials_apart_and_avx512_as_before(monkeypatch):
    fn = _softmax_bits(64, 1024)
    avx2 = _assembly(fn, CpuTarget("znver3", AVX2))[1]
    zen4 = _assembly(fn, CpuTarget("znver4", ZEN4))
    choose(monkeypatch, sums_paired_row_caches_apart=False)
    assert _summed_from_memory(avx2) >= 4 and _summed_from_memory(_assembly(fn, CpuTarget("znver3", AVX2))[1]) == 0
    choose(monkeypatch, sums_paired_row_caches_apart=True)
    assert _assembly(fn, CpuTarget("znver4", ZEN4)) == zen4  # (32 registers: AVX-512 never sums apart)


def test_paired_sums_apart_give_softmax(rng):
    for cols in (1024, 2 * 8 * 5 + 2 * 3):  # whole vectors of pairs; and a scalar remainder
        fn = _softmax_bits(37, cols)
        inputs = [to_bits(special_floats(rng, (37, cols)))]
        (got,) = build_cpu_executable(fuse_whole_function(fn), {"threads": 2})(*inputs)
        assert_matches(from_bits(got), from_bits(interpret(fn, inputs)[0]), DType.bf16, "softmax")
        finite = to_bits((rng.standard_normal((37, cols)) * 4).astype(np.float32))
        (got,) = build_cpu_executable(fuse_whole_function(fn), {"threads": 2})(finite)
        assert_matches(from_bits(got), from_bits(interpret(fn, [finite])[0]), DType.bf16, "softmax")
