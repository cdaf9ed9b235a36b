"""bf16 LayerNorm's variance from its mean pass's sum of squares on Zen 4 (``CpuTarget.takes_bf16_variance_by_dot
_products``, ``codegen/llvm/dot_sums.py``'s ``dot_variance``): the early mean pass sums each word's square by
``vdpbf16ps x, x`` beside its sum, the variance is S2 - n mean^2 in float64 with no deviation pass, and the write pass
subtracts the mean itself. Rows whose mean is far from their spread, tiny, zero, denormal, NaN, infinite or huge rows
take the deviation pass: the same bits as without the property. The variance as close to float64's as the deviation
pass's or closer."""

from __future__ import annotations

import re

import numpy as np
import pytest
from codegen_helpers import aligned_kernel_code, special_floats
from test_bf16_rounding import SAPPHIRE_RAPIDS, ZEN4
from test_bf16_words import _assembly
from test_dot_sums import layernorm_on_and_off
from test_pairs import _NAN_PATTERNS, AVX2, from_bits, layernorm_graph, to_bits

from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import CpuTarget, host_cpu
from neuroncc.testing.choices import choose

PROPERTY = "takes_bf16_variance_by_dot_products"
SQUARES = r"vdpbf16ps\s+(%zmm\d+), \1, %zmm\d+"
needs_host = pytest.mark.skipif(not host_cpu().takes_bf16_variance_by_dot_products,
                                reason="the host does not take it")


def _switch(monkeypatch, on: bool) -> None:
    choose(monkeypatch, **{PROPERTY: on})


def test_zen4_sums_the_squares_in_the_mean_passes(monkeypatch):
    fn, zen4 = layernorm_graph(64, 1024), CpuTarget("znver4", ZEN4)
    assert zen4.takes_bf16_variance_by_dot_products
    _, on = _assembly(fn, zen4)
    _switch(monkeypatch, False)
    _, off = _assembly(fn, zen4)
    # the first row's mean pass and the next row's: 8 sums and 8 squares each
    assert len(re.findall(SQUARES, on)) == 16 and on.count("vdpbf16ps") == 32
    assert not re.findall(SQUARES, off) and off.count("vdpbf16ps") == 16
    # no deviation cache: the write loop widens x (a shift) and subtracts the mean
    write_loop = on.split("vcvtne2ps2bf16")[0].rsplit(".p2align", 1)[1]
    assert "vpslld" in write_loop and write_loop.count("vsubps") == 2


def test_the_write_pass_loads_its_weight_and_bias_placed_past_the_output():
    # (``places_write_buffers_past_the_output``: the widened weight and bias, no deviations; streamed rows)
    ir_text, code = aligned_kernel_code(layernorm_graph(4096, 1024), CpuTarget("znver4", ZEN4))
    assert ir_text.count("alloca [1536 x float], align 4096") == 2 and "vmovntdq" in code
    assert len(re.findall(SQUARES, code)) == 16


def test_avx2_and_intel_avx512_keep_their_deviation_pass():
    for target in (CpuTarget("znver3", AVX2), CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS)):
        assert not target.takes_bf16_variance_by_dot_products, target.name


def test_rows_of_a_remainder_or_over_4096_keep_their_deviation_pass():
    zen4 = CpuTarget("znver4", ZEN4)
    for cols in (326, 8192):
        assert not re.findall(SQUARES, _assembly(layernorm_graph(8, cols), zen4)[1]), cols


def _rows(rng, rows: int, cols: int) -> np.ndarray:
    """bf16 rows: normal ones (mean 0 and 1 against a spread of 3: the squares' rows), then rows the deviation pass
    takes: special values, denormal, tiny, zero, a mean far from the spread, squares past float32's range, one NaN or
    infinity a row."""
    x = (rng.standard_normal((rows, cols)) * 3).astype(np.float32)
    x[rows // 2:] += 1
    x[0] = special_floats(rng, (cols,))
    x[1] = rng.standard_normal(cols).astype(np.float32) * 1e-39
    x[2] = rng.standard_normal(cols).astype(np.float32) * 2e-38
    x[3] = 0.0
    x[4] = rng.standard_normal(cols).astype(np.float32) + 4  # (n mean^2 > M2 / 4)
    x[5] = rng.standard_normal(cols).astype(np.float32) * 1e20  # (squares past float32's range)
    x[6] = rng.standard_normal(cols).astype(np.float32) * 1e-20  # (M2 below 2^-80)
    x[7, 100], x[8, 7], x[8, 9] = np.inf, np.inf, -np.inf
    bits = to_bits(x)
    bits[9, 3], bits[10, cols - 1] = 0x0001, 0x0400  # (a denormal word; the smallest word the sums take)
    bits[11:11 + len(_NAN_PATTERNS) - 3, 5] = _NAN_PATTERNS[:-3]
    return bits


DEVIATION_PASS_ROWS = tuple(range(11 + len(_NAN_PATTERNS) - 3))


def layernorm_inputs(rng, rows: int, cols: int) -> list[np.ndarray]:
    """x (:func:`_rows`: the deviation pass's rows first), w and b of a bf16 LayerNorm, as bits."""
    return [_rows(rng, rows, cols)] + [to_bits((rng.standard_normal(cols) * 2).astype(np.float32)) for _ in range(2)]


@needs_host
@pytest.mark.parametrize(("cols", "threads"), [(1024, 2), (1024, 1), (768, 1), (256, 2), (326, 1)])
def test_results_match_the_interpreter_and_the_deviation_pass_rows_keep_their_bits(rng, monkeypatch, cols, threads):
    rows = 48
    fn = layernorm_graph(rows, cols)
    inputs = layernorm_inputs(rng, rows, cols)
    got = layernorm_on_and_off(monkeypatch, _switch, fn, inputs, threads)
    for row in DEVIATION_PASS_ROWS:
        np.testing.assert_array_equal(got[True][row], got[False][row], err_msg=f"row {row}")


@needs_host
@pytest.mark.parametrize("shift", [0.0, 0.4])
def test_the_variance_is_as_close_to_float64s_as_the_deviation_pass(rng, monkeypatch, shift):
    rows, cols = 2048, 1024
    fn = fuse_whole_function(layernorm_graph(rows, cols, variance_output=True))
    zen4 = CpuTarget("znver4", ZEN4)
    assert len(re.findall(SQUARES, _assembly(layernorm_graph(64, cols, variance_output=True), zen4)[1])) == 16
    x = to_bits((rng.standard_normal((rows, cols)) + shift).astype(np.float32))
    w, bias = (to_bits(rng.standard_normal(cols).astype(np.float32)) for _ in range(2))
    xf = from_bits(x).astype(np.float64)
    exact = ((xf - xf.mean(1, keepdims=True)) ** 2).mean(1, keepdims=True)
    error = {}
    for on in (True, False):
        _switch(monkeypatch, on)
        var = build_cpu_executable(fn, {"threads": 2})(x, w, bias)[1]
        error[on] = np.abs(var.astype(np.float64) - exact) / exact
    assert error[True].mean() <= error[False].mean() and error[True].max() <= error[False].max() * 1.25
