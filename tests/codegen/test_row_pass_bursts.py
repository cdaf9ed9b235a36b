"""A cheap row loop's next-row prefetches in a burst before each pass over the row on AVX2 and Zen 4
(``CpuTarget.bursts_before_each_row_pass``): float32 LayerNorm as torch.compile hands it over (a var and a mean of
x, one stage of two passes: ``stages.SharedMean``) prefetches a 64-line row in three bursts (22/22/20 lines, before
its mean, deviation and write passes) instead of two of 32; bf16 LayerNorm's 32 lines (too few for a burst of
``MEMORY_BURST_LINES`` before each pass), RMSNorm and the code of Intel's AVX-512 cores are unchanged."""

from __future__ import annotations

import numpy as np
from codegen_helpers import run_both
from test_bf16_rounding import SAPPHIRE_RAPIDS, ZEN4
from test_bf16_words import _assembly
from test_pairs import AVX2, layernorm_graph

from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import CpuTarget
from neuroncc.ir import Builder, DType, Function, TensorType
from neuroncc.testing.choices import choose

PREFETCH = 'call void @"llvm.prefetch.p0"'


def no_page_touches(monkeypatch) -> None:
    """Zen 4's row loops without their prefetches of the pages ahead (``test_touch_pages_ahead.py``'s subject): the
    prefetches these tests count are the others."""
    choose(monkeypatch, touches_input_pages_rows_ahead=0, touches_streamed_output_rows_ahead=0)


def var_mean_layernorm(rows: int, cols: int) -> Function:
    """F.layer_norm on float32 as torch.compile hands it to the backend: a var and a mean of x."""
    b = Builder("layernorm")
    x = b.param(TensorType((rows, cols), DType.f32), "x")
    w = b.param(TensorType((cols,), DType.f32), "w")
    bias = b.param(TensorType((cols,), DType.f32), "b")
    var = b.op("var", x, dims=(1,), keepdim=True, correction=0.0)
    mean = b.op("mean", x, dims=(1,), keepdim=True)
    rstd = b.op("rsqrt", b.op("add", var, b.op("full", shape=(), dtype=DType.f32, value=1e-5)))
    return b.build([b.op("add", b.op("mul", b.op("mul", b.op("sub", x, mean), rstd), w), bias)])


def rmsnorm(rows: int, cols: int) -> Function:
    b = Builder("rmsnorm")
    x = b.param(TensorType((rows, cols), DType.f32), "x")
    w = b.param(TensorType((cols,), DType.f32), "w")
    ms = b.op("mean", b.op("mul", x, x), dims=(1,), keepdim=True)
    rms = b.op("rsqrt", b.op("add", ms, b.op("full", shape=(), dtype=DType.f32, value=1e-6)))
    return b.build([b.op("mul", b.op("mul", x, rms), w)])


def _off(monkeypatch) -> None:
    choose(monkeypatch, bursts_before_each_row_pass=False)


def _two_passes(monkeypatch) -> None:
    """The variance's mean and deviations in passes of their own (Zen 4 takes them in one: ``shifted_moments.py``,
    whose row has a burst before each of its two passes, ``test_one_pass_variance.py``)."""
    choose(monkeypatch, takes_the_variance_in_one_pass=False)


def test_layernorm_prefetches_a_burst_before_each_of_its_three_passes_on_avx2_and_zen4(monkeypatch):
    fn = var_mean_layernorm(64, 1024)
    for target in (CpuTarget("znver3", AVX2), CpuTarget("znver4", ZEN4)):
        monkeypatch.undo()
        _two_passes(monkeypatch)
        no_page_touches(monkeypatch)
        assert target.bursts_before_each_row_pass
        on, asm = _assembly(fn, target)
        _off(monkeypatch)
        off, _ = _assembly(fn, target)
        # a loop of prefetches before the mean, the deviation and the write pass (before: the first two together)
        assert on.count(PREFETCH) == 3 and off.count(PREFETCH) == 2
        assert asm.count("prefetcht0") == 3
        mean_pass, deviation_pass = asm.index("vaddps"), asm.index("vsubps")
        assert asm.index("prefetcht0") < mean_pass < asm.index("prefetcht0", mean_pass) < deviation_pass


def test_intel_avx512_layernorm_bf16_layernorm_and_rmsnorm_code_is_unchanged(monkeypatch):
    layernorm, avx2 = var_mean_layernorm(64, 1024), CpuTarget("znver3", AVX2)
    intel = CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS)
    assert not intel.bursts_before_each_row_pass
    default_intel, default_rms = _assembly(layernorm, intel), _assembly(rmsnorm(64, 1024), avx2)
    default_bf16 = _assembly(layernorm_graph(64, 1024), avx2)
    assert default_intel[0].count(PREFETCH) == 2
    _off(monkeypatch)
    assert _assembly(layernorm, intel) == default_intel
    assert _assembly(rmsnorm(64, 1024), avx2) == default_rms  # (one pass per stage: a burst per stage as before)
    assert _assembly(layernorm_graph(64, 1024), avx2) == default_bf16  # (32 lines: 16/16 before two passes)


def test_the_bursts_give_the_same_bits(rng, monkeypatch):
    for cols in (1024, 8 * 5 + 3):  # whole vectors; and a scalar remainder
        fn = fuse_whole_function(var_mean_layernorm(67, cols))
        inputs = [(rng.standard_normal(s) * 3 + 1).astype(np.float32) for s in ((67, cols), (cols,), (cols,))]
        choose(monkeypatch, bursts_before_each_row_pass=True)
        _, got = run_both(fn, inputs)  # against the reference interpreter
        _off(monkeypatch)
        want = build_cpu_executable(fn, {"threads": 2})(*inputs)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)
