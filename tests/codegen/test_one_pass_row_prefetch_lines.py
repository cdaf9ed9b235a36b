"""A row loop whose float32 variance takes one pass prefetches only the next row's first lines on Zen 4
(``CpuTarget.one_pass_row_prefetch_lines``: 16 of a 1024-element row's 64, in one burst before the statistics; the
core's prefetchers fetch the rest); the bursts of every other row loop, and AVX2's and Intel's, are as before; the
same bits either way."""

from __future__ import annotations


import numpy as np

from codegen_helpers import run_both
from test_bf16_rounding import SAPPHIRE_RAPIDS, ZEN4
from test_bf16_words import _assembly
from test_pairs import AVX2
from test_row_pass_bursts import PREFETCH, no_page_touches, rmsnorm, var_mean_layernorm

from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import CpuTarget
from neuroncc.testing.choices import choose


def _all_lines(monkeypatch) -> None:
    choose(monkeypatch, one_pass_row_prefetch_lines=0)




def test_only_zen4_prefetches_the_first_lines_alone():
    assert CpuTarget("znver4", ZEN4).one_pass_row_prefetch_lines == 16
    assert CpuTarget("znver3", AVX2).one_pass_row_prefetch_lines == 0
    assert CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS).one_pass_row_prefetch_lines == 0


def test_zen4_layernorm_prefetches_its_next_rows_first_16_lines_in_one_burst(monkeypatch):
    fn = var_mean_layernorm(64, 1024)
    zen4 = CpuTarget("znver4", ZEN4)
    no_page_touches(monkeypatch)
    ir_text, asm = _assembly(fn, zen4)
    assert ir_text.count(PREFETCH) == 1 and asm.count("prefetcht0") == 1
    assert "cmpq\t$1024, %" in asm[asm.index("prefetcht0"):]  # (16 lines of 64 bytes)
    _all_lines(monkeypatch)
    ir_all, _ = _assembly(fn, zen4)
    assert ir_all.count(PREFETCH) == 2  # (32 lines before the statistics, 32 before the write)


def test_other_row_loops_and_other_cpus_keep_their_bursts(monkeypatch):
    cases = [(rmsnorm(64, 1024), CpuTarget("znver4", ZEN4)), (var_mean_layernorm(64, 1024), CpuTarget("znver3", AVX2)),
             (var_mean_layernorm(64, 1024), CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS))]
    texts = [_assembly(fn, target)[0] for fn, target in cases]
    _all_lines(monkeypatch)
    assert texts == [_assembly(fn, target)[0] for fn, target in cases]


def test_the_first_lines_alone_give_the_same_bits(rng, monkeypatch):
    fn = var_mean_layernorm(37, 1024)
    x = (rng.standard_normal((37, 1024)) * 2.0 + 0.5).astype(np.float32)
    w = rng.standard_normal(1024).astype(np.float32)
    b = rng.standard_normal(1024).astype(np.float32)
    for threads in (1, 2):
        first = build_cpu_executable(fn, {"threads": threads})(x, w, b)
        _all_lines(monkeypatch)
        every = build_cpu_executable(fn, {"threads": threads})(x, w, b)
        monkeypatch.undo()
        for got, want in zip(first, every, strict=True):
            np.testing.assert_array_equal(got, want)
    run_both(fn, [x, w, b], threads=1)  # (against the reference interpreter)
