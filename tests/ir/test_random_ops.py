"""The random ops' reference: Philox 4x32-10 to the specification, and the statistics of what it produces.

Known-answer vectors come from Random123's kat_vectors (the generator's authors' test file). The statistical
tests draw >= 1M values and check what the op promises: uniform values in [0, 1) with the dtype's resolution
(mean, variance, Kolmogorov-Smirnov), fair bits, and the counter layout (an offset shifts the stream; words
and offsets give independent streams).
"""

from __future__ import annotations

import numpy as np
import pytest

from neuroncc.ir import Builder, DType, TensorType, interpret
from neuroncc.ir.ops.random import philox4x32, philox_words
from neuroncc.testing.distributions import check_ks, check_moments, uniform_cdf

KNOWN_ANSWERS = [  # counter words, key words -> output words
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF, 0xFFFFFFFF), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]
MILLION = 1 << 20


@pytest.mark.parametrize("counter,key,expected", KNOWN_ANSWERS)
def test_philox_known_answers(counter, key, expected):
    words = philox4x32(tuple(np.array([c], dtype=np.uint64) for c in counter), key)
    assert tuple(int(w[0]) for w in words) == expected


def _random(name: str, seed: int, offset: int, shape, dtype: DType, word: int = 0) -> np.ndarray:
    b = Builder("draw")
    s, o = b.param(TensorType((), DType.i64), "seed"), b.param(TensorType((), DType.i64), "offset")
    fn = b.build([b.op(name, s, o, shape=shape, dtype=dtype, word=word)])
    return interpret(fn, [np.int64(seed), np.int64(offset)])[0]


def test_the_op_reads_the_documented_counter_and_key():
    # key = the seed's two 32-bit halves, counter = (offset + i) as two words then two zero words
    seed, offset = 0x299F31D0A4093822, 0x85A308D3243F6A88
    bits = _random("philox_bits", seed, offset - 2**64, (2,), DType.i64)  # offset as a signed i64
    for i in range(2):
        expected = philox4x32((np.array([0x243F6A88 + i], np.uint64), np.array([0x85A308D3], np.uint64),
                               np.zeros(1, np.uint64), np.zeros(1, np.uint64)), (0xA4093822, 0x299F31D0))
        assert int(bits[i]) & (2**64 - 1) == int(expected[0][0]) | (int(expected[1][0]) << 32)


def test_an_offset_shifts_the_stream_and_wraps_at_2_64():
    whole = _random("philox_bits", 5, -3, (10,), DType.i32)
    assert np.array_equal(_random("philox_bits", 5, 0, (7,), DType.i32), whole[3:])  # counters wrap 2^64 -> 0
    words = philox_words(5, 2**64 - 3, 10)[0]
    assert np.array_equal(words.view(np.int32), whole)


@pytest.mark.parametrize("dtype", [DType.f32, DType.bf16, DType.f16])
def test_uniform_moments_and_ks_on_a_million_draws(dtype):
    u = _random("philox_uniform", 20240601, 0, (MILLION,), dtype).astype(np.float64)
    bits = {DType.f32: 24, DType.bf16: 8, DType.f16: 11}[dtype]
    assert u.min() >= 0.0 and u.max() < 1.0
    assert np.all(u * 2.0**bits == np.floor(u * 2.0**bits))  # values on the dtype's grid: exact, never rounded up
    step = 2.0**-bits  # the grid's own mean and variance (a discrete uniform on k / 2^bits)
    assert check_moments(u, 0.5 - step / 2, (1 - step**2) / 12, "uniform", fourth_moment=1 / 80) is None
    assert check_ks(u, uniform_cdf(), "uniform", resolution=step) is None


def test_bits_are_fair_and_streams_are_independent():
    bits = _random("philox_bits", -77, 0, (MILLION,), DType.i64).view(np.uint64)
    ones = np.unpackbits(bits.view(np.uint8)).reshape(-1, 64).mean(axis=0)
    assert np.all(np.abs(ones - 0.5) < 5 * 0.5 / np.sqrt(MILLION))  # each of the 64 bit positions is fair
    words = [_random("philox_uniform", -77, 0, (MILLION,), DType.f32, word) for word in range(4)]
    other_offset = _random("philox_uniform", -77, 1 << 40, (MILLION,), DType.f32)
    other_seed = _random("philox_uniform", -78, 0, (MILLION,), DType.f32)
    for a, b in [(words[0], words[1]), (words[2], words[3]), (words[0], other_offset), (words[0], other_seed)]:
        assert abs(np.corrcoef(a, b)[0, 1]) < 5 / np.sqrt(MILLION)
    # neighbouring elements are independent too (a counter-based generator's weak spot if badly keyed)
    assert abs(np.corrcoef(words[0][:-1], words[0][1:])[0, 1]) < 5 / np.sqrt(MILLION)


def test_the_statistical_checks_catch_a_slightly_wrong_generator():
    u = _random("philox_uniform", 3, 0, (MILLION,), DType.f32).astype(np.float64)
    assert check_ks(u ** 1.01, uniform_cdf(), "skewed") is not None
    assert check_moments(u * 1.003, 0.5, 1 / 12, "stretched", fourth_moment=1 / 80) is not None
