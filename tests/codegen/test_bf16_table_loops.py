"""Zen 4 reads bf16 tables in 8-lane loops (``CpuTarget.bf16_table_loop_lanes``, session 37 bfa37): a map stage whose
only polynomials are bf16 table reads runs its loop at 256 bits (``llvm.loop.vectorize.width`` 8, one vector
iteration at a time), a loaded pair's element read by its word (four indices in each 64 bits, read from memory:
``CpuTarget.reads_bf16_table_indices_from_loaded_words``), a computed operand by lane pairs through an empty asm,
no ``vpgatherdd``; the pair functions have 8-pair variants; a stage with another polynomial keeps its polynomials and
its 512-bit loop. The same bits as the polynomials (every bf16 input, row (a)'s NaN payloads and specials) at 1 and 2
threads, and the 8-pair variants as the scalar pair (denormals too); other CPUs as before."""

from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest
from llvmlite import ir
from codegen_helpers import aligned_kernel_code
from test_bf16_op_results import SSE, gelu_sigmoid_graph
from test_bf16_rounding import SAPPHIRE_RAPIDS, ZEN4
from test_bf16_tables import EVERY_INPUT, _computed_operand_graph, _unary_graph
from test_pairs import AVX2, _softmax_bits, layernorm_graph
from test_split_pair_math import _bf16_inputs

from neuroncc.codegen.llvm import bf16_words, jit
from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import CpuTarget, host_cpu
from neuroncc.ir import Builder, DType, Function, TensorType
from neuroncc.testing.choices import choose

ON_ZEN4_LIKE_HOST = pytest.mark.skipif(not host_cpu().bf16_table_loop_lanes,
                                       reason="the host reads no bf16 tables in narrow loops (not an AVX-512 VL/BW "
                                              "CPU but Intel's)")


def test_the_decision():
    zen4 = CpuTarget("znver4", ZEN4)
    assert zen4.bf16_table_loop_lanes == 8 and zen4.reads_bf16_table_indices_from_loaded_words
    assert zen4.looks_up_bf16_unary_math and zen4.reads_bf16_tables_by_lane_pairs
    assert zen4.packs_computed_bf16_table_operands
    for other in (CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS), CpuTarget("x86-64", SSE)):
        assert other.bf16_table_loop_lanes == 0 and not other.reads_bf16_table_indices_from_loaded_words
        assert not other.packs_computed_bf16_table_operands
    # Zen 3 (AVX2, session 39): its own loops, a loaded word's indices read by words too
    zen3 = CpuTarget("znver3", AVX2)
    assert zen3.bf16_table_loop_lanes == 0 and zen3.reads_bf16_table_indices_from_loaded_words
    assert not zen3.packs_computed_bf16_table_operands


def _widths(text: str) -> list[int]:
    """The vector widths the kernel's loops are hinted to."""
    return [int(w) for w in re.findall(r'!\{ !"llvm.loop.vectorize.width", i32 (\d+) \}', text)]


def test_zen4_row_a_reads_its_tables_in_an_8_lane_loop_without_gathers():
    text, asm = aligned_kernel_code(gelu_sigmoid_graph(64, 1024), CpuTarget("znver4", ZEN4))
    assert "ncc.math." not in text and _widths(text) == [8]
    assert '"ncc.bf16_lookup.sigmoid.plain.word0"' in text and '"ncc.bf16_lookup.sigmoid.plain.word1"' in text
    # a computed operand: the pair's two packed into one word, read as x's words are
    assert '"ncc.bf16_lookup.gelu.plain.word0"' in text and '"ncc.bf16_lookup.gelu.plain.word1"' in text
    assert '"ncc.bf16_lookup.gelu.plain"' not in text
    assert "gather" not in asm and "zmm" not in asm and "ymm" in asm and "call" not in asm
    # x's words read as 64 bits into general registers (not the stack's: gelu's words packed ahead)
    assert re.search(r"movq\s+-?\d*\(%r(?!sp)\w+,%r\w+(?:,\d)?\), %r", asm)
    # Zen 3 (AVX2) keeps its loop (no width) and gelu's lane pairs; x's sigmoid read by its words (session 39)
    zen3, zen3_asm = aligned_kernel_code(gelu_sigmoid_graph(64, 1024), CpuTarget("znver3", AVX2))
    assert _widths(zen3) == [] and '"ncc.bf16_lookup.sigmoid.plain.word0"' in zen3
    assert '"ncc.bf16_lookup.gelu.plain"' in zen3 and ".gelu.plain.word" not in zen3
    assert "gather" not in zen3_asm and "zmm" not in zen3_asm and "call" not in zen3_asm
    assert re.search(r"movq\s+\d*\(%r\w+,%r\w+,4\), %r", zen3_asm)  # x's words read as 64 bits


def _moves_out(asm: str) -> int:
    """The vector-to-general register moves (``vmovq``/``vpextrq`` into a 64-bit register) in ``asm``'s loop."""
    return len(re.findall(r"\t(?:vmovq|vpextrq)\t[^\n]*%xmm\d+, %r\w+\n", asm))


def test_zen4_row_a_packs_gelus_operands_into_words(monkeypatch):
    # 4 moves per 16 elements (8 words: four 64-bit quads of 4 indices) where the lane pairs took 8
    choose(monkeypatch, bf16_table_operand_vectors_ahead=0)  # (in the loop)
    _, packed = aligned_kernel_code(gelu_sigmoid_graph(64, 1024), CpuTarget("znver4", ZEN4))
    choose(monkeypatch, packs_computed_bf16_table_operands=False)
    text, pairs = aligned_kernel_code(gelu_sigmoid_graph(64, 1024), CpuTarget("znver4", ZEN4))
    assert '"ncc.bf16_lookup.gelu.plain"' in text and ".gelu.plain.word" not in text
    assert (_moves_out(packed), _moves_out(pairs)) == (4, 8)


def _table_loop(asm: str) -> str:
    """The text of ``asm``'s first loop reading tables (``vpinsrd``): from the label a ``jne`` jumps back to, to it."""
    for label in re.findall(r"\tjne\t(\.LBB\d+_\d+)\n", asm):
        body = asm.split(label + ":")[1].split(f"jne\t{label}")[0]
        if "vpinsrd" in body:
            return body
    raise AssertionError("no table loop")


def _row_a_table_loop(monkeypatch, vectors_ahead: int) -> str:
    choose(monkeypatch, bf16_table_operand_vectors_ahead=vectors_ahead)
    _, asm = aligned_kernel_code(gelu_sigmoid_graph(64, 1024), CpuTarget("znver4", ZEN4))
    assert "zmm" not in asm and "call" not in asm and "gather" not in asm
    return _table_loop(asm)


def test_zen4_row_a_packs_gelus_operands_vectors_ahead(monkeypatch):
    assert CpuTarget("znver4", ZEN4).bf16_table_operand_vectors_ahead == 2
    assert not CpuTarget("znver3", AVX2).bf16_table_operand_vectors_ahead
    assert not CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS).bf16_table_operand_vectors_ahead
    # two ahead: gelu's words stored and read back two iterations later as 64-bit quads, no moves out
    loop = _row_a_table_loop(monkeypatch, 2)
    assert _moves_out(loop) == 0 and len(re.findall(r"\tmovq\t-?\d*\(%rsp,%r\w+\), %r", loop)) == 4
    # one ahead: the moves out read the words the iteration before packed (a register LLVM carries), before this
    # iteration's x*w; in the iteration that packs them, after it
    loop = _row_a_table_loop(monkeypatch, 1)
    assert _moves_out(loop) == 4 and loop.index("\tvmovq\t%xmm") < loop.index("\tvmulps")
    assert "(%rsp," not in loop
    loop = _row_a_table_loop(monkeypatch, 0)
    assert _moves_out(loop) == 4 and loop.index("\tvmovq\t%xmm") > loop.index("\tvmulps")


@ON_ZEN4_LIKE_HOST
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("cols", [128, 1024, 1038, 1040])
def test_row_a_ahead_keeps_every_bit(rng, monkeypatch, threads, cols):
    # the operands packed two and one vectors ahead against packed at their own pair (a row of 64 pairs: a
    # prologue of 16, a loop of 32-56, the last vectors; 519 pairs: a scalar remainder of the pipelined loop)
    inputs = _bf16_inputs(rng, 16, cols)
    results = []
    for ahead in (2, 1, 0):
        with monkeypatch.context() as patch:
            patch.setattr(CpuTarget, "bf16_table_operand_vectors_ahead", property(lambda self, n=ahead: n))
            (got,) = build_cpu_executable(fuse_whole_function(gelu_sigmoid_graph(16, cols)), {"threads": threads})(
                *inputs)
        results.append(got)
    np.testing.assert_array_equal(results[0], results[2])
    np.testing.assert_array_equal(results[1], results[2])


def _mixed_graph(rows: int, cols: int) -> Function:
    """sigmoid(x) (a bf16 op: a table) times exp of x widened (a float32 polynomial) in one map stage."""
    b = Builder("mixed")
    x = b.op("bitcast", b.param(TensorType((rows, cols), DType.i16), "x"), dtype=DType.bf16)
    widened = b.op("cast", x, dtype=DType.f32)
    y = b.op("mul", b.op("cast", b.op("sigmoid", x), dtype=DType.f32), b.op("exp", widened))
    return b.build([b.op("bitcast", b.op("cast", y, dtype=DType.bf16), dtype=DType.i16)])


def test_a_stage_with_another_polynomial_keeps_its_polynomials_and_its_width():
    # (measured: such loops at 8 lanes ran 1.04-1.31x the time of the polynomials at 16)
    text, asm = aligned_kernel_code(_mixed_graph(8, 1024), CpuTarget("znver4", ZEN4))
    assert "ncc.bf16_table" not in text and '@"ncc.math.sigmoid' in text and _widths(text) == []
    assert "zmm" in asm


def test_zen4_pair_functions_have_8_pair_variants():
    zen4, _ = aligned_kernel_code(gelu_sigmoid_graph(8, 1024), CpuTarget("znver4", ZEN4))
    assert '"ncc.bf16.word.n8"' in zen4 and '"ncc.bf16.word.v16"' in zen4
    zen3, _ = aligned_kernel_code(gelu_sigmoid_graph(8, 1024), CpuTarget("znver3", AVX2))
    assert ".n8" not in zen3


@pytest.mark.parametrize("graph", [_softmax_bits, layernorm_graph])
def test_zen4_modules_without_an_8_lane_table_loop_have_no_8_pair_variant(graph):
    # bf16 softmax's and LayerNorm's pair functions: their loops run 16 lanes, an 8-pair variant would be dead
    # code (kept by llvm.compiler.used: ~140 assembly lines each, session 37 dead37)
    text, _ = aligned_kernel_code(graph(8, 1024), CpuTarget("znver4", ZEN4))
    assert '"ncc.bf16.word.converted.v16"' in text and bf16_words.NARROW_VARIANT not in text


def _rounded_words(even: np.ndarray, odd: np.ndarray) -> np.ndarray:
    """The words of float32 pairs rounded to bf16 (nearest even, NaNs as they are: quiet with zero low halves)."""
    def rounded(values: np.ndarray) -> np.ndarray:
        bits = values.view(np.uint32).astype(np.uint64)
        return (((bits | ((bits >> 16) & 1)) + 0x7FFF) & 0xFFFF0000).astype(np.uint32)
    return (rounded(odd) | (rounded(even) >> 16)).astype(np.uint32)


@ON_ZEN4_LIKE_HOST
@pytest.mark.parametrize("form", ["op-results", "converted", "converted-by-words"])
def test_the_8_pair_variants_round_as_the_scalar_pair(rng, form):
    # every form's 8-pair variant (the vectorizer's choice in an 8-lane table loop) on normal values, ties, zeros,
    # infinities, quiet NaNs and float32 denormals (the conversion's slow path)
    if form != "op-results" and not host_cpu().has("avx512bf16"):
        pytest.skip("no AVX-512 BF16")
    module = ir.Module("pairs")
    variant = bf16_words._pair_function(module, False, form != "op-results", form == "converted-by-words")
    bf16_words._add_narrow_variant(variant)
    name = [n for n in module.globals if n.endswith(bf16_words.NARROW_VARIANT)][0]
    test = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.PointerType()] * 3), "test")
    b = ir.IRBuilder(test.append_basic_block("entry"))
    floats = ir.VectorType(ir.FloatType(), 8)
    even, odd = (b.load(arg, typ=floats, align=4) for arg in test.args[:2])
    b.store(b.call(module.globals[name], [even, odd]), test.args[2], align=4)
    b.ret_void()
    assert variant is not None
    code = jit.compile_ir([str(module)])
    call = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(code.address("test"))
    values = np.concatenate([rng.standard_normal(4096).astype(np.float32) * 100,
                             np.array([0.0, -0.0, np.inf, -np.inf, 1e-45, -1e-45, 3e-39, -1.1e-38, 1.0000153,
                                       1.0000458, 3.3895314e38, np.nan, -np.nan], np.float32),
                             (rng.integers(0, 1 << 23, 4096, dtype=np.uint32)
                              | (rng.integers(0, 2, 4096, dtype=np.uint32) << 31)).view(np.float32)])  # denormals
    values = np.resize(rng.permutation(values), (values.size // 16 + 1) * 16)
    out = np.empty(8, np.uint32)
    for k in range(0, values.size, 16):
        even, odd = np.ascontiguousarray(values[k:k + 8]), np.ascontiguousarray(values[k + 8:k + 16])
        call(even.ctypes.data, odd.ctypes.data, out.ctypes.data)
        np.testing.assert_array_equal(out, _rounded_words(even, odd))


def _both(monkeypatch, fn: Function, threads: int, *params: np.ndarray) -> list[np.ndarray]:
    """``fn``'s outputs on ``params`` built as the host's code (tables in narrow loops), then without them."""
    results = []
    for lanes in (None, 0):
        with monkeypatch.context() as patch:
            if lanes is not None:
                patch.setattr(CpuTarget, "bf16_table_loop_lanes", property(lambda self: 0))
            (got,) = build_cpu_executable(fuse_whole_function(fn), {"threads": threads})(*params)
        results.append(got)
    return results


@ON_ZEN4_LIKE_HOST
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("cols", [1024, 2048])
def test_row_a_keeps_every_bit(rng, monkeypatch, threads, cols):
    # (whole vector iterations: a loop's scalar remainder of pairs computes its polynomials with the scalar
    # reciprocal estimate, a few bits in gelu's far tail other than its vector code's and so than the table's)
    tables, polynomials = _both(monkeypatch, gelu_sigmoid_graph(16, cols), threads, *_bf16_inputs(rng, 16, cols))
    np.testing.assert_array_equal(tables, polynomials)


@ON_ZEN4_LIKE_HOST
@pytest.mark.parametrize("name,attrs", [("gelu", {"approximate": "none"}), ("sigmoid", {}), ("tanh", {}),
                                        ("sin", {})], ids=["gelu", "sigmoid", "tanh", "sin"])
def test_every_input_loaded_or_computed_as_the_polynomials(monkeypatch, name, attrs):
    # a loaded operand (by its word, both halves) and a computed one (x * 1: by lane pairs)
    tables, polynomials = _both(monkeypatch, _unary_graph(name, attrs), 2, EVERY_INPUT)
    np.testing.assert_array_equal(tables, polynomials)
    ones = np.full(EVERY_INPUT.shape[-1:], 0x3F80, np.int16)
    tables, polynomials = _both(monkeypatch, _computed_operand_graph(name, attrs), 1, EVERY_INPUT, ones)
    np.testing.assert_array_equal(tables, polynomials)
