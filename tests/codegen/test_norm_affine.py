"""bf16 LayerNorm's weight and bias in one fused multiply-add on Zen 4 (``CpuTarget.fuses_bf16_layer_norm_weight_and
_bias``, ``codegen/llvm/norm_affine.py``): ``fma((x - mean) * rstd, w, b)`` where the graph rounds the product before
adding b, on rows whose mean is finite and whose 1/std is finite and positive in calls of finite weight and bias;
other rows as the graph. One rounding fewer: other bits in a few outputs, as close to float64's or closer; NaN and
infinite outputs the graph's bits."""

from __future__ import annotations

import numpy as np
import pytest
from codegen_helpers import assert_matches, special_floats
from test_bf16_rounding import SAPPHIRE_RAPIDS, ZEN4
from test_bf16_words import _assembly
from test_dot_sums import layernorm_on_and_off
from test_dot_variance import layernorm_inputs
from test_pairs import _NAN_PATTERNS, AVX2, from_bits, layernorm_graph, to_bits

from neuroncc.codegen.llvm.norm_affine import layer_norm_affine
from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import CpuTarget, host_cpu
from neuroncc.ir import DType, interpret
from neuroncc.ir.graph import Builder
from neuroncc.ir.types import TensorType
from neuroncc.testing.choices import choose

PROPERTY = "fuses_bf16_layer_norm_weight_and_bias"
needs_host = pytest.mark.skipif(not host_cpu().fuses_bf16_layer_norm_weight_and_bias,
                                reason="the host does not take it")


def _switch(monkeypatch, on: bool) -> None:
    choose(monkeypatch, **{PROPERTY: on})


def test_zen4s_write_loop_takes_the_weight_and_bias_in_one_fma(monkeypatch):
    fn, zen4 = layernorm_graph(4096, 1024), CpuTarget("znver4", ZEN4)
    assert zen4.fuses_bf16_layer_norm_weight_and_bias
    ir_on, on = _assembly(fn, zen4)
    _switch(monkeypatch, False)
    ir_off, off = _assembly(fn, zen4)
    assert "llvm.fma.f32" in ir_on and "llvm.fma" not in ir_off
    # two write loops (the fused one for the rows that pass the guard, the graph's ops for the others): each rounds a
    # pair of vectors once; the fused loop's products and sums are 2 FMAs
    assert on.count("vcvtne2ps2bf16") == 2 * off.count("vcvtne2ps2bf16")
    fused = on.split("vcvtne2ps2bf16")[0].rsplit(".p2align", 1)[1]
    assert fused.count("vfmadd") == 2 and "vaddps" not in fused and fused.count("vmulps") == 2
    assert "vfmadd" not in off


def test_avx2_and_intel_avx512_keep_their_code():
    for target in (CpuTarget("znver3", AVX2), CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS)):
        assert not target.fuses_bf16_layer_norm_weight_and_bias, target.name


def _layer_norm(dtype: DType, extra_use: bool = False):
    b = Builder("ln")
    x = b.param(TensorType((8, 64), DType.f32), "x")
    w, bias = b.param(TensorType((64,), DType.f32), "w"), b.param(TensorType((64,), DType.f32), "b")
    mean = b.op("mean", x, dims=(1,), keepdim=True)
    rstd = b.op("rsqrt", b.op("add", b.op("var", x, dims=(1,), keepdim=True, correction=0.0),
                              b.op("full", shape=(), dtype=DType.f32, value=1e-5)))
    product = b.op("mul", b.op("mul", b.op("sub", x, mean), rstd), w)
    y = b.op("add", product, bias)
    out = b.op("cast", y, dtype=DType.bf16) if dtype is DType.bf16 else y
    fn = b.build([out, product] if extra_use else [out])
    (add,) = [op for op in fn.ops if op.results[0] is y]
    return fn, add, product


def test_only_a_sum_rounded_to_bf16_alone_is_fused():
    fn, add, product = _layer_norm(DType.bf16)
    assert layer_norm_affine(fn, add, product) is not None
    fn, add, product = _layer_norm(DType.f32)  # (float32 LayerNorm keeps the graph's roundings)
    assert layer_norm_affine(fn, add, product) is None
    fn, add, product = _layer_norm(DType.bf16, extra_use=True)  # (the product is an output too)
    assert layer_norm_affine(fn, add, product) is None


def _closer(got: np.ndarray, other: np.ndarray, inputs: list[np.ndarray]) -> tuple[float, float, int, int]:
    """Mean absolute error against float64's LayerNorm of ``got`` and ``other`` (bf16 bits), and how many of the
    outputs where they differ each is the nearer in."""
    x, w, bias = (from_bits(a).astype(np.float64) for a in inputs)
    mean = x.mean(1, keepdims=True)
    exact = (x - mean) / np.sqrt(((x - mean) ** 2).mean(1, keepdims=True) + 1e-5) * w + bias
    error = [np.abs(from_bits(bits).astype(np.float64) - exact) for bits in (got, other)]
    differ = got != other
    return (error[0].mean(), error[1].mean(), int((error[0] < error[1])[differ].sum()),
            int((error[0] > error[1])[differ].sum()))


@needs_host
@pytest.mark.parametrize("shift", [0.0, 0.4, 4.0, 1e4])
def test_as_close_to_float64s_layer_norm_or_closer(rng, monkeypatch, shift):
    rows, cols = 2048, 1024
    x = (rng.standard_normal((rows, cols)) * (1 + shift / 100) + shift).astype(np.float32)
    inputs = [to_bits(x)] + [to_bits((rng.standard_normal(cols) * 2).astype(np.float32)) for _ in range(2)]
    fn, got = layernorm_graph(rows, cols), {}
    for on in (True, False):
        _switch(monkeypatch, on)
        got[on] = build_cpu_executable(fuse_whole_function(fn), {"threads": 1})(*inputs)[0]
    assert_matches(from_bits(got[True]), from_bits(interpret(fn, inputs)[0]), DType.bf16, "layernorm")
    fused, graph, nearer, farther = _closer(got[True], got[False], inputs)
    assert fused <= graph and nearer >= farther, (fused, graph, nearer, farther)
    assert (got[True] != got[False]).mean() < 1e-3


@needs_host
@pytest.mark.parametrize("threads", [1, 2])
def test_special_rows_weights_and_biases_keep_the_graphs_bits(rng, monkeypatch, threads):
    # rows of special values, NaNs and infinities (the dot variance's fallback rows among them): their outputs as
    # the graph's ops make them, NaN payloads too; then weights and biases holding NaNs and infinities: the call
    # runs the graph's ops everywhere
    rows, cols = 4096, 1024
    fn = layernorm_graph(rows, cols)
    inputs = layernorm_inputs(rng, rows, cols)
    inputs[0][40] = to_bits(special_floats(rng, (cols,)))
    got = layernorm_on_and_off(monkeypatch, _switch, fn, inputs, threads)
    special = ~np.isfinite(from_bits(got[False])) | ~np.isfinite(from_bits(got[True]))
    assert special.sum() > cols
    np.testing.assert_array_equal(got[True][special], got[False][special])
    assert (got[True] != got[False]).any()  # (other rows fused)
    inputs[1][:len(_NAN_PATTERNS)] = _NAN_PATTERNS
    inputs[2][3:3 + len(_NAN_PATTERNS)] = _NAN_PATTERNS
    inputs[1][100:102] = inputs[2][200:202] = to_bits(np.array([np.inf, -np.inf], np.float32))
    got = layernorm_on_and_off(monkeypatch, _switch, fn, inputs, threads)
    np.testing.assert_array_equal(got[True], got[False])
