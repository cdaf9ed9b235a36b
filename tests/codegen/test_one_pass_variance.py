"""A float32 variance that computes its own mean in one pass over its row on Zen 4 (``shifted_moments.py``,
``CpuTarget.takes_the_variance_in_one_pass``): the sums of x, x - c and (x - c)^2 with c the mean of the row's first
16 elements, instead of a mean pass and a deviation pass. The mean keeps its bits; the variance stays within the
float32 tolerances on rows whose mean is large against their spread (where a sum of squares minus the squared mean
would cancel), rows with outliers among their first elements (the shift far from the mean: those rows take the
deviation pass again), constant rows, rows of huge, tiny and non-finite values, short, long and unaligned rows."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from codegen_helpers import run_both
from test_bf16_rounding import SAPPHIRE_RAPIDS, ZEN4
from test_bf16_words import _assembly
from test_pairs import AVX2
from test_row_pass_bursts import PREFETCH, no_page_touches, var_mean_layernorm

from neuroncc.codegen.llvm import shifted_moments
from neuroncc.driver.compile import compile_graph
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import CpuTarget
from neuroncc.ir import Builder, DType, Function, TensorType
from neuroncc.passes import default_pipeline
from neuroncc.testing.choices import choose


#: The cpu pipeline without bf16-product-words: the products of :func:`residual_layernorm_of_products` then give
#: their results as float32 buffers (as before session 47), the float32 row the one pass reads; with the words the
#: LayerNorm reads its residual sum over element pairs instead, which the one pass leaves to the two passes.
FLOAT32_PRODUCTS = default_pipeline("cpu").replace("bf16-product-words,", "")
FALLBACK = "fcmp ugt double"  # (the one pass's test for a row that takes the deviation pass again)


def _one_pass(monkeypatch, on: bool) -> None:
    choose(monkeypatch, takes_the_variance_in_one_pass=on)


def statistics(rows: int, cols: int, correction: float = 0.0) -> Function:
    """LayerNorm as torch.compile hands it over (a var, then a mean of x), its var and mean as outputs too."""
    b = Builder("stats")
    x = b.param(TensorType((rows, cols), DType.f32), "x")
    var = b.op("var", x, dims=(1,), keepdim=True, correction=correction)
    mean = b.op("mean", x, dims=(1,), keepdim=True)
    rstd = b.op("rsqrt", b.op("add", var, b.op("full", shape=(), dtype=DType.f32, value=1e-5)))
    return b.build([b.op("mul", b.op("sub", x, mean), rstd), var, mean])


def plain_rows(rng: np.random.Generator, n: int) -> np.ndarray:
    """Rows whose normalized values float32 gets within its tolerances (each row's kind in the comments)."""
    nan, inf = rng.standard_normal(n), rng.standard_normal(n)
    nan[-1], inf[n // 3] = np.nan, np.inf
    rows = [
        rng.standard_normal(n),
        rng.standard_normal(n) + 3.0,
        np.concatenate([np.full(min(n, 16), 10.0), rng.standard_normal(max(n - 16, 0))]),  # the shift's elements
        np.full(n, 7.0),  # constant: the variance exactly 0
        np.where(np.arange(n) == n // 2, 8.0, 7.0),  # constant but one
        np.where(np.arange(n) == 0, 100.0, rng.standard_normal(n)),  # an outlier first
        rng.standard_normal(n) * 1e-30,  # tiny: squares underflow
        np.linspace(-1.0, 1.0, n),
        nan,
        inf,
    ]
    return np.stack(rows).astype(np.float32)


def far_rows(rng: np.random.Generator, n: int) -> np.ndarray:
    """Rows whose mean is far from 0 against their spread (the normalized values then lose float32's bits to the
    mean's rounding, the variance must not), and rows of large values."""
    rows = [
        rng.standard_normal(n) + 1e4,  # mean 10^4 times the spread
        rng.standard_normal(n) * 0.01 - 3e3,  # 3 * 10^5 times, negative
        np.linspace(-1.0, 1.0, n) + 50.0,
        np.where(np.arange(n) == 0, 1e6, 1.0 + rng.standard_normal(n) * 1e-3),  # an outlier first, far
        rng.standard_normal(n) * 1e16 + 1e17,  # large mean and spread, squares finite
        rng.standard_normal(n) * 1e30,  # huge: squares overflow (inf either way)
    ]
    return np.stack(rows).astype(np.float32)


def test_zen4_takes_the_variance_in_one_pass_other_cpus_do_not():
    assert CpuTarget("znver4", ZEN4).takes_the_variance_in_one_pass
    assert not CpuTarget("znver3", AVX2).takes_the_variance_in_one_pass
    assert not CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS).takes_the_variance_in_one_pass


def test_layernorm_on_zen4_reads_its_row_in_two_passes_not_three(monkeypatch):
    fn = var_mean_layernorm(64, 1024)
    zen4 = CpuTarget("znver4", ZEN4)
    _one_pass(monkeypatch, True)
    no_page_touches(monkeypatch)
    # (all the next row's lines: Zen 4's first lines alone are test_one_pass_row_prefetch_lines.py's)
    choose(monkeypatch, one_pass_row_prefetch_lines=0)
    on, asm = _assembly(fn, zen4)
    # a burst of the next row's lines before each pass: the statistics and the write; the squares summed by FMAs
    assert on.count(PREFETCH) == 2 and on.count(FALLBACK) == 1 and asm.count("prefetcht0") == 2
    stats = asm[asm.index("prefetcht0"):asm.index("prefetcht0", asm.index("prefetcht0") + 1)]
    assert stats.count("vfmadd231ps") >= 4
    _one_pass(monkeypatch, False)
    off, _ = _assembly(fn, zen4)
    assert off.count(PREFETCH) == 3 and FALLBACK not in off
    assert _assembly(fn, CpuTarget("znver3", AVX2))[0].count(PREFETCH) == 3


@pytest.mark.parametrize("cols", [1, 3, 16, 17, 300, 1024, 5000])
@pytest.mark.parametrize("correction", [0.0, 1.0])
def test_one_pass_statistics_are_within_the_tolerances_and_keep_the_mean(cols, correction, rng, monkeypatch):
    plain, far = plain_rows(rng, cols), far_rows(rng, cols)
    fn, far_fn = statistics(plain.shape[0], cols, correction), statistics(far.shape[0], cols, correction)
    _one_pass(monkeypatch, True)
    for threads in (1, 2):
        exe, got = run_both(fn, [plain], threads=threads)  # against the reference interpreter, float32's tolerances
        assert any(FALLBACK in text for text in exe.module.llvm_ir)
    far_got = build_cpu_executable(far_fn, {"threads": 2})(far)
    _one_pass(monkeypatch, False)
    for x, one, f in ((plain, got, fn), (far, far_got, far_fn)):
        two = build_cpu_executable(f, {"threads": 2})(x)
        np.testing.assert_array_equal(one[2], two[2])  # the mean's bits
        np.testing.assert_array_equal(np.isnan(one[1]), np.isnan(two[1]))
        np.testing.assert_array_equal(np.isinf(one[1]), np.isinf(two[1]))
        want = x.astype(np.float64).var(axis=1, ddof=int(correction), keepdims=True) if cols > correction else None
        finite = np.isfinite(want) & (want < 3e38) if want is not None else None
        if want is not None:  # within float32's tolerance of float64's variance, or no further than the two passes'
            error, before = (np.abs(v[finite].astype(np.float64) - want[finite]) for v in (one[1], two[1]))
            assert np.all(error <= np.maximum(before, 1.3e-6 * want[finite]) + 1e-37), (error, before, want[finite])


@pytest.mark.parametrize("offset", [0, 1, 4, 15])
def test_rows_of_an_unaligned_input(offset, rng, monkeypatch):
    # the mean pass's aligned start (``stages._Reducer._aligned_start``) is the one pass's too: the mean's bits
    cols = 300
    x = np.concatenate([plain_rows(rng, cols), far_rows(rng, cols)])
    buffer = np.empty(x.size + 32, np.float32)
    start = (-buffer.ctypes.data % 64) // 4 + offset
    xs = buffer[start:start + x.size].reshape(x.shape)
    xs[...] = x
    fn = statistics(x.shape[0], cols)
    _one_pass(monkeypatch, True)
    got = build_cpu_executable(fn, {"threads": 2})(xs)
    want = x.astype(np.float64).var(axis=1, keepdims=True)
    finite = np.isfinite(want) & (want < 3e38)
    np.testing.assert_allclose(got[1][finite], want[finite], rtol=1.3e-6, atol=1e-37)
    _one_pass(monkeypatch, False)
    np.testing.assert_array_equal(got[2], build_cpu_executable(fn, {"threads": 2})(xs)[2])


def test_rows_whose_shift_is_far_from_the_mean_take_the_deviation_pass_again(rng, monkeypatch):
    # (mean - c)^2 > FALLBACK_RATIO * variance: the two passes' sum of squared deviations, their bits
    x = np.stack([np.concatenate([np.full(16, 100.0), rng.standard_normal(1008)]),
                  np.concatenate([rng.standard_normal(16) + 3.0, rng.standard_normal(1008)])]).astype(np.float32)
    fn = statistics(2, 1024)
    _one_pass(monkeypatch, True)
    got = build_cpu_executable(fn, {"threads": 1})(x)
    _one_pass(monkeypatch, False)
    two = build_cpu_executable(fn, {"threads": 1})(x)
    np.testing.assert_array_equal(got[1], two[1])
    assert shifted_moments.FALLBACK_RATIO <= 1.0


def residual_layernorm_of_products(batch: int, tokens: int, cols: int) -> Function:
    """The zoo's bf16 BERT's last LayerNorm as its forward graph had it: two bf16 products (kernels of their own, so
    their results reach the LayerNorm as float32 words, compiled with FLOAT32_PRODUCTS), their sum rounded to bf16
    and widened, LayerNorm, its bf16 output, its mean and rstd saved, and the first token's row selected (the row
    loop then runs over blocks of a sequence's rows, its next rows prefetched in bursts: the one pass taken)."""
    b = Builder("residual_layernorm")

    def bf16(name: str, shape: tuple[int, ...]) -> Any:
        return b.op("bitcast", b.param(TensorType(shape, DType.i16), name), dtype=DType.bf16)

    def product(name: str) -> Any:
        x, m, c = bf16(f"{name}_x", (batch * tokens, cols)), bf16(f"{name}_m", (cols, cols)), bf16(f"{name}_c", (cols,))
        y = b.op("addmm", c, x, b.op("permute", m, dims=(1, 0)))
        return b.op("reshape", y, shape=(batch, tokens, cols))

    w, bias = bf16("w", (cols,)), bf16("b", (cols,))
    x = b.op("cast", b.op("add", product("h"), product("r")), dtype=DType.f32)
    var = b.op("var", x, dims=(2,), keepdim=True, correction=0.0)
    mean = b.op("mean", x, dims=(2,), keepdim=True)
    rstd = b.op("rsqrt", b.op("add", var, b.op("full", shape=(), dtype=DType.f32, value=1e-12)))
    y = b.op("add", b.op("mul", b.op("mul", b.op("sub", x, mean), rstd), b.op("cast", w, dtype=DType.f32)),
             b.op("cast", bias, dtype=DType.f32))
    y = b.op("cast", y, dtype=DType.bf16)
    first = b.op("select", y, dim=1, index=0)
    return b.build([b.op("bitcast", v, dtype=DType.i16) for v in (
        y, b.op("cast", mean, dtype=DType.bf16), b.op("cast", rstd, dtype=DType.bf16), first)])


@pytest.mark.parametrize("tokens, cols", [(8, 32), (5, 48), (16, 64)])
def test_a_one_pass_variance_leaves_its_write_stage_no_deviation_cache_to_load(tokens, cols, rng, monkeypatch):
    # The one pass stores no x - mean: a write stage that loaded the deviation row cache a two-pass variance fills
    # (``refine.deviation_row_cache``, bf16-widened operands) read uninitialized stack (session 36's zoo losses)
    fn = residual_layernorm_of_products(2, tokens, cols)
    words = [(rng.standard_normal(p.type.shape).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
             .view(np.int16) for p in fn.params]
    want = compile_graph(fn, target="interp", cache=None)(*words)
    choose(monkeypatch, caches_variance_deviations=True)
    _one_pass(monkeypatch, True)
    exe = compile_graph(fn, target="cpu", pipeline=FLOAT32_PRODUCTS, cache=None)
    assert any(FALLBACK in text for text in exe.module.llvm_ir)  # (the one pass taken)
    for got in (exe(*words) for _ in range(3)):
        for actual, expected in zip(got, want):
            np.testing.assert_allclose(_widened(actual), _widened(expected), rtol=2 ** -7, atol=1e-6)


def _widened(words: np.ndarray) -> np.ndarray:
    return (np.asarray(words).view(np.uint16).astype(np.uint32) << 16).view(np.float32)
