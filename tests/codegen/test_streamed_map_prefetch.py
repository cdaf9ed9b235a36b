"""A streamed map stage computing a transcendental per element (cross-entropy's gradient: pieces of
``CpuTarget.streamed_map_piece_lines`` lines through a stack buffer, written past the caches) prefetches its
inputs' lines ``CpuTarget.streamed_map_prefetch_pieces`` bursts of 16 lines ahead on AVX2, a burst before each piece
(``prefetch.emit_prefetch_pieces_ahead``; session 23 softmax23: cross-entropy's backward kernel 12-17% faster at 1
and 2 threads on Zen 3). AVX-512's code does not change."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
from test_bf16_rounding import SAPPHIRE_RAPIDS, ZEN4
from test_pairs import AVX2

from neuroncc.codegen.llvm import jit
from neuroncc.codegen.llvm.emit import emit_kernel
from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.codegen.llvm.schedule import plan_kernel
from neuroncc.codegen.llvm.views import Layout
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import CpuTarget
from neuroncc.ir import Builder, DType, Function, TensorType
from neuroncc.testing.choices import choose


def gradient_like(rows: int, cols: int) -> Function:
    """exp(x - m) * s with a per-row m and s: the shape of cross-entropy's gradient (16 MB out: streamed)."""
    b = Builder("streamed_exp")
    x = b.param(TensorType((rows, cols), DType.f32), "x")
    m = b.param(TensorType((rows, 1), DType.f32), "m")
    s = b.param(TensorType((rows, 1), DType.f32), "s")
    return b.build([b.op("mul", b.op("exp", b.op("sub", x, m)), s)])


def _assembly(fn: Function, target: CpuTarget) -> str:
    """The phase function's assembly for ``target``, its buffers aligned as the launch plan's and a last-level
    cache of unknown size (large outputs stream on any host)."""
    plan = plan_kernel(fn, [Layout.of(k, p.type) for k, p in enumerate(fn.params)],
                       [Layout.of(len(fn.params) + k, v.type) for k, v in enumerate(fn.outputs)])
    plan = dataclasses.replace(plan, aligned_args=frozenset(range(plan.n_args)))
    texts, _ = emit_kernel(plan, "k", dataclasses.replace(target, last_level_cache_bytes=0))
    return jit.assembly(texts, target).split("k_p0:")[1].split(".Lfunc_end")[0]


def _chosen(monkeypatch, choice: str, value: int) -> None:
    """``CpuTarget.<choice>`` reads ``value`` on every target for the rest of the test."""
    choose(monkeypatch, **{choice: value})


def test_avx2_prefetches_the_input_two_pieces_ahead_and_avx512_as_before(monkeypatch):
    fn = gradient_like(1024, 4096)
    zen3, zen4 = CpuTarget("znver3", AVX2), CpuTarget("znver4", ZEN4)
    assert zen3.streamed_map_prefetch_pieces == 2 and zen4.streamed_map_prefetch_pieces == 0
    ahead = _assembly(fn, zen3)
    zen4_code = _assembly(fn, zen4)
    assert "vmovntps" in ahead and ahead.count("prefetcht0") == 2  # a piece's 2 lines of x, 2 KiB ahead
    assert "prefetcht0\t2048(" in ahead
    _chosen(monkeypatch, "streamed_map_prefetch_pieces", 0)
    assert "prefetcht0" not in _assembly(fn, zen3)
    assert _assembly(fn, zen4) == zen4_code and "prefetcht0" not in zen4_code and "vmovntps" in zen4_code


def test_avx2_streams_float32_pieces_of_two_lines_and_avx512_as_before(monkeypatch):
    # CpuTarget.streamed_map_piece_lines (session 25 xent25): on AVX2 each piece is 2 lines (32 float32, one
    # interleaved vector iteration of the math), so that its non-temporal stores spread through the math instead
    # of a burst of 16 lines after each piece (cross-entropy's backward [512, 32000] 4-15% faster on Zen 3)
    fn = gradient_like(1024, 4096)
    zen3, zen4 = CpuTarget("znver3", AVX2), CpuTarget("znver4", ZEN4)
    assert zen3.streamed_map_piece_lines == 2 and zen4.streamed_map_piece_lines == 16
    two, zen4_code = _assembly(fn, zen3), _assembly(fn, zen4)
    _chosen(monkeypatch, "streamed_map_piece_lines", 16)
    sixteen = _assembly(fn, zen3)
    assert two.count("prefetcht0") == 2 and sixteen.count("prefetcht0") == 16  # a piece's lines, 2 KiB ahead
    assert "prefetcht0\t2048(" in two and "prefetcht0\t2048(" in sixteen
    assert re.search(r"cmpq\s+\$1024, %r", sixteen) and not re.search(r"cmpq\s+\$1024, %r", two)  # its copy
    assert _assembly(fn, zen4) == zen4_code


def test_the_prefetches_give_the_same_bits(rng, monkeypatch):
    fn = fuse_whole_function(gradient_like(1024, 4096))
    x = (rng.standard_normal((1024, 4096)) * 4).astype(np.float32)
    x[3, :5] = [np.nan, np.inf, -np.inf, 88.0, -200.0]
    m, s = x.max(axis=1, keepdims=True), rng.random((1024, 1)).astype(np.float32)
    (got,) = build_cpu_executable(fn, {"threads": 2})(x, m, s)
    _chosen(monkeypatch, "streamed_map_prefetch_pieces", 0)
    (want,) = build_cpu_executable(fn, {"threads": 2})(x, m, s)
    np.testing.assert_array_equal(got, want)
    _chosen(monkeypatch, "streamed_map_piece_lines", 16)
    (sixteen,) = build_cpu_executable(fn, {"threads": 2})(x, m, s)
    np.testing.assert_array_equal(got, sixteen)


def test_avx2_and_zen4_stream_the_gradients_pieces_from_registers_and_intel_avx512_as_before(monkeypatch):
    # CpuTarget.register_piece_lines (session 27 xent27, Zen 3; session 35 xent35, Zen 4): a piece without its
    # row's one-hot target is stored with `vmovntps` straight from the math's registers, not through the stack
    # buffer's copy loop (its one store in a loop); the piece holding the target keeps the buffer for its
    # correction. 4 lines: 8 ymm (4 zmm) stores, their vectors' polynomials interleaved
    from test_one_hot_rows import _gradient

    fn = _gradient(1024, 4096)
    zen3, zen4 = CpuTarget("znver3", AVX2), CpuTarget("znver4", ZEN4)
    intel = CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS)
    assert (zen3.register_piece_lines, zen4.register_piece_lines, intel.register_piece_lines) == (4, 4, 0)
    direct, zen4_direct, intel_code = _assembly(fn, zen3), _assembly(fn, zen4), _assembly(fn, intel)
    _chosen(monkeypatch, "register_piece_lines", 0)
    buffered = _assembly(fn, zen3)
    assert buffered.count("vmovntps") == 1 and re.search(r"cmpq\s+\$128, %r", buffered)  # the copy loop
    assert direct.count("vmovntps") >= 9  # a store per vector of the piece, and the target's piece's copy loop
    assert direct.count("vpslld\t$23") >= 8  # the 8 vectors' exponentials side by side
    assert _assembly(fn, zen4).count("vmovntps") == 1
    assert zen4_direct.count("vmovntps") >= 5 and zen4_direct.count("vscalefps") >= 4  # (4 zmm side by side)
    assert _assembly(fn, intel) == intel_code


def test_pieces_from_registers_give_the_buffered_bits(rng, monkeypatch):
    from test_one_hot_rows import _gradient

    rows, classes = 48, 32000  # 6 MB out (streamed on any host), blocks of 16384 and 15616 columns
    fn = fuse_whole_function(_gradient(rows, classes))
    x = (rng.standard_normal((rows, classes)) * 4).astype(np.float32)
    x[3, :5] = [np.nan, np.inf, -np.inf, 88.0, -200.0]
    edges = [0, 31, 32, 63, 64, 127, 128, 16383, 16384, 16415, 16416, classes - 32, classes - 1,  # pieces' edges
             -100, classes, -1, 2**40]
    labels = np.array(edges + list(rng.integers(0, classes, rows - len(edges))), np.int64)
    inputs = [x, labels, rng.uniform(0.5, 2, (rows, 1)).astype(np.float32), np.full((rows, 1), 4.0, np.float32)]
    (got,) = build_cpu_executable(fn, {"threads": 2})(*inputs)
    _chosen(monkeypatch, "register_piece_lines", 0)
    (want,) = build_cpu_executable(fn, {"threads": 2})(*inputs)
    np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))
    assert all(got[r, t] < 0 for r, t in enumerate(labels) if 0 <= t < classes and r != 3)  # corrected
