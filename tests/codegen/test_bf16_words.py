"""A paired loop's bf16 output words rounded in 16-bit lanes on AVX-512 BW (``codegen/llvm/bf16_words.py``): the same
bits as the 32-bit rounding (beside a rounding with the NaN case, which stays in 32-bit lanes), vector loop and
scalar remainder; the 16-bit-lane code in a Zen 4's
write loop, and AVX2's code without it."""

from __future__ import annotations

import re

import numpy as np
import pytest
from test_bf16_rounding import SAPPHIRE_RAPIDS, ZEN4, _float32_patterns
from test_pairs import _NAN_PATTERNS, AVX2, affine_graph, to_bits

from neuroncc.codegen.llvm import jit
from neuroncc.codegen.llvm.emit import emit_kernel
from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.codegen.llvm.schedule import plan_kernel
from neuroncc.codegen.llvm.views import Layout
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import CpuTarget, host_cpu
from neuroncc.ir import Builder, DType, Function, TensorType, interpret
from neuroncc.testing.choices import choose

host_word_lanes = pytest.mark.skipif(not host_cpu().rounds_bf16_in_word_lanes, reason="the host has no AVX-512 BW")


def _cast_graph(rows: int, cols: int) -> Function:
    """float32 x cast to bf16 (the rounding with the NaN case: any payload) and x*w+b of bf16 values (without)."""
    b = Builder("casts")
    x = b.param(TensorType((rows, cols), DType.f32), "x")
    w = b.op("bitcast", b.param(TensorType((cols,), DType.i16), "w"), dtype=DType.bf16)
    rounded = b.op("cast", x, dtype=DType.bf16)
    y = b.op("cast", b.op("add", b.op("mul", b.op("cast", rounded, dtype=DType.f32), b.op("cast", w, dtype=DType.f32)),
                          b.op("full", shape=(), dtype=DType.f32, value=0.375)), dtype=DType.bf16)
    return b.build([b.op("bitcast", rounded, dtype=DType.i16), b.op("bitcast", y, dtype=DType.i16)])


def _assembly(fn: Function, target: CpuTarget) -> tuple[str, str]:
    plan = plan_kernel(fn, [Layout.of(k, p.type) for k, p in enumerate(fn.params)],
                       [Layout.of(len(fn.params) + k, v.type) for k, v in enumerate(fn.outputs)])
    texts, _ = emit_kernel(plan, "k", target)
    return "".join(texts), jit.assembly(texts, target).split("k_p0:")[1].split(".Lfunc_end")[0]


def _patterns(rng, cols: int) -> tuple[np.ndarray, np.ndarray, Function]:
    """Every pattern of ``_float32_patterns`` as rows of ``cols`` (every 23rd where ``cols`` leaves a scalar remainder:
    subnormals, ties, the overflow edge, NaNs, random ones), a weight holding NaN patterns, and ``_cast_graph``."""
    x = _float32_patterns(rng).reshape(-1)
    if cols % 32:
        x = x[::23]
    x = np.concatenate([x, np.zeros(-x.size % cols, np.float32)]).reshape(-1, cols)
    w = to_bits(rng.standard_normal(cols).astype(np.float32))
    w[:len(_NAN_PATTERNS)] = _NAN_PATTERNS
    return x, w, _cast_graph(x.shape[0], cols)


def _same_bits_with_it_off(monkeypatch, fn: Function, x: np.ndarray, w: np.ndarray, decision: str,
                           code_of_it: str) -> None:
    """``fn``'s results on the host are the reference's bits, and the same with ``CpuTarget.<decision>`` off, whose
    code (``code_of_it`` in the IR or assembly) is then gone."""
    got = build_cpu_executable(fuse_whole_function(fn), {"threads": 2})(x, w)
    choose(monkeypatch, **{decision: False})
    assert code_of_it not in "".join(_assembly(fn, host_cpu()))
    want = build_cpu_executable(fuse_whole_function(fn), {"threads": 2})(x, w)
    for g, e, reference in zip(got, want, interpret(fn, [x, w]), strict=True):
        np.testing.assert_array_equal(g, e)
        np.testing.assert_array_equal(g, reference)


@host_word_lanes
@pytest.mark.parametrize("cols", [1024, 2 * 16 * 3 + 2 * 5])  # whole vectors of pairs; and a scalar remainder
def test_word_lanes_round_every_pattern_as_the_32_bit_rounding(rng, monkeypatch, cols):
    x, w, fn = _patterns(rng, cols)
    text, _ = _assembly(fn, host_cpu())
    # x*w+b's words in 16-bit lanes (by the conversion's pair function where the host converts casts' words: its
    # denormal branch's); the float32 cast keeps its NaN case in 32-bit lanes (the form saves nothing there)
    assert len(re.findall(r'call i32 @"ncc\.bf16\.word(\.converted)?"', text)) == 1 and "fcmp uno" in text
    _same_bits_with_it_off(monkeypatch, fn, x, w, "rounds_bf16_in_word_lanes", "ncc.bf16.word")


def test_a_zen4_write_loop_rounds_in_word_lanes_and_avx2_in_32_bit_lanes(monkeypatch):
    # Zen 4 (its casts' words by conversion off: test_an_intel_write_loop_rounds_by_conversion...): the halves apart
    # with two word permutes, the carry an unsigned word compare, no 32-bit adds of the rounding left in the loop
    # (x*w+b's; the weight and bias widened once); AVX2: not this form (its own, with blends: test_bf16_word_blends.py)
    fn = affine_graph(64, 1024)
    choose(monkeypatch, rounds_bf16_cast_pairs_by_conversion=False)
    text, asm = _assembly(fn, CpuTarget("znver4", ZEN4))
    loops = [block for block in re.split(r"\n\.LBB\d+_\d+:", asm) if "vmovntdq" in block or "vmovdqu" in block]
    write = [block for block in loops if re.search(r"vperm[it]2w", block)]
    assert write and all(re.search(r"vpcmpnleuw|vpcmpuw", block) and "vpaddd" not in block for block in write)
    text, asm = _assembly(fn, CpuTarget("znver3", AVX2))
    assert "ncc.bf16.word.v16" not in text and "vperm" not in asm



@pytest.mark.skipif(not host_cpu().rounds_bf16_cast_pairs_by_conversion, reason="the host has no AVX-512 BF16")
@pytest.mark.parametrize("cols", [1024, 2 * 16 * 3 + 2 * 5])
def test_conversion_rounds_every_pattern_as_the_word_lanes(rng, monkeypatch, cols):
    # vcvtne2ps2bf16 takes denormals as zero: a pair of vectors holding one takes the word lanes' rounding (every 7th
    # subnormal, alone in their vectors and beside normal values where the runs of patterns meet; random patterns hold
    # one in ~12% of the pairs of vectors); the words are a cast's: converted on every AVX-512 BF16 CPU
    x, w, fn = _patterns(rng, cols)
    assert "vcvtne2ps2bf16" in _assembly(fn, host_cpu())[1]
    choose(monkeypatch, rounds_bf16_cast_pairs_by_conversion=False)
    _same_bits_with_it_off(monkeypatch, fn, x, w, "rounds_bf16_pairs_by_conversion", "vcvtne2ps2bf16")


def _op_result_affine_graph(rows: int, cols: int) -> Function:
    """x*w+b of bf16 values with bf16 results (eager's bf16 ops, each rounded: op results, not casts)."""
    b = Builder("affine_ops")
    x, w, bias = (b.op("bitcast", b.param(TensorType(shape, DType.i16), name), dtype=DType.bf16)
                  for shape, name in (((rows, cols), "x"), ((cols,), "w"), ((cols,), "b")))
    return b.build([b.op("bitcast", b.op("add", b.op("mul", x, w), bias), dtype=DType.i16)])


def test_an_intel_write_loop_rounds_by_conversion_and_a_zen4_its_casts_only():
    # Sapphire Rapids: vcvtne2ps2bf16 and one vpermw per pair of vectors, each after a vfpclassps per vector and a
    # branch to the word lanes' rounding, for casts' words and ops' bf16 results; Zen 4 (BF16 without FP16) for
    # casts' words (x*w+b widened, computed in float32 and cast back: bf16 LayerNorm's and softmax's outputs), its
    # ops' bf16 results in the word lanes (bf16 row (a): 1.16x slower converted)
    cast, ops = affine_graph(64, 1024), _op_result_affine_graph(64, 1024)
    for fn in (cast, ops):
        _, asm = _assembly(fn, CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS))
        assert re.search(r"vfpclassps\s+\$32", asm) and "vcvtne2ps2bf16" in asm and re.search(r"vpermw\s", asm)
    zen4 = CpuTarget("znver4", ZEN4)
    _, asm = _assembly(cast, zen4)
    assert re.search(r"vfpclassps\s+\$32", asm) and "vcvtne2ps2bf16" in asm and re.search(r"vpermw\s", asm)
    _, asm = _assembly(ops, zen4)
    assert "vcvtne2ps2bf16" not in asm and "vfpclassps" not in asm and re.search(r"vperm[it]2w", asm)


def _ops_and_cast_graph(rows: int, cols: int) -> Function:
    """x*w+b of bf16 values with a bf16 result (an op result) and x*0.375 computed in float32 and cast to bf16 (a
    cast's words), both written by one row loop."""
    b = Builder("ops_and_cast")
    x, w, bias = (b.op("bitcast", b.param(TensorType(shape, DType.i16), name), dtype=DType.bf16)
                  for shape, name in (((rows, cols), "x"), ((cols,), "w"), ((cols,), "b")))
    scaled = b.op("mul", b.op("cast", x, dtype=DType.f32), b.op("full", shape=(), dtype=DType.f32, value=0.375))
    return b.build([b.op("bitcast", b.op("add", b.op("mul", x, w), bias), dtype=DType.i16),
                    b.op("bitcast", b.op("cast", scaled, dtype=DType.bf16), dtype=DType.i16)])


def test_a_zen4_module_with_both_kinds_of_words_rounds_each_in_its_own_form(rng):
    # the decision is per word (casts converted, ops' results in word lanes), not per module: each form is a pair
    # function of its own name, whichever the module meets first
    fn = _ops_and_cast_graph(64, 1024)
    text, asm = _assembly(fn, CpuTarget("znver4", ZEN4))
    assert "ncc.bf16.word.converted.v16" in text and "ncc.bf16.word.v16" in text
    assert "vcvtne2ps2bf16" in asm and re.search(r"vperm[it]2w", asm)
    params = [to_bits(rng.standard_normal(shape).astype(np.float32) * 3) for shape in ((64, 1024), (1024,), (1024,))]
    got = build_cpu_executable(fuse_whole_function(fn), {"threads": 2})(*params)
    for result, want in zip(got, interpret(fn, params)):
        np.testing.assert_array_equal(np.asarray(result), np.asarray(want))
