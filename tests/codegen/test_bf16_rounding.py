"""Rounding float32 to bf16 in generated code: torch's round-to-nearest-even bit for bit on the host CPU, subnormals
included, on any CPU (``scalars.round_to``).

AVX-512 BF16's ``vcvtneps2bf16`` (what LLVM selects for ``fptrunc float to bfloat`` on CPUs that have it) treats
subnormal inputs as zero; torch rounds them like any other value. The kernels round in integer arithmetic on
every CPU, so the results do not depend on the CPU the code was compiled for; Intel's AVX-512 cores round paired
outputs by ``vcvtne2ps2bf16`` where no input of the pair of vectors is subnormal (session 32, ``bf16_words.py``), so
this test checks that form too when run there."""

from __future__ import annotations

import numpy as np
import torch
from test_pairs import AVX2, affine_graph, from_bits, to_bits

from neuroncc.codegen.llvm import jit
from neuroncc.codegen.llvm.views import Layout
from neuroncc.codegen.llvm.emit import emit_kernel
from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.codegen.llvm.schedule import plan_kernel
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import CpuTarget
from neuroncc.ir import Builder, DType, TensorType, interpret
from neuroncc.testing.choices import choose

#: a Zen 4's features as the code generator reads them (AVX-512 with BF16)
ZEN4 = ("+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+popcnt,+sse4.2,+avx512f,+avx512vl,+avx512bw,+avx512dq,+avx512cd,"
        "+avx512bf16,+avx512vbmi,+avx512vbmi2,+avx512vnni")
#: an Intel Sapphire Rapids' features as the code generator reads them (AVX-512 with BF16 and FP16)
SAPPHIRE_RAPIDS = ZEN4 + ",+avx512fp16,+amx-bf16,+amx-tile,+amx-int8"
COLS = 1024


def _float32_patterns(rng: np.random.Generator) -> np.ndarray:
    """Every 7th positive and negative subnormal, bf16 ties with an even and an odd kept half, the values around
    the largest finite bf16 (they round to infinity or not), infinities, NaNs, random patterns; rows of COLS."""
    subnormal = np.arange(1, 1 << 23, 7, dtype=np.uint32)
    halves = rng.integers(0, 1 << 16, 1 << 16, dtype=np.uint32) << 16
    specials = np.array([0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFBFFFFF, 0, 0x80000000], np.uint32)
    parts = [subnormal, subnormal | 0x80000000, halves | 0x8000, halves | 0x7FFF, halves | 0x8001,
             np.arange(0x7F7F0000, 0x7F800001, 97, dtype=np.uint32), specials,
             rng.integers(0, 1 << 32, 1 << 18, dtype=np.uint64).astype(np.uint32)]
    bits = np.concatenate(parts)
    bits = np.concatenate([bits, np.zeros(-bits.size % COLS, np.uint32)])
    return bits.view(np.float32).reshape(-1, COLS)


def test_rounding_to_bf16_is_torchs_bit_for_bit_subnormals_included(rng):
    # a result written as bf16 bits (paired words), one kept as float32, and a product of bf16 values (an op with a
    # bf16 result) in the subnormal range
    x = _float32_patterns(rng)
    rows = x.shape[0]
    b = Builder("round")
    xf = b.param(TensorType((rows, COLS), DType.f32), "x")
    ab = [b.op("bitcast", b.param(TensorType((rows, COLS), DType.i16), name), dtype=DType.bf16) for name in "ab"]
    rounded = b.op("cast", xf, dtype=DType.bf16)
    fn = b.build([b.op("bitcast", rounded, dtype=DType.i16), b.op("cast", rounded, dtype=DType.f32),
                  b.op("bitcast", b.op("mul", *ab), dtype=DType.i16)])
    left = to_bits(np.ldexp(rng.uniform(1, 2, x.shape), rng.integers(-80, -60, x.shape)).astype(np.float32))
    right = to_bits(np.ldexp(rng.uniform(1, 2, x.shape), rng.integers(-80, -50, x.shape)).astype(np.float32))
    bits, kept, product = build_cpu_executable(fuse_whole_function(fn), {"threads": 2})(x, left, right)
    want_bits, want_kept, want_product = interpret(fn, [x, left, right])
    np.testing.assert_array_equal(bits, want_bits)
    np.testing.assert_array_equal(kept.view(np.uint32), want_kept.view(np.uint32))
    np.testing.assert_array_equal(product, want_product)
    # the reference is torch's rounding (NaNs apart: torch gives the default NaN, the reference keeps the payload)
    number = ~np.isnan(x)
    torch_bits = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy()
    np.testing.assert_array_equal(bits[number], torch_bits[number])
    torch_product = (torch.from_numpy(left).view(torch.bfloat16) * torch.from_numpy(right).view(torch.bfloat16))
    np.testing.assert_array_equal(product, torch_product.view(torch.int16).numpy())
    subnormal = (x.view(np.uint32) & 0x7F800000) == 0
    assert (from_bits(bits)[subnormal] != 0).sum() > 1_000_000  # (what vcvtneps2bf16 makes zeros of)
    assert (np.abs(from_bits(product)) < 2.0 ** -126).sum() > 1000


def _kernel(target: CpuTarget) -> tuple[str, str]:
    fn = affine_graph(64, 1024)
    plan = plan_kernel(fn, [Layout.of(k, p.type) for k, p in enumerate(fn.params)],
                       [Layout.of(len(fn.params) + k, v.type) for k, v in enumerate(fn.outputs)])
    texts, _ = emit_kernel(plan, "k", target)
    return "".join(texts), jit.assembly(texts, target).split("k_p0:")[1]


def test_no_cpu_gets_the_bf16_conversion_instruction(monkeypatch):
    # x*w+b on bf16 bits, for a Zen 4 (AVX-512 BF16) and a Zen 3 (AVX2): the same integer rounding in the IR (the
    # parity bit's shift and and, 0x7FFF, the low half dropped), no bfloat type, no vcvtneps2bf16 in the code. (The
    # one exception, a pair of vectors' words by vcvtne2ps2bf16 behind a branch for denormals, bf16_words.py's, is
    # turned off here: test_bf16_words.py holds its bits.)
    choose(monkeypatch, rounds_bf16_cast_pairs_by_conversion=False)
    for target in (CpuTarget("znver4", ZEN4), CpuTarget("znver3", AVX2)):
        text, asm = _kernel(target)
        assert "bfloat" not in text and "cvtneps2bf16" not in asm
        assert "lshr i32" in text and ", 32767" in text
