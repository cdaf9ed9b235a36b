"""fp8 / fp4 dtypes and the MX path (quantize_mx, nc_matmul_mx on trn3) against numpy reference rounding."""

from __future__ import annotations

import numpy as np
import pytest

import kernels_nki02 as k2
import nki
import nki.isa as nisa
import nki.language as nl
from neuroncc.nki import minifloat
from neuroncc.nki.isa_mx import pack_x4, unpack_x4


def _reference_round(values, fmt):
    """Nearest value of a minifloat format by brute force over all its finite codes (ties to even code)."""
    codes = np.arange(1 << fmt.bits, dtype=np.uint8)
    table = minifloat.decode(codes, fmt).astype(np.float64)
    finite = np.isfinite(table)
    candidates, codes = table[finite], codes[finite]
    distance = np.abs(values[:, None].astype(np.float64) - candidates[None, :])
    best = distance.min(axis=1, keepdims=True)
    ties = distance == best
    even = ties & (codes[None, :] % 2 == 0)
    pick = np.where(even.any(axis=1), even.argmax(axis=1), ties.argmax(axis=1))
    return candidates[pick]


@pytest.mark.parametrize("fmt", [minifloat.FLOAT8_E5M2, minifloat.FLOAT8_E4M3FN, minifloat.FLOAT8_E4M3,
                                 minifloat.FLOAT4_E2M1FN], ids=lambda f: f.name)
def test_minifloat_rounding_is_nearest_even_within_range(fmt, rng):
    values = rng.uniform(-fmt.max_finite, fmt.max_finite, 4000).astype(np.float32)
    values[:50] *= 1e-3  # subnormals
    np.testing.assert_array_equal(minifloat.round_to(values, fmt), _reference_round(values, fmt))
    np.testing.assert_array_equal(minifloat.decode(minifloat.encode(values, fmt), fmt), minifloat.round_to(values, fmt))


def test_fp8_tiles_round_on_every_write(rng):
    x = rng.standard_normal((128, 64)).astype(np.float32) * 10

    @nki.jit
    def through_fp8(x):
        out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        t8 = nl.ndarray(x.shape, dtype=nl.float8_e4m3fn, buffer=nl.sbuf)
        nisa.dma_copy(dst=t8, src=x)  # DMA converts float32 -> float8_e4m3fn
        nisa.dma_copy(dst=out, src=t8)
        return out

    np.testing.assert_array_equal(through_fp8(x), minifloat.round_to(x, minifloat.FLOAT8_E4M3FN))


def _reference_quantize(values, fmt):
    """quantize_mx per NKI's docs: groups of 8 partitions x 4 values, X = 2^(floor(log2 amax) - (Emax - 1))."""
    p, f = values.shape
    groups = values.reshape(p // 8, 8, f // 4, 4).astype(np.float64)
    amax = np.abs(groups).max(axis=(1, 3))
    exponent = np.where(amax > 0, np.floor(np.log2(np.where(amax > 0, amax, 1))) - (fmt.max_exponent - 1), -127)
    quantized = minifloat.round_to(groups / np.exp2(exponent)[:, None, :, None], fmt, saturate=True)
    return quantized.reshape(p, f // 4, 4), (exponent + 127).astype(np.uint8)


@pytest.mark.parametrize("mx_dtype", [nl.float8_e4m3fn_x4, nl.float8_e5m2_x4], ids=str)
def test_quantize_mx_and_matmul_mx_match_numpy(mx_dtype, rng):
    K, M, N = 128, 64, 128
    stationary_values = rng.standard_normal((K, M * 4)).astype(np.float32)
    q_values, q_scale = _reference_quantize(stationary_values, mx_dtype.element)
    words = pack_x4(q_values, mx_dtype)  # [K, M] uint32: the offline-quantized stationary tile
    np.testing.assert_array_equal(unpack_x4(words, mx_dtype), q_values)
    moving = rng.standard_normal((K, N * 4)).astype(np.float32)
    moving_bf16 = nki.bfloat16_array(moving)
    out = k2.mx_matmul_quantized_moving(words, q_scale, moving_bf16, mx_dtype)
    m_values, m_scale = _reference_quantize(moving_bf16.values, mx_dtype.element)
    s = q_values * np.repeat(np.exp2(q_scale.astype(np.float64) - 127), 8, axis=0)[:, :, None]
    v = m_values * np.repeat(np.exp2(m_scale.astype(np.float64) - 127), 8, axis=0)[:, :, None]
    np.testing.assert_allclose(out, np.einsum("kmq,knq->mn", s, v), rtol=1e-5, atol=1e-3)
    # And the product is close to the unquantized one (MX keeps ~2-3 significant bits per value).
    exact = stationary_values.reshape(K, M, 4).astype(np.float64)
    exact = np.einsum("kmq,knq->mn", exact, moving_bf16.values.reshape(K, N, 4).astype(np.float64))
    assert np.abs(out - exact).mean() < 0.1 * np.abs(exact).mean()


def test_mx_instructions_exist_only_on_trn3(rng):
    words = np.zeros((128, 64), np.uint32)
    scale = np.full((16, 64), 127, np.uint8)
    moving = nki.bfloat16_array(np.zeros((128, 512), np.float32))
    kernel = nki.jit(k2.mx_matmul_quantized_moving.fn, platform_target="trn2")
    with pytest.raises(AssertionError, match="only on NeuronCore-v4"):
        kernel(words, scale, moving, nl.float8_e4m3fn_x4)
