"""A mean's sum of bf16 words by ``vdpbf16ps`` on Zen 4 (``CpuTarget.sums_bf16_rows_by_dot_products``,
``codegen/llvm/dot_sums.py``): bf16 LayerNorm's mean passes take it, its deviation pass keeps its pair loop; a row
holding a word below 2^-119 (a zero, a denormal, a tiny normal: the instruction takes denormals as zero and flushes
denormal sums) sums in the pair loop. Results as the interpreter's on normal, denormal, tiny, zero, NaN and infinite
rows; rows sent to the pair loop the same bits as without the property."""

from __future__ import annotations

import re

import numpy as np
import pytest
from codegen_helpers import assert_matches, special_floats
from test_bf16_rounding import SAPPHIRE_RAPIDS, ZEN4
from test_bf16_words import _assembly
from test_pairs import _NAN_PATTERNS, AVX2, from_bits, layernorm_graph, to_bits
from test_row_pass_bursts import var_mean_layernorm

from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import CpuTarget, host_cpu
from neuroncc.ir import DType, interpret
from neuroncc.testing.choices import choose

PROPERTY = "sums_bf16_rows_by_dot_products"


def _switch(monkeypatch, on: bool) -> None:
    choose(monkeypatch, **{PROPERTY: on})


def test_zen4_sums_the_means_by_dot_products(monkeypatch):
    # (the squares beside the sums pinned off: this counts the sums and the deviation pass, ``test_dot_variance.py``)
    choose(monkeypatch, takes_bf16_variance_by_dot_products=False)
    fn, zen4 = layernorm_graph(64, 1024), CpuTarget("znver4", ZEN4)
    assert zen4.sums_bf16_rows_by_dot_products
    _, on = _assembly(fn, zen4)
    _switch(monkeypatch, False)
    _, off = _assembly(fn, zen4)
    # the first row's mean pass and the next row's (``means_a_row_early``): 8 accumulators each, a flag test per
    # vector of words into 4 mask chains; the deviation pass and each mean's pair loop (a row with a tiny word)
    # keep their widening
    assert on.count("vdpbf16ps") == 16 and len(re.findall(r"vptestmw\s+%zmm\d+, %zmm\d+, %k\d \{%k\d\}", on)) == 16
    assert "vdpbf16ps" not in off and "vptestmw" not in off
    assert on.count("vpmulld") == off.count("vpmulld")  # (the deviation pass's 4 and each mean's pair loop's 4)
    assert "(%rsp)" not in on.split("vdpbf16ps")[1]  # (no mask register spilled in the loop)


def test_avx2_and_intel_avx512_keep_their_pair_loops():
    fn = layernorm_graph(64, 1024)
    for target in (CpuTarget("znver3", AVX2), CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS)):
        assert not target.sums_bf16_rows_by_dot_products
        assert "vdpbf16ps" not in _assembly(fn, target)[1], target.name


def test_float32_means_keep_their_code(monkeypatch):
    fn, zen4 = var_mean_layernorm(64, 1024), CpuTarget("znver4", ZEN4)
    default = _assembly(fn, zen4)
    _switch(monkeypatch, False)
    assert _assembly(fn, zen4) == default


def _rows(rng, rows: int, cols: int) -> np.ndarray:
    """bf16 rows: normal, then denormal, tiny normal, zero, NaN (one a row, each pattern), infinite and mixed ones."""
    x = (rng.standard_normal((rows, cols)) * 3 + 1).astype(np.float32)
    x[0] = special_floats(rng, (cols,))  # (NaN, infinities, zeros, huge and tiny values in one row)
    x[1] = rng.standard_normal(cols).astype(np.float32) * 1e-39  # denormal
    x[2] = rng.standard_normal(cols).astype(np.float32) * 2e-38  # normal below 2^-119
    x[3] = 0.0
    x[4, 100], x[5, 7], x[5, 9] = np.inf, np.inf, -np.inf
    x[6] = rng.standard_normal(cols).astype(np.float32) * 2e-36 + 1e-35  # normal, just above 2^-119
    bits = to_bits(x)
    bits[7, 3], bits[8, 3], bits[9, cols - 1], bits[10, 0] = 0x0001, -0x8000, -0x7FFF, 0x0400  # one tiny word each
    bits[11:11 + len(_NAN_PATTERNS) - 3, 5] = _NAN_PATTERNS[:-3]  # one NaN (or infinity) a row
    return bits


def layernorm_on_and_off(monkeypatch, switch, fn, inputs: list[np.ndarray], threads: int) -> dict[bool, np.ndarray]:
    """bf16 LayerNorm ``fn``'s output bits built with a property on and off (``switch(monkeypatch, on)``), the "on"
    build's checked against the interpreter: within bf16's tolerance, NaN where the interpreter's is (the inputs hold
    one NaN a row: the payload every result of the row takes) with its bits."""
    got = {}
    for on in (True, False):
        switch(monkeypatch, on)
        got[on] = build_cpu_executable(fuse_whole_function(fn), {"threads": threads})(*inputs)[0]
    want = interpret(fn, inputs)[0]
    assert_matches(from_bits(got[True]), from_bits(want), DType.bf16, "layernorm")
    nan = np.isnan(from_bits(want))
    assert nan.any() and np.isnan(from_bits(got[True])[nan]).all()
    np.testing.assert_array_equal(got[True][nan], want[nan])
    return got


@pytest.mark.skipif(not host_cpu().sums_bf16_rows_by_dot_products, reason="the host does not take it")
@pytest.mark.parametrize(("cols", "threads"), [(1024, 2), (768, 1), (256 + 64 + 6, 1), (256, 2)])
def test_dot_summed_means_match_the_interpreter(rng, monkeypatch, cols, threads):
    rows = 32
    fn = layernorm_graph(rows, cols)
    inputs = [_rows(rng, rows, cols)] + [to_bits((rng.standard_normal(cols) * 2).astype(np.float32))
                                          for _ in range(2)]
    inputs[2][:cols // 2] = 0  # (a bias of zeros: a denormal row's outputs are its deviations scaled, not the bias)
    got = layernorm_on_and_off(monkeypatch, _switch, fn, inputs, threads)
    # rows holding a zero, denormal or tiny word sum in the pair loop: the same bits as without the property (a
    # denormal row's outputs are its deviations scaled, which the tolerance above cannot tell from a flushed mean's)
    for row in (0, 1, 2, 3, 7, 8, 9, 10):
        np.testing.assert_array_equal(got[True][row], got[False][row], err_msg=f"row {row}")


def _row_reduction(op: str, rows: int, cols: int):
    """x.sum(-1) or x.mean(-1) on bf16 bits (a float sum of the widened words, rounded to bf16)."""
    from test_pairs import _bf16, _bits

    from neuroncc.ir import Builder, TensorType

    b = Builder(f"bf16_{op}")
    x = b.param(TensorType((rows, cols), DType.i16), "x")
    return b.build([_bits(b, b.op(op, _bf16(b, x), dims=(1,), keepdim=True))])


def test_zen4_row_sums_and_means_take_them_too(monkeypatch):
    zen4 = CpuTarget("znver4", ZEN4)
    for op in ("sum", "mean"):
        assert _assembly(_row_reduction(op, 64, 1024), zen4)[1].count("vdpbf16ps") == 8, op
    _switch(monkeypatch, False)
    assert "vdpbf16ps" not in _assembly(_row_reduction("sum", 64, 1024), zen4)[1]


@pytest.mark.skipif(not host_cpu().sums_bf16_rows_by_dot_products, reason="the host does not take it")
@pytest.mark.parametrize("op", ["sum", "mean"])
def test_dot_summed_row_sums_match_the_interpreter(rng, monkeypatch, op):
    rows, cols = 32, 1024
    fn = fuse_whole_function(_row_reduction(op, rows, cols))
    x = _rows(rng, rows, cols)
    got = {}
    for on in (True, False):
        _switch(monkeypatch, on)
        got[on] = build_cpu_executable(fn, {"threads": 2})(x)[0]
    want = interpret(fn, [x])[0]
    assert_matches(from_bits(got[True]), from_bits(want), DType.bf16, op)
    nan = np.isnan(from_bits(want))
    assert nan.any()
    np.testing.assert_array_equal(got[True][nan], want[nan])
    for row in (0, 1, 2, 3, 7, 8, 9, 10):  # (the pair loop's rows)
        np.testing.assert_array_equal(got[True][row], got[False][row], err_msg=f"row {row}")
    assert op == "mean" or from_bits(got[True][1]) != 0  # (a denormal row's sum a denormal, not flushed)
