"""A variance's deviations row-cached for a later stage's x - mean on AVX2 (``CpuTarget.caches_variance_deviations``,
``refine.deviation_row_cache``): bf16 LayerNorm's deviation pass stores x - mean into a float32 row cache, and its
write pass loads it there instead of widening x and subtracting the mean again; the bits are those of the code that
computes it twice; Zen 4 takes it too (with the mean a row early), Intel's AVX-512 cores' code is unchanged."""

from __future__ import annotations

import re

import numpy as np
from codegen_helpers import special_floats
from test_bf16_rounding import SAPPHIRE_RAPIDS, ZEN4
from test_bf16_words import _assembly
from test_pairs import AVX2, _bf16, layernorm_graph, to_bits
from test_row_pass_bursts import var_mean_layernorm

from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import CpuTarget
from neuroncc.ir import Builder, DType, TensorType
from neuroncc.testing.choices import choose

ROW_CACHE = "alloca [1024 x float], align 4096"


def _switch(monkeypatch, on: bool) -> None:
    choose(monkeypatch, caches_variance_deviations=on)


def _same_bits_with_and_without(monkeypatch, property_name: str, fn, inputs, threads: int = 2) -> None:
    """``fn``'s outputs on ``inputs`` are the same bits with the ``CpuTarget`` property on as with it off."""
    results = []
    for on in (True, False):
        choose(monkeypatch, **{property_name: on})
        results.append(build_cpu_executable(fn, {"threads": threads})(*inputs))
    for got, want in zip(*results, strict=True):
        np.testing.assert_array_equal(got, want)


def _write_loop(asm: str) -> str:
    """The last loop of the kernel (bf16 LayerNorm's write pass: its streamed or plain output store)."""
    return asm[asm.rindex("vsqrtss"):]


def test_avx2_bf16_layernorm_writes_from_the_cached_deviations(monkeypatch):
    # (the shifts counted are x's widening in the 32-bit rounding's loop: AVX2's blended rounding shifts to pack)
    choose(monkeypatch, rounds_bf16_in_word_lanes_with_blends=False)
    fn, avx2 = layernorm_graph(64, 1024), CpuTarget("znver3", AVX2)
    on_ir, on = _assembly(fn, avx2)
    _switch(monkeypatch, False)
    off_ir, off = _assembly(fn, avx2)
    # the write pass neither widens x (a word shift per 16 elements) nor subtracts the mean; the deviation pass stores
    assert re.findall(r"vpslld\s+\$16", _write_loop(off)) and not re.findall(r"vpslld\s+\$16", _write_loop(on))
    assert "vsubps" in _write_loop(off) and "vsubps" not in _write_loop(on)
    assert on.count("vsubps") == off.count("vsubps") - 2
    assert on_ir.count(ROW_CACHE) == off_ir.count(ROW_CACHE) + 1


def test_zen4_bf16_layernorm_writes_from_the_cached_deviations(monkeypatch):
    # (Zen 4's write loop widens nothing either way: the widened row cache; it loads x - mean instead of x)
    fn, zen4 = layernorm_graph(64, 1024), CpuTarget("znver4", ZEN4)
    choose(monkeypatch, means_a_row_early=False)
    assert zen4.caches_variance_deviations
    on_ir, on = _assembly(fn, zen4)
    _switch(monkeypatch, False)
    off_ir, off = _assembly(fn, zen4)
    assert "vsubps" in _write_loop(off) and "vsubps" not in _write_loop(on)
    assert on_ir.count(ROW_CACHE) == off_ir.count(ROW_CACHE) + 1


def test_intel_avx512_and_float32_layernorm_code_is_unchanged(monkeypatch):
    intel, avx2 = CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS), CpuTarget("znver3", AVX2)
    assert not intel.caches_variance_deviations and avx2.caches_variance_deviations
    default_intel = _assembly(layernorm_graph(64, 1024), intel)
    default_f32 = _assembly(var_mean_layernorm(64, 1024), avx2)
    _switch(monkeypatch, False)
    assert _assembly(layernorm_graph(64, 1024), intel) == default_intel
    assert _assembly(var_mean_layernorm(64, 1024), avx2) == default_f32  # (no widening to spare: not cached)


def test_cached_deviations_give_the_same_bits(rng, monkeypatch):
    for cols in (1024, 2 * 16 * 3 + 2 * 5):  # whole vectors of pairs; and a scalar remainder
        fn = fuse_whole_function(layernorm_graph(67, cols))
        x = (rng.standard_normal((67, cols)) * 3 + 1).astype(np.float32)
        x[0] = special_floats(rng, (cols,))  # NaN and infinities: a row of NaN
        x[1, :4], x[2, 5], x[3, :3] = [1e30, -1e30, 1e-30, -0.0], np.inf, [3e38, 3e38, -3e38]  # huge deviations
        inputs = [to_bits(x)] + [to_bits((rng.standard_normal(cols) * 2).astype(np.float32)) for _ in range(2)]
        _same_bits_with_and_without(monkeypatch, "caches_variance_deviations", fn, inputs)


# ---- the variance's mean pass a row early (``CpuTarget.means_a_row_early``) ------------------------------------


def _early(monkeypatch, on: bool) -> None:
    choose(monkeypatch, means_a_row_early=on)


def test_avx2_bf16_layernorm_computes_the_next_rows_mean_before_writing_a_row(monkeypatch):
    fn, avx2 = layernorm_graph(64, 1024), CpuTarget("znver3", AVX2)
    on_ir, on = _assembly(fn, avx2)
    _early(monkeypatch, False)
    off_ir, off = _assembly(fn, avx2)
    # the mean's division (float64, as the variance's): once more, for the thread's first row before the row loop
    assert on_ir.count("fdiv double") == off_ir.count("fdiv double") + 1
    # without: mean pass, deviation pass, rsqrt, write pass; with: the first row's mean before the row loop, then
    # the row's deviation pass, the next row's mean pass (its conversion to float32), the rsqrt and the write pass
    assert off.index("vcvtsd2ss") < off.index("vsubps") < off.index("vsqrtss")
    first_mean, deviations = on.index("vcvtsd2ss"), on.index("vsubps")
    assert first_mean < deviations < on.index("vcvtsd2ss", deviations) < on.index("vsqrtss")


def test_zen4_bf16_layernorm_computes_the_next_rows_mean_before_writing_a_row(monkeypatch):
    # (its deviation pass: the variance from its mean pass's squares pinned off)
    choose(monkeypatch, takes_bf16_variance_by_dot_products=False)
    fn, zen4 = layernorm_graph(64, 1024), CpuTarget("znver4", ZEN4)
    assert zen4.means_a_row_early
    on_ir, on = _assembly(fn, zen4)
    _early(monkeypatch, False)
    off_ir, off = _assembly(fn, zen4)
    assert on_ir.count("fdiv double") == off_ir.count("fdiv double") + 1
    first_mean, deviations = on.index("vcvtsd2ss"), on.index("vsubps")
    assert first_mean < deviations < on.index("vcvtsd2ss", deviations) < on.index("vsqrtss")


def test_intel_avx512_and_float32_layernorm_compute_each_rows_mean_in_turn(monkeypatch):
    intel, avx2 = CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS), CpuTarget("znver3", AVX2)
    assert not intel.means_a_row_early and avx2.means_a_row_early
    f32 = var_mean_layernorm(64, 1024)
    default_intel, default_f32 = _assembly(layernorm_graph(64, 1024), intel), _assembly(f32, avx2)
    _early(monkeypatch, False)
    assert _assembly(layernorm_graph(64, 1024), intel) == default_intel
    assert _assembly(f32, avx2) == default_f32  # (memory-bound: 10% slower a row early)


def test_early_means_give_the_same_bits(rng, monkeypatch):
    # (the deviation pass's bits: the variance from its mean pass's squares pinned off)
    choose(monkeypatch, takes_bf16_variance_by_dot_products=False)
    _switch(monkeypatch, True)  # (the write pass loads the cached deviations: on every host, as on AVX2's)
    for rows, cols, threads in ((67, 1024, 2), (1, 1024, 2), (5, 2 * 16 * 3 + 2 * 5, 1)):
        fn = fuse_whole_function(layernorm_graph(rows, cols))
        x = (rng.standard_normal((rows, cols)) * 3 + 1).astype(np.float32)
        x[0, :3] = [np.inf, 1e30, -0.0]
        inputs = [to_bits(x)] + [to_bits((rng.standard_normal(cols) * 2).astype(np.float32)) for _ in range(2)]
        _same_bits_with_and_without(monkeypatch, "means_a_row_early", fn, inputs, threads)


def test_a_mean_is_not_taken_a_row_early_where_the_write_pass_subtracts_it(monkeypatch):
    # without cached deviations the write pass subtracts the row's mean from x again, and the next row's mean pass
    # would have overwritten it by then (AVX-512 hosts, whose deviations are not cached, gave every row but the
    # last the next row's mean with the early mean forced on): the code is the same as without it
    _switch(monkeypatch, False)
    fn, avx2 = layernorm_graph(64, 1024), CpuTarget("znver3", AVX2)
    early = _assembly(fn, avx2)
    _early(monkeypatch, False)
    assert _assembly(fn, avx2) == early


def test_a_row_loop_over_blocks_of_rows_computes_its_means_in_turn(rng, monkeypatch):
    # a bf16 LayerNorm over [2, 8, 32] whose output's first token is also selected (BERT's pooler reads the CLS
    # token): its row loop runs over dim 0 alone, each iteration 8 rows of 32; the mean pass a row early covered
    # the stage's last dim only, and its compile raised
    b = Builder("layernorm_cls")
    x = b.param(TensorType((2, 8, 32), DType.i16), "x")
    xf = _bf16(b, x)
    var = b.op("var", xf, dims=(2,), keepdim=True, correction=0.0)
    mean = b.op("mean", xf, dims=(2,), keepdim=True)
    rstd = b.op("rsqrt", b.op("add", var, b.op("full", shape=(), dtype=DType.f32, value=1e-12)))
    y = b.op("cast", b.op("mul", b.op("sub", xf, mean), rstd), dtype=DType.bf16)
    fn = fuse_whole_function(b.build([b.op("bitcast", y, dtype=DType.i16),
                                      b.op("bitcast", b.op("select", y, dim=1, index=0), dtype=DType.i16)]))
    inputs = [to_bits((rng.standard_normal((2, 8, 32)) * 3 + 1).astype(np.float32))]
    _same_bits_with_and_without(monkeypatch, "means_a_row_early", fn, inputs)
