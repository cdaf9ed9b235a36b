"""bf16 rows widened to float32 once per row on AVX-512 (``CpuTarget.caches_widened_bf16_rows``,
``refine.widened_row_cache``): bf16 LayerNorm's mean pass stores the widened row into a float32 row cache, its
deviation and write passes load it there; the bits are those of the code that widens in every pass."""

from __future__ import annotations

import re

import numpy as np
from test_bf16_rounding import ZEN4
from test_bf16_words import _assembly
from test_pairs import AVX2, layernorm_graph, to_bits

from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import CpuTarget
from neuroncc.testing.choices import choose, choose_by


def _widenings(asm: str) -> int:
    """The word shifts that widen bf16 halves (even elements) in the kernel's loops."""
    return len(re.findall(r"vpslld\s+\$16", asm))


def test_zen4_widens_layernorm_rows_once_and_avx2_as_before(monkeypatch):
    fn = layernorm_graph(64, 1024)
    # (Zen 4's write pass loads the cached deviations and its mean passes run a row early since session 33: off here,
    # the row cache alone then spares the deviation and write passes' widening)
    choose_by(monkeypatch, **{decision: lambda target: not target.has("avx512f")
                              for decision in ("caches_variance_deviations", "means_a_row_early")})
    on = _assembly(fn, CpuTarget("znver4", ZEN4))
    avx2 = _assembly(fn, CpuTarget("znver3", AVX2))
    choose(monkeypatch, caches_widened_bf16_rows=False)
    off = _assembly(fn, CpuTarget("znver4", ZEN4))
    assert avx2 == _assembly(fn, CpuTarget("znver3", AVX2))  # AVX2's code does not change
    # x's widening in the mean pass only (and the weight's and bias's, before the rows), not in all three passes
    assert _widenings(on[1]) < _widenings(off[1])
    assert on[0].count("alloca [1024 x float], align 4096") == off[0].count("alloca [1024 x float], align 4096") + 1


def test_widened_rows_give_the_same_bits(rng, monkeypatch):
    for cols in (1024, 2 * 16 * 3 + 2 * 5):  # whole vectors of pairs; and a scalar remainder
        fn = fuse_whole_function(layernorm_graph(67, cols))
        inputs = [to_bits((rng.standard_normal(s) * 3 + 1).astype(np.float32)) for s in ((67, cols), (cols,), (cols,))]
        got = build_cpu_executable(fn, {"threads": 2})(*inputs)
        with monkeypatch.context() as m:
            m.setattr(CpuTarget, "caches_widened_bf16_rows", property(lambda self: False))
            want = build_cpu_executable(fn, {"threads": 2})(*inputs)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)
