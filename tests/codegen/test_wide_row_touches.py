"""Zen 4's cheap row loops (LayerNorm, RMSNorm) touch the pages ahead of rows longer than the 16 KiB they prefetch,
up to ``CpuTarget.touches_wide_row_pages_up_to_bytes`` (32 KiB: 8192 float32, a 70B LLaMA's width): one
``prefetchnta`` per 4 KiB page of the input's row 8 rows ahead and of the streamed output's 2 rows ahead, no line
prefetches; rows of 1024 floats, longer rows, softmax's wide rows and AVX2's and Intel's code as before; the same
bits either way."""

from __future__ import annotations

import numpy as np

from codegen_helpers import run_both
from test_bf16_rounding import SAPPHIRE_RAPIDS, ZEN4
from test_bf16_words import _assembly
from test_delayed_write_order import _softmax
from test_pairs import AVX2
from test_row_pass_bursts import rmsnorm, var_mean_layernorm

from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import CpuTarget
from neuroncc.testing.choices import choose

ZEN4_TARGET = CpuTarget("znver4", ZEN4)
ROWS = 300


def _off(monkeypatch) -> None:
    choose(monkeypatch, touches_wide_row_pages_up_to_bytes=0)


def test_only_zen4_touches_wide_rows():
    assert ZEN4_TARGET.touches_wide_row_pages_up_to_bytes == 32768
    assert CpuTarget("znver3", AVX2).touches_wide_row_pages_up_to_bytes == 0
    assert CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS).touches_wide_row_pages_up_to_bytes == 0


def test_zen4_norms_touch_the_pages_of_rows_of_8192_floats(monkeypatch):
    for fn in (rmsnorm(ROWS, 8192), var_mean_layernorm(ROWS, 8192)):
        asm = _assembly(fn, ZEN4_TARGET)[1]
        # (the input row's 8 pages, no lines; the output is not streamed here: no aligned arguments)
        assert asm.count("prefetchnta") == 8 and "prefetcht0" not in asm
    _off(monkeypatch)
    for fn in (rmsnorm(ROWS, 8192), var_mean_layernorm(ROWS, 8192)):
        assert "prefetch" not in _assembly(fn, ZEN4_TARGET)[1]


def test_other_rows_and_cpus_keep_their_code(monkeypatch):
    cases = [(rmsnorm(ROWS, 1024), ZEN4_TARGET), (var_mean_layernorm(ROWS, 1024), ZEN4_TARGET),
             (rmsnorm(ROWS, 16384), ZEN4_TARGET), (_softmax(ROWS, 8192), ZEN4_TARGET),
             (rmsnorm(ROWS, 8192), CpuTarget("znver3", AVX2)),
             (var_mean_layernorm(ROWS, 8192), CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS))]
    texts = [_assembly(fn, target)[0] for fn, target in cases]
    _off(monkeypatch)
    assert texts == [_assembly(fn, target)[0] for fn, target in cases]


def test_the_touches_give_the_same_bits(rng, monkeypatch):
    for make, cols in ((rmsnorm, 8192), (var_mean_layernorm, 8192), (rmsnorm, 8000 + 3)):  # (a scalar remainder)
        fn = make(37, cols)
        x = (rng.standard_normal((37, cols)) * 2.0 + 0.5).astype(np.float32)
        weights = [rng.standard_normal(cols).astype(np.float32) for _ in fn.params[1:]]
        for threads in (1, 2):
            touched = build_cpu_executable(fn, {"threads": threads})(x, *weights)
            _off(monkeypatch)
            untouched = build_cpu_executable(fn, {"threads": threads})(x, *weights)
            monkeypatch.undo()
            for got, want in zip(touched, untouched, strict=True):
                np.testing.assert_array_equal(got, want)
        run_both(fn, [x, *weights], threads=1)  # (against the reference interpreter)
