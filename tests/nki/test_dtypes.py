"""bfloat16 rounding, casts and promotion."""

from __future__ import annotations

import numpy as np
import pytest

from neuroncc.nki import dtypes
from neuroncc.nki.errors import NKISimulationError


def test_bfloat16_rounds_to_nearest_even():
    one = 1.0
    ulp = 2.0 ** -7  # bfloat16 spacing just above 1.0
    values = np.array([one, one + ulp / 2, one + ulp + ulp / 2, one + ulp / 4, one + 3 * ulp / 4], np.float32)
    expected = np.array([one, one, one + 2 * ulp, one, one + ulp], np.float32)
    np.testing.assert_array_equal(dtypes.round_to_bfloat16(values), expected)


def test_bfloat16_keeps_nan_and_inf_and_overflows_to_inf():
    values = np.array([np.nan, np.inf, -np.inf, np.finfo(np.float32).max], np.float32)
    rounded = dtypes.round_to_bfloat16(values)
    assert np.isnan(rounded[0])
    assert rounded[1] == np.inf and rounded[2] == -np.inf and rounded[3] == np.inf


def test_bfloat16_result_is_the_nearest_representable_value(rng):
    values = (rng.standard_normal(10_000) * 10.0 ** rng.integers(-5, 5, 10_000)).astype(np.float32)
    rounded = dtypes.round_to_bfloat16(values)
    bits = rounded.view(np.uint32)
    assert np.all(bits & 0xFFFF == 0), "low 16 bits must be clear"
    below = (values.view(np.uint32) & 0xFFFF0000).view(np.float32)
    above = ((values.view(np.uint32) & 0xFFFF0000) + 0x10000).view(np.float32)
    best = np.minimum(np.abs(values.astype(np.float64) - below), np.abs(values.astype(np.float64) - above))
    np.testing.assert_array_equal(np.abs(values.astype(np.float64) - rounded), best)


@pytest.mark.parametrize("dtype, values, expected", [
    (dtypes.int8, [1.4, 1.5, 2.5, -300.0, np.nan], [1, 2, 2, -128, 0]),
    (dtypes.uint8, [-5.0, 255.7, 3.0], [0, 255, 3]),
    (dtypes.int32, [2.0 ** 40], [np.iinfo(np.int32).max]),
    (dtypes.bool_, [0.0, 2.0, -1.0], [False, True, True]),
])
def test_cast_to_integers_rounds_and_saturates(dtype, values, expected):
    np.testing.assert_array_equal(dtypes.cast(np.array(values), dtype), np.array(expected, dtype=dtype.storage))


def test_cast_to_float16_uses_numpy_float16():
    result = dtypes.cast(np.array([1.0 + 2.0 ** -11, 70000.0]), dtypes.float16)
    assert result.dtype == np.float16
    assert result[0] == 1.0 and result[1] == np.inf


@pytest.mark.parametrize("a, b, expected", [
    (dtypes.bfloat16, dtypes.bfloat16, dtypes.bfloat16),
    (dtypes.bfloat16, dtypes.float32, dtypes.float32),
    (dtypes.bfloat16, dtypes.float16, dtypes.float32),
    (dtypes.int32, dtypes.bfloat16, dtypes.bfloat16),
    (dtypes.int8, dtypes.int32, dtypes.int32),
    (dtypes.uint16, dtypes.int16, dtypes.int16),
    (dtypes.bool_, dtypes.uint8, dtypes.uint8),
])
def test_promotion(a, b, expected):
    assert dtypes.promote(a, b) is expected
    assert dtypes.promote(b, a) is expected


def test_dtype_of_accepts_names_numpy_types_and_rejects_others():
    assert dtypes.dtype_of("bfloat16") is dtypes.bfloat16
    assert dtypes.dtype_of(np.float16) is dtypes.float16
    assert dtypes.dtype_of(np.dtype("float64")) is dtypes.float32
    with pytest.raises(NKISimulationError, match="unknown dtype 'float8'"):
        dtypes.dtype_of("float8")
    with pytest.raises(NKISimulationError, match="no NKI equivalent"):
        dtypes.dtype_of(np.complex64)


def test_uninitialised_fill_is_nan_for_floats_and_a_sentinel_for_integers():
    assert np.isnan(dtypes.uninitialised_fill(dtypes.bfloat16))
    assert dtypes.uninitialised_fill(dtypes.int16) == -32768
    assert dtypes.uninitialised_fill(dtypes.uint8) == 255


def _copy_kernel():
    import neuroncc.nki as nki
    import neuroncc.nki.language as nl

    @nki.jit
    def copy(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(a))
        return out
    return nki, copy


def test_an_int64_input_outside_int32_is_refused_by_name():
    # int64 arrays run as int32 (NKI has no 64-bit integers): 2**40 + 5 came back as 2147483647 without a word
    nki, copy = _copy_kernel()
    values = np.array([[1, -2], [2**40 + 5, 3]], np.int64)
    with pytest.raises(NKISimulationError, match=r"argument arg0: int64 value 1099511627781 at \[1, 0\] is outside "
                                                 r"int32.s range"):
        nki.simulate_kernel(copy, values)
    result = nki.simulate_kernel(copy, np.array([[1, -2], [2**31 - 1, -2**31]], np.int64))
    np.testing.assert_array_equal(result, [[1, -2], [2**31 - 1, -2**31]])
    assert result.dtype == np.int32
