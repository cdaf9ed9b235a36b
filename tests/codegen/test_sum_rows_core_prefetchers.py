"""A cheap row loop of a float32 row's float sum and then its write (RMSNorm) sends no bursts of the next row's lines
on Zen 4 (``CpuTarget.leaves_sum_rows_to_the_core_prefetchers``): the core's prefetchers fetch the rows, the page
touches ahead stay; LayerNorm's rows, a row max's, and AVX2's and Intel's code keep their bursts; the same bits
either way."""

from __future__ import annotations

import numpy as np

from codegen_helpers import run_both
from test_bf16_rounding import SAPPHIRE_RAPIDS, ZEN4
from test_bf16_words import _assembly
from test_pairs import AVX2
from test_row_pass_bursts import PREFETCH, no_page_touches, rmsnorm, var_mean_layernorm

from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import CpuTarget
from neuroncc.ir import Builder, DType, Function, TensorType
from neuroncc.testing.choices import choose

ZEN4_TARGET = CpuTarget("znver4", ZEN4)


def _bursts(monkeypatch) -> None:
    choose(monkeypatch, leaves_sum_rows_to_the_core_prefetchers=False)


def _divided_by(reduction: str, rows: int, cols: int) -> Function:
    """x / reduction(x) over each row (a float sum, or a row max)."""
    b = Builder("normalized")
    x = b.param(TensorType((rows, cols), DType.f32), "x")
    return b.build([b.op("div", x, b.op(reduction, x, dims=(1,), keepdim=True))])


def test_only_zen4_leaves_sum_rows_to_the_core():
    assert ZEN4_TARGET.leaves_sum_rows_to_the_core_prefetchers
    assert not CpuTarget("znver3", AVX2).leaves_sum_rows_to_the_core_prefetchers
    assert not CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS).leaves_sum_rows_to_the_core_prefetchers


def test_zen4_rmsnorm_sends_no_bursts_but_touches_its_pages(monkeypatch):
    fn = rmsnorm(64, 1024)
    asm = _assembly(fn, ZEN4_TARGET)[1]
    assert "prefetchnta" in asm and "prefetcht0" not in asm  # (the input's page 8 rows ahead)
    no_page_touches(monkeypatch)
    assert _assembly(fn, ZEN4_TARGET)[0].count(PREFETCH) == 0
    _bursts(monkeypatch)
    ir_bursts, asm_bursts = _assembly(fn, ZEN4_TARGET)
    assert ir_bursts.count(PREFETCH) == 2 and asm_bursts.count("prefetcht0") == 2  # (32 lines before each pass)


def test_a_row_sum_takes_it_and_a_row_max_does_not(monkeypatch):
    no_page_touches(monkeypatch)
    assert _assembly(_divided_by("sum", 64, 1024), ZEN4_TARGET)[0].count(PREFETCH) == 0
    assert _assembly(_divided_by("amax", 64, 1024), ZEN4_TARGET)[0].count(PREFETCH) == 2


def test_layernorm_and_other_cpus_keep_their_bursts(monkeypatch):
    cases = [(var_mean_layernorm(64, 1024), ZEN4_TARGET), (rmsnorm(64, 1024), CpuTarget("znver3", AVX2)),
             (rmsnorm(64, 1024), CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS))]
    texts = [_assembly(fn, target)[0] for fn, target in cases]
    no_page_touches(monkeypatch)
    assert [_assembly(fn, target)[0].count(PREFETCH) for fn, target in cases[1:]] == [2, 2]
    monkeypatch.undo()
    _bursts(monkeypatch)
    assert texts == [_assembly(fn, target)[0] for fn, target in cases]


def test_no_bursts_give_the_same_bits(rng, monkeypatch):
    for cols in (1024, 8 * 5 + 3):  # whole vectors; and a scalar remainder
        fn = rmsnorm(37, cols)
        x = (rng.standard_normal((37, cols)) * 2.0 + 0.5).astype(np.float32)
        w = rng.standard_normal(cols).astype(np.float32)
        for threads in (1, 2):
            without = build_cpu_executable(fn, {"threads": threads})(x, w)
            _bursts(monkeypatch)
            bursts = build_cpu_executable(fn, {"threads": threads})(x, w)
            monkeypatch.undo()
            for got, want in zip(without, bursts, strict=True):
                np.testing.assert_array_equal(got, want)
        run_both(fn, [x, w], threads=1)  # (against the reference interpreter)
