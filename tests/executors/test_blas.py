"""Direct BLAS calls for float32 mm/addmm/bmm: bitwise torch's result, chosen exactly where ATen calls BLAS."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from neuroncc.ir import Builder, DType, TensorType
from neuroncc.ir.types import contiguous_strides
from neuroncc.executors.cpu import blas
from neuroncc.driver.compile import compile_graph
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.testing.choices import choose


@pytest.fixture(autouse=True)
def products_on_blas(monkeypatch):
    """These tests are of the extern path (MKL, oneDNN): with AVX-512 the small products they use would be
    generated code instead (CpuTarget.small_mm_max_macs)."""
    choose(monkeypatch, small_mm_max_macs=0)

pytestmark = pytest.mark.skipif(blas.library().sgemm is None, reason="torch's library exports no sgemm_")


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


def _stored(rng, shape, transposed):
    """A float32 operand of logical ``shape`` stored transposed (last two dims) when asked."""
    shape = list(shape)
    if transposed:
        shape[-1], shape[-2] = shape[-2], shape[-1]
    return rng.standard_normal(shape).astype(np.float32)


def _logical(array, transposed):
    tensor = torch.from_numpy(array)
    return tensor.mT if transposed else tensor


def _layout(array):
    return array.shape, tuple(s // array.itemsize for s in array.strides)


def _run(call, arrays, out):
    assert call([a.ctypes.data for a in arrays] + [out.ctypes.data])
    return torch.from_numpy(out)


MM_SHAPES = [(8, 16, 16), (1, 7, 5), (5, 7, 1), (3, 1, 4), (1, 1, 1), (33, 65, 17), (96, 200, 130)]
BIASES = [((-1,), 1.0, 1.0), ((1, -1), 1.0, 1.0), ((-2, -1), 1.0, 1.0), ((-1,), 0.5, 2.0), ((-2, -1), -1.5, 0.25)]


@pytest.mark.parametrize("m, k, n", MM_SHAPES)
def test_mm_and_addmm_are_bitwise_torch(m, k, n, threads):
    rng = np.random.default_rng(m * 100 + k * 10 + n)
    for ta, tb in itertools.product([False, True], repeat=2):
        a, b = _stored(rng, (m, k), ta), _stored(rng, (k, n), tb)
        attrs = {"transpose_a": ta, "transpose_b": tb}
        result = ((m, n), contiguous_strides((m, n)))
        call = blas.prepare("mm", attrs, [_layout(a), _layout(b)], result, ["f32"] * 3)
        assert call is not None, (m, k, n, ta, tb)
        out = _run(call, [a, b], np.full((m, n), np.nan, np.float32))
        assert torch.equal(out, torch.mm(_logical(a, ta), _logical(b, tb))), (m, k, n, ta, tb)
        for bias_dims, alpha, beta in BIASES:
            bias = rng.standard_normal([{-1: n, -2: m, 1: 1}[d] for d in bias_dims]).astype(np.float32)
            call = blas.prepare("addmm", {**attrs, "alpha": alpha, "beta": beta},
                                [_layout(bias), _layout(a), _layout(b)], result, ["f32"] * 4)
            assert call is not None
            out = _run(call, [bias, a, b], np.full((m, n), np.nan, np.float32))
            expected = torch.addmm(torch.from_numpy(bias), _logical(a, ta), _logical(b, tb), beta=beta, alpha=alpha)
            assert torch.equal(out, expected), (m, k, n, ta, tb, bias.shape, alpha, beta)


@pytest.mark.parametrize("batch, m, k, n", [(4, 8, 16, 16), (64, 8, 16, 8), (3, 1, 7, 80), (2, 50, 100, 1),
                                            (6, 9, 9, 9)])
def test_bmm_is_bitwise_torch(batch, m, k, n, threads):
    rng = np.random.default_rng(batch + m + k + n)
    for ta, tb in itertools.product([False, True], repeat=2):
        a, b = _stored(rng, (batch, m, k), ta), _stored(rng, (batch, k, n), tb)
        call = blas.prepare("bmm", {"transpose_a": ta, "transpose_b": tb}, [_layout(a), _layout(b)],
                            ((batch, m, n), contiguous_strides((batch, m, n))), ["f32"] * 3)
        assert call is not None
        for _ in range(2):  # the pointer table is refilled when an operand moves
            out = _run(call, [a, b], np.full((batch, m, n), np.nan, np.float32))
            assert torch.equal(out, torch.bmm(_logical(a, ta), _logical(b, tb))), (batch, m, k, n, ta, tb)
            a, b = a.copy() * 0.5, b.copy()


def _prepared(name, shapes, dtypes=("f32",) * 4, onednn_takes=None, **attrs):
    *operands, result = shapes
    attrs = {"alpha": 1.0, "beta": 1.0, **attrs} if name == "addmm" else attrs
    return blas.prepare(name, attrs, [(s, contiguous_strides(s)) for s in operands],
                        (result, contiguous_strides(result)), list(dtypes[:len(shapes)]), onednn_takes=onednn_takes)


def test_direct_path_only_where_aten_calls_blas(monkeypatch):
    assert _prepared("mm", [(4, 5), (5, 6), (4, 6)]) is not None
    assert _prepared("addmm", [(6,), (4, 5), (5, 6), (4, 6)]) is not None
    assert _prepared("bmm", [(3, 8, 16), (3, 16, 8), (3, 8, 8)]) is not None
    # other dtypes (bf16 rounds after the product; f16/integers are not sgemm)
    assert _prepared("mm", [(4, 5), (5, 6), (4, 6)], dtypes=("bf16",) * 3) is None
    assert _prepared("mm", [(4, 5), (5, 6), (4, 6)], dtypes=("f32", "f32", "f16")) is None
    # empty products and an empty contraction: ATen calls no gemm
    assert _prepared("mm", [(0, 5), (5, 6), (0, 6)]) is None
    assert _prepared("mm", [(4, 0), (0, 6), (4, 6)]) is None
    # beta 0 (ATen skips the bias), a column bias (no row copy)
    assert _prepared("addmm", [(6,), (4, 5), (5, 6), (4, 6)], beta=0.0) is None
    assert _prepared("addmm", [(4, 1), (4, 5), (5, 6), (4, 6)]) is None
    # bmm: ATen's naive loop below 400 multiply-adds per batch; one batch is a plain gemm there
    assert _prepared("bmm", [(3, 4, 4), (3, 4, 4), (3, 4, 4)]) is None
    assert _prepared("bmm", [(1, 8, 16), (1, 16, 8), (1, 8, 8)]) is None
    # the products oneDNN takes stay on the extern path (asked with the logical rows, depth, cols)
    assert _prepared("mm", [(32, 64), (64, 16), (32, 16)], onednn_takes=lambda m, k, n: (m, k, n) == (32, 64, 16)) is None
    assert _prepared("mm", [(32, 64), (64, 16), (32, 16)], onednn_takes=lambda m, k, n: (m, k, n) != (32, 64, 16)) \
        is not None
    # a strided operand BLAS cannot read (ATen clones it first)
    assert blas.prepare("mm", {}, [((4, 5), (10, 2)), ((5, 6), (6, 1))], ((4, 6), (6, 1)), ["f32"] * 3) is None
    assert blas.prepare("mm", {}, [((4, 5), (1, 8)), ((5, 6), (6, 1))], ((4, 6), (6, 1)), ["f32"] * 3) is not None
    # reduced float32 matmul precision: ATen uses oneDNN's bf32/tf32 gemm
    monkeypatch.setattr(blas.library(), "precision", lambda: "medium")
    assert _prepared("mm", [(4, 5), (5, 6), (4, 6)]) is None


def test_precision_changed_after_prepare_defers_to_aten(monkeypatch):
    call = _prepared("mm", [(4, 5), (5, 6), (4, 6)])
    monkeypatch.setattr(call, "_precision", lambda: "high")
    a, b, out = np.ones((4, 5), np.float32), np.ones((5, 6), np.float32), np.zeros((4, 6), np.float32)
    assert call([a.ctypes.data, b.ctypes.data, out.ctypes.data]) is False
    assert not out.any()


def test_plan_gemm_matches_atens_layout_rules():
    # row-major result: ATen computes C^T = B^T A^T (swap), both operands read untransposed
    plan = blas.plan_gemm(blas.Matrix((4, 5), (5, 1)), blas.Matrix((5, 6), (6, 1)), blas.Matrix((4, 6), (6, 1)))
    assert plan == blas.GemmPlan(False, False, 6, 4, 5, 6, 5, 6, True)
    # a [M, 1] result is column-major as well: no swap; a transposed first operand is read transposed
    plan = blas.plan_gemm(blas.Matrix((4, 5), (1, 4)), blas.Matrix((5, 1), (1, 1)), blas.Matrix((4, 1), (1, 1)))
    assert plan is not None and not plan.swap and not plan.transa
    # a result neither row- nor column-major: ATen copies it, so no plan
    assert blas.plan_gemm(blas.Matrix((4, 5), (5, 1)), blas.Matrix((5, 6), (6, 1)),
                          blas.Matrix((4, 6), (12, 2))) is None


def _matmul_graph(bias_shape=None):
    b = Builder("g")
    x = b.param(TensorType((6, 8), DType.f32), "x")
    w = b.param(TensorType((8, 5), DType.f32), "w")
    if bias_shape is None:
        y = b.op("mm", x, w)
        return b.build([b.op("tanh", y), y]), 2
    bias = b.param(TensorType(bias_shape, DType.f32), "bias")
    y = b.op("addmm", bias, x, w, alpha=0.5, beta=2.0)
    return b.build([y, b.op("exp", y)]), 3


@pytest.mark.parametrize("fused", [False, True], ids=["extern-step", "kernel-extern"])
@pytest.mark.parametrize("bias_shape", [None, (5,), (1, 5), (6, 5)])
def test_launcher_uses_blas_and_follows_moving_inputs(bias_shape, fused, rng, threads):
    fn, count = _matmul_graph(bias_shape)
    if fused:  # the cpu pipeline fuses the product with its epilogue: an extern inside a native kernel
        exe = compile_graph(fn, target="cpu", cache=None, options={"threads": threads})
        assert any(step.extern is not None for step in exe.plan.steps)
    else:
        exe = build_cpu_executable(fn, {"threads": threads})
        assert [step.kind for step in exe.plan.steps] == ["extern", "kernel"]
    assert exe.stats["blas_calls"] == exe.stats["extern_calls"] == 1
    shapes = [(6, 8), (8, 5), bias_shape]
    kept = []
    for _ in range(3):
        inputs = [rng.standard_normal(s).astype(np.float32) for s in shapes[:count]]
        kept.append(inputs)  # alive: the next call's inputs live at new addresses
        for _ in range(2):
            got = exe(*inputs)
            x, w = torch.from_numpy(inputs[0]), torch.from_numpy(inputs[1])
            product = torch.mm(x, w) if bias_shape is None else \
                torch.addmm(torch.from_numpy(inputs[2]), x, w, alpha=0.5, beta=2.0)
            assert torch.equal(torch.from_numpy(got[0 if bias_shape else 1]), product)
            inputs[0] *= 0.5  # updated in place: same address, new values


def test_launcher_without_blas_symbols_uses_aten(monkeypatch, rng):
    class NoBlas:
        sgemm = sgemm_batch = None
        precision = staticmethod(torch.get_float32_matmul_precision)

    monkeypatch.setattr(blas, "_LIBRARY", NoBlas())
    fn, _ = _matmul_graph((5,))
    exe = build_cpu_executable(fn, {"threads": 1})
    assert exe.stats["blas_calls"] == 0 and exe.stats["extern_calls"] == 1
    x, w, bias = (rng.standard_normal(s).astype(np.float32) for s in [(6, 8), (8, 5), (5,)])
    got = exe(x, w, bias)
    expected = torch.addmm(torch.from_numpy(bias), torch.from_numpy(x), torch.from_numpy(w), alpha=0.5, beta=2.0)
    torch.testing.assert_close(torch.from_numpy(got[0]), expected)
