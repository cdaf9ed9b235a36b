"""NKI 0.2+ kernels in the public tutorials' style (``import nki``), each checked against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import kernels_nki02 as k2
import nki
import nki.language as nl
from public_helpers import bf16, matmul_bound


def test_spmd_tensor_add_covers_every_tile(rng):
    a = rng.standard_normal((256, 1024)).astype(np.float32)
    b = rng.standard_normal((256, 1024)).astype(np.float32)
    np.testing.assert_array_equal(nki.simulate(k2.add_tiles[2, 2])(a, b), a + b)


MATMULS = [
    (k2.mm_tiled, (256, 256, 1024)),
    (k2.mm_hoisted, (256, 256, 1024)),
    (k2.mm_blocked_free, (256, 256, 1024)),
    (k2.mm_blocked_all, (1024, 512, 1024)),
]


@pytest.mark.parametrize("kernel, shape", MATMULS, ids=lambda v: getattr(v, "__name__", str(v)))
def test_matmul_tutorial_series_fp32(kernel, shape, rng):
    k, m, n = shape
    lhs_t = rng.standard_normal((k, m)).astype(np.float32)
    rhs = rng.standard_normal((k, n)).astype(np.float32)
    matmul_bound(lhs_t, rhs, nki.simulate(kernel)(lhs_t, rhs), relative=2.0 ** -18)


@pytest.mark.parametrize("kernel, shape", MATMULS + [(k2.mm_single_tile, (128, 64, 512))],
                         ids=lambda v: getattr(v, "__name__", str(v)))
def test_matmul_tutorial_series_bf16_converts_in_the_dma(kernel, shape, rng):
    """The tutorial kernels copy fp32 results into a bf16 output with dma_copy: NKI's DMA converts dtypes."""
    k, m, n = shape
    lhs_t = bf16(rng.standard_normal((k, m)))
    rhs = bf16(rng.standard_normal((k, n)))
    result = nki.simulate(kernel)(nki.bfloat16_array(lhs_t), nki.bfloat16_array(rhs))
    assert result.dtype == np.float32 and np.array_equal(result, bf16(result)), "a bf16 output holds bf16 values"
    matmul_bound(lhs_t, rhs, result, relative=2.0 ** -7)


def test_free_axis_transpose_through_an_access_pattern(rng):
    x = rng.standard_normal((128, 6 * 8)).astype(np.float32)
    out = nki.simulate(k2.transpose_free_axes)(x, 6, 8)
    np.testing.assert_array_equal(out, x.reshape(128, 6, 8).transpose(0, 2, 1).reshape(128, 48))


def test_benchmark_costs_the_tutorial_kernels_and_blocking_pays():
    spec = nki.TensorSpec.of
    shape = ((1024, 1024), (1024, 1024))
    tiled = nki.benchmark(k2.mm_tiled, target="trn2", execute=False)(*(spec(s, nl.bfloat16) for s in shape))
    blocked = nki.benchmark(k2.mm_blocked_all, target="trn2", execute=False)(*(spec(s, nl.bfloat16) for s in shape))
    assert blocked.latency_us < tiled.latency_us
    assert blocked.profile.tensor_flops == tiled.profile.tensor_flops == 2 * 1024 ** 3
