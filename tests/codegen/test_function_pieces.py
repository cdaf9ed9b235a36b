"""A map stage evaluating two or more transcendental functions per element (gelu(x*w+b)*sigmoid(x)) runs its rows in
pieces where the target says so (``CpuTarget.function_piece_lines``: Zen 4 and AVX2, 4 lines of float32 output):
each piece one vector iteration of its loop, 4 zmm vectors (AVX2: 8 ymm) interleaved instead of
``polynomial_interleave``'s 2 (4), after the prefetches of its lines of x ``CpuTarget.function_prefetch_lines`` (16)
lines ahead; plain stores, the same operations, the same bits. On AVX2 the pieces come before its split math loops
(``CpuTarget.splits_polynomial_math_loops``), which rows that are not whole pieces keep. Elsewhere (Intel's AVX-512
cores, rows that are not whole pieces, bf16 pairs) the stage's code is as before."""

from __future__ import annotations

import re

import numpy as np
import pytest
from test_bf16_rounding import SAPPHIRE_RAPIDS, ZEN4
from test_pairs import AVX2
from test_streamed_map_prefetch import _assembly, _chosen

from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.errors import TargetCpuError
from neuroncc.hardware.host import CpuTarget, compiling_for
from neuroncc.ir import Builder, DType, Function, TensorType


def row_a(rows: int, cols: int, dtype: DType = DType.f32) -> Function:
    """gelu(x*w+b)*sigmoid(x) over [rows, cols]: issue #19's row (a)."""
    b = Builder("row_a")
    x = b.param(TensorType((rows, cols), dtype), "x")
    w = b.param(TensorType((cols,), dtype), "w")
    bias = b.param(TensorType((cols,), dtype), "b")
    gelu = b.op("gelu", b.op("add", b.op("mul", x, w), bias))
    return b.build([b.op("mul", gelu, b.op("sigmoid", x))])


def _stores(code: str) -> list[str]:
    """The loop's vector stores to memory (not the stack)."""
    return re.findall(r"vmov\w+\t%zmm\d+, (-?\d*\(%r\w+,%r\w+\))", code)


def test_zen4_runs_pieces_of_four_vectors_after_their_prefetches():
    zen4 = CpuTarget("znver4", ZEN4)
    assert zen4.function_piece_lines == 4 and zen4.function_prefetch_lines == 16
    code = _assembly(row_a(4096, 1024), zen4)
    assert len(_stores(code)) == 4 and "vmovnt" not in code  # a piece's 4 vectors, plain stores
    assert len(re.findall(r"vdivps", code)) == 8  # gelu's and sigmoid's divisions, 4 vectors side by side
    loads = sorted(int(n or 0) for n in re.findall(r"vmovups\t(-?\d*)\(%r\w+,%r\w+\), %zmm", code))
    fetched = sorted(int(n or 0) for n in re.findall(r"prefetcht0\t(-?\d*)\(", code))
    assert len(fetched) == 4 and fetched[0] - loads[0] == 16 * 64  # the piece's 4 lines of x, 1 KiB ahead
    assert "(%rsp" not in code  # no spills


def test_without_the_choice_zen4_interleaves_two_vectors_as_before(monkeypatch):
    zen4 = CpuTarget("znver4", ZEN4)
    _chosen(monkeypatch, "function_piece_lines", 0)
    code = _assembly(row_a(4096, 1024), zen4)
    assert len(_stores(code)) == 2 and "prefetch" not in code


def test_avx2_runs_pieces_of_eight_vectors_before_its_split_loops(monkeypatch):
    zen3 = CpuTarget("znver3", AVX2)
    assert zen3.function_piece_lines == 4 and zen3.function_prefetch_lines == 16 and zen3.splits_polynomial_math_loops
    code = _assembly(row_a(4096, 1024), zen3)
    assert len(re.findall(r"vmovups\t%ymm\d+, (-?\d*\(%r\w+,%r\w+\))", code)) == 8  # a piece's 8 vectors, one loop
    assert len(re.findall(r"vdivps", code)) == 16  # gelu's (divided: divides_gelu_erf_ratio) and sigmoid's
    assert len(re.findall(r"prefetcht0", code)) == 4
    _chosen(monkeypatch, "splits_polynomial_math_loops", False)
    assert _assembly(row_a(4096, 1024), zen3) == code  # (the pieces, whether or not the target splits)
    monkeypatch.undo()
    # rows of partial pieces (1040 columns) keep the split loops
    partial = _assembly(row_a(1024, 1040), zen3)
    assert "prefetch" not in partial
    _chosen(monkeypatch, "function_piece_lines", 0)
    assert _assembly(row_a(1024, 1040), zen3) == partial


def test_avx2_pieces_spill_into_aligned_slots(monkeypatch):
    # the phase's stack aligned to 32 bytes: each ymm spill slot whole in one line and one page (aligned moves);
    # without the choice the frame is 16-aligned and its slots unaligned moves; Zen 4's pieces spill nothing
    zen3, zen4 = CpuTarget("znver3", AVX2), CpuTarget("znver4", ZEN4)
    assert zen3.aligns_vector_spill_slots and not zen4.aligns_vector_spill_slots
    code = _assembly(row_a(4096, 1024), zen3)
    assert "andq\t$-32, %rsp" in code and re.findall(r"vmovaps\t%ymm\d+, -?\d*\(%rsp\)", code)
    assert not re.findall(r"vmovups\t[^\n]*\(%rsp\)", code)
    zen4_code = _assembly(row_a(4096, 1024), zen4)
    assert "andq" not in zen4_code and "(%rsp" not in zen4_code
    # rows of partial pieces (the split loops) keep their frame
    partial = _assembly(row_a(1024, 1040), zen3)
    assert "andq\t$-32, %rsp" not in partial
    _chosen(monkeypatch, "aligns_vector_spill_slots", False)
    unaligned = _assembly(row_a(4096, 1024), zen3)
    assert "andq" not in unaligned and re.findall(r"vmovups\t%ymm\d+, -?\d*\(%rsp\)", unaligned)
    assert _assembly(row_a(1024, 1040), zen3) == partial


def test_intel_avx512_keeps_its_code():
    cpu = CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS)
    assert cpu.function_piece_lines == 0 and cpu.function_prefetch_lines == 0
    assert "prefetch" not in _assembly(row_a(4096, 1024), cpu)


def test_avx2_pieces_keep_the_split_loops_bits(rng, monkeypatch):
    # AVX2's code (compiled for a Zen 3, run here) in pieces against its split loops (gelu divided in both)
    fn = fuse_whole_function(row_a(64, 1024))
    x = (rng.standard_normal((64, 1024)) * 4).astype(np.float32)
    x[3, :10] = [np.nan, np.inf, -np.inf, 88.0, -200.0, 1e-40, -0.0, 6.0, -5.7, 5.65]
    w, b = rng.standard_normal(1024).astype(np.float32), rng.standard_normal(1024).astype(np.float32)
    try:
        with compiling_for("znver3"):
            pass
    except TargetCpuError:
        pytest.skip("the host cannot run a Zen 3's code")
    with compiling_for("znver3"):
        pieces = build_cpu_executable(fn, {"threads": 2})
        _chosen(monkeypatch, "function_piece_lines", 0)
        split = build_cpu_executable(fn, {"threads": 2})
    assert "llvm.prefetch" in "".join(pieces.module.llvm_ir)  # (a piece: 8 vector iterations interleaved)
    assert '"llvm.loop.interleave.count", i32 8' in "".join(pieces.module.llvm_ir)
    assert "llvm.prefetch" not in "".join(split.module.llvm_ir)
    (got,), (want,) = pieces(x, w, b), split(x, w, b)
    np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))


def test_rows_of_partial_pieces_keep_their_code(monkeypatch):
    # 1040 columns: 16 pieces of 64 and 16 elements
    zen4 = CpuTarget("znver4", ZEN4)
    partial = _assembly(row_a(1024, 1040), zen4)
    assert "prefetch" not in partial
    _chosen(monkeypatch, "function_piece_lines", 0)
    assert _assembly(row_a(1024, 1040), zen4) == partial


def test_bf16_pairs_keep_their_code(monkeypatch):
    # bf16 (a) after the cpu pipeline: its stage loops over element pairs (pairs.py), 16-bit outputs
    _chosen(monkeypatch, "function_piece_lines", 4)
    _chosen(monkeypatch, "function_prefetch_lines", 16)
    text = "".join(build_cpu_executable(row_a(256, 1024, DType.bf16), {"threads": 1}).module.llvm_ir)
    assert "llvm.prefetch" not in text and "i16" in text


@pytest.mark.parametrize(("shape", "lines"), [((256, 1024), 4), ((64, 4096), 2), ((33, 192), 4)])
def test_the_same_bits_as_the_row_loop(rng, monkeypatch, shape, lines):
    fn = fuse_whole_function(row_a(*shape))
    x = (rng.standard_normal(shape) * 4).astype(np.float32)
    x[3, :10] = [np.nan, np.inf, -np.inf, 88.0, -200.0, 1e-40, -0.0, 6.0, -5.7, 5.65]
    w, b = rng.standard_normal(shape[1]).astype(np.float32), rng.standard_normal(shape[1]).astype(np.float32)
    _chosen(monkeypatch, "splits_polynomial_math_loops", False)  # (AVX2's default: its functions' own loops)
    _chosen(monkeypatch, "function_piece_lines", lines)
    _chosen(monkeypatch, "function_prefetch_lines", 16)
    pieces = build_cpu_executable(fn, {"threads": 2})
    assert "llvm.prefetch" in "".join(pieces.module.llvm_ir)
    (got,) = pieces(x, w, b)
    _chosen(monkeypatch, "function_piece_lines", 0)
    loop = build_cpu_executable(fn, {"threads": 2})
    assert "llvm.prefetch" not in "".join(loop.module.llvm_ir)
    (want,) = loop(x, w, b)
    np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))
