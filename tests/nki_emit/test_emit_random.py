"""The random ops as NKI kernels: Philox in 16-bit limbs on GpSimdE, the reference interpreter's bits.

The generator runs on the device (an iota of each tile element's flat index, ten rounds of limb products);
only its key schedule (the seed's and offset's 16-bit limbs per round) is a host step. Every case compares
bits with the interpreter: tile shapes with partial partition and free blocks, 1-d to 3-d results, every
word and float type, int32 bits, 64-bit offsets that carry across limbs, a dropout fused with its consumer,
and i64 bits (held on the host: the device has no 64-bit integers).
"""

from __future__ import annotations

import numpy as np
import pytest
from emit_helpers import compile_nki

from neuroncc.executors.nki_sim.costs import estimate_costs
from neuroncc.ir import Builder, DType, TensorType, interpret

I64 = TensorType((), DType.i64)
STATES = [(0, 0), (-123456789012345, 2**63 - 3), (7, (1 << 32) - 2)]  # the last offset carries into word 1


def _exact(fn, inputs):
    exe = compile_nki(fn)
    got, want = exe(*inputs), interpret(fn, inputs)
    for position, (have, expected) in enumerate(zip(got, want)):
        assert have.dtype == expected.dtype and have.shape == expected.shape
        assert np.array_equal(have, expected), f"output #{position}: the device's bits differ"
    return exe


@pytest.mark.parametrize("seed,offset", STATES)
@pytest.mark.parametrize("shape,dtype,word", [
    ((1,), DType.f32, 0), ((300,), DType.f32, 1), ((130, 70), DType.f32, 2), ((2, 3, 129), DType.bf16, 3),
    ((5, 9), DType.f16, 0), ((257, 3), DType.i32, 1),
])
def test_generator_matches_the_interpreter(seed, offset, shape, dtype, word):
    b = Builder("random")
    s, o = b.param(I64, "seed"), b.param(I64, "offset")
    name = "philox_bits" if dtype is DType.i32 else "philox_uniform"
    fn = b.build([b.op(name, s, o, shape=shape, dtype=dtype, word=word)])
    exe = _exact(fn, [np.int64(seed), np.int64(offset)])
    assert "nisa.iota(" in exe.source and "engine=nisa.engine.gpsimd" in exe.source
    assert [step.name for step in exe.plan.steps if step.kind == "host"] == ["fused_0_philox_uniform_philox_key_schedule"
                                                                             if name == "philox_uniform" else
                                                                             "fused_0_philox_bits_philox_key_schedule"]


def test_fused_dropout_and_a_constant_offset(rng):
    # [3, 200]: dim 1 on partitions (a full 128-row tile and a partial one of 72), three rows of them; the
    # kernel is the one [96, 200] gets but for its loop's bound, and the simulator's time is per tile
    shape = (3, 200)
    b = Builder("dropout")
    key = b.param(I64, "rng_key")
    x = b.param(TensorType(shape, DType.f32), "x")
    offset = b.op("full", shape=(), dtype=DType.i64, value=3 << 40)  # as the front end gives the 3rd random op
    keep = b.op("ge", b.op("philox_uniform", key, offset, shape=shape, dtype=DType.f32),
                b.op("full", shape=(), dtype=DType.f32, value=0.25))
    out = b.op("mul", b.op("mul", x, b.op("cast", keep, dtype=DType.f32)),
               b.op("full", shape=(), dtype=DType.f32, value=4.0 / 3.0))
    fn = b.build([out, keep])
    exe = _exact(fn, [np.int64(-5), rng.standard_normal(shape).astype(np.float32)])
    assert "dim 1 on partitions" in exe.source and "nl.affine_range(2)" in exe.source


def test_int64_bits_run_on_the_host_and_still_match():
    b = Builder("bits64")
    s, o = b.param(I64, "seed"), b.param(I64, "offset")
    fn = b.build([b.op("philox_bits", s, o, shape=(40,), dtype=DType.i64, word=2)])
    exe = _exact(fn, [np.int64(99), np.int64(-1)])
    assert [step.kind for step in exe.plan.steps] == ["host"]


def test_the_cost_model_sees_a_gpsimd_bound_kernel():
    b = Builder("cost")
    s, o = b.param(I64, "seed"), b.param(I64, "offset")
    fn = b.build([b.op("philox_uniform", s, o, shape=(128, 64), dtype=DType.f32)])
    host, kernel = estimate_costs(compile_nki(fn)).to_dict()["steps"]
    assert host["kind"] == "host" and kernel["bound"] == "GpSimdE"
    assert 300 < kernel["instructions"] < 600  # ten rounds of ~40 limb instructions, for one 128-row tile


def test_a_per_row_draw_broadcast_and_a_reduction_of_draws(rng):
    b = Builder("rows")
    key = b.param(I64, "rng_key")
    x = b.param(TensorType((130, 48), DType.f32), "x")
    zero = b.op("full", shape=(), dtype=DType.i64, value=0)
    rows = b.op("philox_uniform", key, zero, shape=(130, 1), dtype=DType.f32)  # broadcast over the columns
    scaled = b.op("mul", x, rows)
    draws = b.op("philox_uniform", key, b.op("full", shape=(), dtype=DType.i64, value=1 << 40), shape=(130, 48),
                 dtype=DType.f32, word=1)
    total = b.op("sum", b.op("mul", draws, b.op("full", shape=(), dtype=DType.f32, value=4096.0)), dims=(1,))
    fn = b.build([scaled, total])
    exe = compile_nki(fn)
    inputs = [np.int64(12345), rng.standard_normal((130, 48)).astype(np.float32)]
    got, want = exe(*inputs), interpret(fn, inputs)
    assert np.array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6)  # integers below 2^24 summed: float32 order aside
