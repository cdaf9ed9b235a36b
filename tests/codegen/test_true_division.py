"""Float32 true division gives IEEE's quotient, as eager's div_true_kernel does (``codegen/llvm/division.py``; session
45): a plain ``fdiv`` for a number, a 0-d input, a broadcast column or row and a tensor of the same shape; only a
divisor the kernel reduced itself (softmax's sum) keeps ``arcp`` and the hoisted reciprocal multiply, eager's softmax
formula. Before, every division carried ``arcp``, and a loop-invariant divisor was x * RN(1/c): a fifth of the
random-bits quotients below one ulp off for a column divisor (a third of x / 3.0's)."""

from __future__ import annotations

import numpy as np
import pytest

from neuroncc.codegen.llvm.division import multiplies_by_the_reciprocal
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import CpuTarget
from neuroncc.ir import Builder, DType, TensorType
from neuroncc.passes import run_pipeline
from neuroncc.passes.pipeline import default_pipeline

from codegen_helpers import aligned_kernel_code

AVX2 = CpuTarget("znver3", "+avx,+avx2,+fma,-avx512f")
ZEN4 = CpuTarget("znver4", "+avx,+avx2,+fma,+avx512f,+avx512vl,+avx512bw,+avx512dq,+avx512bf16")
ROWS, COLS = 512, 1024
SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 3.0, 7.0, 0.1, 2.0 ** -149, -(2.0 ** -149),
                     2.0 ** -126, 2.0 ** -127, np.finfo(np.float32).max, 2.0 ** 127, 2.0 ** -24, 3e38], np.float32)


def division_graph(divisor_shape: tuple[int, ...] | None):
    """x [512, 1024] / a divisor of that shape (a parameter), or / 3.0 (a constant) for None."""
    b = Builder("true_division")
    x = b.param(TensorType((ROWS, COLS), DType.f32), "x")
    c = b.op("full", shape=(), dtype=DType.f32, value=3.0) if divisor_shape is None else \
        b.param(TensorType(divisor_shape, DType.f32), "c")
    return b.build([b.op("div", x, c)])


def softmax_graph():
    b = Builder("softmax")
    x = b.param(TensorType((ROWS, COLS), DType.f32), "x")
    e = b.op("exp", b.op("sub", x, b.op("amax", x, dims=(1,), keepdim=True)))
    return b.build([b.op("div", e, b.op("sum", e, dims=(1,), keepdim=True))])


def _random_operands(rng: np.random.Generator, shape: tuple[int, ...], kind: int) -> np.ndarray:
    if kind == 0:  # uniform bits: every exponent, NaN, infinities, denormals, zeros
        return rng.integers(0, 2 ** 32, shape, dtype=np.uint32).view(np.float32)
    values = (rng.standard_normal(shape) * 10.0 ** rng.integers(-30, 30, shape)).astype(np.float32)
    values.reshape(-1)[rng.integers(0, values.size, max(values.size // 50, 1))] = \
        rng.choice(SPECIALS, max(values.size // 50, 1))
    return values


def _same_bits(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    return (got.view(np.int32) == want.view(np.int32)) | (np.isnan(got) & np.isnan(want))


@pytest.mark.parametrize("divisor_shape", [(), (ROWS, 1), (1, COLS), (ROWS, COLS)],
                         ids=["0-d", "column", "row", "same shape"])
def test_quotients_are_ieees_over_every_exponent_range(rng, divisor_shape):
    exe = build_cpu_executable(division_graph(divisor_shape), {"threads": 2})
    for kind in (0, 1, 0, 1):
        x = _random_operands(rng, (ROWS, COLS), kind)
        x.reshape(-1)[: SPECIALS.size * SPECIALS.size] = np.repeat(SPECIALS, SPECIALS.size)
        c = _random_operands(rng, divisor_shape, kind)
        if divisor_shape == (ROWS, COLS):
            c.reshape(-1)[: SPECIALS.size * SPECIALS.size] = np.tile(SPECIALS, SPECIALS.size)
        (got,) = exe(x, c)
        with np.errstate(all="ignore"):
            want = np.true_divide(x, c)
        assert _same_bits(got, want).all(), int((~_same_bits(got, want)).sum())


def test_a_number_divides_exactly_too(rng):
    (got,) = build_cpu_executable(division_graph(None), {"threads": 1})(x := rng.standard_normal((ROWS, COLS))
                                                                         .astype(np.float32))
    assert np.array_equal(got.view(np.int32), (x / np.float32(3.0)).view(np.int32))


def test_only_a_divisor_the_kernel_reduced_multiplies_by_its_reciprocal():
    for shape in ((), (ROWS, 1), (1, COLS), (ROWS, COLS)):
        fn = division_graph(shape)
        assert not multiplies_by_the_reciprocal(fn, fn.ops[-1])
        for target in (AVX2, ZEN4):
            text, assembly = aligned_kernel_code(fn, target)
            assert "fdiv float" in text and "fdiv arcp" not in text and "vdivps" in assembly
    fn = softmax_graph()
    assert multiplies_by_the_reciprocal(fn, fn.ops[-1])  # (through the sum's keepdim result)
    for target in (AVX2, ZEN4):
        text, assembly = aligned_kernel_code(fn, target)
        assert "fdiv arcp" in text and "vdivps" not in assembly  # 1/sum hoisted per row, the row multiplied by it


def test_a_divisor_reduced_in_another_kernel_divides_exactly(rng):
    """x / x.sum(1, keepdim=True) split over kernels by a matmul: the second kernel's divisor is its input."""
    b = Builder("sum_then_divide")
    x = b.param(TensorType((64, 64), DType.f32), "x")
    total = b.op("sum", b.op("mm", x, x), dims=(1,), keepdim=True)
    fn = run_pipeline(default_pipeline("cpu"), b.build([b.op("div", x, total)]))
    for op in fn.ops:
        for region in op.regions:
            for inner in region.ops:
                if inner.name == "div":
                    assert multiplies_by_the_reciprocal(region, inner) == (inner.operands[1] not in region.params)
