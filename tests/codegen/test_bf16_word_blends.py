"""AVX2's bf16 output words rounded in 16-bit lanes with shifts and blends (``codegen/llvm/bf16_words.py``,
``CpuTarget.rounds_bf16_in_word_lanes_with_blends``): the 32-bit rounding's bits for every class of input (every
high half with the low halves that decide a rounding, ties of both parities, subnormals, the overflow to infinity,
infinities, NaNs), in the vector variant and the scalar remainder; the form in AVX2's write loops of casts, not of
op results, and never on AVX-512."""

from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest
from llvmlite import ir
from test_bf16_rounding import ZEN4
from test_bf16_words import _assembly, _cast_graph
from test_pairs import AVX2, affine_graph, layernorm_graph

from neuroncc.codegen.llvm import jit
from neuroncc.codegen.llvm.bf16_words import rounded_word
from neuroncc.codegen.llvm.pairs import word_of
from neuroncc.codegen.llvm.scalars import F32, I32, I64, bf16_bits, round_to
from neuroncc.hardware.host import CpuTarget, host_cpu
from neuroncc.ir import Builder, DType, TensorType
from neuroncc.testing.choices import choose

ZEN3 = CpuTarget("znver3", AVX2)
host_avx2_blends = pytest.mark.skipif(not host_cpu().rounds_bf16_in_word_lanes_with_blends,
                                      reason="the host has no AVX2, or has AVX-512")


def _pair_loop(target: CpuTarget, word_lanes: bool) -> str:
    """``f(even, odd, out, n)``: out[i] = the word of even[i] and odd[i] rounded to bf16 without the NaN case, by
    the pair function (``word_lanes``) or the 32-bit rounding and packing."""
    module = ir.Module("pairs")
    ptr = ir.PointerType()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ptr, ptr, ptr, I64]), "f")
    for arg in fn.args[:3]:
        arg.add_attribute("noalias")
    entry, loop, done = (fn.append_basic_block(name) for name in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_signed(">", fn.args[3], ir.Constant(I64, 0)), loop, done)
    b.position_at_end(loop)
    i = b.phi(I64)
    halves = [bf16_bits(b, round_to(b, b.load(b.gep(arg, [i], source_etype=F32), typ=F32), DType.bf16,
                                    nan_case=False)) for arg in fn.args[:2]]
    word = rounded_word(b, *halves, target) if word_lanes else None
    assert (word is not None) == word_lanes
    b.store(word or word_of(b, *halves), b.gep(fn.args[2], [i], source_etype=I32))
    following = b.add(i, ir.Constant(I64, 1))
    i.add_incoming(ir.Constant(I64, 0), entry)
    i.add_incoming(following, loop)
    b.cbranch(b.icmp_signed("<", following, fn.args[3]), loop, done)
    b.position_at_end(done)
    b.ret_void()
    return str(module)


def _words(text: str, even: np.ndarray, odd: np.ndarray) -> np.ndarray:
    code = jit.compile_ir([text])
    call = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(code.address("f"))
    out = np.zeros(even.size, np.uint32)
    call(even.ctypes.data, odd.ctypes.data, out.ctypes.data, even.size)
    return out


def _rounded_bits(bits: np.ndarray) -> np.ndarray:
    """The 32-bit rounding without the NaN case (``scalars.round_to``): bits + 0x7FFF + the kept half's parity."""
    wide = bits.astype(np.uint64)
    return (((wide + 0x7FFF + ((wide >> 16) & 1)) >> 16) & 0xFFFF).astype(np.uint32)


def test_the_decision():
    assert ZEN3.rounds_bf16_in_word_lanes_with_blends and not ZEN3.rounds_bf16_in_word_lanes
    assert not CpuTarget("znver4", ZEN4).rounds_bf16_in_word_lanes_with_blends


@host_avx2_blends
def test_the_blended_form_rounds_every_class_of_input_as_the_32_bit_rounding(rng):
    highs = np.arange(1 << 16, dtype=np.uint32) << 16  # every sign and exponent, every kept half
    lows = [0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF]  # exact, below, ties with either parity, above, the all-ones
    bits = np.concatenate([highs | low for low in lows]
                          + [rng.integers(0, 1 << 32, 1 << 18, dtype=np.uint64).astype(np.uint32)])
    bits = rng.permutation(bits)[:-10]  # 3 pairs beyond whole vectors of 8: the scalar remainder
    even, odd = bits[0::2].copy(), bits[1::2].copy()
    text = _pair_loop(host_cpu(), word_lanes=True)
    assert "ncc.bf16.word.v8" in text
    asm = jit.assembly([text], host_cpu())
    assert "vpblendw" in asm and "vpmaxuw" in asm and "vpsubw" in asm
    reference = _pair_loop(host_cpu(), word_lanes=False)
    for low, high in ((even, odd), (odd, even)):  # each pattern in either half
        got = _words(text, low.view(np.float32), high.view(np.float32))
        np.testing.assert_array_equal(got, _words(reference, low.view(np.float32), high.view(np.float32)))
        np.testing.assert_array_equal(got, _rounded_bits(low) | (_rounded_bits(high) << 16))


def _write_loops(asm: str) -> list[str]:
    return [block for block in re.split(r"\n\.LBB\d+_\d+:", asm) if re.search(r"vmovntdq|vmovdqu\t%ymm\d+, \(", block)]


@pytest.mark.parametrize("graph", [affine_graph, layernorm_graph])
def test_avx2_write_loops_round_casts_with_blends(monkeypatch, graph):
    # a cast's rounding: the words' halves blended, the carry by vpmaxuw/vpcmpeqw, no 32-bit adds of the rounding
    fn = graph(64, 1024)
    text, asm = _assembly(fn, ZEN3)
    assert "ncc.bf16.word.v8" in text
    write = [block for block in _write_loops(asm) if "vpmaxuw" in block]
    assert write and all("vpblendw" in block and "vpsubw" in block and "vpaddd" not in block for block in write)
    choose(monkeypatch, rounds_bf16_in_word_lanes_with_blends=False)
    text, asm = _assembly(fn, ZEN3)
    assert "ncc.bf16.word" not in text and "vpmaxuw" not in asm


def test_avx2_op_results_and_zen4_keep_their_forms(monkeypatch):
    # bf16 row (a)'s op results (a bf16 mul: eager rounds after it) keep the 32-bit rounding on AVX2 (measured
    # slower with blends); Zen 4's code is the same with the AVX2 property forced on
    b = Builder("op_result")
    x, w = (b.op("bitcast", b.param(TensorType((64, 1024), DType.i16), name), dtype=DType.bf16) for name in "xw")
    fn = b.build([b.op("bitcast", b.op("mul", x, w), dtype=DType.i16)])
    assert "ncc.bf16.word" not in _assembly(fn, ZEN3)[0]
    zen4 = CpuTarget("znver4", ZEN4)
    before = [_assembly(graph, zen4)[1] for graph in (layernorm_graph(64, 1024), _cast_graph(64, 1024))]
    choose(monkeypatch, rounds_bf16_in_word_lanes_with_blends=True)
    assert [_assembly(graph, zen4)[1] for graph in (layernorm_graph(64, 1024), _cast_graph(64, 1024))] == before
