"""Small batched float32 matmuls as generated code (codegen/llvm/small_matmul.py): numerics against float64
numpy within the error bound of a K-term float32 sum, every operand layout, odd sizes, 1 and 2 threads; and
which products take it (the planner's one decision: CpuTarget.small_bmm_max_macs), which stay on BLAS; and
2-d products (mm, addmm) run the same way with their rows as the batch (CpuTarget.small_mm_max_macs)."""

from __future__ import annotations

import hashlib
import itertools
import re

import numpy as np
import pytest

from neuroncc.codegen.llvm import jit
from neuroncc.codegen.llvm.launch_plan import StepKind
from neuroncc.codegen.llvm.regions import make_kernel
from neuroncc.codegen.llvm.small_matmul import (MAX_SHARED_PACKED_BYTES, MM_ROWS_PER_ITEM, VECTOR_FMA_WORK,
                                                 emit_small_matmul, plan_small_matmul, rows_per_item)
from neuroncc.codegen.llvm.views import Layout
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import CpuTarget, host_cpu
from neuroncc.ir import Builder, DType, TensorType
from neuroncc.ir.types import contiguous_strides
from neuroncc.testing.choices import choose

EPS = float(np.finfo(np.float32).eps)
FORMS = list(itertools.product([False, True], repeat=2))  # (transpose_a, transpose_b)


def _stored(rng, batch, rows, cols, transposed, scale=1.0):
    shape = (batch, cols, rows) if transposed else (batch, rows, cols)
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _logical(x, transposed):
    return x.transpose(0, 2, 1) if transposed else x


def assert_within_sum_bound(got, a, b):
    """|got - A@B| <= K * eps * (|A| @ |B|) elementwise: the bound of a K-term float32 dot product (one
    rounding per fused multiply-add, each at most eps/2 relative to the partial sum), twice over."""
    exact = np.matmul(a.astype(np.float64), b.astype(np.float64))
    bound = a.shape[-1] * EPS * np.matmul(np.abs(a).astype(np.float64), np.abs(b).astype(np.float64))
    excess = np.abs(got - exact) - bound
    assert excess.max() <= 0, f"worst excess over the bound {excess.max():.3g} at {np.unravel_index(excess.argmax(), excess.shape)}"


def bmm_graph(batch, m, k, n, ta, tb, epilogue=False):
    """A top-level bmm (or, with ``epilogue``, a kernel of bmm * 0.25 + its row max, the attention form)."""
    b = Builder("bmm")
    x = b.param(TensorType((batch, k, m) if ta else (batch, m, k), DType.f32), "a")
    y = b.param(TensorType((batch, n, k) if tb else (batch, k, n), DType.f32), "b")
    product = b.op("bmm", x, y, transpose_a=ta, transpose_b=tb)
    if not epilogue:
        return b.build([product])
    scaled = b.op("mul", product, b.op("full", shape=(), dtype=DType.f32, value=0.25))
    kernel = make_kernel(b.ops, [x, y], [scaled, b.op("amax", scaled, dims=(2,), keepdim=True)], "scores")
    b.ops = [kernel]
    return b.build(list(kernel.results))


def _matmul_steps(exe):
    """(generated matmul phases, extern steps) of an executable's plan."""
    generated = [p for s in exe.plan.steps for p in s.phases if p.symbol.endswith("_mm")]
    externs = [s for s in exe.plan.steps if s.kind == StepKind.EXTERN or s.extern is not None]
    return generated, externs


SHAPES = [(128, 16, 16, 16), (3, 5, 7, 9), (4, 17, 1, 33), (2, 1, 6, 1), (5, 9, 3, 8), (2, 13, 16, 24),
          (64, 16, 8, 16)]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_generated_bmm_numerics_every_layout(shape, threads, rng):
    batch, m, k, n = shape
    for ta, tb in FORMS:
        a, b = _stored(rng, batch, m, k, ta, 3.0), _stored(rng, batch, k, n, tb)
        exe = build_cpu_executable(bmm_graph(batch, m, k, n, ta, tb), {"threads": threads})
        generated, externs = _matmul_steps(exe)
        assert len(generated) == 1 and not externs, (shape, ta, tb)
        (got,) = exe(a, b)
        assert_within_sum_bound(got, _logical(a, ta), _logical(b, tb))


@pytest.mark.parametrize("threads", [1, 2])
def test_generated_bmm_as_the_first_phase_of_its_kernel(threads, rng):
    batch, m, k, n = 64, 16, 16, 16
    for ta, tb in FORMS:
        a, b = _stored(rng, batch, m, k, ta), _stored(rng, batch, k, n, tb, 100.0)
        exe = build_cpu_executable(bmm_graph(batch, m, k, n, ta, tb, epilogue=True), {"threads": threads})
        (step,) = exe.plan.steps
        matmul = step.phases[0]
        assert step.extern is None and matmul.symbol.endswith("_mm") and len(step.phases) >= 2
        scaled, row_max = exe(a, b)
        assert_within_sum_bound(scaled / 0.25, _logical(a, ta), _logical(b, tb))
        np.testing.assert_array_equal(row_max, scaled.max(axis=2, keepdims=True))
        # the batch is the parallel loop; 64 items of 512 vector FMAs (AVX2; 256 with AVX-512), 4 work units
        # each, stay on the calling thread, 1024 items split across the team at 2 threads. (128 items sit
        # exactly at the team's threshold with AVX2's 8 lanes and split there: Zen 3, session 20, 2 threads,
        # split faster for two of the three operand forms, bench_smallbmm.py.)
        assert (matmul.n_outer, matmul.work) == (batch, m * k * n // host_cpu().f32_lanes * VECTOR_FMA_WORK)
        assert (exe.team or exe.pool).runs_inline(matmul.n_outer, matmul.work)
    exe = build_cpu_executable(bmm_graph(1024, m, k, n, False, False, epilogue=True), {"threads": threads})
    matmul = exe.plan.steps[0].phases[0]
    assert matmul.n_outer == 1024 and (exe.team or exe.pool).runs_inline(matmul.n_outer, matmul.work) == (threads == 1)
    a, b = _stored(rng, 1024, m, k, False), _stored(rng, 1024, k, n, False, 100.0)
    scaled, _ = exe(a, b)
    assert_within_sum_bound(scaled / 0.25, a, b)


def test_strided_operands_and_batch_broadcast(rng):
    """Operands read through views: a permuted [L, B, E] input as [B, L, E] and a batch-broadcast B."""
    b = Builder("views")
    x = b.param(TensorType((16, 4, 8), DType.f32), "x")
    w = b.param(TensorType((1, 8, 12), DType.f32), "w")
    heads = b.op("permute", x, dims=(1, 0, 2))  # strides (8, 32, 1)
    weights = b.op("expand", w, shape=(4, 8, 12))  # batch stride 0
    fn = b.build([b.op("bmm", heads, weights)])
    exe = build_cpu_executable(fn, {"threads": 1})
    assert len(_matmul_steps(exe)[0]) == 1
    xs, ws = rng.standard_normal((16, 4, 8)).astype(np.float32), rng.standard_normal((1, 8, 12)).astype(np.float32)
    (got,) = exe(xs, ws)
    assert_within_sum_bound(got, xs.transpose(1, 0, 2), np.broadcast_to(ws, (4, 8, 12)))


def test_classifier_heads_are_generated_and_large_products_stay_on_blas():
    """Issue #18's attention (32 x 4 heads of 16 x 16, head size 16): every form of its bmm is generated
    code; a product past CpuTarget.small_bmm_max_macs per item stays on sgemm_batch."""
    for ta, tb in FORMS:
        exe = build_cpu_executable(bmm_graph(128, 16, 16, 16, ta, tb), {"threads": 1})
        assert len(_matmul_steps(exe)[0]) == 1 and exe.stats["blas_calls"] == 0 and exe.stats["extern_calls"] == 0
    side = round(host_cpu().small_bmm_max_macs ** (1 / 3)) + 8
    exe = build_cpu_executable(bmm_graph(4, side, side, side, False, False), {"threads": 1})
    assert _matmul_steps(exe)[0] == [] and exe.stats["blas_calls"] == 1


def _layout(slot, shape, strides=None):
    return Layout(slot, 0, shape, strides or contiguous_strides(shape), DType.f32)


def test_the_decision():
    op = bmm_graph(8, 16, 16, 16, False, True).ops[0]
    operands, result = [_layout(0, (8, 16, 16)), _layout(1, (8, 16, 16))], _layout(2, (8, 16, 16))
    target = host_cpu()
    assert plan_small_matmul(op, operands, result, target) is not None
    assert plan_small_matmul(op, operands, result, target, max_macs=16 ** 3 - 1) is None
    assert plan_small_matmul(op, operands, _layout(2, (8, 16, 16), (256, 1, 16)), target) is None  # column-major C
    empty = bmm_graph(0, 16, 16, 16, False, False).ops[0]
    assert plan_small_matmul(empty, [_layout(0, (0, 16, 16))] * 2, _layout(2, (0, 16, 16)), target) is None
    bf16 = [Layout(0, 0, (8, 16, 16), (256, 16, 1), DType.bf16)] * 2
    assert plan_small_matmul(op, bf16, _layout(2, (8, 16, 16)), target) is None
    # B transposed is copied to the stack per item: only while that copy is small
    wide = bmm_graph(2, 4, 128, 128, False, True).ops[0]
    assert plan_small_matmul(wide, [_layout(0, (2, 4, 128)), _layout(1, (2, 128, 128))], _layout(2, (2, 4, 128)),
                             target, max_macs=1 << 30) is None


def test_code_is_vector_fmas_for_avx2_and_avx512():
    op = bmm_graph(8, 16, 16, 16, False, False).ops[0]
    layouts = [_layout(0, (8, 16, 16)), _layout(1, (8, 16, 16)), _layout(2, (8, 16, 16))]
    for name, features, register in (("znver3", "+avx,+avx2,+fma", "ymm"),
                                     ("skylake-avx512", "+avx,+avx2,+fma,+avx512f", "zmm")):
        target = CpuTarget(name, features)
        text = emit_small_matmul(plan_small_matmul(op, layouts[:2], layouts[2], target), "smm", 4)
        assert re.search(rf"vfmadd\d+ps\s[^\n]*%{register}", jit.assembly([text], target)), name


# ---- 2-d products: mm and addmm, rows as the batch ----------------------------------------------------------


@pytest.fixture
def generated_2d(monkeypatch):
    """Every float32 mm/addmm up to 2^25 multiply-adds generated, whatever the host (AVX2's bound is lower)."""
    choose(monkeypatch, small_mm_max_macs=1 << 25)


def mm_graph(m, k, n, ta, tb, bias_shape=None, epilogue=False, alpha=1, beta=1):
    """A top-level mm (addmm with ``bias_shape``), or with ``epilogue`` a kernel of it and its tanh."""
    b = Builder("mm")
    x = b.param(TensorType((k, m) if ta else (m, k), DType.f32), "a")
    y = b.param(TensorType((n, k) if tb else (k, n), DType.f32), "b")
    params = [x, y]
    if bias_shape is None:
        product = b.op("mm", x, y, transpose_a=ta, transpose_b=tb)
    else:
        bias = b.param(TensorType(bias_shape, DType.f32), "bias")
        params.append(bias)
        product = b.op("addmm", bias, x, y, transpose_a=ta, transpose_b=tb, alpha=alpha, beta=beta)
    if not epilogue:
        return b.build([product])
    kernel = make_kernel(b.ops, params, [b.op("tanh", product)], "linear_tanh")
    b.ops = [kernel]
    return b.build(list(kernel.results))


MM_SHAPES = [(512, 64, 192), (512, 128, 64), (64, 512, 128), (36, 5, 19), (30, 1, 33), (48, 7, 1), (96, 24, 40),
             (1, 3, 17), (200, 16, 130)]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", MM_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_generated_mm_numerics_every_layout(shape, threads, rng, generated_2d):
    m, k, n = shape
    for ta, tb in FORMS:
        a2, b2 = _stored(rng, 1, m, k, ta, 3.0)[0], _stored(rng, 1, k, n, tb)[0]
        exe = build_cpu_executable(mm_graph(m, k, n, ta, tb), {"threads": threads})
        generated, externs = _matmul_steps(exe)
        lanes = host_cpu().f32_lanes
        if tb and n > 1 and k * -(-n // lanes) * lanes * 4 > MAX_SHARED_PACKED_BYTES:  # B too big to pack: BLAS
            assert generated == [] and len(externs) == 1
        else:
            assert len(generated) == 1 and not externs, (shape, ta, tb)
            assert generated[0].n_outer == m // rows_per_item(m)
        (got,) = exe(a2, b2)
        assert_within_sum_bound(got, a2.T if ta else a2, b2.T if tb else b2)


@pytest.mark.parametrize("threads", [1, 2])
def test_generated_addmm_adds_each_form_of_bias(threads, rng, generated_2d):
    m, k, n = 96, 40, 72
    for bias_shape in [(n,), (1, n), (m, n), (1,), ()]:
        for ta, tb in FORMS:
            a2, b2 = _stored(rng, 1, m, k, ta, 3.0)[0], _stored(rng, 1, k, n, tb)[0]
            bias = (rng.standard_normal(bias_shape) * 10).astype(np.float32)
            exe = build_cpu_executable(mm_graph(m, k, n, ta, tb, bias_shape), {"threads": threads})
            generated, externs = _matmul_steps(exe)
            la, lb = a2.T if ta else a2, b2.T if tb else b2
            (got,) = exe(a2, b2, bias)
            if len(bias_shape) == 2 or bias_shape == (n,):  # a row vector or a matrix: added per column
                assert len(generated) == 1 and not externs, (bias_shape, ta, tb)
            # the sum is rounded once more where the bias is added (as ATen adds it to MKL's product)
            exact = la.astype(np.float64) @ lb + bias
            bound = k * EPS * (np.abs(la).astype(np.float64) @ np.abs(lb)) + EPS * np.abs(exact)
            assert (np.abs(got - exact) - bound).max() <= 0, (bias_shape, ta, tb)


def test_addmm_with_other_alpha_or_beta_stays_on_blas(generated_2d):
    for alpha, beta in ((2, 1), (1, 0), (1, 0.5)):
        exe = build_cpu_executable(mm_graph(64, 16, 32, False, True, (32,), alpha=alpha, beta=beta), {"threads": 1})
        assert _matmul_steps(exe)[0] == []


@pytest.mark.parametrize("threads", [1, 2])
def test_generated_linear_as_the_first_phase_of_its_kernel(threads, rng, generated_2d):
    m, k, n = 512, 64, 128  # the classifier's first MLP layer, x @ W^T + b then its activation
    exe = build_cpu_executable(mm_graph(m, k, n, False, True, (n,), epilogue=True), {"threads": threads})
    (step,) = exe.plan.steps
    assert step.extern is None and step.phases[0].symbol.endswith("_mm") and len(step.phases) >= 2
    x, w, bias = (rng.standard_normal(shape).astype(np.float32) for shape in ((m, k), (n, k), (n,)))
    (got,) = exe(x, w, bias)
    np.testing.assert_allclose(got, np.tanh(x.astype(np.float64) @ w.T + bias), rtol=1e-5, atol=1e-5)
    # 32 items of 16 rows; split across the team at 2 threads (4M multiply-adds)
    matmul = step.phases[0]
    assert matmul.n_outer == m // MM_ROWS_PER_ITEM
    assert (exe.team or exe.pool).runs_inline(matmul.n_outer, matmul.work) == (threads == 1)


def test_the_2d_decision(generated_2d):
    target = host_cpu()
    op = mm_graph(512, 64, 192, False, True).ops[0]
    a, w, c = _layout(0, (512, 64)), _layout(1, (192, 64)), _layout(2, (512, 192))  # x @ W^T, W stored [N, K]
    plan = plan_small_matmul(op, [a, w], c, target)
    assert (plan.batch, plan.rows, plan.b.strides[0], plan.packs_b) == (32, 16, 0, True)
    assert plan_small_matmul(op, [a, w], c, target, max_macs=512 * 64 * 192 - 1) is None
    assert plan_small_matmul(op, [a, w], _layout(2, (512, 192), (1, 512)), target) is None  # column-major C
    # one B for every item, packed once per call: only while it fits MAX_SHARED_PACKED_BYTES
    depth = MAX_SHARED_PACKED_BYTES // (4 * 192) + 1
    deep = mm_graph(64, depth, 192, False, True).ops[0]
    assert plan_small_matmul(deep, [_layout(0, (64, depth)), _layout(1, (192, depth))],
                             _layout(2, (64, 192)), target) is None
    in_place = mm_graph(64, depth, 192, False, False).ops[0]
    assert plan_small_matmul(in_place, [_layout(0, (64, depth)), _layout(1, (depth, 192))], _layout(2, (64, 192)),
                             target) is not None  # B read in place
    # rows: 16 per item where they divide, else a divisor up to 32, else one item of up to 32 rows
    assert [rows_per_item(r) for r in (512, 96, 30, 37, 31, 1, 67)] == [16, 16, 30, None, 31, 1, None]


def test_classifier_products_are_generated_on_avx512():
    """Issue #18's classifier: its forward products and gradients (2.1M-6.3M multiply-adds) are generated code
    on AVX-512 hosts (CpuTarget.small_mm_max_macs), not MKL calls; the transformer block's (e) stay on oneDNN."""
    avx512 = CpuTarget("znver4", "+avx2,+fma,+avx512f")
    for m, k, n in ((512, 64, 192), (512, 192, 64), (192, 512, 64), (512, 128, 64), (64, 512, 128)):
        assert m * k * n <= avx512.small_mm_max_macs
    assert not avx512.onednn_takes(512, 64, 192) and avx512.onednn_takes(2048, 512, 512)
    assert 2048 * 512 * 512 > avx512.small_mm_max_macs


def _classifier_plan(target, m, k, n, form):
    """The plan of one of issue #18's classifier's 2-d products on ``target``: "linear" x @ W^T (W stored
    [N, K]), "data" dY @ W, "weight" dY^T @ X (A stored [K, M])."""
    ta, tb = form == "weight", form == "linear"
    a_shape, b_shape = ((k, m) if ta else (m, k)), ((n, k) if tb else (k, n))
    op = mm_graph(m, k, n, ta, tb).ops[0]
    return plan_small_matmul(op, [_layout(0, a_shape), _layout(1, b_shape)], _layout(2, (m, n)), target)


CLASSIFIER_2D = [(512, 64, 192, "linear"), (512, 128, 64, "linear"), (512, 192, 64, "data"),
                 (512, 64, 128, "data"), (192, 512, 64, "weight"), (64, 512, 128, "weight")]


def test_classifier_products_are_generated_on_avx2_in_2x6_tiles():
    """Without AVX-512 (CpuTarget.small_mm_max_macs, matmul_tile_vectors): the classifier's products are
    generated code in tiles of 2 vectors x 6 rows (MKL's AVX2 kernel's shape; 4 x 2 lost to MKL on the weight
    gradients); an odd count of vectors ends in one 3 x 4 tile; the 33.6M weight gradients stay on MKL."""
    avx2 = CpuTarget("znver3", "+avx,+avx2,+fma")
    for m, k, n, form in CLASSIFIER_2D:
        plan = _classifier_plan(avx2, m, k, n, form)
        assert plan is not None, (m, k, n, form)
        assert [vectors for _, vectors in plan.column_blocks] == [2] * (n // 16), (m, k, n, form)
        assert plan.tile_rows(2) == 6
    odd = _classifier_plan(avx2, 96, 24, 40, "data")  # 5 vectors
    assert odd.column_blocks == ((0, 2), (2, 3)) and odd.tile_rows(3) == 4
    assert _classifier_plan(avx2, 96, 24, 24, "data").column_blocks == ((0, 3),)
    assert _classifier_plan(avx2, 256, 1024, 128, "weight") is None


#: sha256 (16 hex digits) of the AVX-512 (Zen 4) modules of small products, as 19589e4 emitted them: the tile
#: choice AVX2 changed leaves AVX-512's code as it was measured
AVX512_MODULES = {(512, 64, 192, "linear"): "971d1a6e24bee3af", (512, 192, 64, "data"): "3c1e49d663b57aec",
                  (192, 512, 64, "weight"): "7bdb2dfb4bb14121", (64, 512, 128, "weight"): "7cad93d970871312",
                  (96, 24, 40, "data"): "91308ff92aa6883f", (128, 16, 16, 16): "2bbf6b37c54397d5",
                  (64, 32, 32, 32): "1661b456b53c94c5", (32, 64, 64, 64): "b61aa6e017a909ac",
                  (128, 24, 24, 24): "87bbd2c87b876f82"}


def test_avx512_code_is_unchanged():
    avx512 = CpuTarget("znver4", "+avx2,+fma,+avx512f")
    for key, digest in AVX512_MODULES.items():
        if isinstance(key[-1], str):
            plan = _classifier_plan(avx512, *key)
        else:
            batch, m, k, n = key
            op = bmm_graph(batch, m, k, n, False, False).ops[0]
            plan = plan_small_matmul(op, [_layout(0, (batch, m, k)), _layout(1, (batch, k, n))],
                                     _layout(2, (batch, m, n)), avx512)
        text = emit_small_matmul(plan, "smm", 4)
        assert hashlib.sha256(text.encode()).hexdigest()[:16] == digest, key


@pytest.mark.parametrize("threads", [1, 2])
def test_classifier_products_run_generated_on_this_host(threads, rng):
    """The classifier's products on this host as the planner decides them (no bound forced): generated code
    (AVX2 and AVX-512 alike), within the K-term sum's error bound."""
    for m, k, n, form in CLASSIFIER_2D:
        ta, tb = form == "weight", form == "linear"
        a2, b2 = _stored(rng, 1, m, k, ta)[0], _stored(rng, 1, k, n, tb)[0]
        exe = build_cpu_executable(mm_graph(m, k, n, ta, tb), {"threads": threads})
        generated, externs = _matmul_steps(exe)
        assert len(generated) == 1 and not externs, (m, k, n, form)
        (got,) = exe(a2, b2)
        assert_within_sum_bound(got, a2.T if ta else a2, b2.T if tb else b2)
