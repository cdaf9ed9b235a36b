"""The random ops in native code: the same bits as the reference interpreter, in every kernel shape they reach.

philox_bits / philox_uniform are functions of (seed, offset, element index); the LLVM lowering must give the
interpreter's bits exactly wherever the op sits: alone, fused with its consumers (a dropout), broadcast, under a
reduction, in a matmul's epilogue, read transposed, in bf16/f16, with offsets that wrap the 64-bit counter.
"""

from __future__ import annotations

import numpy as np
import pytest

from neuroncc.ir import Builder, DType, TensorType, interpret
from neuroncc.executors.cpu.launcher import build_cpu_executable

I64 = TensorType((), DType.i64)
SEEDS = [(0, 0), (-123456789012345, 2**63 - 7), (2**62 + 12345, -3)]


def _state(b: Builder):
    return b.param(I64, "seed"), b.param(I64, "offset")


def _run_exact(fn, inputs):
    exe = build_cpu_executable(fn, {"threads": 2})
    assert exe.stats["interpreted_kernels"] == 0, exe.stats["interpreted_reasons"]
    got, want = exe(*inputs), interpret(fn, inputs)
    for position, (actual, expected) in enumerate(zip(got, want)):
        assert actual.dtype == expected.dtype and actual.shape == expected.shape
        assert np.array_equal(actual, expected, equal_nan=True), f"output #{position} differs"
    return got


@pytest.mark.parametrize("seed,offset", SEEDS)
@pytest.mark.parametrize("shape", [(), (7,), (3, 5), (33, 130), (2, 3, 17)])
def test_every_op_and_word_matches_the_interpreter(seed, offset, shape):
    b = Builder("random")
    s, o = _state(b)
    outs = [b.op("philox_uniform", s, o, shape=shape, dtype=dtype, word=word)
            for dtype, word in ((DType.f32, 0), (DType.bf16, 1), (DType.f16, 3))]
    outs += [b.op("philox_bits", s, o, shape=shape, dtype=DType.i32, word=2),
             b.op("philox_bits", s, o, shape=shape, dtype=DType.i64, word=1)]
    _run_exact(b.build(outs), [np.int64(seed), np.int64(offset)])


def test_fused_dropout_broadcast_reduction_and_transposed_reads(rng):
    b = Builder("fused")
    s, o = _state(b)
    x = b.param(TensorType((64, 48), DType.f32), "x")
    keep = b.op("ge", b.op("philox_uniform", s, o, shape=(64, 48), dtype=DType.f32),
                b.op("full", shape=(), dtype=DType.f32, value=0.25))
    dropped = b.op("mul", b.op("where", keep, x, b.op("full", shape=(), dtype=DType.f32, value=0.0)),
                   b.op("full", shape=(), dtype=DType.f32, value=4.0 / 3.0))
    rows = b.op("philox_uniform", s, b.op("full", shape=(), dtype=DType.i64, value=1 << 40), shape=(64, 1),
                dtype=DType.f32)  # a per-row draw broadcast over the columns
    scaled = b.op("mul", dropped, rows)
    total = b.op("sum", b.op("philox_uniform", s, o, shape=(64, 48), dtype=DType.f32, word=2), dims=(1,))
    transposed = b.op("permute", b.op("philox_bits", s, o, shape=(48, 64), dtype=DType.i32), dims=(1, 0))
    mixed = b.op("add", b.op("cast", transposed, dtype=DType.f32), scaled)
    inputs = [np.int64(99), np.int64(5), rng.standard_normal((64, 48)).astype(np.float32)]
    _run_exact(b.build([scaled, keep, mixed]), inputs)
    exe = build_cpu_executable(b.build([total]), {"threads": 2})  # a float sum: equal up to summation order
    np.testing.assert_allclose(exe(*inputs)[0], interpret(b.build([total]), inputs)[0], rtol=1e-6)


def test_dropout_in_a_matmul_epilogue(rng):
    b = Builder("epilogue")
    s, o = _state(b)
    x = b.param(TensorType((32, 40), DType.f32), "x")
    w = b.param(TensorType((40, 24), DType.f32), "w")
    product = b.op("mm", x, w)
    keep = b.op("lt", b.op("philox_uniform", s, o, shape=(32, 24), dtype=DType.f32),
                b.op("full", shape=(), dtype=DType.f32, value=0.9))
    out = b.op("mul", product, b.op("cast", keep, dtype=DType.f32))
    fn = b.build([out])
    inputs = [np.int64(7), np.int64(0), rng.standard_normal((32, 40)).astype(np.float32),
              rng.standard_normal((40, 24)).astype(np.float32)]
    exe = build_cpu_executable(fn, {"threads": 2})
    got, want = exe(*inputs)[0], interpret(fn, inputs)[0]
    assert np.array_equal(got == 0, want == 0)  # the same elements dropped: the mask is bit-identical
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-4)  # the product itself sums in BLAS order


def test_the_generator_is_vectorized_without_calls():
    from neuroncc.codegen.llvm import jit

    b = Builder("vec")
    s, o = _state(b)
    fn = b.build([b.op("philox_uniform", s, o, shape=(64, 256), dtype=DType.f32)])
    exe = build_cpu_executable(fn, {"threads": 1})
    asm = jit.assembly(exe.module.llvm_ir)
    body = asm.split("_p0.body")[1] if "_p0.body" in asm else asm
    assert "vpmuludq" in body and "ymm" in body  # 32x32->64 products on 256-bit vectors
    assert "call" not in body.split(".Lfunc_end")[0]
