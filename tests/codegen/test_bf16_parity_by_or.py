"""bf16 roundings in 32-bit lanes that or the kept half's parity into the low half (AVX-512's ``vpternlogd``: 4
vector instructions a rounding instead of 5) give the bits of the form that adds it, for every float32
(``CpuTarget.rounds_bf16_parity_by_or``, ``scalars.round_to``; session 36 bfa36).

low + parity > 0x8000 exactly when low | parity is (parity 0: the same; parity 1: both when low >= 0x8000), so
the carry into the kept half, and with the low half cleared the result, is the same. All 2**32 patterns were
checked once in numpy (``/work/scratch/bfa36/exhaustive.py``: 0 mismatches, torch's rounding on a quarter of
them); here every low half under a spread of kept halves, and the kernels on both forms."""

from __future__ import annotations

import numpy as np
import pytest
from test_bf16_rounding import SAPPHIRE_RAPIDS, ZEN4, _float32_patterns
from test_pairs import AVX2, to_bits

from neuroncc.codegen.llvm import jit
from neuroncc.codegen.llvm.emit import emit_kernel
from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.codegen.llvm.schedule import plan_kernel
from neuroncc.codegen.llvm.views import Layout
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import CpuTarget, host_cpu
from neuroncc.ir import Builder, DType, Function, TensorType, interpret
from neuroncc.testing.choices import choose


def _added(bits: np.ndarray) -> np.ndarray:
    lsb = (bits >> 16) & 1
    return (bits + (lsb + np.uint32(0x7FFF))) & np.uint32(0xFFFF0000)


def _ored(bits: np.ndarray) -> np.ndarray:
    return ((bits | ((bits >> 16) & 1)) + np.uint32(0x7FFF)) & np.uint32(0xFFFF0000)


def test_oring_the_parity_rounds_every_low_half_as_adding_it(rng):
    # every low half under kept halves even and odd, the largest finite bf16s (carry into infinity), infinities and
    # NaNs' kept halves, subnormals' and zeros' (both signs), and random ones
    kept = np.concatenate([np.arange(0, 8), np.arange(0x7F78, 0x7F88), np.arange(0xFF78, 0xFF88),
                           np.arange(0x7FF8, 0x8008), np.arange(0xFFF8, 0x10000),
                           rng.integers(0, 1 << 16, 192)]).astype(np.uint32)
    bits = ((kept[:, None] << 16) | np.arange(1 << 16, dtype=np.uint32)[None, :]).ravel()
    np.testing.assert_array_equal(_ored(bits), _added(bits))


def test_the_parity_is_ored_where_a_ternary_logic_instruction_takes_it():
    assert CpuTarget("znver4", ZEN4).rounds_bf16_parity_by_or
    assert CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS).rounds_bf16_parity_by_or
    assert not CpuTarget("znver3", AVX2).rounds_bf16_parity_by_or


def _graph(rows: int, cols: int) -> Function:
    """A cast to bf16 (its rounding with the NaN case), a product of bf16 values and its sum with one of them (ops'
    results: their roundings without it), the sum's bits and the product kept as float32."""
    b = Builder("parity")
    xf = b.param(TensorType((rows, cols), DType.f32), "x")
    ab = [b.op("bitcast", b.param(TensorType((rows, cols), DType.i16), name), dtype=DType.bf16) for name in "ab"]
    product = b.op("mul", *ab)
    return b.build([b.op("bitcast", b.op("cast", xf, dtype=DType.bf16), dtype=DType.i16),
                    b.op("bitcast", b.op("add", product, ab[0]), dtype=DType.i16),
                    b.op("cast", product, dtype=DType.f32)])


def _code(target: CpuTarget) -> tuple[str, str]:
    """The LLVM IR and the assembly of :func:`_graph`'s kernel for ``target``."""
    fn = _graph(64, 1024)
    plan = plan_kernel(fn, [Layout.of(k, p.type) for k, p in enumerate(fn.params)],
                       [Layout.of(len(fn.params) + k, v.type) for k, v in enumerate(fn.outputs)])
    texts, _ = emit_kernel(plan, "k", target)
    return "".join(texts), jit.assembly(texts, target).split("k_p0:")[1]


def _vector_instructions(asm: str) -> list[str]:
    return [line.split()[0] for line in asm.splitlines() if line.strip().startswith("v")]


def test_avx512_rounds_by_vpternlogd_and_avx2_keeps_its_code(monkeypatch):
    # the product's rounding, the sum's and the cast's (the product's float32 and the sum's bits are kept: 32-bit
    # lanes): the parity's and and or one vpternlogd each on Zen 4, 3 fewer vector instructions; Zen 3's unchanged
    zen4, zen3 = _code(CpuTarget("znver4", ZEN4)), _code(CpuTarget("znver3", AVX2))
    choose(monkeypatch, rounds_bf16_parity_by_or=False)
    off = _code(CpuTarget("znver4", ZEN4))
    assert _code(CpuTarget("znver3", AVX2)) == zen3
    on_vector, off_vector = _vector_instructions(zen4[1]), _vector_instructions(off[1])
    assert on_vector.count("vpternlogd") >= 3 + off_vector.count("vpternlogd")
    assert len(on_vector) <= len(off_vector) - 3
    assert ", 32767" in zen4[0] and "cvtneps2bf16" not in zen4[1]


@pytest.mark.parametrize("threads", [1, 2])
def test_kernels_give_the_same_bits_with_the_parity_ored_or_added(rng, monkeypatch, threads):
    # a cast (with the NaN case), ops' results (without it: products and sums of bf16 values, subnormal ones
    # among them) and an op's result kept as float32, on the host: each form's bits are the reference's
    x = _float32_patterns(rng)
    fn = _graph(*x.shape)
    left = to_bits(np.ldexp(rng.uniform(1, 2, x.shape), rng.integers(-80, 60, x.shape)).astype(np.float32))
    right = to_bits(np.ldexp(rng.uniform(1, 2, x.shape), rng.integers(-80, 60, x.shape)).astype(np.float32))
    left.reshape(-1)[::5] = to_bits(x.reshape(-1)[::5])  # NaN payloads, infinities, ties, subnormals as operands
    want = interpret(fn, [x, left, right])
    results = []
    for on in (True, False):
        choose(monkeypatch, rounds_bf16_parity_by_or=on)
        got = build_cpu_executable(fuse_whole_function(fn), {"threads": threads})(x, left, right)
        results.append(got)
        for have, expected in zip(got, want):
            np.testing.assert_array_equal(have.view(np.uint8), expected.view(np.uint8))
    if host_cpu().rounds_bf16_parity_by_or:
        for on, off in zip(*results):
            np.testing.assert_array_equal(on.view(np.uint8), off.view(np.uint8))
