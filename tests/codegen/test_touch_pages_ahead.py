"""On Zen 4 a row loop prefetches one line of each 4 KiB page of its prefetched inputs' row 8 rows ahead and of its
streamed outputs' row 2 rows ahead (``CpuTarget.touches_input_pages_rows_ahead``,
``touches_streamed_output_rows_ahead``; ``prefetch.emit_touch_pages_ahead``), so that the pages' translations are
in the TLB before the row's own prefetches and non-temporal stores reach them; AVX2 and Intel's AVX-512 cores emit
none; a row loop of one memory-bound pass (x*w+b) touches too (``touches_one_pass_rows``); the same bits either
way."""

from __future__ import annotations

import numpy as np

from codegen_helpers import run_both
from test_bf16_rounding import SAPPHIRE_RAPIDS, ZEN4
from test_delayed_write_order import _softmax
from test_pairs import AVX2
from test_row_pass_bursts import no_page_touches, rmsnorm, var_mean_layernorm
from test_widened_exp_rows import _assembly

from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import CpuTarget
from neuroncc.ir import Builder, DType, TensorType
from neuroncc.testing.choices import choose

TOUCH = "i32 0, i32 0, i32 1)"  # (llvm.prefetch's read, no locality, data: prefetchnta)


def test_only_zen4_touches_pages_ahead():
    zen4, avx2 = CpuTarget("znver4", ZEN4), CpuTarget("znver3", AVX2)
    intel = CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS)
    assert (zen4.touches_input_pages_rows_ahead, zen4.touches_streamed_output_rows_ahead) == (8, 2)
    for target in (avx2, intel):
        assert (target.touches_input_pages_rows_ahead, target.touches_streamed_output_rows_ahead) == (0, 0)


def test_zen4_softmax_touches_its_input_8_rows_and_its_output_2_rows_ahead(monkeypatch):
    fn = _softmax(4096, 1024)  # (16 MiB each way: the output streamed)
    ir_text, asm = _assembly(fn, CpuTarget("znver4", ZEN4))
    assert ir_text.count(TOUCH) == 2
    assert sorted(line.split()[1].split("(")[0] for line in asm.splitlines() if "prefetchnta" in line) == \
        ["32768", "8192"]  # (8 and 2 rows of 4 KiB)
    assert _assembly(var_mean_layernorm(4096, 1024), CpuTarget("znver4", ZEN4))[0].count(TOUCH) == 2
    no_page_touches(monkeypatch)
    assert TOUCH not in _assembly(fn, CpuTarget("znver4", ZEN4))[0]


def test_other_cpus_touch_nothing():
    for fn in (_softmax(4096, 1024), var_mean_layernorm(4096, 1024)):
        for target in (CpuTarget("znver3", AVX2), CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS)):
            assert TOUCH not in _assembly(fn, target)[0]


def test_touching_pages_ahead_gives_the_same_bits(rng, monkeypatch):
    x = (rng.standard_normal((4096, 1024)) * 3.0).astype(np.float32)
    w = rng.standard_normal(1024).astype(np.float32)
    b = rng.standard_normal(1024).astype(np.float32)
    cases = [(_softmax(4096, 1024), [x]), (var_mean_layernorm(4096, 1024), [x, w, b]), (rmsnorm(4096, 1024), [x, w])]
    for fn, args in cases:
        for threads in (1, 2):
            touched = build_cpu_executable(fn, {"threads": threads})(*args)
            no_page_touches(monkeypatch)
            plain = build_cpu_executable(fn, {"threads": threads})(*args)
            monkeypatch.undo()
            for got, want in zip(touched, plain, strict=True):
                np.testing.assert_array_equal(got, want)
    run_both(_softmax(37, 1024), [x[:37]], threads=1)  # (against the reference interpreter)


def _scale_shift(rows: int, cols: int):
    b = Builder("scale_shift")
    x = b.param(TensorType((rows, cols), DType.f32), "x")
    w = b.param(TensorType((cols,), DType.f32), "w")
    bias = b.param(TensorType((cols,), DType.f32), "b")
    return b.build([b.op("add", b.op("mul", x, w), bias)])


def test_a_streamed_one_pass_map_touches_its_rows_pages_on_zen4_only(rng, monkeypatch):
    zen4 = CpuTarget("znver4", ZEN4)
    _, asm = _assembly(_scale_shift(8192, 1024), zen4)  # (32 MiB each way: the output streamed)
    assert sorted(line.split()[1].split("(")[0] for line in asm.splitlines() if "prefetchnta" in line) == \
        ["32768", "8192"]
    assert TOUCH not in _assembly(_scale_shift(64, 1024), zen4)[0]  # (in cache: not streamed)
    assert TOUCH not in _assembly(_scale_shift(8192, 1024), CpuTarget("znver3", AVX2))[0]
    choose(monkeypatch, touches_one_pass_rows=False)
    assert TOUCH not in _assembly(_scale_shift(8192, 1024), zen4)[0]
    monkeypatch.undo()
    fn = _scale_shift(8192, 1024)
    args = [rng.standard_normal((8192, 1024)).astype(np.float32), rng.standard_normal(1024).astype(np.float32),
            rng.standard_normal(1024).astype(np.float32)]
    touched = build_cpu_executable(fn, {"threads": 1})(*args)
    no_page_touches(monkeypatch)
    np.testing.assert_array_equal(touched[0], build_cpu_executable(fn, {"threads": 1})(*args)[0])
