"""Reference kernels written in public NKI 0.2+ style match numpy (float32 tightly, bfloat16 at 1e-2)."""

from __future__ import annotations

import numpy as np
import pytest

import neuroncc.nki as nki
from neuroncc.nki import kernels

from sim_helpers import TOLERANCE, bf16

DTYPES = ["float32", "bfloat16"]


def _prepare(rng, dtype, *shapes):
    """Random inputs, the values the kernel sees (bf16-rounded for bfloat16), and device arguments."""
    values = [rng.standard_normal(shape).astype(np.float32) for shape in shapes]
    if dtype == "bfloat16":
        values = [bf16(v) for v in values]
        return values, [nki.bfloat16_array(v) for v in values]
    return values, values


def _check(result, expected, dtype):
    np.testing.assert_allclose(result, expected, **TOLERANCE[dtype])


def _matmul_reference(lhsT, rhs, k_tiles_per_group, dtype):
    """``lhsT.T @ rhs`` summed the way the hardware does: fp32 sums of 128-row K tiles, groups of
    ``k_tiles_per_group`` accumulated in PSUM, groups added in fp32, result rounded to the output dtype."""
    total = np.zeros((lhsT.shape[1], rhs.shape[1]), np.float32)
    group = 128 * k_tiles_per_group
    for g in range(0, lhsT.shape[0], group):
        partial = np.zeros_like(total)
        for k in range(g, g + group, 128):
            partial += lhsT[k:k + 128].T @ rhs[k:k + 128]
        total += partial
    return bf16(total) if dtype == "bfloat16" else total


def _check_matmul(result, lhsT, rhs, k_tiles_per_group, dtype):
    """float32: within the worst-case error of any fp32 summation order of the K products (gamma_K times
    ``|lhsT|.T @ |rhs|``, Higham's bound) of the exact product, so the check holds whatever order the BLAS that
    numpy uses sums in on this machine. bfloat16: the hardware's summation, rounded, at the bf16 tolerance."""
    if dtype == "bfloat16":
        _check(result, _matmul_reference(lhsT, rhs, k_tiles_per_group, dtype), dtype)
        return
    k = lhsT.shape[0]
    unit = np.finfo(np.float32).eps / 2
    gamma = k * unit / (1 - k * unit)
    exact = lhsT.astype(np.float64).T @ rhs.astype(np.float64)
    bound = gamma * (np.abs(lhsT).astype(np.float64).T @ np.abs(rhs).astype(np.float64))
    error = np.abs(result.astype(np.float64) - exact)
    worst = np.unravel_index(np.argmax(error - bound), error.shape)
    assert np.all(error <= bound), f"error {error[worst]:.3g} above the fp32 summation bound {bound[worst]:.3g} at {worst}"


@pytest.mark.parametrize("dtype", DTYPES)
def test_tensor_add_on_a_2d_grid(rng, dtype):
    (a, b), args = _prepare(rng, dtype, (256, 1024), (256, 1024))
    result = nki.simulate(kernels.tensor_add[2, 2])(*args)
    _check(result, a.astype(np.float64) + b, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_transpose(rng, dtype):
    (x,), args = _prepare(rng, dtype, (200, 300))
    np.testing.assert_array_equal(nki.simulate(kernels.transpose_2d)(*args), x.T)


@pytest.mark.parametrize("dtype", DTYPES)
def test_tiled_matmul_accumulates_k_tiles_in_psum(rng, dtype):
    (lhsT, rhs), args = _prepare(rng, dtype, (384, 256), (384, 1024))
    result = nki.simulate(kernels.matmul_tiled)(*args)
    _check_matmul(result, lhsT, rhs, 3, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_blocked_matmul(rng, dtype):
    (lhsT, rhs), args = _prepare(rng, dtype, (512, 512), (512, 2048))
    result = nki.simulate(kernels.matmul_blocked)(*args, tiles_m=2, tiles_n=2, tiles_k=2)
    _check_matmul(result, lhsT, rhs, 2, dtype)


def _softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax(rng, dtype):
    (x,), args = _prepare(rng, dtype, (300, 512))
    _check(nki.simulate(kernels.softmax)(*args), _softmax(x.astype(np.float64)), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rmsnorm(rng, dtype):
    (x, gamma), args = _prepare(rng, dtype, (260, 384), (384,))
    x64 = x.astype(np.float64)
    expected = x64 / np.sqrt((x64 ** 2).mean(axis=1, keepdims=True) + 1e-6) * gamma
    _check(nki.simulate(kernels.rmsnorm)(*args), expected, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_layernorm(rng, dtype):
    (x, gamma, beta), args = _prepare(rng, dtype, (260, 384), (384,), (384,))
    x = x + np.float32(3.0)  # a non-zero mean exercises the variance formula
    if dtype == "bfloat16":
        x = bf16(x)
    args = [nki.bfloat16_array(x) if dtype == "bfloat16" else x, *args[1:]]
    x64 = x.astype(np.float64)
    mean, var = x64.mean(axis=1, keepdims=True), x64.var(axis=1, keepdims=True)
    expected = (x64 - mean) / np.sqrt(var + 1e-5) * gamma + beta
    _check(nki.simulate(kernels.layernorm)(*args), expected, dtype)


def test_kernels_reproduce_their_results_on_every_target(rng):
    (x,), _ = _prepare(rng, "float32", (128, 256))
    results = [nki.simulate(kernels.softmax, target=t)(x) for t in ("trn1", "trn2", "trn3")]
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[1], results[2])


def test_softmax_with_several_rows_per_partition(rng):
    (x,), args = _prepare(rng, "bfloat16", (600, 256))
    result = nki.simulate(kernels.softmax)(*args, rows_per_partition=3)
    _check(result, _softmax(x.astype(np.float64)), "bfloat16")
